"""The HTML report in headless Chromium: no console errors, table and every chart drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, HELM_STACK
from idealized_runtime.leaderboard.build import build_leaderboard
from idealized_runtime.leaderboard.groups import ModelGroup, ranked_groups
from idealized_runtime.report.inputs import bundled_helm_inputs
from idealized_runtime.report.render import write_report
from idealized_runtime.report.stack_tables import stack_model_pivot
from tests.report.browser import chromium_missing_reason, headless_chromium

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        chromium_missing_reason() is not None, reason=str(chromium_missing_reason())
    ),
]

# Per chart: its id, how many data marks it has, and whether it has axis labels.
CHART_SUMMARY_JS = """
return Array.from(document.querySelectorAll('svg.chart')).map(function (svg) {
  return [svg.id, svg.querySelectorAll('.mark').length, svg.querySelectorAll('text.label').length];
});
"""

# The leaderboard's entries as shown: per tbody, the head line's label then its names.
LINES_JS = """
return Array.from(document.querySelectorAll('#leaderboard-table tbody')).map(function (body) {
  return Array.from(body.rows).map(function (row) {
    return row.getAttribute('data-model') || row.querySelector('strong').textContent;
  });
});
"""


def line_names(group: ModelGroup) -> list[str]:
    """What LINES_JS reads for a group before any sort within it (board order)."""
    return [group.key, *group.names] if group.has_aliases else [group.headline.model]


def test_report_renders_in_chromium(tmp_path: Path) -> None:
    board = build_leaderboard(bundled_helm_inputs(), stacks=(HELM_STACK, DEFAULT_STACK))
    files = write_report(board, tmp_path / "report")
    with headless_chromium() as driver:
        driver.get(files.html.resolve().as_uri())
        assert driver.title == "Idealized runtime leaderboard"
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == []

        # One tbody per architecture, one line per name (and a head line over several names).
        entries = driver.execute_script(
            "return document.querySelectorAll('#leaderboard-table tbody').length"
        )
        assert entries == len(board.groups) < len(board.models)
        names = driver.execute_script(
            "return Array.from(document.querySelectorAll('#leaderboard-table tr[data-model]'))"
            ".map(row => row.getAttribute('data-model'))"
        )
        assert sorted(names) == sorted(row.model for row in board.models)
        # The stacks side by side: one row per architecture and figures, and the stacks used
        # with their errors.
        stack_rows = driver.execute_script(
            "return document.querySelectorAll('#stack-table tbody tr').length"
        )
        assert stack_rows == len(stack_model_pivot(board.stack_comparison, board.group_keys()))
        used = driver.execute_script(
            "return Array.from(document.querySelectorAll("
            "'#reference-stack-table tbody tr td code')).map(c => c.textContent)"
        )
        assert {HELM_STACK, DEFAULT_STACK} <= set(used)
        charts = driver.execute_script(CHART_SUMMARY_JS)
        expected = 2 * len(board.frontier_scenarios()) + len(board.inputs.profiles)
        assert len(charts) == expected
        empty = [chart_id for chart_id, marks, _ in charts if marks == 0]
        assert empty == []
        assert all(labels == 2 for _, _, labels in charts)  # x and y axis titles

        # Every table fits a 1366-pixel-wide window: no column hidden behind a scrollbar.
        overflowing = driver.execute_script(
            "return Array.from(document.querySelectorAll('.table-wrap'))"
            ".filter(w => w.scrollWidth > w.clientWidth + 1).map(w => w.firstElementChild.id)"
        )
        assert overflowing == []

        # It opens in the terminal's order (fastest idealized runtime first, missing values
        # last), each entry with its names under it, and shows the whole board (no scroll box).
        ranked = [line_names(group) for group in ranked_groups(board.groups)]
        assert driver.execute_script(LINES_JS) == ranked
        wrap = driver.execute_script(
            "var w = document.getElementById('leaderboard-table').parentElement;"
            "return [w.scrollHeight, w.clientHeight, w.getBoundingClientRect().height];"
        )
        assert wrap[0] <= wrap[1] + 1 and wrap[2] > 800, wrap  # every entry, all 24 of them
        # The methodology's names of commands are code, not Markdown backticks.
        methodology = driver.execute_script(
            "return document.getElementById('methodology').textContent"
        )
        assert "`" not in methodology and "idealized-runtime stacks" in methodology
        # The idealized column is marked as the sort; a click reverses it, another restores it.
        for _ in range(2):
            driver.execute_script(
                "document.querySelectorAll('#leaderboard-table thead th')[4].click()"
            )
        order = driver.execute_script(LINES_JS)
        assert order == ranked
        # A measured figure sorts the entries by their names' best value, descending too.
        driver.execute_script(
            "document.querySelectorAll('#leaderboard-table thead th')[10].click()"
        )
        driver.execute_script(
            "document.querySelectorAll('#leaderboard-table thead th')[10].click()"
        )
        order = driver.execute_script(LINES_JS)
        most_accurate = max(
            (row for row in board.models if row.accuracy is not None), key=lambda r: r.accuracy
        )
        assert most_accurate.model in order[0]
        # Each entry keeps its head line first and its names below it, most accurate first.
        groups = {
            group.key if group.has_aliases else group.headline.model: group
            for group in board.groups
        }
        assert sorted(lines[0] for lines in order) == sorted(groups)
        for head, *names in order:
            group = groups[head]
            assert sorted(names) == (sorted(group.names) if group.has_aliases else [])
            accuracies = [group.members[group.names.index(name)].accuracy for name in names]
            known = [value for value in accuracies if value is not None]
            assert known == sorted(known, reverse=True)
            assert accuracies == known + [None] * (len(accuracies) - len(known))

        # Choosing a scenario shows its pair of charts.
        scenario = board.frontier_scenarios()[0]
        visible = driver.execute_script(
            """
            var select = document.getElementById('scenario-select');
            select.selectedIndex = 0; select.dispatchEvent(new Event('change'));
            return Array.from(document.querySelectorAll('.chart-pair'))
              .filter(function (pair) { return pair.offsetParent !== null; })
              .map(function (pair) { return pair.querySelectorAll('svg').length; });
            """
        )
        assert visible == [2], scenario

        driver.save_screenshot(str(tmp_path / "top.png"))
        driver.execute_script("document.getElementById('frontier').scrollIntoView()")
        driver.save_screenshot(str(tmp_path / "frontier.png"))
        assert (tmp_path / "frontier.png").stat().st_size > 10_000
        assert driver.get_log("browser") == []


# Today's models as shown: per row, its model and the sort value of one column.
CURRENT_ROWS_JS = """
var headers = Array.from(document.querySelectorAll('#current-models-table thead th'));
var index = headers.findIndex(function (th) { return th.textContent === arguments[0]; });
return Array.from(document.querySelectorAll('#current-models-table tbody tr')).map(function (row) {
  var value = row.cells[index].getAttribute('data-value');
  return [row.getAttribute('data-model'), value === '' ? null : parseFloat(value)];
});
"""


def test_todays_models_render_and_sort_in_chromium(tmp_path: Path) -> None:
    from idealized_runtime.core.prices import read_price_table
    from idealized_runtime.leaderboard.current_models import CurrentModelsSpec, sorted_rows
    from idealized_runtime.report.current_tables import RATIO_HEADER

    prices = tmp_path / "prices.yaml"
    prices.write_text(
        "- {provider: p, model: m, architecture: deepseek-v3, input_usd_per_mtok: 1.25, "
        "output_usd_per_mtok: 1.25}\n"
    )
    spec = CurrentModelsSpec(prices=read_price_table(prices))
    board = build_leaderboard(bundled_helm_inputs(), current_models=spec)
    current = board.current_models
    assert current is not None
    files = write_report(board, tmp_path / "report")
    with headless_chromium() as driver:
        driver.get(files.html.resolve().as_uri())
        assert driver.get_log("browser") == []
        nav = driver.execute_script(
            "return Array.from(document.querySelectorAll('nav a')).map(a => a.textContent)"
        )
        assert "Today's models" in nav
        # Fastest first as written; every model once, with the column's value.
        shown = driver.execute_script(CURRENT_ROWS_JS.replace("arguments[0]", "'idealized s'"))
        assert [model for model, _ in shown] == [
            row.model for row in sorted_rows(current.rows, "idealized")
        ]
        assert sorted(model for model, _ in shown) == sorted(row.model for row in current.rows)
        # A click on a column sorts by it, ascending then descending.
        for header in ("tok/s/user", RATIO_HEADER, "$/1M out"):
            script = CURRENT_ROWS_JS.replace("arguments[0]", repr(header))
            click = (
                "Array.from(document.querySelectorAll('#current-models-table thead th'))"
                f".find(th => th.textContent === {header!r}).click()"
            )
            driver.execute_script(click)
            values = [value for _, value in driver.execute_script(script)]
            assert values == sorted(values), header
            driver.execute_script(click)
            values = [value for _, value in driver.execute_script(script)]
            assert values == sorted(values, reverse=True), header
        # The stacks and the hardware each table used: today's models' stack and GPU too.
        used = driver.execute_script(
            "return Array.from(document.querySelectorAll('#reference-stack-table tbody tr'))"
            ".map(r => [r.cells[0].textContent, r.cells[1].textContent])"
        )
        used_by = {stack.removesuffix(" (default)"): tables for stack, tables in used}
        assert "today's models" in used_by[current.stack].split(", ")
        assert "leaderboard" in used_by[HELM_STACK].split(", ")
        hardware = driver.execute_script(
            "return Array.from(document.querySelectorAll('#methodology li'))"
            ".map(li => li.textContent).filter(t => t.includes('$/GPU-hour'))"
        )
        assert any(
            line.startswith(current.hardware) and "today's models" in line for line in hardware
        ), hardware
        assert any(line.startswith("a100-80gb") for line in hardware), hardware
        # The providers' prices beside the idealized dollars.
        price_rows = driver.execute_script(
            "return Array.from(document.querySelectorAll('#price-table tbody tr'))"
            ".map(r => Array.from(r.cells).map(c => c.textContent))"
        )
        assert [row[:3] for row in price_rows] == [["p", "m", "deepseek-v3"]]
        # Both tables fit a 1366-pixel-wide window.
        overflowing = driver.execute_script(
            "return Array.from(document.querySelectorAll('.table-wrap'))"
            ".filter(w => w.scrollWidth > w.clientWidth + 1).map(w => w.firstElementChild.id)"
        )
        assert overflowing == []
        driver.execute_script("document.getElementById('current-models').scrollIntoView()")
        driver.save_screenshot(str(tmp_path / "current.png"))
        assert (tmp_path / "current.png").stat().st_size > 10_000
        assert driver.get_log("browser") == []
