"""/v1/load-summaries against the real service (SQLite; PostgreSQL with DATABASE_URL_TEST):
store and list round trips, raw rows summarized by the server, replacement, and 4xx details."""

from __future__ import annotations

import json

import httpx

from idealized_runtime.core.types import LoadSummary
from idealized_runtime.timing.summary import summaries_to_json, summarize
from tests.api.conftest import Service


def raw_rows(model: str, load: str, e2e: list[float]) -> list[dict]:
    return [
        {"model": model, "load": load, "ok": True, "runtime_s": t, "ttft_s": t / 10,
         "num_output_tokens": 5, "inter_token_latencies_s": [t / 20], "started_at_s": float(i)}
        for i, t in enumerate(e2e)
    ]  # fmt: skip


def test_json_summaries_round_trip_and_replace(service: Service, client: httpx.Client) -> None:
    rows = raw_rows("load-a", "concurrency=1", [1.0, 2.0]) + raw_rows(
        "load-a", "concurrency=4", [2.0, 3.0, 4.0]
    )
    summaries = summaries_to_json(summarize(rows))
    written = client.post("/v1/load-summaries", json=summaries, headers=service.auth)
    assert written.status_code == 201, written.text
    assert written.json()["written"] == 2
    listed = client.get("/v1/load-summaries", params={"model": "load-a"}).json()
    assert listed["total"] == 2
    for item, sent in zip(listed["items"], summaries, strict=True):
        assert item["source"] == "measured"
        assert (
            LoadSummary.model_validate({k: item[k] for k in sent}).model_dump(mode="json") == sent
        )
    # The same (model, load, source) again replaces; another source is kept beside it.
    faster = [{**summaries[0], "requests_per_s": 9.0}]
    assert client.post("/v1/load-summaries", json=faster, headers=service.auth).status_code == 201
    simulated = client.post(
        "/v1/load-summaries", json=faster, params={"source": "simulated"}, headers=service.auth
    )
    assert simulated.status_code == 201
    items = client.get("/v1/load-summaries", params={"model": "load-a"}).json()["items"]
    assert len(items) == 3
    nine = {(i["load"], i["source"]) for i in items if i["requests_per_s"] == 9.0}
    assert nine == {("concurrency=1", "measured"), ("concurrency=1", "simulated")}
    only = client.get("/v1/load-summaries", params={"source": "simulated"}).json()
    assert only["total"] == 1


def test_raw_rows_are_summarized_by_the_server(service: Service, client: httpx.Client) -> None:
    rows = raw_rows("load-b", "rate=2.0", [1.0, 2.0, 3.0, 4.0])
    body = "".join(json.dumps(row) + "\n" for row in rows)
    response = client.post(
        "/v1/load-summaries",
        content=body,
        params={"slo": "e2e=2.5"},
        headers={**service.auth, "Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 201, response.text
    (item,) = response.json()["items"]
    expected = summarize(rows, None)[0]
    assert item["e2e_s"] == expected.e2e_s.model_dump()
    assert item["goodput_requests_per_s"] == 2 / 7  # two of four within 2.5 s, over 7 s
    upload = client.post(
        "/v1/load-summaries",
        files={"file": ("raw.jsonl", body, "application/octet-stream")},
        params={"source": "upload"},
        headers=service.auth,
    )
    assert upload.status_code == 201 and upload.json()["items"][0]["source"] == "upload"


def test_bad_uploads_are_4xx_with_detail(service: Service, client: httpx.Client) -> None:
    ndjson = {**service.auth, "Content-Type": "application/x-ndjson"}
    cases = [
        ({"content": "[1]\n", "headers": ndjson}, 422, "line 1 is not a JSON object"),
        (
            {"content": '{"runtime_s": 1.2, "runtime_s": 2.5}\n', "headers": ndjson},
            422,
            "line 1 gives the key 'runtime_s' twice",
        ),
        ({"content": "", "headers": ndjson}, 422, "no summaries"),
        ({"content": "{}\n", "headers": ndjson, "params": {"slo": "p99=1"}}, 422, "ttft=S"),
        ({"json": [{"model": "m"}], "headers": service.auth}, 422, "load"),
        ({"json": [], "headers": service.auth}, 422, "at least 1 item"),
        ({"content": "x", "headers": {**service.auth, "Content-Type": "image/png"}}, 415, "send"),
        ({"json": [], "headers": {}}, 401, ""),
    ]
    for kwargs, code, detail in cases:
        response = client.post("/v1/load-summaries", **kwargs)
        assert response.status_code == code, (kwargs, response.text)
        assert detail in json.dumps(response.json()["detail"])
