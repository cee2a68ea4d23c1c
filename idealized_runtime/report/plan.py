"""A plan's page: per GPU, the Pareto frontiers of each engine stack (output tokens/s per GPU
against tokens/s per user) with the SLO's region shaded and the chosen configuration marked, and
the tables behind them. A thin layer over ``cost_model.planning``'s ``PlanResult``;
``plan --report DIR`` writes it as ``plan.html`` with the result as ``plan.json``.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from idealized_runtime.core.files import atomic_writer
from idealized_runtime.cost_model.planning.request import (
    IDEAL_STACK,
    Frontier,
    PlanPoint,
    PlanResult,
)
from idealized_runtime.report.svg import HEIGHT, MARGIN_BOTTOM, MARGIN_TOP, PALETTE, Axes, _svg

PLAN_HTML_NAME, PLAN_JSON_NAME = "plan.html", "plan.json"
SLO_FILL = "#009E73"
CHOSEN_COLOUR = "#000000"


def plan_chart(result: PlanResult, hardware: str) -> str:
    """One GPU's frontiers, one line per stack (the ideal reference dashed); the region of
    tokens/s per user the TPOT target allows shaded; points missing the TTFT target hollow; the
    chosen configuration ringed."""
    frontiers = [f for f in result.frontiers if f.hardware == hardware and f.points]
    points = [p for f in frontiers for p in f.points]
    # The ideal line reaches far more tokens/s per user than any engine: the axis ends a quarter
    # beyond the engines' frontiers and the ideal line is clipped there, so theirs stay readable.
    engines = [p.tokens_per_s_per_user for p in points if p.stack != IDEAL_STACK]
    reach = 1.25 * max(engines) if engines else max(p.tokens_per_s_per_user for p in points)
    shown = [p for p in points if p.tokens_per_s_per_user <= reach]
    tpot = result.slo.tpot_s
    xs = [p.tokens_per_s_per_user for p in shown] + ([1.0 / tpot] if tpot else [])
    axes = Axes.fit(xs, [p.output_tokens_per_s_per_gpu for p in shown])
    title = f"{hardware}: throughput per GPU vs tokens/s per user"
    parts = axes.frame(title, "tokens/s per user (1 / TPOT)", "output tokens/s per GPU")
    left, right = axes.x(axes.x_ticks[0]), axes.x(axes.x_ticks[-1])
    top, height = MARGIN_TOP, HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    clip = f"clip-plan-{hardware}"
    parts.append(
        f'<clipPath id="{escape(clip)}"><rect x="{left:.1f}" y="{top}" '
        f'width="{right - left:.1f}" height="{height}"/></clipPath>'
    )
    if tpot:
        start = min(axes.x(1.0 / tpot), right)
        parts.append(
            f'<rect class="slo-region" x="{start:.1f}" y="{top}" width="{right - start:.1f}" '
            f'height="{height}" fill="{SLO_FILL}" fill-opacity="0.12"><title>meets TPOT &le; '
            f"{tpot:g} s</title></rect>"
        )
    parts.append(f'<g clip-path="url(#{escape(clip)})">')
    for index, frontier in enumerate(frontiers):
        parts += _frontier_marks(axes, frontier, PALETTE[index % len(PALETTE)], index)
    parts.append("</g>")
    chosen = result.best
    if chosen is not None and chosen.hardware == hardware:
        x, y = axes.x(chosen.tokens_per_s_per_user), axes.y(chosen.output_tokens_per_s_per_gpu)
        parts.append(
            f'<circle class="mark chosen" cx="{x:.1f}" cy="{y:.1f}" r="8" fill="none" '
            f'stroke="{CHOSEN_COLOUR}" stroke-width="2"><title>chosen: '
            f"{escape(chosen.label)}</title></circle>"
        )
    return _svg(parts, title, f"plan-{hardware}")


def _frontier_marks(axes: Axes, frontier: Frontier, colour: str, index: int) -> list[str]:
    front = frontier.points
    dash = "5 3" if frontier.stack == IDEAL_STACK else ""
    d = "M" + " L".join(
        f"{axes.x(p.tokens_per_s_per_user):.1f},{axes.y(p.output_tokens_per_s_per_gpu):.1f}"
        for p in front
    )
    parts = [
        f'<path class="mark frontier-line" data-stack="{escape(frontier.stack)}" d="{d}" '
        f'fill="none" stroke="{colour}" stroke-width="1.6" stroke-dasharray="{dash}"/>'
    ]
    for p in front:
        fill = colour if p.meets_slo else "white"
        tip = (
            f"{p.label}: {p.tokens_per_s_per_user:.1f} tok/s/user, "
            f"{p.output_tokens_per_s_per_gpu:.0f} tok/s/GPU, TTFT {p.ttft_s:.2f} s"
        )
        parts.append(
            f'<circle class="mark point" cx="{axes.x(p.tokens_per_s_per_user):.1f}" '
            f'cy="{axes.y(p.output_tokens_per_s_per_gpu):.1f}" r="3" fill="{fill}" '
            f'stroke="{colour}"><title>{escape(tip)}</title></circle>'
        )
    x, y = axes.x(axes.x_ticks[-1]) - 4, MARGIN_TOP + 12 + 14 * index
    parts.append(
        f'<text class="legend" x="{x:.1f}" y="{y}" text-anchor="end" fill="{colour}">'
        f"{escape(frontier.stack)}</text>"
    )
    return parts


POINT_COLUMNS = (
    "GPU", "stack", "weights", "layout", "budget", "GPUs", "clients", "TTFT s", "TPOT ms",
    "tok/s/user", "tok/s/GPU", "$/1M tok", "MJ/1M tok", "SLO",
)  # fmt: skip


def point_cells(p: PlanPoint) -> list[str]:
    """A point's cells under ``POINT_COLUMNS``."""
    usd = "–" if p.usd_per_million_tokens is None else f"{p.usd_per_million_tokens:.2f}"
    energy = p.joules_per_million_tokens
    return [
        p.hardware, p.stack, p.weights, p.layout,
        "–" if p.token_budget is None else str(p.token_budget), str(p.gpus), str(p.concurrency),
        f"{p.ttft_s:.3g}", f"{p.tpot_s * 1e3:.3g}", f"{p.tokens_per_s_per_user:.1f}",
        f"{p.output_tokens_per_s_per_gpu:.0f}", usd,
        "–" if energy is None else f"{energy / 1e6:.2f}", "yes" if p.meets_slo else "no",
    ]  # fmt: skip


def _table(table_id: str, points: list[PlanPoint]) -> str:
    rows = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in point_cells(p)) + "</tr>" for p in points
    )
    head = "".join(f"<th>{escape(h)}</th>" for h in POINT_COLUMNS)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def render_plan_html(result: PlanResult) -> str:
    workload, slo = result.workload, result.slo
    targets = [f"{k.removesuffix('_s')} &le; {v:g} s" for k, v in slo.model_dump().items() if v]
    question = (
        f"{escape(result.model)}, {workload.prompt_tokens} prompt and {workload.output_tokens} "
        f"output tokens; SLO: {', '.join(targets) or 'none'}"
        + (f"; {result.rate:g} requests/s" if result.rate else "")
    )
    best = result.best
    if best is None:
        answer = '<p id="plan-best">No configuration meets the SLO.</p>'
    else:
        fleet = (
            f" For {result.rate:g} requests/s: {result.replicas} replicas, "
            f"{result.gpus_for_rate} GPUs."
            if result.rate
            else ""
        )
        answer = (
            f'<p id="plan-best"><strong>{_best_rule(result)}:</strong> {escape(best.hardware)}, '
            f"{escape(best.label)} ({best.gpus} GPUs): "
            f"{best.output_tokens_per_s_per_gpu:.0f} output tokens/s per GPU at "
            f"{best.tokens_per_s_per_user:.1f} tokens/s per user, TTFT {best.ttft_s:.2f} s."
            f"{escape(fleet)}</p>"
        )
    passed = rejection_lines(result)
    if passed:
        items = "".join(f"<li>{escape(line)}</li>" for line in passed)
        answer += (
            "<p>Passed over, their simulation missing the SLO:</p>"
            f'<ul id="plan-passed-over">{items}</ul>'
        )
    hardware = list(dict.fromkeys(f.hardware for f in result.frontiers))
    charts = "".join(plan_chart(result, h) for h in hardware)
    frontier_points = [p for f in result.frontiers for p in f.points]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>Deployment plan</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2rem;color:#222}"
        "table{border-collapse:collapse;font-size:.85rem;margin-bottom:1.5rem}"
        "td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:right}"
        "td:nth-child(-n+4){text-align:left}"
        ".chart .grid{stroke:#e4e4e4}.chart .axis{stroke:#555}.chart text{font-size:11px}"
        ".chart .title{font-weight:600}.charts{display:flex;flex-wrap:wrap;gap:1rem}"
        "</style></head><body><h1>Deployment plan</h1>"
        f"<p>{question}. Searched {result.deployments} deployments at "
        f"{result.evaluated} (deployment, load) points in {result.seconds:.1f} s.</p>"
        f"{answer}"
        "<p>Per GPU, each engine's Pareto frontier of output tokens/s per GPU against tokens/s "
        "per user (the ideal roofline dashed); the shaded region meets the TPOT target, hollow "
        "points miss the TTFT target, the ringed point is the chosen configuration.</p>"
        f'<div class="charts">{charts}</div>'
        "<h2>Best per GPU under the SLO</h2>"
        + _table("plan-best-table", list(result.best_per_hardware))
        + "<h2>Frontier points</h2>"
        + _table("plan-frontier-table", frontier_points)
        + "</body></html>"
    )


def write_plan_report(result: PlanResult, out_dir: str | Path) -> Path:
    """``plan.html`` and ``plan.json`` in ``out_dir``; returns the page's path."""
    folder = Path(out_dir)
    page = render_plan_html(result)  # before writing anything: no half-written report
    with atomic_writer(folder / PLAN_JSON_NAME) as handle:
        handle.write(result.model_dump_json(indent=1))
    path = folder / PLAN_HTML_NAME
    with atomic_writer(path) as handle:
        handle.write(page)
    return path


def _best_rule(result: PlanResult) -> str:
    """What the best configuration is the best of: under the SLO, or (none given) the most
    output tokens/s per GPU at any latency."""
    if any(value for value in result.slo.model_dump().values()):
        return "Best under the SLO"
    return "Highest throughput (no SLO given)"


def plan_text(result: PlanResult, frontier_points: int = 8, *, frontiers: bool = False) -> str:
    """The plan as text (``plan``'s output), the answer first: the best configuration, its
    fleet and costs, the simulation's check (the SLO judged on the medians, the slowest tenth
    said apart), then the question and the search in one line. With ``frontiers`` the best per
    GPU and each frontier (``frontier_points`` of its points, spread along it) follow."""
    workload, slo = result.workload, result.slo
    targets = [f"{k.removesuffix('_s')} <= {v:g} s" for k, v in slo.model_dump().items() if v]
    lines = []
    best = result.best
    if best is None and result.rejected:
        lines.append(
            f"no configuration meets the SLO in its simulation ({result.verified} candidates "
            "simulated, best estimate first; --frontiers shows what is reached)"
        )
    elif best is None:
        lines.append("no configuration meets the SLO (--frontiers shows what is reached)")
    else:
        rule = _best_rule(result)
        lines.append(
            f"{rule[0].lower()}{rule[1:]}: {best.hardware}, {best.label} "
            f"({best.gpus} GPUs per replica)"
        )
        lines.append(
            f"  TTFT {best.ttft_s:.3g} s, TPOT {best.tpot_s * 1e3:.3g} ms "
            f"({best.tokens_per_s_per_user:.1f} tokens/s per user), "
            f"{best.output_tokens_per_s_per_gpu:.0f} output tokens/s per GPU, "
            f"{best.requests_per_s:.3g} requests/s per replica"
        )
        costs = []
        if best.usd_per_million_tokens is not None:
            costs.append(f"${best.usd_per_million_tokens:.2f}")
        if best.joules_per_million_tokens is not None:
            costs.append(f"{best.joules_per_million_tokens / 1e6:.2f} MJ")
        if costs:
            lines.append(f"  {' and '.join(costs)} per million output tokens")
        if result.replicas is not None:
            lines.append(
                f"  for {result.rate:g} requests/s: {result.replicas} replicas, "
                f"{result.gpus_for_rate} GPUs"
            )
        if result.verification is not None:
            lines.append("  " + verification_line(result))
    lines += [f"  passed over: {line}" for line in rejection_lines(result)]
    lines.append(
        f"{result.model}: {workload.prompt_tokens} prompt + {workload.output_tokens} output "
        f"tokens; SLO {', '.join(targets) or 'none'} (steady-state medians)"
        + (f"; {result.rate:g} requests/s" if result.rate else "")
        + f"; searched {result.deployments} deployments, {result.evaluated} (deployment, load) "
        f"points in {result.seconds:.1f} s"
    )
    if not frontiers:
        left_out = sum(refusal.count for refusal in result.refused)
        lines.append(
            "the best per GPU, every frontier"
            + (f" and the {left_out} deployments left out (and why)" if left_out else "")
            + ": --frontiers (text) or --report DIR (charts)"
        )
        return "\n".join(lines)
    lines += ["", "best per GPU under the SLO:", *_text_table(list(result.best_per_hardware))]
    for frontier in result.frontiers:
        points = frontier.points
        shown = _thin(points, frontier_points)
        lines += [
            "",
            f"frontier {frontier.hardware} {frontier.stack} ({len(shown)} of {len(points)} "
            "points):",
            *_text_table(shown),
        ]
    for refusal in result.refused[:5]:
        lines.append(f"left out ({refusal.count}): {refusal.reason}")
    return "\n".join(lines)


# Candidates whose simulation missed the SLO said one per line; the rest counted.
SHOWN_REJECTIONS = 3


def rejection_lines(result: PlanResult) -> list[str]:
    """The candidates passed over because their simulation missed the SLO, best estimate
    first, one line each: its simulated medians beside its estimate (what the plan answered
    instead of a deployment whose estimate was better)."""
    pairs = list(zip(result.rejected, result.rejected_checks, strict=False))
    lines = [
        f"{point.hardware}, {point.label}: simulated TTFT p50 "
        f"{check.ttft_p50_s:.3g} s, TPOT p50 {check.tpot_p50_s * 1e3:.3g} ms (estimate "
        f"{point.ttft_s:.3g} s, {point.tpot_s * 1e3:.3g} ms, "
        f"{point.output_tokens_per_s_per_gpu:.0f} output tokens/s per GPU)"
        for point, check in pairs[:SHOWN_REJECTIONS]
    ]
    if len(pairs) > SHOWN_REJECTIONS:
        lines.append(f"{len(pairs) - SHOWN_REJECTIONS} more (--json lists them)")
    return lines


def verification_line(result: PlanResult) -> str:
    """The request-by-request check in words: the SLO is judged on the medians (as the search
    judges every configuration), TTFT's of the requests after each client's first (the
    start-up burst, every client at once, left out as the steady state leaves it out); the
    90th percentiles are said apart, with the targets they miss."""
    check, slo = result.verification, result.slo
    assert check is not None
    medians = [f"TTFT p50 {check.ttft_p50_s:.3g} s", f"TPOT p50 {check.tpot_p50_s * 1e3:.3g} ms"]
    verdict = "met" if check.meets_slo else "NOT met"
    tried = f", {result.verified} candidates simulated" if result.verified > 1 else ""
    line = (
        f"simulated request by request ({check.requests} requests{tried}): SLO {verdict} on the "
        f"medians after the start-up burst ({', '.join(medians)}); p90 TTFT "
        f"{check.ttft_p90_s:.3g} s, TPOT {check.tpot_p90_s * 1e3:.3g} ms"
    )
    missed = []
    if slo.ttft_s and check.ttft_p90_s > slo.ttft_s:
        missed.append(f"TTFT {slo.ttft_s:g} s")
    if slo.tpot_s and check.tpot_p90_s > slo.tpot_s:
        missed.append(f"TPOT {slo.tpot_s * 1e3:g} ms")
    if missed:
        line += f" (the slowest tenth misses {' and '.join(missed)})"
    return line


def _thin(points: list[PlanPoint], count: int) -> list[PlanPoint]:
    """At most ``count`` points spread evenly along a frontier, both ends kept."""
    if count <= 0 or len(points) <= count:
        return points if count > 0 else []
    if count == 1:
        return [points[-1]]
    step = (len(points) - 1) / (count - 1)
    return [points[round(i * step)] for i in range(count)]


def _text_table(points: list[PlanPoint]) -> list[str]:
    rows = [list(POINT_COLUMNS)] + [point_cells(p) for p in points]
    widths = [max(len(row[i]) for row in rows) for i in range(len(POINT_COLUMNS))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            for row in rows]  # fmt: skip
