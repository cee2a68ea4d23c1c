"""A round's statistics from its request rows, and rounds as series: grouping, order, windows,
spreads, and shifts mapped back to the rounds they were found at."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from idealized_runtime.core.prices import ProviderPrice
from idealized_runtime.core.rounds import MonitorRound, ProbeShape, RoundPoint
from idealized_runtime.trends.round_statistics import (
    IdealizedReference,
    RoundIdentity,
    round_from_rows,
)
from idealized_runtime.trends.series import build_series, spread, window_summary

T0 = datetime(2026, 11, 26, 10, 0, tzinfo=timezone.utc)
SHAPES = [
    ProbeShape(prompt_tokens=16, output_tokens=4),
    ProbeShape(prompt_tokens=64, output_tokens=8),
]


def _row(p: int, o: int, ttft: float, gap: float, *, ok: bool = True) -> dict:
    """A streamed request's row as ``measure`` writes it: a first token after ``ttft``, then
    one every ``gap``."""
    return {
        "model": "m", "load": "concurrency=1", "ok": ok, "num_prompt_tokens": p,
        "num_output_tokens": o, "runtime_s": ttft + gap * (o - 1) if ok else None,
        "ttft_s": ttft if ok else None, "inter_token_latencies_s": [gap] * (o - 1) if ok else [],
        "started_at_s": 0.0, "finished_at_s": 1.0, "run_id": "r", "error": None if ok else
        "HTTP 503: overloaded",
    }  # fmt: skip


def _identity(index: int = 0) -> RoundIdentity:
    start = T0 + timedelta(minutes=5 * index)
    return RoundIdentity(f"m1:{index:06d}:p", "p", "m", index, start, start + timedelta(seconds=3))


def test_a_round_from_its_rows() -> None:
    rows = [
        _row(16, 4, 0.10, 0.010),
        _row(64, 8, 0.12, 0.010),
        _row(16, 4, 0.11, 0.010),
        _row(64, 8, 0.13, 0.010),
        _row(16, 4, 0.0, 0.0, ok=False),
    ]
    price = ProviderPrice("p", "m", input_usd_per_mtok=1.0, output_usd_per_mtok=2.0)
    reference = IdealizedReference(runtime_s=0.05, label="x on h100-sxm")
    record = round_from_rows(_identity(), rows, SHAPES, price=price, reference=reference)
    assert record.status == "ok" and record.requests == 5 and record.failed_requests == 1
    assert record.error_rate == pytest.approx(0.2)
    assert record.error == "1 of 5 requests failed; first: HTTP 503: overloaded"
    assert record.ttft_s == pytest.approx(np.median([0.10, 0.12, 0.11, 0.13]))
    assert record.itl_s == pytest.approx(0.010)
    assert record.output_tokens_per_s == pytest.approx(100.0)
    # Dollars of the four successful requests: 160 prompt and 24 output tokens.
    assert record.usd == pytest.approx((160 * 1.0 + 24 * 2.0) / 1e6)
    assert record.idealized_runtime_s == 0.05 and record.reference == "x on h100-sxm"
    assert record.denoised_runtime_s is not None
    assert record.discrepancy == pytest.approx(record.denoised_runtime_s / 0.05)
    assert len(record.measurements) == 4 and record.summary is not None
    # The lower envelope of these timings: the fastest request of each shape.
    assert record.denoised_runtime_s == pytest.approx((0.10 + 0.03 + 0.12 + 0.07) / 2, rel=0.05)


def test_a_round_that_sent_nothing_is_a_failed_round() -> None:
    record = round_from_rows(_identity(), [], SHAPES, error="probe request failed: refused")
    assert record.status == "failed" and record.error_rate == 1.0 and record.requests == 0
    assert record.error == "probe request failed: refused"
    assert record.ttft_s is None and record.denoised_runtime_s is None and record.usd is None
    assert round_from_rows(_identity(), [], SHAPES).error == "no request was sent"


def test_round_rules_between_fields() -> None:
    base = round_from_rows(_identity(), [_row(16, 4, 0.1, 0.01)], SHAPES).model_dump()
    for change, words in [
        ({"finished_at": T0 - timedelta(seconds=1)}, "finished_at is before started_at"),
        ({"failed_requests": 2}, "failed_requests is more than requests"),
        ({"status": "failed"}, "status must be ok or degraded when some request succeeded"),
    ]:
        with pytest.raises(ValueError, match=words):
            MonitorRound.model_validate({**base, **change})
    later = MonitorRound.model_validate(
        {**base, "started_at": "2026-11-26T11:00:00+01:00", "finished_at": T0}
    )
    assert later.started_at == T0 and later.started_at.tzinfo == timezone.utc


def _points(values: list[float | None], provider: str = "p", model: str = "m") -> list[RoundPoint]:
    points = []
    for index, value in enumerate(values):
        start = T0 + timedelta(minutes=5 * index)
        points.append(
            RoundPoint(
                round_id=f"m1:{index:06d}:{provider}:{model}",
                provider=provider,
                model=model,
                round_index=index,
                started_at=start,
                finished_at=start + timedelta(seconds=2),
                status="ok" if value is not None else "failed",
                requests=6,
                failed_requests=0 if value is not None else 6,
                ttft_s=value,
                error_rate=0.0 if value is not None else 1.0,
                usd=0.001 if value else None,
            )
        )
    return points


def test_series_group_order_and_find_shifts_at_their_rounds() -> None:
    rng = np.random.default_rng(1)
    values: list[float | None] = list(0.2 * np.exp(rng.normal(0, 0.03, 50)))
    values[30:] = [2 * v for v in values[30:]]  # type: ignore[operator]
    values[10] = None  # a failed round: no TTFT, left out of the TTFT series
    other = _points([0.1] * 5, provider="q")
    shuffled = _points(values)[::-1] + other
    series = build_series(shuffled)
    assert [(s.provider, s.model) for s in series] == [("p", "m"), ("q", "m")]
    first = series[0]
    assert [p.round_index for p in first.points] == list(range(50))
    (change,) = first.changes
    assert change.statistic == "ttft_s" and change.direction == "up"
    assert change.start_round_index == 30 and 30 <= change.round_index <= 35
    assert change.rounds_to_flag == change.round_index - 30 + 1
    assert change.relative == pytest.approx(1.0, abs=0.1)
    window = first.window(T0 + timedelta(minutes=5 * 5), T0 + timedelta(minutes=5 * 14))
    assert window.rounds == 10 and window.failed_rounds == 1
    assert window.requests == 60 and window.failed_requests == 6
    inside = [v for v in values[5:15] if v is not None]
    assert window.statistics["ttft_s"] == spread(inside)
    assert window.usd_total == pytest.approx(0.009)
    shown = first.between(T0, T0 + timedelta(minutes=5 * 29))
    assert len(shown.points) == 30 and shown.changes == ()


def test_spread_is_the_median_and_the_10th_to_90th_percentiles() -> None:
    values = [float(v) for v in range(1, 12)]
    got = spread(values)
    assert (got.median, got.p10, got.p90, got.values) == (6.0, 2.0, 10.0, 11)
    assert spread([]).median is None
    empty = window_summary([])
    assert empty.rounds == 0 and empty.statistics["ttft_s"].values == 0
