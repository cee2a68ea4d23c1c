"""CLI: ``measure`` (time an OpenAI-compatible API) and ``serve-model`` (the local runner behind
an OpenAI-compatible endpoint). Thin layers over ``idealized_runtime.timing.levels`` and
``local_runner.openai_server``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer

from idealized_runtime.cli.app import app
from idealized_runtime.cli.common import fail
from idealized_runtime.core.errors import InputError

# Exit code of a process stopped by SIGINT, by shell convention (128 + 2).
EXIT_INTERRUPTED = 130


@app.command("measure")
def measure_command(
    base_url: str = typer.Option(..., "--base-url", help="e.g. http://127.0.0.1:8000/v1"),
    model: str = typer.Option(..., "--model", help="model name the server expects"),
    output: Path = typer.Option(..., "-o", "--output", help="raw JSONL, appended to (resumable)"),
    label: Optional[str] = typer.Option(  # noqa: UP045  (typer needs Optional on 3.10)
        None, "--label", help="model name written to the rows (default: --model)"
    ),
    api_key_env: Optional[str] = typer.Option(  # noqa: UP045
        None, "--api-key-env", help="environment variable that holds the API key"
    ),
    endpoint: str = typer.Option("completions", "--endpoint", help="completions or chat"),
    grid: str = typer.Option(
        "helm-synthetic", "--grid", help="helm-synthetic, quick, or a CSV/JSON file of points"
    ),
    repeats: int = typer.Option(3, "--repeats", min=1, help="requests per grid point"),
    concurrency: Optional[str] = typer.Option(  # noqa: UP045
        None, "--concurrency", help="requests in flight; a list (1,4,16) runs one level each"
    ),
    rate: Optional[str] = typer.Option(  # noqa: UP045
        None, "--rate", help="Poisson arrivals per second (a list: one level each)"
    ),
    sweep: Optional[int] = typer.Option(  # noqa: UP045
        None, "--sweep", help="synchronous, saturated, then N rates between them"
    ),
    workload: Optional[Path] = typer.Option(  # noqa: UP045
        None,
        "--workload",
        help="replay a trace (CSV/JSONL: arrival_s, prompt/output tokens) or conversations "
        "(session_id, turns: prompt/output tokens, delay); with --concurrency C: C at a time",
    ),
    start_at: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--start-at",
        help="with --workload: send the trace's first request at this time (Unix seconds or "
        "ISO 8601 with zone), so that clients in other processes replay one schedule together",
    ),
    stream: bool = typer.Option(True, "--stream/--no-stream", help="stream (TTFT, inter-token)"),
    tokenizer: Optional[str] = typer.Option(  # noqa: UP045
        None,
        "--tokenizer",
        help="tokenizer.json (or folder), tiktoken:ENCODING, or bytes; default: calibrate",
    ),
    timeout: float = typer.Option(120.0, "--timeout", help="per-request timeout, seconds"),
    max_retries: int = typer.Option(5, "--max-retries", min=0, help="on 429/5xx/conn. errors"),
    backoff_base: float = typer.Option(
        0.5, "--backoff-base", min=0, help="first retry waits up to this (full jitter), seconds"
    ),
    backoff_max: float = typer.Option(30.0, "--backoff-max", min=0, help="longest wait, seconds"),
    fixed_length_fields: bool = typer.Option(
        True,
        "--fixed-length-fields/--no-fixed-length-fields",
        help="send ignore_eos/min_tokens/generation_config (dropped if the server rejects them)",
    ),
    extra_body: Optional[str] = typer.Option(  # noqa: UP045
        None, "--extra-body", help="JSON object merged into every request body"
    ),
    shuffle: bool = typer.Option(True, "--shuffle/--in-order", help="random request order"),
    seed: int = typer.Option(0, "--seed"),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Time an OpenAI-compatible API over a grid of prompt/output sizes (raw JSONL for `fit`)."""
    import asyncio

    from idealized_runtime.core.load_levels import parse_load_levels
    from idealized_runtime.timing.config import MeasureConfig
    from idealized_runtime.timing.conversations import Conversation, load_workload
    from idealized_runtime.timing.grids import load_grid
    from idealized_runtime.timing.levels import measure_levels, measure_sweep
    from idealized_runtime.timing.load_patterns import parse_start_time

    if endpoint not in ("completions", "chat"):
        fail(f"--endpoint must be completions or chat, got {endpoint!r}")
    requests = load_workload(workload) if workload is not None else None
    conversations = requests is not None and isinstance(requests[0], Conversation)
    chosen = [name for name, value in (("--rate", rate), ("--sweep", sweep),
              ("--workload", workload)) if value is not None]  # fmt: skip
    # Conversations may run C at a time (--concurrency); a trace keeps its arrival times.
    concurrency_clash = concurrency is not None and not (conversations and chosen == ["--workload"])
    if len(chosen) > 1 or (chosen and concurrency_clash):
        fail(f"choose one of --concurrency, --rate, --sweep, --workload (got {', '.join(chosen)}"
             + (", --concurrency" if concurrency is not None else "") + ")")  # fmt: skip
    if sweep is not None and sweep < 1:
        fail(f"--sweep needs at least 1 rate between the bounds, got {sweep}")
    levels: list[dict] = [{"concurrency": 1}]
    if concurrency is not None:
        key = "sessions_in_flight" if conversations else "concurrency"
        levels = [{key: c} for c in parse_load_levels(concurrency, "--concurrency", integer=True)]
    if rate is not None:
        levels = [{"rate": r} for r in parse_load_levels(rate, "--rate", integer=False)]
    if start_at is not None and (workload is None or conversations):
        fail("--start-at needs --workload with a trace (the schedule it places)")
    start_at_s = parse_start_time(start_at) if start_at is not None else None
    body: dict = {}
    if extra_body:
        try:
            body = json.loads(extra_body)
        except json.JSONDecodeError as error:
            raise InputError(f"--extra-body is not valid JSON: {error}") from None
        if not isinstance(body, dict):
            raise InputError("--extra-body must be a JSON object")
    config = MeasureConfig(
        base_url=base_url,
        model=model,
        label=label,
        api_key_env=api_key_env,
        endpoint=endpoint,  # type: ignore[arg-type]
        grid=load_grid(grid),
        repeats=repeats,
        workload=None if conversations else requests,  # type: ignore[arg-type]
        conversations=requests if conversations else None,  # type: ignore[arg-type]
        start_at_s=start_at_s,
        stream=stream,
        tokenizer=tokenizer,
        timeout_s=timeout,
        max_retries=max_retries,
        backoff_base_s=backoff_base,
        backoff_max_s=backoff_max,
        fixed_length_fields=fixed_length_fields,
        extra_body=body,
        shuffle=shuffle,
        seed=seed,
    )
    config.url  # noqa: B018  (validates the base URL before any work)
    if sweep is not None:
        result = asyncio.run(measure_sweep(config, sweep, output, progress))
    else:
        result = asyncio.run(measure_levels(config, levels, output, progress))
    written = ok = 0
    # Plain echo, not rich: a rich console wraps the line at 80 columns when piped, and reads
    # brackets in a file name as markup.
    for summary in result.levels:
        written, ok = written + summary.written, ok + summary.ok
        detail = (
            f"{summary.load}: {summary.written} rows written ({summary.ok} ok, "
            f"{summary.failed} failed, {summary.usage_mismatches} usage mismatches), "
            f"{summary.already_done} already in {output}; {summary.elapsed_s:.1f} s"
        )
        if summary.dropped_fields:
            detail += f"; server rejected {', '.join(summary.dropped_fields)} (not sent)"
        if summary.stopped:
            detail += f"; stopped early, server over-saturated: {summary.stopped}"
        if summary.interrupted:
            typer.echo(f"interrupted: {detail}. Run the same command again to resume.", err=True)
            raise typer.Exit(EXIT_INTERRUPTED)
        typer.echo(detail, err=True)
    for load in result.skipped:
        typer.echo(f"{load}: skipped (the server was over-saturated at or below it)", err=True)
    if written and not ok:
        fail("every request failed; see the error column of the rows", code=1)


@app.command("serve-model")
def serve_model_command(
    arch: str = typer.Option(..., "--arch", help="catalog name, or path to an HF config.json"),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
    dtype: str = typer.Option("float32", "--dtype", help="float32, float16 or bfloat16"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port", min=0, max=65535),
    max_batch_size: int = typer.Option(
        1,
        "--max-batch",
        "--max-batch-size",
        min=1,
        help="requests decoded together (continuous batching when > 1)",
    ),
    token_budget: Optional[int] = typer.Option(  # noqa: UP045
        None,
        "--token-budget",
        min=1,
        help="tokens per batched step: decode tokens + prompt chunks (default 256)",
    ),
    tokenizer: Optional[str] = typer.Option(  # noqa: UP045
        None, "--tokenizer", help="tokenizer.json for text prompts (default: one token per byte)"
    ),
    seed: int = typer.Option(0, "--seed"),
    step_log: Optional[Path] = typer.Option(  # noqa: UP045
        None,
        "--step-log",
        help="append each batched step (its work and seconds) to this JSONL (for simulate --fit)",
    ),
    request_log: Optional[Path] = typer.Option(  # noqa: UP045
        None,
        "--request-log",
        help="append each request's server-side times (received, first and last token sent) "
        "to this JSONL",
    ),
) -> None:
    """Serve the local runner (random weights) behind an OpenAI-compatible /v1/completions."""
    from idealized_runtime.core.architectures import load_architecture
    from idealized_runtime.local_runner.openai_server import serve

    if device not in ("cpu", "cuda"):
        fail(f"--device must be cpu or cuda, got {device!r}")
    if dtype not in ("float32", "float16", "bfloat16"):
        fail(f"--dtype must be float32, float16 or bfloat16, got {dtype!r}")
    if device == "cpu" and dtype == "float16":
        fail("float16 is not supported on CPU; use float32 or bfloat16")
    if tokenizer is not None and not Path(tokenizer).is_file():
        fail(f"--tokenizer {tokenizer}: no such file (give a tokenizer.json)")
    if step_log is not None and max_batch_size < 2:
        fail("--step-log needs continuous batching (--max-batch 2 or more)")
    if step_log is not None and not step_log.parent.is_dir():
        fail(f"--step-log {step_log}: no such folder")
    if request_log is not None and not request_log.parent.is_dir():
        fail(f"--request-log {request_log}: no such folder")
    architecture = load_architecture(arch)
    _check_can_listen(host, port)  # before building the model, which can take minutes
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            fail("--device cuda: no CUDA device is available (torch sees none)")
    serve(
        architecture,
        host=host,
        port=port,
        device=device,
        dtype=dtype,
        max_batch_size=max_batch_size,
        tokenizer=tokenizer,
        seed=seed,
        token_budget=token_budget,
        step_log=str(step_log) if step_log is not None else None,
        request_log=str(request_log) if request_log is not None else None,
    )


def _check_can_listen(host: str, port: int) -> None:
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as error:
        fail(f"cannot listen on {host}:{port}: {error.strerror or error}")


@app.command("summarize")
def summarize_command(
    raw: list[Path] = typer.Argument(
        ..., help="raw JSONL files written by measure (or guidellm, aiperf, ... result files)"
    ),
    slo: Optional[str] = typer.Option(  # noqa: UP045
        None, "--slo", help="latency targets for goodput, seconds: ttft=S,tpot=S,e2e=S (any)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list instead of a table"),
    output: Optional[Path] = typer.Option(  # noqa: UP045
        None, "-o", "--output", help="also write the JSON list to this file"
    ),
    prices: Optional[Path] = typer.Option(  # noqa: UP045
        None,
        "--prices",
        help="price table (YAML or CSV: provider, model, input/output_usd_per_mtok, "
        "architecture): dollars per request and per 1M tokens beside the idealized dollars",
    ),
    idealized_gpu: Optional[str] = typer.Option(  # noqa: UP045
        None, "--idealized-gpu", help="GPU of the idealized dollars (default h100-sxm)"
    ),
    idealized_stack: Optional[str] = typer.Option(  # noqa: UP045
        None, "--idealized-stack", help="reference stack of the idealized dollars (see 'stacks')"
    ),
) -> None:
    """Per model and load level: throughput, TTFT/ITL/TPOT/end-to-end percentiles, errors,
    goodput; reasoning and answer TTFT, per turn of conversations, and dollars with --prices."""
    from idealized_runtime.core.files import atomic_writer
    from idealized_runtime.timing.importers import peers
    from idealized_runtime.timing.summary import (
        parse_slo,
        read_raw_rows,
        summaries_to_json,
        summarize,
    )
    from idealized_runtime.timing.summary_text import format_table

    targets = parse_slo(slo) if slo is not None else None
    if prices is None and (idealized_gpu or idealized_stack):
        fail("--idealized-gpu and --idealized-stack price requests: give --prices too")
    table = idealized = None
    if prices is not None:
        from idealized_runtime.core.prices import read_price_table

        table = read_price_table(prices)
        idealized = _idealized_costs(idealized_gpu, idealized_stack)
    # Other load generators' result files (guidellm, aiperf, ...) are imported on the way.
    rows = [
        row
        for path in raw
        for row in (
            peers.read_result_file(path) if peers.is_result_file(path) else read_raw_rows([path])
        )
    ]
    summaries = summarize(rows, targets, prices=table, idealized=idealized)
    if not summaries:
        fail("no request rows in " + ", ".join(map(str, raw)))
    data = summaries_to_json(summaries)
    if output is not None:
        if output.is_dir():
            fail(f"{output}: is a folder; -o names the JSON file to write")
        try:
            with atomic_writer(output) as handle:
                json.dump(data, handle, indent=1)
        except OSError as error:
            fail(f"{output}: cannot write: {error.strerror or error}")
    typer.echo(json.dumps(data, indent=1) if as_json else format_table(summaries))


def _idealized_costs(gpu: str | None, stack: str | None) -> Callable[..., Any]:
    """``summarize``'s idealized dollars on ``gpu`` and ``stack`` (checked here, once: an
    unknown name is one line before any file is read)."""
    import functools

    from idealized_runtime.core.catalog import get_hardware
    from idealized_runtime.leaderboard.current_models import (
        DEFAULT_GPU,
        DEFAULT_STACK,
        idealized_request_costs,
    )
    from idealized_runtime.leaderboard.stack_comparison import resolve_stacks

    hardware = get_hardware(gpu or DEFAULT_GPU).name
    (chosen,) = resolve_stacks([stack or DEFAULT_STACK])
    return functools.partial(idealized_request_costs, hardware=hardware, stack=chosen)
