"""``summarize`` as plain text: one table of the load levels, then, where the rows call for them,
one of each multi-turn level's turn indices and one of the dollars at a price table's prices.
Latencies in milliseconds; the columns of reasoning and prefix-cache figures appear only when a
level has them."""

from __future__ import annotations

from collections.abc import Sequence

from idealized_runtime.core.types import LoadSummary

Row = tuple[str, ...]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _tokens(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _table(header: Row, lines: Sequence[Row], left: int) -> list[str]:
    """Columns padded to their widest cell; the first ``left`` left-aligned, the rest right."""
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return [
        "  ".join(
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *lines]
    ]


def _has_reasoning(summaries: Sequence[LoadSummary]) -> bool:
    return any(s.reasoning_tokens_mean for s in summaries)


def _has_cache(summaries: Sequence[LoadSummary]) -> bool:
    return any(s.cached_prompt_tokens_mean is not None for s in summaries)


def _level_table(summaries: Sequence[LoadSummary]) -> list[str]:
    reasoning, cache = _has_reasoning(summaries), _has_cache(summaries)
    header: Row = (
        "model", "load", "requests", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50",
        "TPOT p50", "E2E p50", "E2E p99", "errors", "goodput/s",
    )  # fmt: skip
    header += ("answer TTFT p50", "reasoning tok") if reasoning else ()
    header += ("cached tok",) if cache else ()
    lines = []
    for s in summaries:
        line: Row = (
            s.model,
            s.load,
            str(s.requests),
            f"{s.requests_per_s:.3f}",
            f"{s.output_tokens_per_s:.1f}",
            _ms(s.ttft_s.p50),
            _ms(s.ttft_s.p99),
            _ms(s.itl_s.p50),
            _ms(s.tpot_s.p50),
            _ms(s.e2e_s.p50),
            _ms(s.e2e_s.p99),
            f"{s.error_rate:.1%}",
            f"{s.goodput_requests_per_s:.3f}",
        )
        if reasoning:
            line += (_ms(s.ttft_answer_s.p50), _tokens(s.reasoning_tokens_mean))
        if cache:
            line += (_tokens(s.cached_prompt_tokens_mean),)
        lines.append(line)
    return _table(header, lines, left=2)


def _turn_table(summaries: Sequence[LoadSummary]) -> list[str]:
    header: Row = (
        "model", "load", "turn", "requests", "prompt tok", "cached tok", "output tok",
        "reasoning tok", "TTFT p50", "answer TTFT p50", "TPOT p50", "E2E p50", "errors",
    )  # fmt: skip
    lines = [
        (
            s.model,
            s.load,
            str(t.turn),
            str(t.requests),
            _tokens(t.prompt_tokens_mean),
            _tokens(t.cached_prompt_tokens_mean),
            _tokens(t.output_tokens_mean),
            _tokens(t.reasoning_tokens_mean),
            _ms(t.ttft_s.p50),
            _ms(t.ttft_answer_s.p50),
            _ms(t.tpot_s.p50),
            _ms(t.e2e_s.p50),
            f"{t.error_rate:.1%}",
        )
        for s in summaries
        for t in s.turns
    ]
    return ["", "per turn (means of token counts):", *_table(header, lines, left=2)]


def _cost_table(summaries: Sequence[LoadSummary]) -> list[str]:
    header: Row = (
        "model", "load", "price", "$/request", "$/1M tokens", "$/1M out tokens",
        "idealized $/request", "idealized $/1M out tokens", "idealized on",
    )  # fmt: skip
    lines = [
        (
            s.model,
            s.load,
            s.cost.price,
            _usd(s.cost.usd_per_request),
            _usd(s.cost.usd_per_million_tokens),
            _usd(s.cost.usd_per_million_output_tokens),
            _usd(s.cost.idealized_usd_per_request),
            _usd(s.cost.idealized_usd_per_million_output_tokens),
            s.cost.idealized_basis or "-",
        )
        for s in summaries
        if s.cost is not None
    ]
    return ["", "dollars at the price table's prices:", *_table(header, lines, left=3)]


def format_table(summaries: Sequence[LoadSummary]) -> str:
    """The levels (latencies in ms), then per turn and the dollars where there are any."""
    text = _level_table(summaries)
    if any(s.turns for s in summaries):
        text += _turn_table(summaries)
    if any(s.cost is not None for s in summaries):
        text += _cost_table(summaries)
    return "\n".join(text) + "\n(latencies in ms)"
