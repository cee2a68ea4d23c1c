"""End-to-end tests of the REST service over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest

from idealized_runtime.core.types import FittedCostModel
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from tests.api.conftest import Service, set_count
from tests.servers import cli_command, create_api_key, serving_api

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_BATCH_ROWS = 100_000
SERVER_ENV = {
    "IDEALIZED_RUNTIME_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
    "IDEALIZED_RUNTIME_MAX_BATCH_ROWS": str(MAX_BATCH_ROWS),
}

ARCHITECTURE = {
    "name": "test-llama",
    "family": "testfamily",
    "num_layers": 2,
    "hidden_size": 64,
    "num_heads": 4,
    "num_kv_heads": 2,
    "ffn_hidden_size": 128,
    "vocab_size": 1000,
    "activation": "swiglu",
    "norm": "rmsnorm",
    "position": "rotary",
    "bias": False,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def timings(model: str, runtime_scale: float = 1.0) -> list[dict[str, object]]:
    """A small profiling grid: alpha(p) = 0.02 + 1e-4 p, beta = 0.01."""
    rows = []
    for p in (16, 64, 256, 1024):
        for o in (1, 8, 32):
            runtime = (0.02 + 1e-4 * p + 0.01 * (o - 1)) * runtime_scale
            rows.append(
                {
                    "model": model,
                    "num_prompt_tokens": p,
                    "num_output_tokens": o,
                    "runtime_s": runtime,
                }
            )
    return rows


def to_csv(rows: list[dict[str, object]]) -> str:
    header = "model,num_prompt_tokens,num_output_tokens,runtime_s\n"
    return header + "".join(
        f"{r['model']},{r['num_prompt_tokens']},{r['num_output_tokens']},{r['runtime_s']}\n"
        for r in rows
    )


# --- service, auth -----------------------------------------------------------------------------


def test_health_version_and_openapi(client: httpx.Client, service: Service) -> None:
    assert client.get("/v1/health").json() == {"status": "ok", "database": "ok"}
    version = client.get("/v1/version").json()
    assert version["api"] == "v1" and version["schema_revision"] == "0003"
    assert version["database_backend"] == (
        "sqlite" if service.backend == "sqlite" else "postgresql"
    )
    schema = client.get("/v1/openapi.json").json()
    assert "/v1/estimate/batch" in schema["paths"]
    assert "server-timing" in client.get("/v1/health").headers


def test_writes_need_a_valid_key(client: httpx.Client, service: Service) -> None:
    body = {**ARCHITECTURE, "name": unique("noauth")}
    assert client.post("/v1/models", json=body).status_code == 401
    bad = {"Authorization": "Bearer ir_0000_nope"}
    assert client.post("/v1/models", json=body, headers=bad).status_code == 401
    wrong_secret = service.key[:-4] + "AAAA"
    response = client.post(
        "/v1/models", json=body, headers={"Authorization": f"Bearer {wrong_secret}"}
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert client.delete("/v1/measurement-sets/1").status_code == 401
    assert client.get(f"/v1/models/{body['name']}").status_code == 404  # nothing written


# --- catalog -----------------------------------------------------------------------------------


def test_models_create_list_get_and_conflict(client: httpx.Client, service: Service) -> None:
    name = unique("test-llama")
    created = client.post("/v1/models", json={**ARCHITECTURE, "name": name}, headers=service.auth)
    assert created.status_code == 201, created.text
    assert created.json()["name"] == name and created.json()["total_parameters"] > 0
    again = client.post("/v1/models", json={**ARCHITECTURE, "name": name}, headers=service.auth)
    assert again.status_code == 409
    assert client.get(f"/v1/models/{name}").json()["id"] == created.json()["id"]
    assert client.get("/v1/models/no-such-model").status_code == 404
    # Seeded catalog, paginated and filtered.
    first = client.get("/v1/models", params={"limit": 3, "offset": 0}).json()
    second = client.get("/v1/models", params={"limit": 3, "offset": 3}).json()
    assert len(first["items"]) == 3 and first["total"] >= 28
    assert {m["name"] for m in first["items"]}.isdisjoint(m["name"] for m in second["items"])
    llamas = client.get("/v1/models", params={"family": "llama", "limit": 100}).json()["items"]
    assert llamas and all(m["family"] == "llama" for m in llamas)
    megatron = client.get("/v1/models", params={"name_prefix": "megatron-", "limit": 100}).json()
    assert megatron["total"] == 13
    assert client.get("/v1/models", params={"name_prefix": "%"}).json()["total"] == 0
    assert client.get("/v1/models/openai/davinci").status_code == 404  # names may contain "/"


def test_models_validation(client: httpx.Client, service: Service) -> None:
    bad = {**ARCHITECTURE, "name": unique("bad"), "hidden_size": 65}  # not divisible by heads
    response = client.post("/v1/models", json=bad, headers=service.auth)
    assert response.status_code == 422 and "divisible" in response.text
    assert (
        client.post(
            "/v1/models", json={**ARCHITECTURE, "name": "x" * 201}, headers=service.auth
        ).status_code
        == 422
    )
    assert (
        client.post(
            "/v1/models",
            content=b"{not json",
            headers={**service.auth, "content-type": "application/json"},
        ).status_code
        == 422
    )


def test_hardware(client: httpx.Client, service: Service) -> None:
    listed = client.get("/v1/hardware", params={"vendor": "nvidia", "limit": 100}).json()
    assert "h100-sxm" in {h["name"] for h in listed["items"]}
    assert client.get("/v1/hardware/a100-80gb").json()["memory_gb"] == 80
    name = unique("accel")
    body = {"name": name, "memory_gb": 24, "memory_bandwidth_gbps": 300, "peak_dense_tflops": 100}
    assert client.post("/v1/hardware", json=body, headers=service.auth).status_code == 201
    assert client.post("/v1/hardware", json=body, headers=service.auth).status_code == 409
    bad = {**body, "name": unique("accel"), "memory_gb": -1}
    assert client.post("/v1/hardware", json=bad, headers=service.auth).status_code == 422


# --- measurements ------------------------------------------------------------------------------


def test_json_upload_list_and_delete(client: httpx.Client, service: Service) -> None:
    model = unique("m")
    rows = timings(model)
    body = {
        "name": unique("set"),
        "source": "local_profile",
        "measurements": rows,
        "stack": {"runner": "test", "hardware": "a100-80gb", "num_devices": 1},
    }
    created = client.post("/v1/measurement-sets", json=body, headers=service.auth)
    assert created.status_code == 201, created.text
    stored = created.json()
    assert stored["row_count"] == len(rows) and stored["models"] == [model]
    assert stored["stack"]["hardware"] == "a100-80gb"
    set_id = stored["id"]
    page1 = client.get(f"/v1/measurement-sets/{set_id}/measurements", params={"limit": 5}).json()
    page3 = client.get(
        f"/v1/measurement-sets/{set_id}/measurements", params={"limit": 5, "offset": 10}
    ).json()
    assert page1["total"] == len(rows) and len(page1["items"]) == 5 and len(page3["items"]) == 2
    assert page1["items"][0]["runtime_s"] == pytest.approx(rows[0]["runtime_s"])
    assert client.get("/v1/measurement-sets", params={"model": model}).json()["total"] == 1
    assert client.post("/v1/measurement-sets", json=body, headers=service.auth).status_code == 409
    assert client.delete(f"/v1/measurement-sets/{set_id}", headers=service.auth).status_code == 204
    assert client.get(f"/v1/measurement-sets/{set_id}").status_code == 404
    assert client.delete(f"/v1/measurement-sets/{set_id}", headers=service.auth).status_code == 404


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("runtime_s", -1.0),
        ("runtime_s", 0),
        ("num_prompt_tokens", 0),
        ("num_output_tokens", 10_000_001),
        ("runtime_s", "NaN"),
        ("model", ""),
    ],
)
def test_invalid_rows_write_nothing(
    client: httpx.Client, service: Service, field: str, value: object
) -> None:
    before = set_count(client)
    rows = timings(unique("m"))
    rows[5] = {**rows[5], field: value}
    response = client.post(
        "/v1/measurement-sets", json={"measurements": rows}, headers=service.auth
    )
    assert response.status_code == 422, response.text
    assert "measurements" in response.text and "5" in response.text  # where: row index
    assert set_count(client) == before


def test_csv_upload_body_and_multipart(client: httpx.Client, service: Service) -> None:
    model = unique("csv")
    text = to_csv(timings(model))
    plain = client.post(
        "/v1/measurement-sets/csv",
        params={"name": unique("csv"), "hardware": "a100-80gb", "source": "local_profile"},
        content=text,
        headers={**service.auth, "content-type": "text/csv"},
    )
    assert plain.status_code == 201, plain.text
    assert plain.json()["row_count"] == 12 and plain.json()["stack"]["hardware"] == "a100-80gb"
    form = client.post(
        "/v1/measurement-sets/csv",
        files={"file": ("t.csv", text, "text/csv")},
        headers=service.auth,
    )
    assert form.status_code == 201, form.text
    assert form.json()["models"] == [model]


def test_multipart_uploads_log_no_traceback(client: httpx.Client, service: Service) -> None:
    """Closing the form of a multipart upload logged a NoEventLoopError traceback on every
    upload, taken or refused."""
    log = Path(service.env["IDEALIZED_RUNTIME_HOME"]) / "server.log"
    start = log.stat().st_size
    text = to_csv(timings(unique("csv")))
    for content, status in [(text, 201), (text.replace(",0.02", ",inf", 1), 422)]:
        files = {"file": ("t.csv", content, "text/csv")}
        response = client.post("/v1/measurement-sets/csv", files=files, headers=service.auth)
        assert response.status_code == status, response.text
    no_file = client.post(
        "/v1/measurement-sets/csv", files={"other": ("t.csv", text, "text/csv")},
        headers=service.auth,
    )  # fmt: skip
    assert no_file.status_code == 422, no_file.text
    assert client.get("/v1/health").status_code == 200
    with log.open("rb") as file:
        file.seek(start)
        logged = file.read().decode(errors="replace")
    assert "Traceback" not in logged and "NoEventLoopError" not in logged, logged


def test_csv_errors_name_row_and_column(client: httpx.Client, service: Service) -> None:
    before = set_count(client)
    headers = {**service.auth, "content-type": "text/csv"}
    bad = to_csv(timings(unique("csv"))).replace(",0.02", ",inf", 1)
    response = client.post("/v1/measurement-sets/csv", content=bad, headers=headers)
    assert response.status_code == 422
    assert "row 1" in response.json()["detail"] and "runtime_s" in response.json()["detail"]
    missing = client.post(
        "/v1/measurement-sets/csv", content="model,runtime_s\nx,1\n", headers=headers
    )
    assert missing.status_code == 422 and "num_prompt_tokens" in missing.json()["detail"]
    assert client.post("/v1/measurement-sets/csv", content=b"", headers=headers).status_code == 422
    assert (
        client.post("/v1/measurement-sets/csv", content=b"\xff\xfe", headers=headers).status_code
        == 422
    )
    other = client.post(
        "/v1/measurement-sets/csv",
        content="{}",
        headers={**service.auth, "content-type": "application/json"},
    )
    assert other.status_code == 415
    assert set_count(client) == before


def test_idempotent_upload(client: httpx.Client, service: Service) -> None:
    key = {"Idempotency-Key": unique("idem")}
    body = {"measurements": timings(unique("idem"))}
    first = client.post("/v1/measurement-sets", json=body, headers={**service.auth, **key})
    again = client.post("/v1/measurement-sets", json=body, headers={**service.auth, **key})
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    other = {"measurements": timings(unique("idem"))}
    reused = client.post("/v1/measurement-sets", json=other, headers={**service.auth, **key})
    assert reused.status_code == 409 and "Idempotency-Key" in reused.text
    sets = client.get("/v1/measurement-sets", params={"model": body["measurements"][0]["model"]})
    assert sets.json()["total"] == 1


def test_body_limit_is_enforced_while_streaming(client: httpx.Client, service: Service) -> None:
    # Rows long enough that the body limit comes before the row limit.
    row = b"model-name-x,1,1,1\n"
    big = b"model,num_prompt_tokens,num_output_tokens,runtime_s\n" + row * (
        MAX_BODY_BYTES // len(row) + 10
    )
    headers = {**service.auth, "content-type": "text/csv"}
    assert client.post("/v1/measurement-sets/csv", content=big, headers=headers).status_code == 413

    def chunks():  # no Content-Length: chunked transfer encoding
        for start in range(0, len(big), 1 << 16):
            yield big[start : start + (1 << 16)]

    response = client.post("/v1/measurement-sets/csv", content=chunks(), headers=headers)
    assert response.status_code == 413
    assert client.get("/v1/health").status_code == 200


# --- fits --------------------------------------------------------------------------------------


def _upload(
    client: httpx.Client, service: Service, rows: list[dict[str, object]], **extra: object
) -> int:
    response = client.post(
        "/v1/measurement-sets", json={"measurements": rows, **extra}, headers=service.auth
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


@pytest.mark.parametrize("method", ["helm", "default"])
def test_fit_from_stored_measurements(client: httpx.Client, service: Service, method: str) -> None:
    model = unique("fit")
    set_id = _upload(client, service, timings(model) + timings(unique("other")))
    response = client.post(
        "/v1/fits",
        json={"measurement_set_id": set_id, "method": method, "models": [model]},
        headers=service.auth,
    )
    assert response.status_code == 201, response.text
    (fit,) = response.json()["fits"]
    assert fit["model"] == model and fit["method"] == method and fit["measurement_set_id"] == set_id
    assert fit["quality"]["n_points"] == 12 and fit["quality"]["mape"] < 0.05
    assert client.get(f"/v1/fits/{fit['id']}").json() == fit
    listed = client.get("/v1/fits", params={"model": model}).json()
    assert [f["id"] for f in listed["items"]] == [fit["id"]]
    exported = client.get("/v1/fits/export/helm", params={"model": model}).json()
    assert set(exported) == {model}
    assert set(exported[model]) >= {"runtime_per_output_token", "runtime_for_prompt_tokens"}
    estimate = client.get(
        "/v1/estimate", params={"model": model, "prompt_tokens": 300, "output_tokens": 20}
    ).json()
    assert estimate["fit_id"] == fit["id"]
    assert estimate["runtime_s"] == pytest.approx(0.02 + 1e-4 * 300 + 0.01 * 19, rel=0.1)
    # Deleting the set keeps the fit, without its provenance link.
    assert client.delete(f"/v1/measurement-sets/{set_id}", headers=service.auth).status_code == 204
    assert client.get(f"/v1/fits/{fit['id']}").json()["measurement_set_id"] is None


def test_fit_errors(client: httpx.Client, service: Service) -> None:
    assert (
        client.post(
            "/v1/fits", json={"measurement_set_id": 999_999}, headers=service.auth
        ).status_code
        == 404
    )
    set_id = _upload(client, service, timings(unique("fit")))
    missing = client.post(
        "/v1/fits", json={"measurement_set_id": set_id, "models": ["nope"]}, headers=service.auth
    )
    assert missing.status_code == 422
    assert (
        client.post(
            "/v1/fits", json={"measurement_set_id": set_id, "method": "magic"}, headers=service.auth
        ).status_code
        == 422
    )


def test_absurd_timings_are_a_422_at_upload_not_a_500(
    client: httpx.Client, service: Service
) -> None:
    # 1e-300 s and 1e300 s are unit mistakes; they would also overflow the fits' relative weights.
    model = unique("absurd")
    rows = [
        {"model": model, "num_prompt_tokens": 1, "num_output_tokens": 1, "runtime_s": 1e-300},
        {"model": model, "num_prompt_tokens": 1, "num_output_tokens": 5, "runtime_s": 1e300},
    ]
    before = client.get("/v1/measurement-sets", params={"model": model}).json()["total"]
    response = client.post(
        "/v1/measurement-sets", json={"measurements": rows}, headers=service.auth
    )
    assert response.status_code == 422, response.text
    assert "runtime_s" in response.text and "between" in response.text
    assert client.get("/v1/measurement-sets", params={"model": model}).json()["total"] == before


def test_nul_characters_are_a_422_not_a_500(client: httpx.Client, service: Service) -> None:
    # PostgreSQL stores no NUL in text or JSON; SQLite does. Either way: never a 5xx.
    name = unique("nul") + "\u0000x"
    rows = timings(name)
    upload = client.post("/v1/measurement-sets", json={"measurements": rows}, headers=service.auth)
    score = client.post(
        "/v1/capability-scores",
        json={"scores": [{"model": name, "scenario": "s", "metric": "acc", "value": 1.0}]},
        headers=service.auth,
    )
    read = client.get("/v1/fits", params={"model": name})
    for response in (upload, score, read):
        assert response.status_code < 500, response.text
    if service.backend == "postgres":
        assert upload.status_code == score.status_code == read.status_code == 422
        assert "NUL" in json.dumps(upload.json()["detail"])


def test_helm_import_round_trip(client: httpx.Client, service: Service) -> None:
    model = unique("helm/model")
    table = {
        model: {
            "runtime_per_output_token": 0.05,
            "runtime_for_prompt_tokens": {"1": 0.1, "512": 0.3},
        }
    }
    created = client.post(
        "/v1/fits/import/helm", params={"metric": "denoised"}, json=table, headers=service.auth
    )
    assert created.status_code == 201, created.text
    assert created.json()["fits"][0]["method"] == "denoised"
    exported = client.get(
        "/v1/fits/export/helm", params={"metric": "denoised", "model": model}
    ).json()
    assert exported == table
    bad = {model: {"runtime_per_output_token": -1, "runtime_for_prompt_tokens": {"1": 0.1}}}
    assert client.post("/v1/fits/import/helm", json=bad, headers=service.auth).status_code == 422


# --- estimates ---------------------------------------------------------------------------------


def _fit(client: httpx.Client, fit_id: int) -> FittedCostModel:
    body = client.get(f"/v1/fits/{fit_id}").json()
    return FittedCostModel(
        **{k: v for k, v in body.items() if k not in ("id", "source", "measurement_set_id")}
    )


def test_single_estimate_matches_the_cost_model(client: httpx.Client) -> None:
    params = {"model": "openai/davinci", "prompt_tokens": 512, "output_tokens": 64}
    response = client.get("/v1/estimate", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    fit = _fit(client, body["fit_id"])
    assert body["runtime_s"] == pytest.approx(float(predict_runtime(fit, 512, 64)))
    assert body["method"] == "helm" and body["cost"]["hardware"] == "a100-80gb"
    cost = body["cost"]
    assert cost["gpu_seconds"] == pytest.approx(body["runtime_s"] * cost["num_gpus"])
    assert cost["joules"] > 0 and cost["dollars"] > 0
    denoised = client.get("/v1/estimate", params={**params, "metric": "denoised"}).json()
    assert denoised["method"] == "denoised" and denoised["runtime_s"] != body["runtime_s"]
    h100 = client.get(
        "/v1/estimate", params={**params, "hardware": "h100-sxm", "num_gpus": 2}
    ).json()
    assert h100["cost"]["num_gpus"] == 2 and h100["cost"]["hardware"] == "h100-sxm"


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"model": "no/such-model", "prompt_tokens": 1, "output_tokens": 1}, 404),
        ({"model": "openai/davinci", "prompt_tokens": 0, "output_tokens": 1}, 422),
        ({"model": "openai/davinci", "prompt_tokens": 1, "output_tokens": 10_000_001}, 422),
        ({"model": "openai/davinci", "prompt_tokens": "x", "output_tokens": 1}, 422),
        ({"model": "openai/davinci", "prompt_tokens": 1, "output_tokens": 1, "metric": "raw"}, 422),
        (
            {"model": "openai/davinci", "prompt_tokens": 1, "output_tokens": 1, "hardware": "tpu"},
            404,
        ),
        (
            {"model": "openai/davinci", "prompt_tokens": 1, "output_tokens": 1, "fit_id": 999999},
            404,
        ),
    ],
)
def test_single_estimate_errors(
    client: httpx.Client, params: dict[str, object], status: int
) -> None:
    response = client.get("/v1/estimate", params=params)
    assert response.status_code == status, response.text
    assert response.json()["detail"]


def test_batch_estimate_of_100k_rows(client: httpx.Client) -> None:
    rng = np.random.default_rng(0)
    p = rng.integers(1, 2048, 100_000)
    o = rng.integers(1, 256, 100_000)
    pairs = zip(p.tolist(), o.tolist(), strict=True)
    requests = [{"prompt_tokens": a, "output_tokens": b} for a, b in pairs]
    body = {"model": "openai/davinci", "requests": requests}
    response = client.post("/v1/estimate/batch", json=body)
    assert response.status_code == 200, response.text
    out = response.json()
    fit = _fit(client, out["fit_id"])
    np.testing.assert_allclose(out["runtime_s"], predict_runtime(fit, p, o), rtol=1e-12)
    assert out["count"] == 100_000
    assert out["total_runtime_s"] == pytest.approx(float(np.sum(predict_runtime(fit, p, o))))
    assert len(out["cost"]["gpu_seconds"]) == 100_000
    server_ms = float(response.headers["server-timing"].split("dur=")[1])
    assert server_ms < 5_000  # the benchmark measures it properly; this only catches disasters
    totals = client.post("/v1/estimate/batch", json={**body, "include_rows": False}).json()
    assert totals["runtime_s"] is None and totals["total_runtime_s"] == pytest.approx(
        out["total_runtime_s"]
    )


def test_batch_estimate_limits(client: httpx.Client) -> None:
    base = {"model": "openai/davinci"}
    one = {"prompt_tokens": 1, "output_tokens": 1}
    half = client.post("/v1/estimate/batch", json={**base, "requests": [{"prompt_tokens": 1}]})
    assert half.status_code == 422
    assert half.json()["detail"][0]["loc"] == ["body", "requests", 0, "output_tokens"]
    rows = MAX_BATCH_ROWS + 1
    too_many = client.post("/v1/estimate/batch", json={**base, "requests": [one] * rows})
    assert too_many.status_code == 422 and str(MAX_BATCH_ROWS) in too_many.json()["detail"]
    bad = [{"prompt_tokens": 0, "output_tokens": 1}] * 1000
    bad_values = client.post("/v1/estimate/batch", json={**base, "requests": bad})
    assert bad_values.status_code == 422
    assert len(bad_values.json()["detail"]) <= 20 and bad_values.json()["error_count"] == 1000


def test_compare_over_a_helm_workload_and_own_requests(client: httpx.Client) -> None:
    models = ["openai/davinci", "openai/curie", "ai21/j1-jumbo"]
    response = client.post("/v1/compare", json={"models": models, "workload": "mmlu"})
    assert response.status_code == 200, response.text
    out = response.json()
    assert out["best"] == out["rows"][0]["model"] and out["rows"][0]["ratio_to_best"] == 1.0
    assert {r["model"] for r in out["rows"]} == set(models)
    assert all(r["ratio_to_best"] >= 1 and r["cost"]["gpu_seconds"] > 0 for r in out["rows"])
    requests = [
        {"prompt_tokens": 100, "output_tokens": 10},
        {"prompt_tokens": 200, "output_tokens": 20},
    ]
    own = client.post("/v1/compare", json={"models": models[:2], "requests": requests}).json()
    assert own["num_requests"] == 2 and own["mean_prompt_tokens"] == 150
    row = next(r for r in own["rows"] if r["model"] == "openai/curie")
    fit = _fit(client, row["fit_id"])
    assert row["total_runtime_s"] == pytest.approx(
        float(predict_runtime(fit, [100, 200], [10, 20]).sum())
    )
    assert client.post("/v1/compare", json={"models": models}).status_code == 422
    assert (
        client.post("/v1/compare", json={"models": models, "workload": "nope"}).status_code == 404
    )
    assert (
        client.post("/v1/compare", json={"models": ["nope/x"], "workload": "mmlu"}).status_code
        == 404
    )
    assert "mmlu" in {w["name"] for w in client.get("/v1/workloads").json()}


def test_leaderboard_json_and_html(client: httpx.Client, service: Service) -> None:
    board = client.get("/v1/leaderboard").json()
    davinci = next(m for m in board["models"] if m["model"] == "openai/davinci")
    assert davinci["idealized_runtime_s"] > 0 and davinci["accuracy"] is not None
    assert davinci["cost"]["gpu_seconds"] > 0
    assert board["workloads"] and board["scenarios"] is None
    with_scenarios = client.get("/v1/leaderboard", params={"include_scenarios": True}).json()
    assert with_scenarios["scenarios"]
    scores = {
        "scores": [
            {
                "model": "openai/davinci",
                "scenario": "mine:x=1",
                "metric": "exact_match",
                "value": 0.5,
            }
        ]
    }
    assert client.post("/v1/capability-scores", json=scores, headers=service.auth).json() == {
        "written": 1
    }
    listed = client.get("/v1/capability-scores", params={"scenario": "mine:x=1"}).json()
    assert listed["total"] == 1 and listed["items"][0]["value"] == 0.5
    html = client.get("/v1/leaderboard.html")
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    assert "openai/davinci" in html.text


def test_scores_are_bounded_and_the_board_stays_numeric(
    client: httpx.Client, service: Service
) -> None:
    """A score beyond its metric's documented range is refused (1e308 was stored, and the
    board's accuracy of that model became null); the board keeps numbers."""

    def score(metric: str, value: float) -> dict:
        row = {"model": "openai/davinci", "scenario": "mine:x=2", "metric": metric, "value": value}
        return {"scores": [row]}

    for metric, value in [
        ("exact_match", 1e308),
        ("accuracy", 1.5),
        ("exact_match", -0.1),
        ("raw_runtime_s", 2e6),
        ("mean_output_tokens", -1),
        ("other", 1e13),
    ]:
        detail = json.dumps(
            service.refused(
                client,
                "/v1/capability-scores",
                json.dumps(score(metric, value)),
                "application/json",
            )
        )
        assert f"{metric} must be between" in detail or "less than or equal" in detail, detail
    written = client.post(
        "/v1/capability-scores", json=score("exact_match", 1.0), headers=service.auth
    )
    assert written.status_code == 201, written.text
    board = client.get("/v1/leaderboard", params={"include_scenarios": True}).json()
    davinci = next(m for m in board["models"] if m["model"] == "openai/davinci")
    assert isinstance(davinci["accuracy"], float) and 0 <= davinci["accuracy"] <= 1


# --- configuration and CLI (SQLite only: they start their own servers) ------------------------


def test_reads_can_require_a_key(tmp_path: Path) -> None:
    env = {
        "IDEALIZED_RUNTIME_HOME": str(tmp_path),
        "DATABASE_URL": "",
        "IDEALIZED_RUNTIME_READS_REQUIRE_KEY": "1",
    }
    key = create_api_key("reader", env)
    assert key.startswith("ir_") and len(key) > 40
    with serving_api(env) as (url, _):
        assert httpx.get(f"{url}/v1/models").status_code == 401
        assert (
            httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code
            == 200
        )
    upgrade = subprocess.run(
        cli_command("db", "upgrade"), env={**os.environ, **env}, capture_output=True, text=True
    )
    assert upgrade.returncode == 0 and "0003" in upgrade.stdout
    # The key is stored hashed, never in clear.
    database = (tmp_path / "idealized-runtime.sqlite3").read_bytes()
    assert key.encode() not in database


def test_bad_database_url_is_one_line_error(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": "postgresql+psycopg://nobody:x@127.0.0.1:1/none"}
    result = subprocess.run(cli_command("db", "upgrade"), env=env, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("error: ")
    assert json.dumps  # keep the json import used for readers extending these tests


def test_literal_paths_under_an_id_route_answer_405_with_their_methods(
    client: httpx.Client,
) -> None:
    for method in ("GET", "DELETE"):
        response = client.request(method, "/v1/measurement-sets/csv")
        assert response.status_code == 405
        assert response.headers["allow"] == "POST"
