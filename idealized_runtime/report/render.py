"""Render a ``Leaderboard`` as a self-contained HTML page (inline CSS, JS and SVG; opens from
file:// with no network), a Markdown summary and CSV tables."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2
from pydantic import BaseModel

from idealized_runtime import __version__
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.leaderboard.build import Leaderboard, stacks
from idealized_runtime.leaderboard.rows import (
    FRONTIER_KINDS,
    Cost,
    ModelRow,
    ScenarioRow,
    StackComparison,
    StackModelRow,
    StackWorkloadRow,
    WorkloadRow,
)
from idealized_runtime.report.groups import (
    BoardLine,
    FigureSide,
    board_lines,
    group_lines,
    measured_spans,
    merge_aliases,
    names_label,
)
from idealized_runtime.report.svg import frontier_chart, runtime_vs_output_chart

HTML_NAME, MARKDOWN_NAME = "index.html", "report.md"
CSV_NAMES = ("models.csv", "scenarios.csv", "workloads.csv", "frontiers.csv", "fits.csv")
# Written when the board compares stacks (``build_leaderboard(..., stacks=...)``).
STACK_CSV_NAMES = ("stacks.csv", "stack_workloads.csv")
RUNTIME_AXIS = {
    "idealized": "idealized runtime (s per request)",
    "raw": "raw runtime (s per request)",
}

# What each metric means; shown in the methodology section and the Markdown.
METRIC_DEFINITIONS = (
    (
        "Idealized runtime",
        "Runtime of one request on a uniform, well-optimized stack without contention "
        "(runtime(p, o) = alpha(p) + beta * (o - 1)), fitted to profiles of the model's "
        "architecture with random weights. Per scenario: HELM's reported value (the fit "
        "averaged over the scenario's requests) where available, else the fit at the mean "
        "prompt/output tokens.",
    ),
    (
        "Stack",
        "The hardware/software stack an idealized runtime was computed on. HELM's tables are "
        "helm-megatron-2022 (Megatron-LM, 2022, A100); a reference stack of today's engines "
        "gives the hardware model's estimate for the model's architecture on that stack "
        "(`idealized-runtime stacks`); a local profile is named runner/hardware.",
    ),
    (
        "Denoised runtime",
        "The same form fitted to timings of the black-box API (plus a fixed overhead): the "
        "provider's speed with the noise of load and network taken out.",
    ),
    (
        "Raw runtime",
        "Mean wall-clock time of the scenario's requests as measured through the API.",
    ),
    (
        "Accelerators",
        "Fewest accelerators whose memory holds the weights and a full-context KV cache "
        "(batch 1), from the serving model.",
    ),
    (
        "GPU-seconds / $ / kJ per 1,000 requests",
        "Idealized runtime x accelerators x 1,000; dollars at the accelerator's indicative "
        "on-demand hourly price, kilojoules at its board power.",
    ),
    (
        "Accuracy",
        "HELM's exact-match score on the scenario (0-1).",
    ),
    (
        "Pareto frontier",
        "A model is on a scenario's frontier iff no other model is at least as accurate and "
        "at least as fast with one of the two strictly better.",
    ),
)


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    csv: tuple[Path, ...]


# --- formatting --------------------------------------------------------------------------------


def fmt_seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def fmt_number(value: float | None, digits: int = 3) -> str:
    """``digits`` significant digits; thousands as ``25,200`` rather than ``2.52e+04``."""
    if value is None:
        return "–"
    rounded = float(f"{value:.{digits}g}")
    if 1e3 <= abs(rounded) < 1e15:
        return f"{rounded:,.0f}"
    return f"{value:.{digits}g}"


def fmt_params(value: int | None) -> str:
    if value is None:
        return "–"
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return str(value)


def fmt_accuracy(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def fmt_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}×"


def slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower() or "x"


# --- the grouped leaderboard as text (Markdown, terminal) --------------------------------------


@dataclass(frozen=True)
class Column:
    header: str
    side: FigureSide  # whose figure: a line prints it or leaves it blank (``BoardLine.shows``)
    text: Callable[[ModelRow], str]


LEADERBOARD_COLUMNS = {
    column.header: column
    for column in (
        Column("parameters", "shape", lambda row: fmt_params(row.num_parameters)),
        Column("GPUs", "architecture", lambda row: fmt_number(row.num_gpus)),
        Column("idealized s", "architecture", lambda row: fmt_seconds(row.idealized_runtime_s)),
        Column("denoised s", "measured", lambda row: fmt_seconds(row.denoised_runtime_s)),
        Column("raw s", "measured", lambda row: fmt_seconds(row.raw_runtime_s)),
        Column("GPU-s/1k", "architecture", lambda row: fmt_number(row.cost.gpu_seconds)),
        Column("$/1k", "architecture", lambda row: fmt_number(row.cost.usd)),
        Column("accuracy", "measured", lambda row: fmt_accuracy(row.accuracy)),
        Column("scenarios", "measured", lambda row: str(row.num_scenarios)),
        Column(
            "frontier (ideal./raw)",
            "measured",
            lambda row: f"{row.frontier_count['idealized']}/{row.frontier_count['raw']}",
        ),
        Column("stack", "architecture", lambda row: row.stack or "–"),
    )
}
ALIAS_MARK = "↳ "  # before a name listed under its architecture's line


def line_cells(line: BoardLine, headers: Sequence[str]) -> list[str]:
    """The line's cells under ``headers`` (``LEADERBOARD_COLUMNS``): blank where the figure is
    printed on another line of its group."""
    columns = [LEADERBOARD_COLUMNS[header] for header in headers]
    return [column.text(line.row) if line.shows(column.side) else "" for column in columns]


# --- HTML --------------------------------------------------------------------------------------


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
        percent=_percent,
        slug=slug,
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


def _fit_rows(board: Leaderboard) -> list[dict[str, object]]:
    rows = []
    for profile in board.inputs.profiles:
        for fit in profile.fits:
            quality = fit.quality
            rows.append(
                {
                    "profile": profile.name,
                    "method": fit.method,
                    "stack": fit.stack.hardware if fit.stack else "",
                    "n_points": quality.n_points if quality else None,
                    "r2": quality.r2 if quality else None,
                    "mape": quality.mape if quality else None,
                    "max_error": quality.max_error if quality else None,
                    "beta_s": fit.beta_s,
                    "overhead_s": fit.overhead_s,
                }
            )
    return rows


def render_html(board: Leaderboard) -> str:
    profiles = board.inputs.profiles
    template = _environment().get_template("report.html.j2")
    groups = sorted({row.group for row in board.scenario_rows})
    workloads = sorted({row.workload for row in board.workload_rows})
    default_scenario = _default_scenario(board)
    group_keys = board.group_keys()
    return template.render(
        board=board,
        model_groups=[
            {"lines": group_lines(group), "spans": measured_spans(group)} for group in board.groups
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
        fit_rows=_fit_rows(board),
        groups=groups,
        workloads=workloads,
        stacks=stacks(board.inputs),
        comparison=board.stack_comparison,
        stack_models=stack_model_pivot(board.stack_comparison, group_keys),
        stack_workloads=stack_workload_pivot(board.stack_comparison, group_keys),
        reference_stacks=reference_stack_rows(board),
        hardware_rates=sorted(
            {
                board.inputs.cost_rates[m.hardware]
                for m in board.models
                if m.hardware and m.hardware in board.inputs.cost_rates
            },
            key=lambda rate: rate.hardware,
        ),
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


# --- stacks ------------------------------------------------------------------------------------


def _figures(rows: Iterable[BaseModel]) -> tuple[str, ...]:
    """Rows' figures without the model's name: equal for names that share them."""
    return tuple(row.model_dump_json(exclude={"model"}) for row in rows)


def stack_model_pivot(
    comparison: StackComparison | None, group_keys: Mapping[str, str] | None = None
) -> list[dict[str, object]]:
    """One entry per model: its row under each compared stack (stack -> ``StackModelRow``).
    With ``group_keys`` (model -> group, ``Leaderboard.group_keys``), names of one architecture
    with the same figures under every stack are one entry (``models`` lists them)."""
    if comparison is None:
        return []
    by_model = comparison.by_model().items()
    merged = merge_aliases(
        ((model, _figures(rows.values()), rows) for model, rows in by_model), group_keys or {}
    )
    return [
        {
            "model": names_label(models),
            "models": models,
            "architecture": next(iter(rows.values())).architecture,
            "rows": rows,
            "num_workloads": max(row.num_workloads for row in rows.values()),
            "note": _stack_notes(rows.values()),
        }
        for models, rows in merged
    ]


def _stack_notes(rows: Iterable[StackModelRow]) -> str:
    """The rows' notes, each once, with the stacks it applies to unless it applies to all:
    "why (stack, stack)"."""
    rows = list(rows)
    stacks_by_note: dict[str, list[str]] = {}
    for row in rows:
        if row.note:
            stacks_by_note.setdefault(row.note, []).append(row.stack)
    return "; ".join(
        note if len(names) == len(rows) else f"{note} ({', '.join(names)})"
        for note, names in stacks_by_note.items()
    )


def stack_workload_pivot(
    comparison: StackComparison | None, group_keys: Mapping[str, str] | None = None
) -> list[dict[str, object]]:
    """One entry per (model, workload): its row under each compared stack; with
    ``group_keys`` one per (architecture, workload) for names with the same figures."""
    if comparison is None:
        return []
    table: dict[tuple[str, str], dict[str, StackWorkloadRow]] = {}
    for row in comparison.workloads:
        table.setdefault((row.model, row.workload), {})[row.stack] = row
    merged = merge_aliases(
        (
            (model, (workload, *_figures(rows.values())), rows)
            for (model, workload), rows in table.items()
        ),
        group_keys or {},
    )
    entries = []
    for models, rows in merged:
        first = next(iter(rows.values()))
        entries.append(
            {
                "model": names_label(models),
                "models": models,
                "workload": first.workload,
                "prompt_tokens": first.prompt_tokens,
                "output_tokens": first.output_tokens,
                "rows": rows,
            }
        )
    return entries


def workload_entries(
    rows: Iterable[WorkloadRow], group_keys: Mapping[str, str]
) -> list[dict[str, object]]:
    """The per-workload rows, names of one architecture with the same figures at a workload as
    one entry (``models`` lists them; ``row`` is the first name's)."""
    merged = merge_aliases(((row.model, _figures([row]), row) for row in rows), group_keys)
    return [{"models": models, "row": row} for models, row in merged]


def used_stack_names(board: Leaderboard) -> list[str]:
    """Reference stacks the board's runtimes were computed on: the compared ones first, then
    those named by its rows."""
    from idealized_runtime.cost_model.hardware.stacks.catalog import shipped_stacks

    names = list(board.stack_comparison.stacks) if board.stack_comparison else []
    rows: list[ModelRow | ScenarioRow | WorkloadRow] = [
        *board.models,
        *board.scenario_rows,
        *board.workload_rows,
    ]
    names += sorted({row.stack for row in rows if row.stack})
    shipped = shipped_stacks()
    return [name for name in dict.fromkeys(names) if name in shipped]


ERROR_SPLITS = ("in_sample", "leave_one_source_out", "leave_one_model_out")
FIGURE_KINDS = {"decode": "decode", "ttft": "TTFT"}


def reference_stack_rows(board: Leaderboard) -> list[dict[str, object]]:
    """Per reference stack used and figure kind with errors: the stack's description, number
    of published sources, and median / p90 |predicted / published - 1| in sample and held out
    by source and by model, as its calibration file records them."""
    from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, get_stack

    rows = []
    for name in used_stack_names(board):
        stack = get_stack(name)
        for kind, label in FIGURE_KINDS.items():
            errors = {split: stack.errors.get(split, {}).get(kind, {}) for split in ERROR_SPLITS}
            if not any(found.get("n") for found in errors.values()):
                continue
            rows.append(
                {
                    "stack": name,
                    "default": name == DEFAULT_STACK,
                    "description": stack.description,
                    "sources": len(stack.sources),
                    "figures": label,
                    "n": errors["in_sample"].get("n"),
                    **{
                        f"{split}_{stat}": errors[split].get(stat)
                        for split in ERROR_SPLITS
                        for stat in ("median", "p90")
                    },
                }
            )
    return rows


# --- CSV ---------------------------------------------------------------------------------------


def _model_record(row: ModelRow) -> dict[str, object]:
    return {
        "model": row.model,
        "architecture": row.architecture or "",
        "num_parameters": row.num_parameters,
        "num_gpus": row.num_gpus,
        "hardware": row.hardware or "",
        "idealized_runtime_s": row.idealized_runtime_s,
        "denoised_runtime_s": row.denoised_runtime_s,
        "raw_runtime_s": row.raw_runtime_s,
        "accuracy": row.accuracy,
        "num_scenarios": row.num_scenarios,
        "gpu_seconds_per_1000": row.cost.gpu_seconds,
        "usd_per_1000": row.cost.usd,
        "kilojoules_per_1000": row.cost.kilojoules,
        "frontier_count_idealized": row.frontier_count["idealized"],
        "frontier_count_raw": row.frontier_count["raw"],
        "stack": row.stack or "",
        "group": row.group or "",
    }


def _scenario_record(row: ScenarioRow) -> dict[str, object]:
    return {
        "scenario": row.scenario,
        "group": row.group,
        "model": row.model,
        "mean_prompt_tokens": row.prompt_tokens,
        "mean_output_tokens": row.output_tokens,
        "idealized_runtime_s": row.idealized_runtime_s,
        "idealized_source": row.idealized_source or "",
        "denoised_runtime_s": row.denoised_runtime_s,
        "raw_runtime_s": row.raw_runtime_s,
        "accuracy": row.accuracy,
        "on_idealized_frontier": row.on_frontier.get("idealized", False),
        "on_raw_frontier": row.on_frontier.get("raw", False),
        "stack": row.stack or "",
    }


def _workload_record(row: WorkloadRow) -> dict[str, object]:
    return {
        "workload": row.workload,
        "model": row.model,
        "mean_prompt_tokens": row.prompt_tokens,
        "mean_output_tokens": row.output_tokens,
        "idealized_runtime_s": row.idealized_runtime_s,
        "denoised_runtime_s": row.denoised_runtime_s,
        "num_gpus": row.num_gpus,
        "gpu_seconds_per_1000": row.cost.gpu_seconds,
        "usd_per_1000": row.cost.usd,
        "kilojoules_per_1000": row.cost.kilojoules,
        "stack": row.stack or "",
    }


def _stack_record(row: StackModelRow | StackWorkloadRow) -> dict[str, object]:
    """A side-by-side row, long format (one row per model, [workload,] stack)."""
    record: dict[str, object] = {"model": row.model}
    if isinstance(row, StackWorkloadRow):
        record.update(
            workload=row.workload,
            mean_prompt_tokens=row.prompt_tokens,
            mean_output_tokens=row.output_tokens,
        )
    else:
        record.update(architecture=row.architecture or "", num_workloads=row.num_workloads)
    record.update(
        stack=row.stack,
        idealized_runtime_s=row.idealized_runtime_s,
        ratio=row.ratio,
        source=row.source or "",
        hardware=row.hardware or "",
        tp=row.tp,
        note=row.note or "",
    )
    return record


def _csv_text(records: Sequence[dict[str, object]], header: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(header), lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if v is None else v for k, v in record.items()})
    return buffer.getvalue()


def csv_tables(board: Leaderboard) -> dict[str, str]:
    """File name -> CSV text of each table."""
    frontier_records = [
        {
            "scenario": scenario,
            "runtime": kind,
            "model": point.model,
            "runtime_s": point.runtime_s,
            "accuracy": point.accuracy,
            "on_frontier": point.on_frontier,
        }
        for kind in FRONTIER_KINDS
        for scenario, points in sorted(board.frontier_points[kind].items())
        for point in points
    ]
    fit_rows = _fit_rows(board)
    tables = {
        "models.csv": [_model_record(row) for row in board.models],
        "scenarios.csv": [_scenario_record(row) for row in board.scenario_rows],
        "workloads.csv": [_workload_record(row) for row in board.workload_rows],
        "frontiers.csv": frontier_records,
        "fits.csv": fit_rows,
    }
    headers = {
        "models.csv": list(_model_record(_EMPTY_MODEL)),
        "scenarios.csv": list(_scenario_record(_EMPTY_SCENARIO)),
        "workloads.csv": list(_workload_record(_EMPTY_WORKLOAD)),
        "frontiers.csv": ["scenario", "runtime", "model", "runtime_s", "accuracy", "on_frontier"],
        "fits.csv": [
            "profile",
            "method",
            "stack",
            "n_points",
            "r2",
            "mape",
            "max_error",
            "beta_s",
            "overhead_s",
        ],
    }
    texts = {name: _csv_text(tables[name], headers[name]) for name in CSV_NAMES}
    comparison = board.stack_comparison
    if comparison is not None:
        for name, rows, empty in (
            ("stacks.csv", comparison.models, _EMPTY_STACK_MODEL),
            ("stack_workloads.csv", comparison.workloads, _EMPTY_STACK_WORKLOAD),
        ):
            records = [_stack_record(row) for row in rows]
            texts[name] = _csv_text(records, list(_stack_record(empty)))
    return texts


# Header templates (the record functions define the columns once).
_NONE = dict.fromkeys(
    ("idealized_runtime_s", "denoised_runtime_s", "raw_runtime_s", "accuracy", "num_gpus")
)
_EMPTY_MODEL = ModelRow(
    model="", architecture=None, num_parameters=None, hardware=None, num_scenarios=0,
    cost=Cost(), frontier_count={"idealized": 0, "raw": 0}, **_NONE,
)  # fmt: skip
_EMPTY_SCENARIO = ScenarioRow(
    scenario="", group="", model="", prompt_tokens=None, output_tokens=None,
    idealized_source=None, **{k: v for k, v in _NONE.items() if k != "num_gpus"},
)  # fmt: skip
_STACK_NONE = dict.fromkeys(("idealized_runtime_s", "source", "hardware", "tp", "ratio"))
_EMPTY_STACK_MODEL = StackModelRow(
    model="", architecture=None, stack="", num_workloads=0, **_STACK_NONE
)
_EMPTY_STACK_WORKLOAD = StackWorkloadRow(
    model="", workload="", prompt_tokens=0.0, output_tokens=0.0, stack="", **_STACK_NONE
)
_EMPTY_WORKLOAD = WorkloadRow(
    workload="", model="", prompt_tokens=0.0, output_tokens=0.0, idealized_runtime_s=None,
    denoised_runtime_s=None, num_gpus=None, cost=Cost(),
)  # fmt: skip


# --- Markdown ----------------------------------------------------------------------------------


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *(line(r) for r in rows)])


def render_markdown(board: Leaderboard) -> str:
    """The leaderboard, the frontier of each scenario, fit quality and the methodology."""
    parts = [
        "# Idealized runtime leaderboard",
        "",
        f"Generated {board.inputs.created_at:%Y-%m-%d %H:%M UTC} by idealized-runtime "
        f"{__version__} from {board.inputs.source}.",
        "",
        "## Leaderboard",
        "",
        "Idealized and denoised runtimes: mean over the HELM scenario-group workloads; raw "
        "runtime and accuracy: mean over the scenarios HELM ran the model on. Costs per 1,000 "
        "requests at the idealized runtime. " + GROUPING_NOTE,
        "",
        _md_table(
            ["model", *MARKDOWN_COLUMNS],
            [
                [_line_label(line), *line_cells(line, MARKDOWN_COLUMNS)]
                for line in board_lines(board.groups)
            ],
        ),
        "",
        *_stack_comparison_lines(board.stack_comparison, board.group_keys()),
        "## Pareto frontier per scenario (accuracy vs runtime)",
        "",
        _md_table(
            ["scenario", "models", "on idealized-runtime frontier", "on raw-runtime frontier"],
            [
                [
                    scenario,
                    str(len(board.frontier_points["idealized"].get(scenario, ()))),
                    ", ".join(board.frontier("idealized", scenario)) or "–",
                    ", ".join(board.frontier("raw", scenario)) or "–",
                ]
                for scenario in board.frontier_scenarios()
            ],
        ),
        "",
        "## Fit quality",
        "",
        _md_table(
            ["profile", "method", "points", "R²", "MAPE", "max error"],
            [
                [
                    str(row["profile"]),
                    str(row["method"]),
                    fmt_number(row["n_points"]),  # type: ignore[arg-type]
                    fmt_number(row["r2"], 4),  # type: ignore[arg-type]
                    _percent(row["mape"]),  # type: ignore[arg-type]
                    _percent(row["max_error"]),  # type: ignore[arg-type]
                ]
                for row in _fit_rows(board)
            ],
        ),
        "",
        "## Methodology",
        "",
        *(f"- **{name}**: {text}" for name, text in METRIC_DEFINITIONS),
        "",
        "Stacks:",
        "",
        *(
            f"- {stack.runner} on {stack.hardware} ({stack.device_name or 'n/a'}), "
            f"{stack.dtype}, tensor parallel {stack.tensor_parallel_size}"
            + (f": {stack.notes}" if stack.notes else "")
            for stack in stacks(board.inputs)
        ),
        "",
        *_used_stack_lines(board),
        *_reference_stack_lines(),
    ]
    return "\n".join(parts)


MARKDOWN_COLUMNS = tuple(LEADERBOARD_COLUMNS)
GROUPING_NOTE = (
    "Names of one architecture (HELM's providers of one profiled shape) are one entry: its "
    "line has the architecture's figures, the lines of its names (↳) what was measured under "
    "each name, and an idealized runtime only where a name's differs."
)


def _line_label(line: BoardLine) -> str:
    return ALIAS_MARK + line.label if line.kind == "alias" else line.label


def _stack_comparison_lines(
    comparison: StackComparison | None, group_keys: Mapping[str, str]
) -> list[str]:
    """The side-by-side table: each model's mean runtime under every compared stack and the
    ratios to the first."""
    if comparison is None:
        return []
    first, others = comparison.stacks[0], comparison.stacks[1:]
    header = [
        "model",
        *(f"{stack} s" for stack in comparison.stacks),
        *(f"{stack} / {first}" for stack in others),
        "workloads",
        "note",
    ]
    rows = []
    for entry in stack_model_pivot(comparison, group_keys):
        by_stack: dict[str, StackModelRow] = entry["rows"]  # type: ignore[assignment]
        cells = [by_stack[stack] for stack in comparison.stacks]
        rows.append(
            [
                str(entry["model"]),
                *(
                    fmt_seconds(row.idealized_runtime_s)
                    if row.idealized_runtime_s is not None
                    else "n/a"
                    for row in cells
                ),
                *(fmt_ratio(by_stack[stack].ratio) for stack in others),
                str(entry["num_workloads"]),
                str(entry["note"]),
            ]
        )
    return [
        "## Stacks side by side",
        "",
        f"Idealized runtime of the same models under each stack, on {comparison.hardware}: a "
        "model's own fit where it was measured on the stack (HELM's tables for "
        "helm-megatron-2022), else the hardware model's estimate for its architecture on the "
        "stack at the tensor-parallel size HELM used. Means over the HELM scenario-group "
        f"workloads every stack covers; ratios to {first}.",
        "",
        _md_table(header, rows),
        "",
    ]


def _used_stack_lines(board: Leaderboard) -> list[str]:
    """The reference stacks the runtimes were computed on, with their calibration errors."""
    rows = reference_stack_rows(board)
    if not rows:
        return []

    def pair(row: dict[str, object], split: str) -> str:
        return f"{_percent(row[f'{split}_median'])} / {_percent(row[f'{split}_p90'])}"  # type: ignore[arg-type]

    return [
        "Reference stacks used (median / p90 |predicted / published - 1|):",
        "",
        _md_table(
            [
                "stack",
                "description",
                "sources",
                "figures",
                "in sample",
                "held out by source",
                "held out by model",
            ],
            [
                [
                    str(row["stack"]),
                    str(row["description"]),
                    str(row["sources"]),
                    str(row["figures"]),
                    pair(row, "in_sample"),
                    pair(row, "leave_one_source_out"),
                    pair(row, "leave_one_model_out"),
                ]
                for row in rows
            ],
        ),
        "",
    ]


def _reference_stack_lines() -> list[str]:
    """The hardware model's reference stacks with their held-out errors (methodology)."""
    from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, shipped_stacks

    lines = [
        "Reference stacks of the hardware model (median |predicted / published - 1| of decode "
        "figures, held out by source / by model; `idealized-runtime stacks` has the details):",
        "",
    ]
    for name, stack in shipped_stacks().items():
        by_source = stack.errors.get("leave_one_source_out", {}).get("decode", {}).get("median")
        by_model = stack.errors.get("leave_one_model_out", {}).get("decode", {}).get("median")
        errors = (
            f"{_percent(by_source)} / {_percent(by_model)}"
            if by_source is not None
            else f"in sample {_percent(stack.headline_error())}"
        )
        default = " (default)" if name == DEFAULT_STACK else ""
        lines.append(f"- {name}{default}: {stack.description}; {errors}")
    return [*lines, ""]


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.2f}%"


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
