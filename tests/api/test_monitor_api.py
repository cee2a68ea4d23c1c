"""/v1/monitor against the real service (SQLite; PostgreSQL with DATABASE_URL_TEST): a round is
stored whole with its measurement set, its id makes a retry a no-op and a different round
under it a 409, bodies are read strictly, and the series are filtered by provider, model and
time, with a step found at its round."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import numpy as np

from tests.api.conftest import Service

T0 = datetime(2026, 11, 26, 10, 0, tzinfo=timezone.utc)


def round_body(
    index: int, ttft: float = 0.2, *, provider: str = "prov-a", model: str = "api-m"
) -> dict[str, Any]:
    start = T0 + timedelta(minutes=5 * index)
    return {
        "round_id": f"mtest:{index:06d}:{provider}:{model}",
        "provider": provider,
        "model": model,
        "round_index": index,
        "started_at": start.isoformat(),
        "finished_at": (start + timedelta(seconds=3)).isoformat(),
        "status": "ok",
        "requests": 2,
        "failed_requests": 0,
        "ttft_s": ttft,
        "itl_s": 0.01,
        "output_tokens_per_s": 100.0,
        "denoised_runtime_s": ttft + 0.15,
        "idealized_runtime_s": 0.1,
        "discrepancy": (ttft + 0.15) / 0.1,
        "error_rate": 0.0,
        "usd": 0.0002,
        "reference": "x on h100-sxm, pytorch-compiled, batch 1",
        "shapes": [{"prompt_tokens": 16, "output_tokens": 16}],
        "measurements": [
            {"model": model, "num_prompt_tokens": 16, "num_output_tokens": 16,
             "runtime_s": ttft + 0.15, "ttft_s": ttft},
            {"model": model, "num_prompt_tokens": 16, "num_output_tokens": 16,
             "runtime_s": ttft + 0.16, "ttft_s": ttft + 0.01},
        ],
    }  # fmt: skip


def test_a_round_is_stored_once_with_its_measurements(
    service: Service, client: httpx.Client
) -> None:
    body = round_body(0)
    first = client.post("/v1/monitor/rounds", json=body, headers=service.auth)
    assert first.status_code == 201, first.text
    stored = first.json()
    assert stored["round_id"] == body["round_id"] and stored["ttft_s"] == 0.2
    set_id = stored["measurement_set_id"]
    rows = client.get(f"/v1/measurement-sets/{set_id}/measurements").json()
    assert rows["total"] == 2
    made = client.get(f"/v1/measurement-sets/{set_id}").json()
    assert made["name"] == f"monitor:{body['round_id']}" and made["source"] == "api_timing"
    # The same round again (its times written with another offset): stored nothing.
    again = {**body, "started_at": (T0 + timedelta(hours=1)).astimezone(
        timezone(timedelta(hours=1))).isoformat()}  # fmt: skip
    again["started_at"] = body["started_at"].replace("+00:00", "Z")
    replay = client.post("/v1/monitor/rounds", json=again, headers=service.auth)
    assert replay.status_code == 200 and replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == stored
    listed = client.get("/v1/monitor/rounds", params={"provider": "prov-a"}).json()
    assert listed["total"] == 1
    # Another round under a stored id: 409, nothing written.
    other = client.post("/v1/monitor/rounds", json={**body, "ttft_s": 0.3}, headers=service.auth)
    assert other.status_code == 409 and "other content" in other.json()["detail"]
    # The fit of a round is made from its measurement set by the fits endpoint.
    fit = client.post(
        "/v1/fits", json={"measurement_set_id": set_id, "method": "denoised"}, headers=service.auth
    )
    assert fit.status_code == 201, fit.text


def test_a_failed_round_has_no_measurement_set(service: Service, client: httpx.Client) -> None:
    body = {
        **round_body(0, provider="prov-down"),
        "status": "failed", "requests": 0, "failed_requests": 0, "error_rate": 1.0,
        "error": "probe request failed: ConnectError", "measurements": [], "ttft_s": None,
        "itl_s": None, "output_tokens_per_s": None, "denoised_runtime_s": None,
        "discrepancy": None, "usd": None,
    }  # fmt: skip
    response = client.post("/v1/monitor/rounds", json=body, headers=service.auth)
    assert response.status_code == 201, response.text
    assert response.json()["measurement_set_id"] is None
    assert response.json()["error"] == "probe request failed: ConnectError"


def test_rounds_are_listed_by_status_degraded_included(
    service: Service, client: httpx.Client
) -> None:
    ok = round_body(0, provider="prov-status")
    degraded = {
        **round_body(1, provider="prov-status"),
        "status": "degraded", "requests": 6, "failed_requests": 4, "error_rate": 4 / 6,
    }  # fmt: skip
    for body in (ok, degraded):
        response = client.post("/v1/monitor/rounds", json=body, headers=service.auth)
        assert response.status_code == 201, response.text
    for status, index in (("degraded", 1), ("ok", 0)):
        listed = client.get(
            "/v1/monitor/rounds", params={"provider": "prov-status", "status": status}
        ).json()
        assert [r["round_index"] for r in listed["items"]] == [index]
    refused = client.get("/v1/monitor/rounds", params={"status": "bad"})
    assert refused.status_code == 422


def test_rounds_are_refused_with_detail(service: Service, client: httpx.Client) -> None:
    body = round_body(1, provider="prov-bad")
    anonymous = client.post("/v1/monitor/rounds", json=body)
    assert anonymous.status_code == 401
    for change, where in [
        ({"requests": "2"}, "requests"),
        ({"ttft_s": True}, "ttft_s"),
        ({"round_id": "no spaces allowed"}, "round_id"),
        ({"provider": "a/b"}, "provider"),
        ({"error_rate": 1.5}, "error_rate"),
        ({"started_at": "2026-11-26T10:00:00"}, "started_at"),  # no zone
        ({"unknown": 1}, "unknown"),
    ]:
        response = client.post("/v1/monitor/rounds", json={**body, **change}, headers=service.auth)
        assert response.status_code == 422, (change, response.text)
        assert where in json.dumps(response.json()["detail"]), (change, response.text)
    for change, words in [
        ({"finished_at": (T0 - timedelta(days=1)).isoformat()}, "finished_at is before"),
        ({"failed_requests": 3}, "failed_requests is more than requests"),
        ({"failed_requests": 2, "status": "ok"}, "status must be ok or degraded when"),
    ]:
        response = client.post("/v1/monitor/rounds", json={**body, **change}, headers=service.auth)
        assert response.status_code == 422 and words in response.text, response.text
    bad_measurement = {**body["measurements"][0], "ttft_s": 5.0}
    response = client.post(
        "/v1/monitor/rounds",
        json={**body, "measurements": [bad_measurement]},
        headers=service.auth,
    )
    assert response.status_code == 422 and "greater than runtime_s" in response.text
    nan = json.dumps(body).replace('"ttft_s": 0.2', '"ttft_s": NaN', 1)
    response = client.post(
        "/v1/monitor/rounds",
        content=nan,
        headers={**service.auth, "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert client.get("/v1/monitor/rounds", params={"provider": "prov-bad"}).json()["total"] == 0


def test_series_filters_and_the_step_found(service: Service, client: httpx.Client) -> None:
    rng = np.random.default_rng(3)
    ttft = 0.2 * np.exp(rng.normal(0.0, 0.03, 60))
    ttft[35:] *= 2
    for index, value in enumerate(ttft):
        body = round_body(index, float(value), provider="prov-s", model="series-m")
        response = client.post("/v1/monitor/rounds", json=body, headers=service.auth)
        assert response.status_code == 201, response.text
    client.post("/v1/monitor/rounds", json=round_body(0, provider="prov-t", model="series-m"),
                headers=service.auth)  # fmt: skip
    everything = client.get("/v1/monitor/series", params={"model": "series-m"}).json()
    assert [(s["provider"], s["model"]) for s in everything["items"]] == [
        ("prov-s", "series-m"), ("prov-t", "series-m"),
    ]  # fmt: skip
    series = everything["items"][0]
    assert len(series["points"]) == 60
    changes = {c["statistic"]: c for c in series["changes"]}
    assert set(changes) == {"ttft_s", "denoised_runtime_s"}
    assert changes["ttft_s"]["start_round_index"] == 35
    assert 35 <= changes["ttft_s"]["round_index"] <= 40
    assert changes["ttft_s"]["direction"] == "up"
    # A window after the step: its points and medians; the shift flagged inside it is shown.
    start, end = T0 + timedelta(minutes=5 * 36), T0 + timedelta(minutes=5 * 59)
    window = client.get(
        "/v1/monitor/series",
        params={"provider": "prov-s", "from": start.isoformat(), "to": end.isoformat()},
    ).json()
    (item,) = window["items"]
    assert window["from"] is not None and len(item["points"]) == 24
    assert item["window"]["rounds"] == 24 and item["window"]["requests"] == 48
    median = item["window"]["statistics"]["ttft_s"]["median"]
    assert median == float(np.median(ttft[36:60]))
    assert {c["statistic"] for c in item["changes"]} == {"ttft_s", "denoised_runtime_s"}
    before = (T0 + timedelta(minutes=60)).isoformat()
    early = client.get("/v1/monitor/series", params={"provider": "prov-s", "to": before})
    assert early.json()["items"][0]["changes"] == []
    rounds = client.get(
        "/v1/monitor/rounds",
        params={"provider": "prov-s", "from": start.isoformat(), "limit": 10, "offset": 5},
    ).json()
    assert rounds["total"] == 24 and [r["round_index"] for r in rounds["items"]] == list(
        range(41, 51)
    )
    assert client.get("/v1/monitor/rounds", params={"status": "failed", "provider": "prov-s"}
                      ).json()["total"] == 0  # fmt: skip


def test_series_queries_are_checked(client: httpx.Client) -> None:
    for params, words in [
        ({"from": "2026-11-27T00:00:00Z", "to": "2026-11-26T00:00:00Z"}, "from is after to"),
        ({"from": "2026-11-27T00:00:00"}, "time zone"),
        ({"provider": "a b"}, "provider"),
        ({"from": "yesterday"}, "from"),
        # Bare numbers are no date-time (pydantic alone reads them as seconds since 1970).
        ({"from": "1700000000"}, "ISO 8601 date-time"),
        ({"to": "0.5"}, "ISO 8601 date-time"),
        ({"from": "2026-11-27"}, "ISO 8601 date-time"),
    ]:
        for path in ("/v1/monitor/series", "/v1/monitor/rounds"):
            response = client.get(path, params=params)
            assert response.status_code == 422, (path, params, response.text)
            assert words in response.text, (path, params, response.text)
    assert client.get("/v1/monitor/rounds", params={"status": "lost"}).status_code == 422
