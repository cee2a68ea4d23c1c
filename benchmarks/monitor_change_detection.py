"""The monitor's change detector (``trends.changes.find_shifts``) on seeded round statistics:
how often it raises a false alarm on a steady provider, and how many rounds it takes to flag a
real shift, by the shift's size against the provider's own noise.

A round's statistic is the median of ``--requests`` requests (3 by default), each with a
log-normal spread of 5%, 10% or 20% around the provider's level and a 2% chance of a slow
spike (1 + Exp(1) times slower: a neighbour's burst, a network hiccup), the noise a probe round
sees. A steady series is ``--rounds`` rounds of that; a shifted one multiplies every round from
round 60 on by a factor. The "round noise" column is the spread of the round statistic itself
(MAD x 1.4826, relative to the level): a shift of factor f is (f - 1) / round noise of them.

For reference, the textbook CUSUM on the baseline's mean and standard deviation (k = 0.5,
h = 5, the same 40-round baseline, no clipping, no rank test) runs on the same series: its
false alarms show what the robust scale, the clipping and the rank test buy.

Run: python benchmarks/monitor_change_detection.py [--series N] [--rounds N] [--seed S]
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Sequence
from datetime import date

import numpy as np
from numpy.typing import NDArray

from idealized_runtime.trends.changes import MAD_TO_SD, ChangeSettings, find_shifts

SPREADS = (0.05, 0.10, 0.20)
FACTORS = (1.1, 1.2, 1.3, 1.5, 2.0, 0.8, 0.5)
SHIFT_AT = 60
SHIFTED_ROUNDS = 100
SPIKES = 0.02


def rounds_of(
    rng: np.random.Generator, series: int, rounds: int, spread: float, requests: int
) -> NDArray[np.float64]:
    """``series`` x ``rounds`` round statistics of steady providers at level 1."""
    shape = (series, rounds, requests)
    latency = np.exp(rng.normal(0.0, spread, size=shape))
    slow = rng.random(shape) < SPIKES
    latency *= np.where(slow, 1.0 + rng.exponential(1.0, shape), 1.0)
    return np.median(latency, axis=2)


def classic_cusum(values: Sequence[float], settings: ChangeSettings) -> list[int]:
    """Alarms of the textbook two-sided CUSUM (k = 0.5, h = 5) on the mean and standard
    deviation of the last ``baseline_rounds`` in-control values; restarts after an alarm."""
    k, h = 0.5, 5.0
    alarms: list[int] = []
    level_start, up, down = 0, 0.0, 0.0
    for index, value in enumerate(values):
        if index - level_start < settings.min_baseline_rounds:
            continue
        window = np.asarray(values[max(level_start, index - settings.baseline_rounds) : index])
        sd = float(window.std(ddof=1)) or 1e-12
        z = (value - float(window.mean())) / sd
        up, down = max(0.0, up + z - k), max(0.0, down - z - k)
        if max(up, down) > h:
            alarms.append(index)
            level_start, up, down = index, 0.0, 0.0
    return alarms


def round_noise(values: NDArray[np.float64]) -> float:
    flat = values.ravel()
    median = float(np.median(flat))
    return float(np.median(np.abs(flat - median))) * MAD_TO_SD / median


def false_alarms(args: argparse.Namespace, settings: ChangeSettings) -> list[list[str]]:
    rows = []
    for spread in SPREADS:
        rng = np.random.default_rng([args.seed, int(spread * 1000)])
        steady = rounds_of(rng, args.series, args.rounds, spread, args.requests)
        ours = sum(len(find_shifts(list(series), settings)) for series in steady)
        classic = sum(len(classic_cusum(list(series), settings)) for series in steady)
        total = steady.size
        rows.append(
            [
                f"{spread:.0%}",
                f"{round_noise(steady):.1%}",
                f"{total:,}",
                str(ours),
                f"{ours / total * 1000:.3f}",
                f"{total / ours:,.0f}" if ours else f"> {total:,}",
                str(classic),
                f"{classic / total * 1000:.2f}",
            ]
        )
    return rows


def delays(args: argparse.Namespace, settings: ChangeSettings) -> list[list[str]]:
    rows = []
    for spread in SPREADS:
        for factor in FACTORS:
            rng = np.random.default_rng([args.seed, int(spread * 1000), int(factor * 1000)])
            values = rounds_of(rng, args.shift_series, SHIFT_AT + SHIFTED_ROUNDS, spread,
                               args.requests)  # fmt: skip
            noise = round_noise(values[:, :SHIFT_AT])
            values[:, SHIFT_AT:] *= factor
            found, delay, start_ok, early = 0, [], 0, 0
            for series in values:
                shifts = find_shifts(list(series), settings)
                early += sum(shift.alarm < SHIFT_AT for shift in shifts)
                after = [shift for shift in shifts if shift.alarm >= SHIFT_AT]
                if not after:
                    continue
                found += 1
                delay.append(after[0].alarm - SHIFT_AT + 1)
                start_ok += abs(after[0].start - SHIFT_AT) <= 1
            n = len(values)
            rows.append(
                [
                    f"{spread:.0%}",
                    f"x{factor:g}",
                    f"{abs(factor - 1) / noise:.1f}",
                    f"{found / n:.1%}",
                    f"{np.median(delay):.0f}" if delay else "-",
                    f"{np.percentile(delay, 90):.0f}" if delay else "-",
                    f"{start_ok / found:.0%}" if found else "-",
                    str(early),
                ]
            )
    return rows


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"]
    lines.append("| " + " | ".join("-" * w for w in widths) + " |")
    lines += [
        "| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=200, help="steady series per spread")
    parser.add_argument("--rounds", type=int, default=1000, help="rounds per steady series")
    parser.add_argument("--shift-series", type=int, default=200, help="series per shift")
    parser.add_argument("--requests", type=int, default=3, help="requests per round")
    parser.add_argument("--seed", type=int, default=20261126)
    args = parser.parse_args()
    settings = ChangeSettings()
    began = time.perf_counter()
    print(f"# monitor change detection, {platform.machine()} {platform.processor() or ''}, "
          f"{date.today()}")  # fmt: skip
    print(f"detector: {settings}\n")
    print("False alarms on steady providers")
    print(
        table(
            ["spread", "round noise", "rounds", "false alarms", "per 1,000 rounds",
             "rounds per false alarm", "textbook CUSUM", "per 1,000 rounds"],
            false_alarms(args, settings),
        )
    )  # fmt: skip
    print(f"\nShifts at round {SHIFT_AT} ({args.shift_series} series each, "
          f"{SHIFTED_ROUNDS} rounds after it)")  # fmt: skip
    print(
        table(
            ["spread", "shift", "in round noise", "found", "rounds to flag (median)",
             "p90", "start within 1 round", "alarms before it"],
            delays(args, settings),
        )
    )  # fmt: skip
    print(f"\n{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
