"""Our `measure` against guidellm, on the same `serve-model` server at the same concurrencies
(one benchmark, one script).

One local server (the runner's tiny-llama with random weights, one torch thread, pinned to CPU 0
with the clients on the other CPUs; a BPE tokenizer trained here and saved with
save_pretrained, so both clients count the same tokens) is measured at each concurrency level by
`idealized-runtime measure` (chat endpoint, streaming) and by `guidellm run --profile
kind=concurrent` (one worker process), which take turns at going first, with the same prompts
(guidellm reads, as a JSON-lines dataset, the very texts our client writes, each of which the
server counts as the same number of tokens) and the same output length. Each sends warm-up + N
requests; the first (by start time) are left out of both. Like with like: TTFT from the request
going out to the first chunk with text, and ITL as guidellm defines it, per request (last -
first token) / (output tokens - 1), from each client's own per-request records. Printed per
level: p50 TTFT and p50 ITL of both with their ratio (target: within 5%), and each client's CPU
seconds per request (user + system of the client process and its children, start-up included;
target: ours no higher).

guidellm lives in its own virtual environment (it brings its own dependencies); pin torch to the
CPU build already installed so that pip does not fetch another one:
    python -m venv /tmp/guidellm-venv
    echo torch==2.13.0 > /tmp/torch-pin.txt
    /tmp/guidellm-venv/bin/pip install -c /tmp/torch-pin.txt guidellm==0.8.1
and is found through --guidellm, GUIDELLM (the executable), else `guidellm` on PATH.

Usage: python benchmarks/client_vs_guidellm.py [--levels 1,4] [--requests 40] [--warmup 4]
                                               [--prompt-tokens 64] [--output-tokens 32]

``ours_level`` and ``guidellm_level`` are the core, which benchmarks/simulator_vs_served.py
runs on its own server at its own levels, with ``side_by_side_level`` (both clients at once,
each at half the level) and ``poisson_arrivals`` (one draw both clients replay).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from idealized_runtime.processes import free_port, running_server
from idealized_runtime.timing.summary import read_raw_rows

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
# One worker process: its default (one per CPU, up to 10) spends a small machine's CPU on
# polling that the clients' timing shares.
GUIDELLM_ENV = {**OFFLINE, "GUIDELLM__MAX_WORKER_PROCESSES": "1"}


def train_byte_level_bpe(texts: Iterable[str], vocab_size: int) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts``, with the special tokens
    <unk>, <s> and </s> (trained here: nothing comes from the hub)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<unk>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return tokenizer


def make_tokenizer(folder: Path, vocab_size: int = 2000) -> Path:
    """A byte-level BPE trained on generated text, saved with save_pretrained (no hub)."""
    from transformers import PreTrainedTokenizerFast

    words = [f"{a}{b}" for a in "bcdfghjklmnpr" for b in ("an", "el", "it", "or", "us", "ed")]
    text = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(400)]
    fast = PreTrainedTokenizerFast(
        tokenizer_object=train_byte_level_bpe(text, vocab_size),
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    # Both tools send chat messages whose content may be a list of parts.
    fast.chat_template = (
        "{% for m in messages %}{{ m['content'] if m['content'] is string else "
        "m['content'][0]['text'] }}{% endfor %}"
    )
    fast.save_pretrained(folder)
    return folder


def _start(command: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start ``command`` with its output to ``log``."""
    with log.open("wb") as handle:
        return subprocess.Popen(
            list(command), env={**os.environ, **env}, stdout=handle, stderr=subprocess.STDOUT
        )


def _finish(process: subprocess.Popen, log: Path) -> float:
    """Wait for ``process``; user + system CPU seconds of it and its descendants (its own
    rusage, so that two clients running at once are counted apart)."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        name = Path(str(process.args[0])).name  # type: ignore[index]
        raise RuntimeError(f"{name} failed ({process.returncode}): {' | '.join(tail)}")
    return usage.ru_utime + usage.ru_stime


def _cpu_of(command: Sequence[str], env: dict[str, str], log: Path) -> float:
    """Run to completion; user + system CPU seconds of the process and its descendants."""
    return _finish(_start(command, env, log), log)


def _find_median(data: Any, names: Iterable[str]) -> float | None:
    """The successful requests' median of the first metric named in ``names`` (guidellm's JSON
    nests metrics as {name: {"successful": {"median": ...}}}), in seconds."""
    wanted = tuple(names)
    if isinstance(data, dict):
        for key, value in data.items():
            if key in wanted and isinstance(value, dict):
                stats = value.get("successful", value)
                median = stats.get("median") if isinstance(stats, dict) else None
                if isinstance(median, (int, float)):
                    return float(median) / (1000.0 if key.endswith("_ms") else 1.0)
        for value in data.values():
            found = _find_median(value, wanted)
            if found is not None:
                return found
    elif isinstance(data, list):
        for value in data:
            found = _find_median(value, wanted)
            if found is not None:
                return found
    return None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def poisson_arrivals(rate: float, count: int, seed: int) -> list[float]:
    """``count`` arrival times (seconds, the first at 0) of a Poisson process of ``rate`` per
    second: one draw that both clients replay, so that a rate level sends the same arrivals
    whichever client sends them (two draws differ more than two clients do)."""
    import numpy as np

    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count - 1)
    return [0.0, *np.cumsum(gaps).round(6).tolist()]


def _profile_args(
    concurrency: int | None, rate: float | None, arrivals: Sequence[float] | None
) -> str:
    if arrivals is not None:
        # Each request at its trace time (its row's relative_timestamp), not after a gap.
        return "kind=replay,schedule_turn=timestamp"
    if rate is not None:
        return f"kind=poisson,rate={rate}"
    return f"kind=concurrent,streams={concurrency}"


def _guidellm_command(
    guidellm: str, base_url: str, tokenizer_dir: Path, *, concurrency: int | None,
    rate: float | None, count: int, prompt_tokens: int, output_tokens: int | Sequence[int],
    work: Path, tag: str, arrivals: Sequence[float] | None = None,
) -> tuple[list[str], Path]:  # fmt: skip
    """guidellm's command line for ``count`` requests of our client's prompts of
    ``prompt_tokens`` as the server counts them (``write_prompts``; ``output_tokens``: one
    length, or a cycle of lengths in turn), sent at ``arrivals`` when given (a trace replay),
    and its JSON output."""
    out = work / f"guidellm-{tag}.json"
    data = write_prompts(
        tokenizer_dir, prompt_tokens, output_tokens, count,
        work / f"guidellm-prompts-{tag}.jsonl", arrivals,
    )  # fmt: skip
    command = [
        guidellm, "run",
        "--backend", f"kind=openai_http,target={base_url}",
        "--profile", _profile_args(concurrency, rate, arrivals),
        "--constraint", f"kind=max_requests,count={count}",
        "--data", f"kind=json_file,path={data}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer_dir}",
        "--output", f"kind=json,path={out}",
        "--disable-console-interactive",
    ]  # fmt: skip
    return command, out


def _guidellm_requests(out: Path) -> list[dict[str, Any]]:
    """guidellm's successful requests by start time (its own per-request records)."""
    (benchmark,) = json.loads(out.read_text())["benchmarks"]
    return sorted(benchmark["requests"]["successful"], key=lambda r: r["request_start_time"])


def _latency_stats(ttfts: Sequence[float | None], itls: Sequence[float | None]) -> dict:
    """p50 TTFT and ITL (seconds) of one client's requests, and the per-request values
    (``*_values_s``), so that passes can be pooled request by request (``pooled_p50``)."""
    ttft_values = [v for v in ttfts if v is not None]
    itl_values = [v for v in itls if v is not None]
    return {
        "ttft_s": _median(ttft_values),
        "itl_s": _median(itl_values),
        "ttft_values_s": ttft_values,
        "itl_values_s": itl_values,
    }


def pooled_p50(runs: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """For each ``NAME_values_s`` of several runs of one client (one per pass), ``NAME_s``: the
    p50 over all their requests taken together, steadier than the median of each run's p50
    when a latency has two modes (a prompt prefilled alone or beside another's)."""
    names = sorted({k for run in runs for k in run if k.endswith("_values_s")})
    return {
        name.removesuffix("_values_s") + "_s": _median([v for run in runs for v in run[name]])
        for name in names
    }


def _guidellm_stats(kept: Sequence[dict[str, Any]], cpu_s_per_request: float) -> dict:
    """p50 TTFT and ITL (guidellm's own metrics: ITL = (last - first token) / (tokens - 1))."""

    def seconds(name: str) -> list[float | None]:
        return [None if r.get(name) is None else r[name] / 1000.0 for r in kept]

    return {
        **_latency_stats(seconds("time_to_first_token_ms"), seconds("inter_token_latency_ms")),
        "prompt_tokens": _median([r["prompt_tokens"] for r in kept if r.get("prompt_tokens")]),
        "requests": len(kept),
        "cpu_s_per_request": cpu_s_per_request,
    }


def guidellm_level(
    guidellm: str, base_url: str, tokenizer_dir: Path, *, concurrency: int | None = None,
    rate: float | None = None, requests: int, warmup: int, prompt_tokens: int,
    output_tokens: int, work: Path, tag: str, arrivals: Sequence[float] | None = None,
) -> dict[str, float | None]:  # fmt: skip
    """guidellm at one level: ``warmup + requests`` requests, our client's prompts; the
    statistics of the last ``requests`` of them by start time, their medians."""
    command, out = _guidellm_command(
        guidellm, base_url, tokenizer_dir, concurrency=concurrency, rate=rate,
        count=requests + warmup, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        work=work, tag=tag, arrivals=arrivals,
    )  # fmt: skip
    cpu = _cpu_of(command, GUIDELLM_ENV, work / f"guidellm-{tag}.log")
    return _guidellm_stats(_guidellm_requests(out)[warmup:], cpu / (requests + warmup))


def request_itl(row: dict[str, Any]) -> float | None:
    """guidellm's per-request inter-token latency: (last - first streamed token) /
    (output tokens - 1); the gaps between our streamed tokens add up to the numerator."""
    tokens = row.get("num_output_tokens") or 0
    gaps = row.get("inter_token_latencies_s") or []
    return sum(gaps) / (tokens - 1) if tokens > 1 and gaps else None


def _ours_command(
    base_url: str, model: str, tokenizer_dir: Path, *, concurrency: int | None,
    rate: float | None, count: int, prompt_tokens: int, output_tokens: int | Sequence[int],
    work: Path, tag: str, arrivals: Sequence[float] | None = None,
    start_at: float | None = None,
) -> tuple[list[str], Path]:  # fmt: skip
    """`idealized-runtime measure`'s command line (chat endpoint, streaming, as guidellm) for
    ``count`` requests (a ``--workload`` trace of ``arrivals`` when given, its time 0 at
    ``start_at`` seconds since the epoch when given), and its output."""
    out = work / f"ours-{tag}.jsonl"
    lengths = output_lengths(output_tokens, count)
    if arrivals is not None:
        if len(arrivals) != count:
            raise ValueError(f"{len(arrivals)} arrivals for {count} requests")
        trace = work / f"trace-{tag}.csv"
        trace.write_text("arrival_s,num_prompt_tokens,num_output_tokens\n" + "".join(
            f"{t},{prompt_tokens},{n}\n" for t, n in zip(arrivals, lengths, strict=True)
        ))  # fmt: skip
        what = ["--workload", str(trace)]
        if start_at is not None:
            what += ["--start-at", f"{start_at:.6f}"]
    else:
        # A cycle of lengths: one grid point each, sent in turn (--in-order: repeat by repeat).
        cycle = list(dict.fromkeys(lengths))
        if count % len(cycle) or lengths != output_lengths(cycle, count):
            raise ValueError(f"{count} requests do not take the lengths {cycle} in turn")
        grid = work / f"grid-{tag}.csv"
        grid.write_text("num_prompt_tokens,num_output_tokens\n" + "".join(
            f"{prompt_tokens},{n}\n" for n in cycle
        ))  # fmt: skip
        load = ["--rate", str(rate)] if rate is not None else ["--concurrency", str(concurrency)]
        what = ["--grid", str(grid), "--repeats", str(count // len(cycle)), *load]
    command = [
        sys.executable, "-m", "idealized_runtime", "measure", "--base-url", f"{base_url}/v1",
        "--model", model, "--endpoint", "chat", *what, "--in-order",
        "--tokenizer", str(tokenizer_dir / "tokenizer.json"), "--no-progress", "-o", str(out),
    ]  # fmt: skip
    return command, out


def _ours_stats(kept: Sequence[dict[str, Any]], cpu_s_per_request: float) -> dict:
    return {
        **_latency_stats([r.get("ttft_s") for r in kept], [request_itl(r) for r in kept]),
        "prompt_tokens": _median([r["num_prompt_tokens"] for r in kept]),
        "requests": len(kept),
        "cpu_s_per_request": cpu_s_per_request,
    }


def ours_level(
    base_url: str, model: str, tokenizer_dir: Path, *, concurrency: int | None = None,
    rate: float | None = None, requests: int, warmup: int, prompt_tokens: int,
    output_tokens: int, work: Path, tag: str, arrivals: Sequence[float] | None = None,
) -> tuple[dict[str, float | None], list[dict[str, Any]]]:  # fmt: skip
    """`idealized-runtime measure` at one level: ``warmup + requests`` requests, the first
    ``warmup`` by start time left out. Returns the statistics and all raw rows by start time
    (warm-up first)."""
    command, out = _ours_command(
        base_url, model, tokenizer_dir, concurrency=concurrency, rate=rate,
        count=requests + warmup, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        work=work, tag=tag, arrivals=arrivals,
    )  # fmt: skip
    cpu = _cpu_of(command, OFFLINE, work / f"ours-{tag}.log")
    rows = sorted(read_raw_rows([out]), key=lambda r: r["started_at_s"])
    kept = [r for r in rows[warmup:] if r.get("ok")]
    return _ours_stats(kept, cpu / (requests + warmup)), rows


def _epoch(iso: str) -> float:
    return datetime.datetime.fromisoformat(iso).timestamp()


# A request of ours sent this much after its place on a shared schedule was sent late.
LATE_S = 0.05
# On one shared schedule, ours this far after guidellm's request in every other pair and as far
# before it in the others: a fraction of a decode step, more than either client's jitter.
PAIR_OFFSET_S = 0.005
# guidellm's trace time 0 is estimated from this many of its first requests.
ZERO_FROM_REQUESTS = 4


def paired_arrivals(arrivals: Sequence[float], offset_s: float) -> list[float]:
    """``arrivals`` moved ``offset_s`` later and earlier in turn (the first later), never
    before 0 nor before the previous one, so that the trace keeps its order."""
    moved: list[float] = []
    for index, time_s in enumerate(arrivals):
        shifted = time_s + (offset_s if index % 2 == 0 else -offset_s)
        moved.append(round(max(shifted, 0.0, moved[-1] if moved else 0.0), 6))
    return moved


def trace_zero(received_s: Sequence[float], arrivals: Sequence[float]) -> float:
    """A trace's time 0 (seconds since the epoch) from when its first requests were received:
    the earliest received time less trace time (a request is never early, only late)."""
    return min(r - t for r, t in zip(received_s, arrivals, strict=False))


def side_by_side_level(
    guidellm: str, base_url: str, model: str, tokenizer_dir: Path, *,
    concurrency: int | None = None, rate: float | None = None, requests: int, warmup: int,
    prompt_tokens: int, output_tokens: int, work: Path, tag: str,
    guidellm_received: Callable[[], list[float]], seed: int = 0, period_s: float = 1.0,
    output_cycle: Sequence[int] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Both clients at once on the same server, each at half the level, so that the server runs
    at the same speed for both: on a small VM the machine's speed drifts from one minute to the
    next, and two runs one after the other can differ by more than the clients do.

    At concurrency 1 the two take turns: each sends one request every ``period_s`` (a few
    times an unloaded request's latency), ours half a period after guidellm's, so that every
    request has the server to itself, as in a closed loop of one, and the two clients' requests
    alternate through the same minutes. At a higher concurrency, each runs concurrency / 2
    streams, each client's requests taking the lengths of ``output_cycle`` in turn when given:
    with one length for all, the streams of a client that sends again at once end in the same
    step and come back together, and the clients' figures then differ by how each one's streams
    happen to fall into step. At a rate, both replay one Poisson draw of half the rate on one
    schedule (ours with ``measure --start-at`` guidellm's trace time 0): the requests arrive in
    pairs, one from each client, ours ``PAIR_OFFSET_S`` after guidellm's in every other pair
    and as much before it in the others, so that each goes first in half the pairs (when a
    step ends between the two, the first is prefilled a step earlier: the shorter TTFT, and the
    longer ITL, its decode steps carrying the other's prompt); each pair's latencies then
    differ by the clients alone, not by which requests each happened to send.

    guidellm starts first (it takes seconds to start sending), ours once the server has answered
    guidellm's first requests: ``guidellm_received()`` gives the times (seconds since the epoch)
    the server received those it has answered so far, in order. guidellm's trace time 0 is
    taken as the earliest of received time less trace time over its first
    ``ZERO_FROM_REQUESTS`` requests (its first request goes out later against its schedule than
    the next ones, by its connection set-up). Each
    sends ``warmup + 1.5 x requests`` requests; kept are those that started after both clients
    had sent their first ``warmup`` and ended before either client's last request ended (from
    then on the server ran below the level). Returns {"ours": stats, "guidellm": stats,
    "window": (start, end), "arrivals": each client's trace or None}, the window in seconds
    since the epoch (the server's request log of the same requests lies within it). CPU per
    request counts every request sent."""
    count = warmup + requests + requests // 2
    alternate = concurrency == 1
    lengths: int | Sequence[int] = output_tokens
    if output_cycle and concurrency is not None and not alternate:
        lengths = output_cycle
        count += -count % len(output_cycle)  # whole cycles
    shape = {
        "concurrency": None if concurrency is None or alternate else concurrency // 2,
        "rate": None if rate is None else rate / 2, "count": count,
        "prompt_tokens": prompt_tokens, "output_tokens": lengths, "work": work,
        "tag": f"{tag}-together",
    }  # fmt: skip
    arrivals = None if rate is None else poisson_arrivals(rate / 2, count, seed)
    if alternate:
        arrivals = [round(period_s * k, 6) for k in range(count)]
    ours_arrivals = arrivals
    if rate is not None and arrivals is not None:
        ours_arrivals = paired_arrivals(arrivals, PAIR_OFFSET_S)
    theirs_command, theirs_out = _guidellm_command(
        guidellm, base_url, tokenizer_dir, arrivals=arrivals, **shape
    )
    theirs_log, ours_log = work / f"guidellm-{tag}-together.log", work / f"ours-{tag}-together.log"
    theirs_process = _start(theirs_command, GUIDELLM_ENV, theirs_log)
    deadline = time.monotonic() + 300
    # At least one: with --warmup 0 a trace's time 0 still needs guidellm's first request.
    needed = 1 if arrivals is None else max(1, min(ZERO_FROM_REQUESTS, warmup, count))
    while len(received := guidellm_received()) < needed:
        if theirs_process.poll() is not None or time.monotonic() > deadline:
            theirs_process.kill()
            _finish(theirs_process, theirs_log)
            raise RuntimeError(f"side by side at {tag}: guidellm sent no request")
        time.sleep(0.05)
    # Replaying a trace, ours on guidellm's schedule: its trace time 0 at guidellm's, or half a
    # period later taking turns (the arrivals already past go out at once, within the warm-up).
    start_at = None
    if arrivals is not None:
        theirs_zero = trace_zero(received[:needed], sorted(arrivals))
        start_at = theirs_zero + (period_s / 2 if alternate else 0.0)
    ours_command, ours_out = _ours_command(
        base_url, model, tokenizer_dir, arrivals=ours_arrivals, start_at=start_at, **shape
    )
    ours_process = _start(ours_command, OFFLINE, ours_log)
    try:
        ours_cpu = _finish(ours_process, ours_log)
    finally:  # guidellm's requests are bounded: wait for it even when ours failed
        theirs_cpu = _finish(theirs_process, theirs_log)

    theirs = [
        {**r, "start": r["request_start_time"], "end": r["request_end_time"]}
        for r in _guidellm_requests(theirs_out)
    ]  # fmt: skip
    ours = sorted(
        ({**r, "start": _epoch(r["started_at"]), "end": _epoch(r["finished_at"])}
         for r in read_raw_rows([ours_out]) if r.get("ok")),
        key=lambda r: r["start"],
    )  # fmt: skip
    if len(ours) <= warmup or len(theirs) <= warmup:
        raise RuntimeError(f"side by side at {tag}: a client finished {warmup} requests or fewer")
    start = max(ours[warmup]["start"], theirs[warmup]["start"])
    if start_at is not None and ours_arrivals is not None:
        # Ours starts on a schedule already under way: the arrivals it found past went out at
        # once, together. Compared from the end of the last of those.
        on_time = [r for r in ours if r["start"] - start_at - ours_arrivals[r["repeat"]] < LATE_S]
        first = on_time[0]["start"] if on_time else ours[-1]["end"]
        start = max(start, first, *(r["end"] for r in ours if r["start"] < first))
    end = min(ours[-1]["end"], theirs[-1]["end"])

    def within(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if r["start"] >= start and r["end"] <= end]

    return {
        "ours": _ours_stats(within(ours), ours_cpu / count),
        "guidellm": _guidellm_stats(within(theirs), theirs_cpu / count),
        "window": (start, end),
        "arrivals": {"ours": ours_arrivals, "guidellm": arrivals},
    }


def find_guidellm(path: str | None = None) -> str | None:
    """The guidellm executable: ``path``, else $GUIDELLM, else `guidellm` on PATH."""
    found = path or os.environ.get("GUIDELLM") or shutil.which("guidellm")
    return found if found and Path(found).exists() else None


def served_chat_tokens(tokenizer: Any, text: str) -> int:
    """Prompt tokens serve-model counts for a one-message chat request of ``text`` (it reads
    the messages as "user: TEXT\\n"), with its ``tokenizers.Tokenizer``."""
    return len(tokenizer.encode(f"user: {text}\n").ids)


def output_lengths(output_tokens: int | Sequence[int], count: int) -> list[int]:
    """``count`` requests' output lengths: one length for all, or a cycle of lengths in turn."""
    cycle = [output_tokens] if isinstance(output_tokens, int) else list(output_tokens)
    return [cycle[i % len(cycle)] for i in range(count)]


def write_prompts(
    tokenizer_dir: Path,
    prompt_tokens: int,
    output_tokens: int | Sequence[int],
    count: int,
    path: Path,
    arrivals: Sequence[float] | None = None,
) -> Path:
    """The prompts our client sends (``measure --tokenizer``: the same words, the same
    variants, and the offset its probe learns from the server's chat framing) as a guidellm
    JSON-lines dataset of ``count`` rows ({"prompt", "output_tokens_count"}, and
    "relative_timestamp" from ``arrivals`` for a trace replay), each checked to be
    ``prompt_tokens`` tokens as the server counts it: both clients send the same prefill."""
    from tokenizers import Tokenizer

    from idealized_runtime.timing.prompts import (
        OFFSET_PROBE_TOKENS,
        PromptBuilder,
        PromptRecipe,
        exact_text,
        load_tokenizer,
        one_token_pieces,
    )

    tokenizer = load_tokenizer(str(tokenizer_dir / "tokenizer.json"))
    served_tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    probe = exact_text(tokenizer, one_token_pieces(tokenizer), OFFSET_PROBE_TOKENS, variant=-1)
    offset = served_chat_tokens(served_tokenizer, probe) - OFFSET_PROBE_TOKENS
    builder = PromptBuilder(PromptRecipe("tokenizer", offset), tokenizer)
    rows = []
    lengths = output_lengths(output_tokens, count)
    for variant in range(count):
        text = builder.text(prompt_tokens, variant)
        served = served_chat_tokens(served_tokenizer, text)
        if served != prompt_tokens:
            raise RuntimeError(f"prompt {variant}: the server would count {served} tokens")
        row: dict[str, Any] = {"prompt": text, "output_tokens_count": lengths[variant]}
        if arrivals is not None:
            row["relative_timestamp"] = arrivals[variant]
        rows.append(row)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def compare(
    base_url: str, model: str, tokenizer_dir: Path, levels: Sequence[int], *,
    requests: int = 40, warmup: int = 4, prompt_tokens: int = 64, output_tokens: int = 32,
    guidellm: str | None = None, work: Path | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Per concurrency level: {"concurrency", "ours": {...}, "guidellm": {...}} with p50 TTFT,
    p50 ITL (seconds) and client CPU seconds per request. ``base_url`` without /v1. The two
    clients alternate which goes first from one level to the next."""
    guidellm = find_guidellm(guidellm)
    if not guidellm:
        raise SystemExit("guidellm not found: set GUIDELLM to its executable (see the docstring)")
    work = work or Path(tempfile.mkdtemp(prefix="client-vs-guidellm-"))
    results = []
    for number, level in enumerate(levels):
        shape = {
            "concurrency": level, "requests": requests, "warmup": max(warmup, level),
            "output_tokens": output_tokens, "work": work, "tag": f"c{level}",
        }  # fmt: skip

        theirs = functools.partial(
            guidellm_level, guidellm, base_url, tokenizer_dir,
            prompt_tokens=prompt_tokens, **shape,
        )  # fmt: skip
        ours = functools.partial(
            ours_level, base_url, model, tokenizer_dir, prompt_tokens=prompt_tokens, **shape
        )
        if number % 2:
            result = {"guidellm": theirs(), "ours": ours()[0]}
        else:
            result = {"ours": ours()[0], "guidellm": theirs()}
        results.append({"concurrency": level, **result})
    return results


def _ratio(ours: float | None, theirs: float | None) -> str:
    return "-" if not ours or not theirs else f"{ours / theirs:.3f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def print_table(results: Sequence[dict[str, Any]]) -> None:
    header = (
        "load", "prompt tok ours/guidellm", "TTFT ours ms", "TTFT guidellm ms", "ratio",
        "ITL ours ms", "ITL guidellm ms", "ratio", "CPU s/req ours", "CPU s/req guidellm",
        "ratio",
    )  # fmt: skip
    if any("server_steps_ratio" in row for row in results):
        # The server's engine step time during our run over during guidellm's (--step-log).
        header += ("server step time ours/guidellm",)
    print(" | ".join(header))
    for row in results:
        ours, theirs = row["ours"], row["guidellm"]
        print(" | ".join((
            str(row.get("load") or f"concurrency={row['concurrency']}"),
            f"{ours['prompt_tokens'] or 0:g}/{theirs['prompt_tokens'] or 0:g}",
            _ms(ours["ttft_s"]), _ms(theirs["ttft_s"]), _ratio(ours["ttft_s"], theirs["ttft_s"]),
            _ms(ours["itl_s"]), _ms(theirs["itl_s"]), _ratio(ours["itl_s"], theirs["itl_s"]),
            f"{ours['cpu_s_per_request']:.4f}", f"{theirs['cpu_s_per_request']:.4f}",
            _ratio(ours["cpu_s_per_request"], theirs["cpu_s_per_request"]),
            *([f"{row['server_steps_ratio']:.3f}"] if "server_steps_ratio" in row else []),
        )))  # fmt: skip


SERVER_CPUS = {0}


def client_cpus() -> set[int] | None:
    """The CPUs left to the clients when the server is pinned to CPU 0 (None: one CPU, or no
    affinity control): on a small machine a client's own work would otherwise slow the
    single-threaded server it is timing."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = os.sched_getaffinity(0) - SERVER_CPUS
    return cpus if cpus and os.sched_getaffinity(0) >= SERVER_CPUS else None


@contextlib.contextmanager
def pinned(cpus: set[int] | None) -> Iterator[None]:
    """Run the block (and the processes it starts) on ``cpus``; None: anywhere."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=4, help="first requests left out per level")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--max-batch", type=int, default=None, help="serve-model batching")
    parser.add_argument("--guidellm", default=None, help="guidellm executable")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    work = Path(tempfile.mkdtemp(prefix="client-vs-guidellm-"))
    tokenizer_dir = make_tokenizer(work / "tokenizer")
    port = free_port()
    command = [
        sys.executable, "-m", "idealized_runtime", "serve-model", "--arch", "tiny-llama",
        "--port", str(port), "--tokenizer", str(tokenizer_dir / "tokenizer.json"),
    ]  # fmt: skip
    if args.max_batch:
        command += ["--max-batch", str(args.max_batch)]
    base_url = f"http://127.0.0.1:{port}"
    clients = client_cpus()
    with contextlib.ExitStack() as stack:
        with pinned(SERVER_CPUS if clients else None):
            stack.enter_context(
                running_server(
                    command, f"{base_url}/health", env={"OMP_NUM_THREADS": "1"}, timeout_s=120,
                    log_path=work / "server.log",
                )
            )  # fmt: skip
        with pinned(clients):
            results = compare(
                base_url, "tiny-llama", tokenizer_dir, levels, requests=args.requests,
                warmup=args.warmup, prompt_tokens=args.prompt_tokens,
                output_tokens=args.output_tokens, guidellm=args.guidellm, work=work,
            )  # fmt: skip
    print(
        f"serve-model tiny-llama (one thread{', CPU 0' if clients else ''}), {args.requests} "
        f"requests per level after {args.warmup}+ warm-up, {args.prompt_tokens} prompt / "
        f"{args.output_tokens} output tokens, chat, streaming"
    )
    print_table(results)


if __name__ == "__main__":
    main()
