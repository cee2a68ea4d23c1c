"""What the service refuses, and how, against the real server (SQLite; PostgreSQL with
DATABASE_URL_TEST): the key before the body, strict JSON types, bounded tables and finite
estimates, upload quirks named by row and column, idempotent deletes, and the rules the OpenAPI
document states."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session

from idealized_runtime.api.db import make_engine
from idealized_runtime.api.models import FitRow
from idealized_runtime.api.settings import normalize_database_url
from tests.api.conftest import Service, set_count
from tests.api.live import live_server


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def measurement(**change: object) -> dict[str, object]:
    return {
        "model": "m",
        "num_prompt_tokens": 8,
        "num_output_tokens": 4,
        "runtime_s": 0.5,
        **change,
    }


def write_operations(client: httpx.Client) -> list[tuple[str, str]]:
    """(method, concrete path) of every operation that requires a key."""
    document = client.get("/v1/openapi.json").json()
    return [
        (method.upper(), path.replace("{set_id}", "1"))
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if {} not in operation.get("security", [{}])
    ]


# --- the key before the body -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body"),
    [("image/png", b"\x89PNG\xff\xff"), ("application/json", b"{not json"), ("text/csv", b"")],
)
@pytest.mark.parametrize("authorization", [None, "Bearer ir_0000_nope", "Basic dXNlcjpwYXNz"])
def test_writes_without_a_valid_key_are_401_whatever_the_body(
    client: httpx.Client, content_type: str, body: bytes, authorization: str | None
) -> None:
    operations = write_operations(client)
    assert len(operations) >= 10
    headers = {"content-type": content_type}
    if authorization:
        headers["authorization"] = authorization
    for method, path in operations:
        response = client.request(method, path, content=body, headers=headers)
        assert response.status_code == 401, (method, path, response.text)
        assert "API key" in response.json()["detail"]
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_reads_that_require_a_key_refuse_before_the_body(tmp_path: Path) -> None:
    with live_server(tmp_path, IDEALIZED_RUNTIME_READS_REQUIRE_KEY="1") as server:
        with server.client() as anonymous:
            assert anonymous.get("/v1/models").status_code == 401
            garbage = {"content-type": "application/json"}
            for path in ("/v1/estimate/batch", "/v1/compare", "/v1/estimate/hardware-model"):
                response = anonymous.post(path, content=b"{not json", headers=garbage)
                assert response.status_code == 401, (path, response.text)
            assert anonymous.get("/v1/health").status_code == 200  # liveness stays public
            assert anonymous.get("/v1/openapi.json").status_code == 200
        with server.client(headers=server.auth) as keyed:
            assert keyed.get("/v1/models").status_code == 200
            response = keyed.post("/v1/estimate/batch", content=b"{not json", headers=garbage)
            assert response.status_code == 422 and response.json()["detail"][0]["type"] == (
                "json_invalid"
            )


# --- strict types on every write ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ('"runtime_s": true', ["runtime_s"], "valid number"),
        ('"num_output_tokens": "3"', ["num_output_tokens"], "valid integer"),
        ('"num_output_tokens": 1e3', ["num_output_tokens"], "3, not 3.0 or 3e0"),
        ('"num_output_tokens": 3.0', ["num_output_tokens"], "3, not 3.0 or 3e0"),
        # Not JSON numbers: the parser refuses them in the measurement it reads.
        ('"runtime_s": 1e999', [], "numeric (floating point) overflow"),
        ('"runtime_s": NaN', [], "NaN is not JSON"),
        ('"std_s": Infinity', [], "Infinity is not JSON"),
        ('"model": "a\\u0000b"', ["model"], "control, NUL or bidirectional"),
        ('"model": "' + "x" * 201 + '"', ["model"], "at most 200 characters"),
        ('"ttft_s": 2.0', [], "ttft_s 2 is greater than runtime_s 0.5"),
    ],
)
def test_measurements_are_read_strictly(
    client: httpx.Client, service: Service, body: str, where: list[str], message: str
) -> None:
    before = set_count(client)
    # The second measurement with one field written as ``body`` (raw JSON text).
    fields = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in measurement().items()]
    bad = "{" + ", ".join([f for f in fields if not f.startswith(body.split(":")[0])] + [body])
    text = '{"measurements": [' + json.dumps(measurement()) + ", " + bad + "}]}"
    (error,) = service.refused(client, "/v1/measurement-sets", text, "application/json")
    assert error["loc"] == ["body", "measurements", 1, *where]
    assert message in error["msg"]
    assert set_count(client) == before


@pytest.mark.parametrize(
    ("path", "text", "message"),
    [
        ("/v1/measurement-sets", '{"metadata": {"x": NaN}, "measurements": [M]}', "NaN"),
        ("/v1/measurement-sets", '{"metadata": {"x": [1, -Infinity]}, "measurements": [M]}',
         "-Infinity is not JSON"),
        ("/v1/capability-scores",
         '{"scores": [{"model": "m", "scenario": "s", "metric": "a", "value": false}]}',
         "valid number"),
        ("/v1/capability-scores",
         '{"scores": [{"model": "m", "scenario": "s", "metric": "a", "value": "0.5"}]}',
         "valid number"),
        ("/v1/hardware",
         '{"name": "h", "memory_gb": Infinity, "memory_bandwidth_gbps": 1, '
         '"peak_dense_tflops": 1}', "Infinity is not JSON"),
        ("/v1/fits", '{"measurement_set_id": "1"}', "valid integer"),
        ("/v1/fits", '{"measurement_set_id": 1.0}', "3, not 3.0"),
        ("/v1/models", '{"name": "x", "config": {"hidden_size": 8}}', "no model_type"),
        ("/v1/models", '{"name": "x", "config": {"model_type": "llama", "rope_theta": NaN}}',
         "NaN"),
    ],
)  # fmt: skip
def test_every_write_reads_json_strictly(
    client: httpx.Client, service: Service, path: str, text: str, message: str
) -> None:
    text = text.replace("M", json.dumps(measurement()))
    before = set_count(client)
    assert message in json.dumps(service.refused(client, path, text, "application/json"))
    assert set_count(client) == before


@pytest.mark.parametrize(
    ("path", "text", "key"),
    [
        ("/v1/measurement-sets",
         '{"measurements": [{"model": "m", "num_prompt_tokens": 8, "num_output_tokens": 4, '
         '"runtime_s": 1.2, "runtime_s": 2.5}]}', "runtime_s"),
        ("/v1/measurement-sets", '{"name": "a", "measurements": [M], "name": "b"}', "name"),
        ("/v1/capability-scores",
         '{"scores": [{"model": "m", "scenario": "s", "value": 0.5, "value": 0.9}]}', "value"),
        ("/v1/hardware", '{"name": "h", "name": "g", "memory_gb": 80, '
         '"memory_bandwidth_gbps": 1, "peak_dense_tflops": 1}', "name"),
        ("/v1/load-summaries", '[{"model": "m", "model": "n"}]', "model"),
        ("/v1/plan", '{"architecture": "llama-3.1-8b", "hardware": ["h100-sxm"], '
         '"workload": {"prompt_tokens": 10, "output_tokens": 5, "output_tokens": 9}}',
         "output_tokens"),
        ("/v1/estimate/batch", '{"model": "m", "model": "n", "requests": []}', "model"),
        ("/v1/compare", '{"models": ["a"], "workload": "mmlu", "workload": "x"}', "workload"),
    ],
)  # fmt: skip
def test_a_repeated_key_is_refused_in_every_body(
    client: httpx.Client, service: Service, path: str, text: str, key: str
) -> None:
    """JSON lets a parser take the last of two equal keys; the service refuses the body instead
    (``"runtime_s": 1.2, "runtime_s": 2.5`` was stored as 2.5), naming the key."""
    text = text.replace("M", json.dumps(measurement()))
    before = set_count(client)
    detail = json.dumps(service.refused(client, path, text, "application/json"))
    assert f"'{key}' is given twice" in detail
    assert set_count(client) == before


def test_json_bodies_need_a_json_media_type(client: httpx.Client, service: Service) -> None:
    body = json.dumps({"measurements": [measurement()]})
    response = client.post(
        "/v1/measurement-sets", content=body, headers={**service.auth, "content-type": "text/csv"}
    )
    assert response.status_code == 415 and "application/json" in response.json()["detail"]


# --- HELM tables and finite estimates ----------------------------------------------------------


def test_helm_tables_take_keys_in_any_order_and_bounded_runtimes(
    client: httpx.Client, service: Service
) -> None:
    model = unique("table")
    alphas = {"1024": 0.4, "1": 0.1, "256": 0.2}
    table = {model: {"runtime_for_prompt_tokens": alphas, "runtime_per_output_token": 0.05}}
    created = client.post("/v1/fits/import/helm", json=table, headers=service.auth)
    assert created.status_code == 201, created.text
    assert created.json()["fits"][0]["prompt_sizes"] == [1, 256, 1024]
    exported = client.get("/v1/fits/export/helm", params={"model": model}).json()[model]
    assert list(exported["runtime_for_prompt_tokens"]) == ["1", "256", "1024"]
    for value, where in [(1e308, "runtime_per_output_token"), (-1.0, "runtime_per_output_token")]:
        bad = {unique("t"): {"runtime_for_prompt_tokens": {"1": 0.1}, where: value}}
        response = client.post("/v1/fits/import/helm", json=bad, headers=service.auth)
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"][-1] == where
    huge = {unique("t"): {"runtime_for_prompt_tokens": {"1": 1e308}, "runtime_per_output_token": 1}}
    response = client.post("/v1/fits/import/helm", json=huge, headers=service.auth)
    assert response.status_code == 422 and "1000000" in response.text


def test_helm_tables_of_the_older_form_keep_their_lookup(
    client: httpx.Client, service: Service
) -> None:
    """HELM's older tables (``runtime_for_input_tokens``) import through the service as through
    the library: HELM's unscaled lookup, exported back in that form; an entry with both alpha
    tables or neither is refused."""
    model = unique("older")
    alphas = {"512": 0.3, "1": 0.1}
    table = {model: {"runtime_for_input_tokens": alphas, "runtime_per_output_token": 0.05}}
    created = client.post("/v1/fits/import/helm", json=table, headers=service.auth)
    assert created.status_code == 201, created.text
    fit = created.json()["fits"][0]
    assert fit["alpha_rule"] == "helm_next_size" and fit["prompt_sizes"] == [1, 512]
    # Between the sizes, the next size's runtime, unscaled: 0.3 s at p = 100, plus 9 steps.
    query = {"model": model, "prompt_tokens": 100, "output_tokens": 10, "fit_id": fit["id"]}
    estimate = client.get("/v1/estimate", params=query)
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["runtime_s"] == pytest.approx(0.3 + 9 * 0.05)
    exported = client.get("/v1/fits/export/helm", params={"model": model}).json()[model]
    assert exported == {"runtime_per_output_token": 0.05, "runtime_for_input_tokens": {
        "1": 0.1, "512": 0.3}}  # fmt: skip
    for entry in (
        {"runtime_per_output_token": 0.05},
        {"runtime_per_output_token": 0.05, "runtime_for_input_tokens": alphas,
         "runtime_for_prompt_tokens": alphas},
    ):  # fmt: skip
        response = client.post(
            "/v1/fits/import/helm", json={unique("t"): entry}, headers=service.auth
        )
        assert response.status_code == 422, response.text
        assert "exactly one of runtime_for_prompt_tokens" in response.text


def _database_url(service: Service) -> str:
    url = service.env.get("DATABASE_URL") or (
        f"sqlite:///{Path(service.env['IDEALIZED_RUNTIME_HOME']) / 'idealized-runtime.sqlite3'}"
    )
    return normalize_database_url(url)


def test_estimates_never_answer_null_for_a_number(client: httpx.Client, service: Service) -> None:
    """A fit stored before the bounds (or written to the database by hand) whose figures
    overflow: 422 naming it, never 200 with "runtime_s": null."""
    model = unique("overflow")
    table = {model: {"runtime_for_prompt_tokens": {"1": 0.1}, "runtime_per_output_token": 0.05}}
    fit_id = client.post("/v1/fits/import/helm", json=table, headers=service.auth).json()["fits"][
        0
    ]["id"]
    engine = make_engine(_database_url(service))
    try:
        with Session(engine) as session:
            row = session.get(FitRow, fit_id)
            assert row is not None
            row.parameters = {**row.parameters, "beta_s": 1e308}
            session.commit()
    finally:
        engine.dispose()
    query = {"model": model, "prompt_tokens": 10, "output_tokens": 100, "fit_id": fit_id}
    single = client.get("/v1/estimate", params=query)
    assert single.status_code == 422, single.text
    assert "floating-point range" in single.json()["detail"]
    batch = client.post(
        "/v1/estimate/batch",
        json={"model": model, "fit_id": fit_id, "requests": [
            {"prompt_tokens": 10, "output_tokens": 100}]},
    )  # fmt: skip
    assert batch.status_code == 422 and "floating-point range" in batch.json()["detail"]
    compare = client.post(
        "/v1/compare",
        json={"models": [model], "requests": [{"prompt_tokens": 10, "output_tokens": 100}]},
    )
    assert compare.status_code == 422 and "floating-point range" in compare.json()["detail"]


# --- load summaries ----------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["", "s" * 5000, "<b>x</b>", "a b"])
def test_load_summary_sources_are_checked(
    client: httpx.Client, service: Service, source: str
) -> None:
    model = unique("load")
    summary = {
        "model": model, "load": "concurrency=1", "requests": 1, "requests_per_s": 1.0,
        "output_tokens_per_s": 1.0, "ttft_s": {}, "itl_s": {}, "tpot_s": {}, "e2e_s": {},
        "error_rate": 0.0, "goodput_requests_per_s": 1.0,
    }  # fmt: skip
    response = client.post(
        "/v1/load-summaries", params={"source": source}, json=[summary], headers=service.auth
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["query", "source"]
    assert client.get("/v1/load-summaries", params={"model": model}).json()["total"] == 0


# --- CSV quirks --------------------------------------------------------------------------------

HEADER = "model,num_prompt_tokens,num_output_tokens,runtime_s"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{HEADER},runtime_s\nm,1,1,0.5,0.5\n",
         "upload, column 'runtime_s': duplicate column in the header"),
        (f"{HEADER}\nm,1_000,1,0.5\n",
         "upload, row 1, column 'num_prompt_tokens': expected a positive integer, got '1_000'"),
        (f"{HEADER}\nm,8,1,0.5\nm,1,1,1_000\n",
         "upload, row 2, column 'runtime_s': expected a number of seconds, got '1_000'"),
        (f"{HEADER}\nm,１２,1,0.5\n", "row 1, column 'num_prompt_tokens': expected"),
        (f"{HEADER},ttft_s\nm,1,4,0.5,0.75\n",
         "upload, row 1, column 'ttft_s': ttft_s 0.75 is greater than runtime_s 0.5"),
        (f"{HEADER}\nm\x07x,1,1,0.5\n",
         "upload, row 1, column 'model': model name has a control character (U+0007) at "
         "position 2"),
        (f"{HEADER}\nm,1,1,0.5\nab\x00,1,1,0.5\n", "row 2, column 'model': model name has a "
         "control character (U+0000) at position 3"),
        (f"{HEADER}\n\u202ecba,1,1,0.5\n",
         "model name has a bidirectional-formatting character (U+202E) at position 1"),
        (f"{HEADER}\n{'x' * 201},1,1,0.5\n",
         "upload, row 1, column 'model': model name of 201 characters; at most 200"),
        (f"{HEADER}\nm,1,1,0.5\n".encode() + b"\xff", "upload: not UTF-8 text (byte 62)"),
    ],
)  # fmt: skip
def test_csv_quirks_are_refused_naming_row_and_column(
    client: httpx.Client, service: Service, text: str | bytes, message: str
) -> None:
    before = set_count(client)
    detail = service.refused(client, "/v1/measurement-sets/csv", text, "text/csv")
    assert isinstance(detail, str) and message in detail
    assert set_count(client) == before


# --- idempotent deletes ------------------------------------------------------------------------


def test_a_retried_delete_gets_the_stored_204(client: httpx.Client, service: Service) -> None:
    def upload() -> int:
        body = {"measurements": [measurement(model=unique("del"))]}
        return client.post("/v1/measurement-sets", json=body, headers=service.auth).json()["id"]

    first, second = upload(), upload()
    key = {**service.auth, "Idempotency-Key": unique("delete")}
    deleted = client.delete(f"/v1/measurement-sets/{first}", headers=key)
    assert deleted.status_code == 204 and deleted.content == b""
    retried = client.delete(f"/v1/measurement-sets/{first}", headers=key)
    assert retried.status_code == 204 and retried.headers["idempotent-replayed"] == "true"
    assert client.delete(f"/v1/measurement-sets/{second}", headers=key).status_code == 409
    assert client.get(f"/v1/measurement-sets/{second}").status_code == 200
    assert client.delete(f"/v1/measurement-sets/{first}", headers=service.auth).status_code == 404
    # A refused delete stores nothing: the key still works for its own request.
    missing = {**service.auth, "Idempotency-Key": unique("missing")}
    assert client.delete("/v1/measurement-sets/2147483647", headers=missing).status_code == 404
    assert client.delete(f"/v1/measurement-sets/{second}", headers=missing).status_code == 204


# --- the OpenAPI document ----------------------------------------------------------------------


def test_the_schema_states_the_rules(client: httpx.Client) -> None:
    document = client.get("/v1/openapi.json").json()
    components, paths = document["components"]["schemas"], document["paths"]

    def resolve(schema: dict) -> dict:
        while "$ref" in schema:
            schema = components[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def body(path: str, media: str = "application/json") -> dict:
        return resolve(paths[path]["post"]["requestBody"]["content"][media]["schema"])

    # Load summaries: a list of the defined LoadSummary.
    summaries = body("/v1/load-summaries")
    assert summaries["type"] == "array" and resolve(summaries["items"])["title"] == "LoadSummary"
    # The HTML leaderboard's errors are JSON, as the service answers them.
    html = paths["/v1/leaderboard.html"]["get"]["responses"]
    assert list(html["200"]["content"]) == ["text/html"]
    assert list(html["401"]["content"]) == list(html["422"]["content"]) == ["application/json"]
    # A reused Idempotency-Key is a 409.
    assert "refused with 409" in document["info"]["description"]
    assert "422" not in document["info"]["description"].split("Idempotency-Key")[1][:200]
    # Batch estimates and comparisons take a list of {prompt_tokens, output_tokens} objects.
    for path in ("/v1/estimate/batch", "/v1/compare"):
        requests = resolve(body(path)["properties"]["requests"])
        requests = next((s for s in requests.get("anyOf", [requests]) if "items" in s), requests)
        shape = resolve(requests["items"])
        assert shape["required"] == ["prompt_tokens", "output_tokens"], path
        assert shape["additionalProperties"] is False
        assert "prompt_tokens" not in body(path)["properties"]
    # An HF config names its model_type, one of the supported families.
    config = resolve(body("/v1/models"))
    hf = next(resolve(s) for s in config["oneOf"] if "config" in resolve(s)["properties"])
    assert hf["properties"]["config"]["required"] == ["model_type"]
    assert "llama" in hf["properties"]["config"]["properties"]["model_type"]["enum"]
    # slo has a pattern; an archive body a minimum length.
    (slo,) = [p for p in paths["/v1/load-summaries"]["post"]["parameters"] if p["name"] == "slo"]
    assert any("pattern" in s for s in slo["schema"].get("anyOf", [slo["schema"]]))
    archive = paths["/v1/measurement-sets/helm"]["post"]["requestBody"]["content"]
    assert all(media["schema"]["minLength"] == 20 for media in archive.values())
    # A HELM table's prompt sizes: any keys of the pattern, in any order.
    entry = resolve(resolve(body("/v1/fits/import/helm"))["additionalProperties"])
    (sizes,) = [
        resolve(form)
        for form in entry["properties"]["runtime_for_prompt_tokens"]["anyOf"]
        if resolve(form).get("type") == "object"
    ]
    assert sizes["propertyNames"]["pattern"] == "^[1-9][0-9]{0,6}$"
    assert "patternProperties" not in sizes


def test_a_count_beyond_64_bits_is_the_same_422_on_every_backend(
    client: httpx.Client, service: Service
) -> None:
    # Each figure in range, the weights they make beyond a 64-bit integer.
    huge = {"name": unique("huge"), "num_layers": 284947, "hidden_size": 3984039,
            "num_heads": 7230978, "head_dim": 126, "ffn_hidden_size": 68630,
            "vocab_size": 34700185042, "position": "alibi"}  # fmt: skip
    response = client.post("/v1/models", json=huge, headers=service.auth)
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == "a number is too large to store (at most 2**63 - 1)"
    assert client.get(f"/v1/models/{huge['name']}").status_code == 404
