"""/metrics of the real service, scraped and parsed by prometheus-client's own parser: request
counters and latency histograms per route, refusals by reason; after a monitoring round is
stored, the provider's gauges carry that round's figures. The shipped Grafana dashboard and
Prometheus alert rules load, and every metric they query is one the service exposes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.api.live import LiveServer, live_server

DOCS = Path(__file__).resolve().parents[2] / "docs"
# An hour ago: the gauges read the rounds of the last week.
STARTED = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
ROUND = {
    "round_id": "metrics:000001:prov-metrics:m-metrics",
    "provider": "prov-metrics",
    "model": "m-metrics",
    "round_index": 1,
    "started_at": STARTED.isoformat(),
    "finished_at": (STARTED + timedelta(seconds=3)).isoformat(),
    "status": "ok",
    "requests": 4,
    "failed_requests": 1,
    "ttft_s": 0.25,
    "itl_s": 0.0125,
    "output_tokens_per_s": 80.0,
    "denoised_runtime_s": 0.45,
    "idealized_runtime_s": 0.15,
    "discrepancy": 3.0,
    "error_rate": 0.25,
    "measurements": [
        {"model": "m-metrics", "num_prompt_tokens": 128, "num_output_tokens": 16,
         "runtime_s": 0.45, "ttft_s": 0.25}
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(tmp_path_factory.mktemp("metrics")) as running:
        yield running


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def _value(samples: dict, name: str, **labels: str) -> float:
    matches = [v for found, v in samples.get(name, []) if labels.items() <= found.items()]
    assert len(matches) == 1, (name, labels, samples.get(name))
    return matches[0]


def test_metrics_carry_requests_refusals_and_the_latest_round(server: LiveServer) -> None:
    with server.client() as client:
        stored = client.post("/v1/monitor/rounds", json=ROUND, headers=server.auth)
        assert stored.status_code == 201, stored.text
        assert client.get("/v1/health").status_code == 200
        anonymous = client.post("/v1/monitor/rounds", json=ROUND)
        assert anonymous.status_code == 401
        repeated = client.post(
            "/v1/capability-scores",
            content=b'{"scores": [], "scores": []}',
            headers={**server.auth, "content-type": "application/json"},
        )
        assert repeated.status_code == 422
        assert client.get("/no/such/path").status_code == 404
        scraped = client.get("/metrics")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    samples = _samples(scraped.text)

    requests = "idealized_runtime_http_requests_total"
    assert _value(samples, requests, route="/v1/monitor/rounds", method="POST", status="201") == 1
    assert _value(samples, requests, route="/v1/health", method="GET", status="200") >= 1
    assert _value(samples, requests, route="unmatched", method="GET", status="404") == 1
    latency = "idealized_runtime_http_request_duration_seconds"
    assert _value(samples, f"{latency}_count", route="/v1/health", method="GET") >= 1
    assert _value(samples, f"{latency}_bucket", route="/v1/health", method="GET", le="+Inf") >= 1
    refusals = "idealized_runtime_refusals_total"
    assert _value(samples, refusals, reason="unauthenticated") == 1
    assert _value(samples, refusals, reason="json_repeated_key") == 1
    assert _value(samples, "idealized_runtime_computations_in_flight") == 0
    assert _value(samples, "idealized_runtime_computations_limit") == 2

    who = {"provider": "prov-metrics", "model": "m-metrics"}
    for name, field in [
        ("idealized_runtime_monitor_ttft_seconds", "ttft_s"),
        ("idealized_runtime_monitor_itl_seconds", "itl_s"),
        ("idealized_runtime_monitor_output_tokens_per_second", "output_tokens_per_s"),
        ("idealized_runtime_monitor_denoised_runtime_seconds", "denoised_runtime_s"),
        ("idealized_runtime_monitor_idealized_runtime_seconds", "idealized_runtime_s"),
        ("idealized_runtime_monitor_discrepancy_ratio", "discrepancy"),
        ("idealized_runtime_monitor_error_ratio", "error_rate"),
    ]:
        assert _value(samples, name, **who) == pytest.approx(ROUND[field]), name
    assert _value(samples, "idealized_runtime_monitor_round_ok", **who) == 1
    stamp = _value(samples, "idealized_runtime_monitor_round_timestamp_seconds", **who)
    assert stamp == STARTED.timestamp()
    # One round: nothing to compare it with, no shift.
    assert _value(samples, "idealized_runtime_monitor_shift", **who, statistic="ttft_s") == 0


def _queried_metrics(expressions: list[str]) -> set[str]:
    names = set()
    for expression in expressions:
        names |= set(re.findall(r"idealized_runtime_[a-z_]+", expression))
    return names


def test_the_dashboard_and_alert_rules_load_and_query_exposed_metrics(
    server: LiveServer,
) -> None:
    dashboard = json.loads((DOCS / "grafana" / "idealized-runtime.json").read_text())
    rules = yaml.safe_load((DOCS / "prometheus" / "alerts.yml").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels and all(p["targets"] for p in panels)
    dashboard_queries = [t["expr"] for p in panels for t in p["targets"]]
    dashboard_queries += [v["definition"] for v in dashboard["templating"]["list"]
                          if "definition" in v]  # fmt: skip
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert alerts and all({"alert", "expr", "labels", "annotations"} <= set(a) for a in alerts)
    assert {a["labels"]["severity"] for a in alerts} <= {"page", "ticket"}

    with server.client() as client:
        assert client.post("/v1/monitor/rounds", json=ROUND, headers=server.auth).is_success
        exposed = set(_samples(client.get("/metrics").text))
    for name in _queried_metrics(dashboard_queries + [a["expr"] for a in alerts]):
        assert name in exposed, f"{name} is queried but not exposed"
