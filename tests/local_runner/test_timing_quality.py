"""The profiler notices noise: a point whose repeats spread apart is timed again and the
steadiest timing kept; a point slower than a longer prompt (p = 1 at 0.206 s, p = 128 at
0.071 s, as on a busy machine) is timed again and its row replaced; what stays noisy is one
warning line and ``timing_quality`` in the profile's metadata, which ``fit`` repeats. Timings
and the machine's load are injected: no clock decides anything here."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.local_runner.grids import GridPoint
from idealized_runtime.local_runner.profile import profile_grid
from idealized_runtime.local_runner.settings import ProfileSettings
from idealized_runtime.local_runner.timer import Timing
from idealized_runtime.local_runner.timing_quality import NoiseCheck, out_of_order, warning_line
from tests.servers import run_cli

POINTS = [GridPoint(p, o) for o in (1, 4) for p in (1, 16, 128)]
SETTINGS = ProfileSettings(repeats=3, warmup=0)


def scripted(answers: dict[GridPoint, list[tuple[float, float]]]) -> Callable[..., Timing]:
    """A timer answering each point's (runtime, std) in turn; the last answer repeats."""
    calls: dict[GridPoint, int] = {}

    def timer(generator, point: GridPoint, *, repeats: int, warmup: int) -> Timing:
        index = calls.get(point, 0)
        calls[point] = index + 1
        runtime, std = answers[point][min(index, len(answers[point]) - 1)]
        return Timing(runtime, std, runtime / 2, repeats)

    timer.calls = calls  # type: ignore[attr-defined]
    return timer


def profile(tmp_path: Path, timer, load: float = 0.3) -> tuple[dict, dict, list[str]]:
    out = tmp_path / "m.csv"
    warnings: list[str] = []
    profile_grid(
        get_architecture("tiny-llama"),
        POINTS,
        out,
        SETTINGS,
        progress=False,
        timer=timer,
        noise=NoiseCheck(load=lambda: load),
        warn=warnings.append,
    )
    with out.open(encoding="utf-8") as handle:
        rows = {
            int(row["num_prompt_tokens"]): row
            for row in csv.DictReader(handle)
            if row["num_output_tokens"] == "4"
        }
    meta = json.loads((tmp_path / "m.csv.meta.json").read_text(encoding="utf-8"))
    return rows, meta["timing_quality"], warnings


STEADY = {
    GridPoint(1, 1): [(0.020, 0.001)],
    GridPoint(16, 1): [(0.030, 0.001)],
    GridPoint(128, 1): [(0.041, 0.001)],
    GridPoint(1, 4): [(0.050, 0.001)],
    GridPoint(16, 4): [(0.060, 0.001)],
    GridPoint(128, 4): [(0.071, 0.001)],
}


def test_a_steady_grid_is_trusted_and_nothing_is_timed_twice(tmp_path: Path) -> None:
    timer = scripted(STEADY)
    rows, quality, warnings = profile(tmp_path, timer)
    assert warnings == [] and quality["trustworthy"] is True
    assert quality["rerun"] == 0 and set(timer.calls.values()) == {1}
    assert quality["load_per_core_before"] == 0.3 and quality["busy"] is False
    assert float(rows[128]["runtime_s"]) == 0.071


def test_a_noisy_point_is_timed_again_and_the_steady_timing_kept(tmp_path: Path) -> None:
    # Repeats 40% apart, then steady: the second timing is written.
    timer = scripted({**STEADY, GridPoint(16, 4): [(0.090, 0.036), (0.061, 0.002)]})
    rows, quality, warnings = profile(tmp_path, timer)
    assert timer.calls[GridPoint(16, 4)] == 2 and quality["rerun"] == 1
    assert float(rows[16]["runtime_s"]) == 0.061 and float(rows[16]["std_s"]) == 0.002
    assert quality["trustworthy"] is True and warnings == []


def test_a_point_slower_than_a_longer_prompt_is_timed_again_and_replaced(tmp_path: Path) -> None:
    # The busy machine: p = 1 at 0.206 s, p = 128 at 0.071 s, the same o.
    timer = scripted({**STEADY, GridPoint(1, 4): [(0.206, 0.004), (0.049, 0.001)]})
    rows, quality, warnings = profile(tmp_path, timer)
    assert timer.calls[GridPoint(1, 4)] == 2
    assert float(rows[1]["runtime_s"]) == 0.049  # the row was replaced, no duplicate
    assert len(rows) == 3 and quality["trustworthy"] is True and warnings == []


def test_noise_that_stays_is_one_warning_line_and_in_the_metadata(tmp_path: Path) -> None:
    timer = scripted(
        {
            **STEADY,
            GridPoint(1, 4): [(0.206, 0.004)],  # out of order, every time
            GridPoint(16, 4): [(0.065, 0.026)],  # 40% spread, every time
            GridPoint(128, 4): [(0.071, 0.001)],
        }
    )
    _, quality, warnings = profile(tmp_path, timer, load=2.5)
    # 16: 1 + 2 re-runs for its spread; 1: timed again once for its order.
    assert timer.calls[GridPoint(16, 4)] == 3 and timer.calls[GridPoint(1, 4)] == 2
    assert quality["trustworthy"] is False and quality["busy"] is True
    assert quality["noisy_points"] == [[16, 4, 1]]
    assert quality["out_of_order_points"] == [[1, 4, 1]]
    assert quality["max_spread"] == pytest.approx(0.4)
    (line,) = warnings
    assert line == warning_line(quality)
    assert line.startswith("warning: timings not trustworthy (1 of 6 points spread more than 10%")
    assert "1 slower than a longer prompt" in line and "load 2.5 per core" in line
    assert "\n" not in line

    # fit says it again, under its table.
    fitted = run_cli("fit", str(tmp_path / "m.csv"), "-o", str(tmp_path / "fit.json"))
    assert fitted.returncode == 0, fitted.stderr
    assert line in fitted.stderr.splitlines()


@given(
    st.lists(
        st.tuples(st.sampled_from([1, 8, 64, 512]), st.sampled_from([1, 4]), st.floats(0.01, 1)),
        min_size=1,
        max_size=12,
        unique_by=lambda item: item[:2],
    )
)
def test_a_grid_in_order_has_no_suspects(items: list[tuple[int, int, float]]) -> None:
    """Runtimes that never fall as the prompt grows are never out of order; raising any point
    above a longer prompt's by more than the tolerance makes it a suspect."""
    timings: dict[GridPoint, Timing] = {}
    for output in {o for _, o, _ in items}:
        prompts = sorted(p for p, o, _ in items if o == output)
        for rank, prompt in enumerate(prompts):
            timings[GridPoint(prompt, output)] = Timing(0.01 * (rank + 1), 0.0, 0.001, 3)
    assert out_of_order(timings, 0.15) == []
    shortest = min(timings, key=lambda p: (p.num_prompt_tokens, p.num_output_tokens))
    longer = [p for p in timings if p.num_output_tokens == shortest.num_output_tokens]
    if len(longer) > 1:
        slowest = max(timings[p].runtime_s for p in longer)
        timings[shortest] = Timing(slowest * 1.5, 0.0, 0.001, 3)
        assert out_of_order(timings, 0.15) == [shortest]
