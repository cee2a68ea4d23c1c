"""What Prometheus scrapes at ``/metrics`` (prometheus-client, its text format): requests per
route and status, latency histograms, refusals by reason, computations in flight; and the
monitor's latest round per provider and model, read from the database at scrape time (so every
server process answers the same).

Counters and histograms are per process (run one process per scrape target, or add the
processes' series up in Prometheus)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Slots(Protocol):
    """What the gauges read of the compute bound (``compute.ComputeSlots``; a protocol, so
    that this module imports nothing of the module that counts into it)."""

    limit: int

    @property
    def running(self) -> int: ...


PREFIX = "idealized_runtime"
REGISTRY = CollectorRegistry()

REQUESTS = Counter(
    f"{PREFIX}_http_requests",
    "HTTP requests answered, by route (its path template), method and status",
    ["route", "method", "status"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    f"{PREFIX}_http_request_duration_seconds",
    "From the request's headers to the response's end, by route and method",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    registry=REGISTRY,
)
REFUSALS = Counter(
    f"{PREFIX}_refusals",
    "Requests refused, by reason (the status's meaning, or the bound that refused them)",
    ["reason"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    f"{PREFIX}_computations_in_flight",
    "Expensive reads (plans, batch and hardware-model estimates, comparisons) running now",
    registry=REGISTRY,
)
COMPUTE_LIMIT = Gauge(
    f"{PREFIX}_computations_limit",
    "Computations this process runs at once (IDEALIZED_RUNTIME_MAX_CONCURRENT_COMPUTATIONS)",
    registry=REGISTRY,
)

# Refusals named by their status; bounds name themselves (``refused``).
_STATUS_REASONS = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    415: "media_type",
    422: "unprocessable",
    429: "too_many_requests",
    503: "unavailable",
}


REFUSAL_STATE = "refusal_reason"


def mark_refusal(request: Request, reason: str) -> None:
    """Name the bound that refuses ``request`` (counted once, by the middleware, under it)."""
    setattr(request.state, REFUSAL_STATE, reason)


def track_computations(slots: Slots) -> None:
    IN_FLIGHT.set_function(lambda: slots.running)
    COMPUTE_LIMIT.set(slots.limit)


class MetricsMiddleware:
    """Counts and times every HTTP request under its route's path template (``unmatched``
    for a path no route serves: the label's values stay bounded)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope["method"]
            REQUESTS.labels(route, method, str(status[0])).inc()
            LATENCY.labels(route, method).observe(time.perf_counter() - start)
            if status[0] >= 400:
                named = scope.get("state", {}).get(REFUSAL_STATE)
                reason = named or _STATUS_REASONS.get(status[0], f"status_{status[0]}")
                REFUSALS.labels(reason).inc()


# --- the monitor's latest rounds, read at scrape time ------------------------------------------

# (metric suffix, RoundPoint field, help)
MONITOR_GAUGES = (
    ("monitor_ttft_seconds", "ttft_s", "Time to first token, the round's median"),
    ("monitor_itl_seconds", "itl_s", "Inter-token latency, the round's median"),
    ("monitor_output_tokens_per_second", "output_tokens_per_s", "Output tokens/s per request"),
    ("monitor_denoised_runtime_seconds", "denoised_runtime_s", "Denoised runtime of the probe"),
    ("monitor_idealized_runtime_seconds", "idealized_runtime_s", "Idealized runtime (reference)"),
    ("monitor_discrepancy_ratio", "discrepancy", "Denoised / idealized runtime"),
    ("monitor_error_ratio", "error_rate", "Failed requests / requests of the round"),
)


# The rounds a scrape reads: a week (2,016 rounds of a series at the default 5 minutes), so that
# a scrape's work does not grow with the history; a series without a round in it is not shown.
MONITOR_WINDOW = timedelta(days=7)


class MonitorCollector(Collector):
    """Gauges of each (provider, model)'s latest stored monitoring round, and per detected
    statistic its shift state over the rounds of the last ``MONITOR_WINDOW`` (1: the latest
    shift flagged went up, -1: down, 0: none)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from idealized_runtime.api import monitor_crud
        from idealized_runtime.api.db import get_database
        from idealized_runtime.trends.series import build_series

        since = datetime.now(timezone.utc) - MONITOR_WINDOW
        with get_database().read_sessions() as session:
            series = build_series(monitor_crud.recent_round_points(session, since))
        yield from monitor_families(series)

    def describe(self) -> Iterable[Any]:
        return []  # read at scrape time: nothing to check at registration


def monitor_families(series: Iterable[Any]) -> Iterator[GaugeMetricFamily]:
    labels = ["provider", "model"]
    families = {
        field: GaugeMetricFamily(f"{PREFIX}_{name}", text, labels=labels)
        for name, field, text in MONITOR_GAUGES
    }
    round_ok = GaugeMetricFamily(
        f"{PREFIX}_monitor_round_ok", "1 when the latest round succeeded, else 0", labels=labels
    )
    round_time = GaugeMetricFamily(
        f"{PREFIX}_monitor_round_timestamp_seconds",
        "When the latest round started (Unix time)",
        labels=labels,
    )
    shift = GaugeMetricFamily(
        f"{PREFIX}_monitor_shift",
        "The latest shift flagged of a statistic in the last week's rounds: 1 up, -1 down, 0 none",
        labels=[*labels, "statistic"],
    )
    from idealized_runtime.trends.series import DETECTED

    for one in series:
        if not one.points:
            continue
        latest, names = one.points[-1], [one.provider, one.model]
        for field, family in families.items():
            value = getattr(latest, field)
            if value is not None:
                family.add_metric(names, float(value))
        round_ok.add_metric(names, 1.0 if latest.status == "ok" else 0.0)
        round_time.add_metric(names, latest.started_at.timestamp())
        last_shift = {change.statistic: change.direction for change in one.changes}
        for statistic in DETECTED:
            direction = last_shift.get(statistic)
            value = 1.0 if direction == "up" else -1.0 if direction == "down" else 0.0
            shift.add_metric([*names, statistic], value)
    yield from families.values()
    yield from (round_ok, round_time, shift)


REGISTRY.register(MonitorCollector())


def exposition() -> tuple[bytes, str]:
    """The text Prometheus scrapes, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
