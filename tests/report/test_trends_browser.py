"""The monitoring trends page in headless Chromium, written by ``report --from DB`` from rounds
stored in a real SQLite database: a section per provider and model with a trend line per
statistic, the idealized runtime as the reference line, each flagged shift marked at the round
it was flagged and the round it began, the window's medians and spread in the table, no
console errors."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from idealized_runtime.core.rounds import MonitorRound
from idealized_runtime.monitor.store import DatabaseStore
from idealized_runtime.trends.series import build_series
from tests.report.browser import browser_marks, headless_chromium
from tests.servers import run_cli

pytestmark = browser_marks()

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
ROUNDS = 60
SHIFT_ROUND = 40
STEP = timedelta(minutes=5)
IDEALIZED_S = 0.1

# Per chart: id, trend lines, points, reference lines, shift lines, shift starts, and the
# horizontal position of each point (its round in the tooltip) and of each shift line.
CHARTS_JS = """
return Array.from(document.querySelectorAll('section.series')).map(function (section) {
  var charts = Array.from(section.querySelectorAll('svg.chart')).map(function (svg) {
    var box = svg.getBoundingClientRect();
    return {
      id: svg.id, width: box.width, height: box.height,
      lines: svg.querySelectorAll('.trend-line').length,
      reference: svg.querySelectorAll('.reference-line').length,
      points: Array.from(svg.querySelectorAll('circle.point')).map(function (c) {
        return [c.querySelector('title').textContent, parseFloat(c.getAttribute('cx'))];
      }),
      changes: Array.from(svg.querySelectorAll('line.change')).map(function (l) {
        return [l.getAttribute('data-statistic'), parseFloat(l.getAttribute('x1')),
                l.querySelector('title').textContent];
      }),
      starts: svg.querySelectorAll('.change-start').length
    };
  });
  return {provider: section.dataset.provider, model: section.dataset.model, charts: charts};
});
"""
TABLE_JS = """
return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr')).map(function (row) {
  return Array.from(row.cells).map(function (cell) { return cell.textContent; });
});
"""


def rounds(provider: str, model: str, seed: int, factor: float) -> list[MonitorRound]:
    """60 rounds five minutes apart, 5% seeded noise, ``factor`` times slower from round 40."""
    rng = np.random.default_rng(seed)
    made = []
    for index in range(ROUNDS):
        level = factor if index >= SHIFT_ROUND else 1.0
        noise = float(np.exp(rng.normal(0.0, 0.05)))
        ttft, itl = 0.2 * level * noise, 0.01 * level * noise
        denoised = ttft + 15 * itl
        start = T0 + index * STEP
        made.append(
            MonitorRound(
                round_id=f"mbrowser:{index:06d}:{provider}",
                provider=provider,
                model=model,
                round_index=index,
                started_at=start,
                finished_at=start + timedelta(seconds=2),
                status="ok",
                requests=4,
                ttft_s=ttft,
                itl_s=itl,
                output_tokens_per_s=1.0 / itl,
                denoised_runtime_s=denoised,
                idealized_runtime_s=IDEALIZED_S,
                discrepancy=denoised / IDEALIZED_S,
                error_rate=0.0,
                usd=0.0001,
                reference="llama-3.1-8b on h100-sxm, pytorch-compiled, batch 1",
            )
        )
    return made


def test_trends_page_renders_in_chromium(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'monitor.sqlite3'}"
    stored = rounds("steady-co", "m-a", 1, 1.0) + rounds("shifty", "m-b", 2, 2.0)
    store = DatabaseStore(database)
    for monitor_round in stored:
        store.store(monitor_round)
    # The series and shifts the page must show (the library's own, on the same rounds).
    expected = {item.provider: item for item in build_series(r.point() for r in stored)}
    assert expected["steady-co"].changes == ()
    shifted = expected["shifty"].changes
    assert {c.statistic for c in shifted} == {
        "ttft_s", "itl_s", "output_tokens_per_s", "denoised_runtime_s"
    }  # fmt: skip

    # A 3-hour window: the newest 37 rounds (those started within 3 h of the last).
    made = run_cli("report", "--from", database, "-o", str(tmp_path / "report"), "--window", "3h")
    assert made.returncode == 0, made.stderr
    page = tmp_path / "report" / "trends.html"
    assert f"trends: {page}" in made.stdout
    newest = stored[-1].started_at
    in_window = [p for p in stored if p.started_at >= newest - timedelta(hours=3)]
    shown = {p.round_index for p in in_window if p.provider == "shifty"}
    assert len(shown) == 37 and min(shown) == ROUNDS - 37

    with headless_chromium() as driver:
        driver.get(page.resolve().as_uri())
        assert driver.title == "Provider monitoring"
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == [], errors
        sections = {s["provider"]: s for s in driver.execute_script(CHARTS_JS)}
        summary = {row[0]: row for row in driver.execute_script(TABLE_JS, "#trend-summary")}
        change_rows = driver.execute_script(TABLE_JS, "#trend-changes")

    assert set(sections) == {"steady-co", "shifty"}
    assert sections["shifty"]["model"] == "m-b" and sections["steady-co"]["model"] == "m-a"
    for provider, section in sections.items():
        charts = {chart["id"].split("-", 2)[2]: chart for chart in section["charts"]}
        assert list(charts) == [
            "denoised_runtime_s", "ttft_s", "itl_s", "output_tokens_per_s", "error_rate"
        ]  # fmt: skip
        for name, chart in charts.items():
            # Drawn, one trend line through the window's rounds, in time order.
            assert chart["width"] > 100 and chart["height"] > 100, chart["id"]
            assert chart["lines"] == 1 and len(chart["points"]) == 37, chart["id"]
            xs = [x for _, x in chart["points"]]
            assert xs == sorted(xs) and len(set(xs)) == 37
            assert chart["points"][0][0].startswith(f"round {ROUNDS - 37},")
            # The idealized runtime is the reference line of the runtime chart only.
            assert chart["reference"] == (1 if name == "denoised_runtime_s" else 0), chart["id"]
            # Each shift of this statistic: a line at the round it was flagged, a triangle.
            wanted = [c for c in expected[provider].changes if c.statistic == name]
            assert len(chart["changes"]) == len(wanted) == chart["starts"], chart["id"]
            at = {int(title.split(",")[0].split()[1]): x for title, x in chart["points"]}
            for change, (statistic, x, title) in zip(wanted, chart["changes"], strict=True):
                assert statistic == name
                assert x == pytest.approx(at[change.round_index], abs=0.2)
                assert f"began round {change.start_round_index}" in title
                assert abs(change.start_round_index - SHIFT_ROUND) <= 1
        if provider == "shifty":
            assert len(charts["ttft_s"]["changes"]) == 1
            assert "up +" in charts["ttft_s"]["changes"][0][2]

    # The table: rounds, medians with their spread over the window, and the shifts counted.
    for provider, row in summary.items():
        window = expected[provider].window(newest - timedelta(hours=3), newest)
        ttft = window.statistics["ttft_s"]
        assert ttft.median is not None and ttft.p10 is not None and ttft.p90 is not None
        assert row[2] == "37 (0 failed, 0 degraded)"
        ms = [f"{value * 1000:.3g} ms" for value in (ttft.median, ttft.p10, ttft.p90)]
        assert row[3] == f"{ms[0]} [{ms[1]}–{ms[2]}]"
        assert row[7].startswith("0.1 s")  # the idealized runtime
        assert row[-1] == str(len(expected[provider].changes))
    assert [row[0] for row in change_rows] == ["shifty"] * len(shifted)
    began = {int(row[7].split()[0]) for row in change_rows}
    assert began <= {SHIFT_ROUND - 1, SHIFT_ROUND, SHIFT_ROUND + 1}, change_rows


# Per chart: the plot's left edge (the first x tick's grid line), the first point's x, the
# value axis's tick labels, and whether a drawn line passes through the legend's box.
LAYOUT_JS = """
return Array.from(document.querySelectorAll('svg.chart')).map(function (svg) {
  var ticks = Array.from(svg.querySelectorAll('text.tick'));
  var yTicks = ticks.filter(function (t) { return t.getAttribute('text-anchor') === 'end'; });
  var tickXs = yTicks.map(function (t) { return parseFloat(t.getAttribute('x')); });
  var points = Array.from(svg.querySelectorAll('circle.point'));
  var legend = svg.querySelector('text.legend');
  var crossed = 0;
  if (legend) {
    var box = legend.getBBox();
    svg.querySelectorAll('.trend-line, .reference-line').forEach(function (path) {
      var length = path.getTotalLength();
      for (var i = 0; i <= 400; i++) {
        var at = path.getPointAtLength(length * i / 400);
        if (at.x >= box.x && at.x <= box.x + box.width && at.y >= box.y &&
            at.y <= box.y + box.height) { crossed++; }
      }
    });
  }
  return {
    id: svg.id,
    left: Math.min.apply(null, tickXs) + 6,
    firstX: points.length ? parseFloat(points[0].getAttribute('cx')) : null,
    yTicks: yTicks.map(function (t) { return t.textContent; }),
    legend: legend ? legend.textContent : null,
    crossed: crossed
  };
});
"""


def test_a_window_longer_than_the_rounds_starts_at_the_first_round(tmp_path: Path) -> None:
    """``--window 30d`` over 5 hours of rounds: every chart starts at the first round (no empty
    left part), the error rate reads in percent (0-10 %, not 0-1), and the reference's legend
    lies where no line passes."""
    database = f"sqlite:///{tmp_path / 'monitor.sqlite3'}"
    store = DatabaseStore(database)
    for monitor_round in rounds("steady-co", "m-a", 1, 1.0) + rounds("shifty", "m-b", 2, 2.0):
        store.store(monitor_round)
    made = run_cli("report", "--from", database, "-o", str(tmp_path / "r"), "--window", "30d")
    assert made.returncode == 0, made.stderr
    with headless_chromium() as driver:
        driver.get((tmp_path / "r" / "trends.html").resolve().as_uri())
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == [], errors
        charts = driver.execute_script(LAYOUT_JS)
    assert len(charts) == 10
    for chart in charts:
        assert chart["firstX"] == pytest.approx(chart["left"], abs=1.0), chart
        if chart["id"].endswith("error_rate"):
            assert float(chart["yTicks"][-1]) >= 10, chart  # percent, all rounds at 0 %
        if chart["id"].endswith("denoised_runtime_s"):
            assert chart["legend"] == "idealized (reference)" and chart["crossed"] == 0, chart
        else:
            assert chart["legend"] is None
