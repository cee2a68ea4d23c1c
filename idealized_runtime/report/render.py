"""Render a ``Leaderboard`` as a self-contained HTML page (inline CSS, JS and SVG; opens from
file:// with no network) and write the whole report: the page, the Markdown summary
(``markdown``) and the CSV tables (``csv_tables``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2
import markupsafe

from idealized_runtime import __version__
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.leaderboard.build import Leaderboard, stacks
from idealized_runtime.leaderboard.current_models import sorted_rows
from idealized_runtime.leaderboard.groups import ranked_groups
from idealized_runtime.leaderboard.rows import (
    FRONTIER_KINDS,
)
from idealized_runtime.report.cells import (
    METRIC_DEFINITIONS,
    RUNTIME_AXIS,
    fit_rows,
    fmt_accuracy,
    fmt_number,
    fmt_params,
    fmt_percent,
    fmt_ratio,
    fmt_seconds,
    slug,
)
from idealized_runtime.report.csv_tables import csv_tables
from idealized_runtime.report.current_tables import (
    PRICE_COLUMNS,
    PRICE_NOTE,
    current_columns,
    current_title,
    serving_note,
)
from idealized_runtime.report.groups import (
    group_lines,
    measured_spans,
)
from idealized_runtime.report.markdown import render_markdown
from idealized_runtime.report.stack_tables import (
    reference_stack_rows,
    stack_model_pivot,
    stack_workload_pivot,
    used_hardware,
    workload_entries,
)
from idealized_runtime.report.svg import frontier_chart, runtime_vs_output_chart

HTML_NAME, MARKDOWN_NAME = "index.html", "report.md"


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    csv: tuple[Path, ...]


# --- HTML --------------------------------------------------------------------------------------


def code_spans(text: str) -> markupsafe.Markup:
    """Text written for Markdown as HTML: escaped, its `code spans` as <code> elements."""
    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("idealized_runtime", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        seconds=fmt_seconds,
        number=fmt_number,
        params=fmt_params,
        accuracy=fmt_accuracy,
        ratio=fmt_ratio,
        percent=fmt_percent,
        slug=slug,
        code=code_spans,
    )
    return env


def _scenario_charts(board: Leaderboard) -> list[dict[str, object]]:
    """One entry per scenario with a frontier: the two charts side by side and its fronts."""
    charts = []
    for scenario in board.frontier_scenarios():
        entry: dict[str, object] = {"scenario": scenario, "id": slug(scenario), "charts": []}
        for kind in FRONTIER_KINDS:
            points = board.frontier_points[kind].get(scenario, ())
            entry[f"{kind}_frontier"] = board.frontier(kind, scenario)
            entry[f"{kind}_count"] = len(points)
            if points:
                entry["charts"].append(  # type: ignore[attr-defined]
                    frontier_chart(
                        points,
                        title=f"{scenario} — {kind}",
                        x_label=RUNTIME_AXIS[kind],
                        chart_id=f"frontier-{kind}-{slug(scenario)}",
                    )
                )
        charts.append(entry)
    return charts


def render_html(board: Leaderboard) -> str:
    profiles = board.inputs.profiles
    template = _environment().get_template("report.html.j2")
    groups = sorted({row.group for row in board.scenario_rows})
    workloads = sorted({row.workload for row in board.workload_rows})
    default_scenario = _default_scenario(board)
    group_keys = board.group_keys()
    return template.render(
        board=board,
        # The terminal's order: fastest idealized runtime first.
        model_groups=[
            {"lines": group_lines(group), "spans": measured_spans(group)}
            for group in ranked_groups(board.groups)
        ],
        workload_entries=workload_entries(board.workload_rows, group_keys),
        version=__version__,
        generated_at=board.inputs.created_at.strftime("%Y-%m-%d %H:%M UTC"),
        source=board.inputs.source,
        scenario_charts=_scenario_charts(board),
        default_scenario=slug(default_scenario) if default_scenario else "",
        profile_charts=[
            runtime_vs_output_chart(profile, chart_id=f"runtime-{slug(profile.name)}")
            for profile in profiles
            if profile.fits
        ],
        fit_rows=fit_rows(board),
        groups=groups,
        workloads=workloads,
        stacks=stacks(board.inputs),
        comparison=board.stack_comparison,
        stack_models=stack_model_pivot(board.stack_comparison, group_keys),
        stack_workloads=stack_workload_pivot(board.stack_comparison, group_keys),
        reference_stacks=reference_stack_rows(board),
        current=board.current_models,
        current_title=current_title(board.current_models) if board.current_models else "",
        current_columns=current_columns(board.current_models) if board.current_models else (),
        current_serving_note=serving_note(board.current_models) if board.current_models else "",
        current_rows=sorted_rows(board.current_models.rows, "idealized")
        if board.current_models
        else (),
        price_columns=PRICE_COLUMNS,
        price_note=PRICE_NOTE,
        hardware_rates=[
            {"rate": board.inputs.cost_rates[name], "used_by": ", ".join(tables)}
            for name, tables in used_hardware(board).items()
        ],
        metrics=METRIC_DEFINITIONS,
        frontier_kinds=FRONTIER_KINDS,
    )


def _default_scenario(board: Leaderboard) -> str | None:
    """The scenario shown first: the one with the most models on both axes."""
    scenarios = board.frontier_scenarios()
    if not scenarios:
        return None
    return max(
        scenarios,
        key=lambda s: (
            sum(len(board.frontier_points[k].get(s, ())) for k in FRONTIER_KINDS),
            -scenarios.index(s),
        ),
    )


# --- writing -----------------------------------------------------------------------------------


def write_report(board: Leaderboard, out_dir: str | Path) -> ReportFiles:
    """Write index.html, report.md and the CSV tables into ``out_dir``; each file atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_paths = []
    for name, text in csv_tables(board).items():  # stacks.csv too when stacks are compared
        with atomic_writer(out / name, newline="") as handle:
            handle.write(text)
        csv_paths.append(out / name)
    with atomic_writer(out / MARKDOWN_NAME) as handle:
        handle.write(render_markdown(board))
    # The page last: its presence means the whole report was written.
    with atomic_writer(out / HTML_NAME) as handle:
        handle.write(render_html(board))
    return ReportFiles(out / HTML_NAME, out / MARKDOWN_NAME, tuple(csv_paths))
