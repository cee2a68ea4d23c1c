"""The serving simulator against a real continuous-batching server, and our timing client
against guidellm on that server, in one run on this machine (one benchmark, one script: its
phases share the server, the schedule and the clients, so they stay together).

1. Serve a small Llama-shaped model (random weights, one torch thread) with ``serve-model
   --max-batch B`` (continuous batching, chunked prefill), pinned to CPU 0 where the machine
   has more than one; the clients and the profiler's bookkeeping run on the other CPUs.
2. Right before and right after our client's run at each load level (guidellm's run is outside
   that bracket, so that the profiles are as close in time as they can be to the requests the
   simulation is compared with), the server profiles its own engine while idle
   (``POST /v1/engine/profile``: ``local_runner.batching.profile_steps`` on the served model and
   cache, in the server's process: batch 1..B, prompt chunks and decode steps, no HTTP), and step
   times are fitted to it (``cost_model.serving.step_time.fit_step_timings``): the profile
   before the level alone (a prediction), and before and after pooled (which halves the effect
   of the machine's speed drifting during the level).
3. Right before that, four unloaded single requests give the server's HTTP overhead,
   which the ideal simulated server does not have: per request (parsing, tokenization, the first
   chunk) and per streamed token (a JSON chunk per token), beyond the engine steps the server
   logged while serving them (so that the machine's speed at that moment is not taken for
   overhead). Both are added to the simulation as measured constants
   (``ServerConfig.request_overhead_s``, the fit's per-sequence term), and printed.
4. At each level (concurrency 1, 2, B, then a Poisson rate of half the saturated throughput):
   our client (``measure``, chat, streaming) and, if installed, guidellm (reading our client's
   very prompts, so that the server counts the same prompt tokens for both: printed), taking
   turns at going first, the first requests of each left out as warm-up. The rate level is one
   Poisson draw per pass that both clients replay as a trace (``measure --workload``, guidellm's
   ``kind=replay``), so that both send the same arrivals. Simulate the same level: the rate
   level replays our measured arrival times, a closed loop our client's measured re-submit gaps
   (the server's request log: each request's end to the next request received) as the
   simulated clients' think times. Then, at every level, both clients at once, each at half
   the level (``side_by_side_level``): the machine's speed, which drifts here from one minute
   to the next, is then the same for both. At concurrency 1 they take turns (one request each
   every four p90 latencies of our concurrency-1 run, ours half a period after guidellm's: each
   request alone on the server); at 2 and B each runs half the streams, its requests taking
   8-24 output tokens in turn (mean 16; with 16 for all, a client's streams end in the same
   step and come back together, and the clients then differ by how their streams fall into
   step); at the rate both replay one draw of half the rate on one schedule (ours ``measure
   --start-at`` the trace time 0 of guidellm's first requests at the server, 5 ms later and
   earlier in turn), so that the requests come in pairs, one from each, each client first in
   half of them.
5. Print simulated vs measured p50/p90 TTFT and TPOT and output throughput per level, then our
   client vs guidellm (p50 TTFT, p50 ITL as guidellm defines it, client CPU per request), each
   beside the server's own times of the same requests (``serve-model --request-log``: received,
   first and last token handed to the connection), with the time from a request's end to the
   next request the server receives (closed loop: how fast a client re-submits), the spread of
   its arrivals and, replaying a trace, how late each request reached the server against its
   trace time; and the load average at start and end.

guidellm runs from its own virtual environment (see benchmarks/client_vs_guidellm.py for the
install); give its executable with --guidellm or GUIDELLM; without it that table is skipped.

Usage: python benchmarks/simulator_vs_served.py [--quick] [--requests 16] [--repeats 1]
                                                [--together-requests 96] [--max-batch 4]
                                                [--guidellm PATH]
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from client_vs_guidellm import (
    SERVER_CPUS,
    client_cpus,
    find_guidellm,
    guidellm_level,
    make_tokenizer,
    ours_level,
    pinned,
    poisson_arrivals,
    pooled_p50,
    print_table,
    side_by_side_level,
)

PROMPT, OUTPUT = 64, 16
# Output lengths (mean OUTPUT) that both clients' closed loops take in turn when they run at
# once: with one length for all, a client's streams fall into step (see side_by_side_level).
OUTPUT_CYCLE = (8, 12, 16, 20, 24)
# A Llama-shaped model small enough for a 2-core CPU, big enough that its matmuls, not Python,
# set the step time (~25M parameters).
CONFIG = {
    "model_type": "llama",
    "hidden_size": 512,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 1408,
    "vocab_size": 4096,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
CALIBRATION = 4  # unloaded single requests before each level, for the server's overhead
THREADS = "1"  # the profiler and the server see the same CPU with the same threads
Level = tuple[str, int | None, float | None]  # (label, concurrency, rate)


def post_engine_profile(base: str, settings: dict[str, Any]) -> list[dict]:
    """The served engine's own steps, timed by the idle server in its own process
    (``POST /v1/engine/profile`` with ``settings``)."""
    import httpx

    response = httpx.post(f"{base}/v1/engine/profile", json=settings, timeout=600)
    response.raise_for_status()
    return response.json()["steps"]


def profile_engine(base: str, max_batch: int, warmup: bool, quick: bool) -> list[dict]:
    """The served engine's steps at every batch size 1..max_batch (see the module docstring),
    or at 1 and max_batch if ``quick``: each small decode batch is timed, as the step-time fit
    learns each one's own cost (``FittedStepTime.small_steps_s``)."""
    settings: dict[str, Any] = {
        "prompt_tokens": [PROMPT] if quick else [16, PROMPT],
        "output_tokens": OUTPUT,
        "batch_sizes": [1, max_batch] if quick else list(range(1, max_batch + 1)),
        "warmup": warmup,
    }
    return post_engine_profile(base, settings)


def simulate_level(
    fit: Any, config: Any, model: str, level: Level, rows: list[dict], requests: int,
    warmup: int, think_time_s: float | list[float] = 0.0,
) -> list[dict]:  # fmt: skip
    """The level on the simulated server, warm-up included and then left out as measured; a
    rate level replays the measured arrival times (the same Poisson draw, not another one), a
    closed loop the client's measured re-submit gaps (``think_time_s``).
    ``rows``: the measured rows, warm-up included, by start time."""
    from idealized_runtime.cost_model.serving.simulator import simulate
    from idealized_runtime.cost_model.serving.workload import RequestShape

    label, concurrency, rate = level
    prompt = round(statistics.median(r["num_prompt_tokens"] for r in rows))
    if rate is not None:
        sent = [r["started_at_s"] for r in rows]
        shapes = [RequestShape(prompt, OUTPUT, t - sent[0]) for t in sent]
        simulated = simulate(shapes, fit, config, model=model, load=label)
    else:
        shapes = [RequestShape(prompt, OUTPUT)] * (requests + warmup)
        simulated = simulate(
            shapes, fit, config, concurrency=concurrency, model=model, load=label,
            think_time_s=think_time_s or 0.0,
        )  # fmt: skip
    # One run per level and pass, as measure's run_id: a level's throughput is over its runs.
    kept = sorted(simulated, key=lambda r: r["started_at_s"])[warmup:]
    run = rows[0].get("run_id", "") if rows else ""
    return [{**r, "run_id": f"simulated-{run}"} for r in kept]


def calibrate_overheads(
    fit: Any, config: Any, model: str, rows: list[dict]
) -> tuple[float, float]:  # fmt: skip
    """(per request, per streamed token) seconds that the served requests took beyond the
    engine's steps, from unloaded single requests: measured minus simulated p50 TTFT and TPOT
    at concurrency 1 (not below 0)."""
    from idealized_runtime.timing.summary import summarize

    level: Level = ("calibration", 1, None)
    simulated = simulate_level(fit, config, model, level, rows, len(rows), 0)
    (real,) = summarize([{**r, "load": "calibration"} for r in rows])
    (ideal,) = summarize(simulated)
    return (
        max(0.0, real.ttft_s.p50 - ideal.ttft_s.p50),
        max(0.0, real.tpot_s.p50 - ideal.tpot_s.p50),
    )


def print_simulator_table(measured: list[dict], simulated: list[dict], levels: list[Level]) -> None:
    from idealized_runtime.timing.summary import summarize

    real = {s.load: s for s in summarize(measured)}
    ideal = {s.load: s for s in summarize(simulated)}
    header = f"{'load':<18}{'metric':<16}{'measured':>10}{'simulated':>11}{'ratio':>7}"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for label, *_ in levels:
        m, s = real[label], ideal[label]
        metrics = [
            ("TTFT p50 ms", m.ttft_s.p50, s.ttft_s.p50, 1e3),
            ("TTFT p90 ms", m.ttft_s.p90, s.ttft_s.p90, 1e3),
            ("TPOT p50 ms", m.tpot_s.p50, s.tpot_s.p50, 1e3),
            ("TPOT p90 ms", m.tpot_s.p90, s.tpot_s.p90, 1e3),
            ("output tok/s", m.output_tokens_per_s, s.output_tokens_per_s, 1.0),
        ]
        for name, real_value, sim_value, scale in metrics:
            ratio = sim_value / real_value if real_value else float("nan")
            worst = max(worst, abs(ratio - 1.0))
            print(
                f"{label:<18}{name:<16}{real_value * scale:>10.2f}{sim_value * scale:>11.2f}"
                f"{ratio:>7.2f}"
            )
    print(f"largest deviation: {worst:.0%} (target: within 20% below saturation)")


def print_repeatability(by_pass: dict[str, list[list[dict]]], levels: list[Level]) -> None:
    from idealized_runtime.timing.summary import summarize

    header = f"{'load':<18}{'metric':<16}{'pass / pass: min':>18}{'max':>7}"
    print(header)
    print("-" * len(header))
    widest = 0.0
    for label, *_ in levels:
        passes = [summarize(rows)[0] for rows in by_pass.get(label, []) if rows]
        metrics = {
            "TTFT p50 ms": [p.ttft_s.p50 for p in passes],
            "TTFT p90 ms": [p.ttft_s.p90 for p in passes],
            "TPOT p50 ms": [p.tpot_s.p50 for p in passes],
            "TPOT p90 ms": [p.tpot_s.p90 for p in passes],
            "output tok/s": [p.output_tokens_per_s for p in passes],
        }
        for name, values in metrics.items():
            ratios = [a / b for a, b in itertools.permutations(values, 2) if a and b]
            if not ratios:
                continue
            widest = max(widest, max(abs(r - 1.0) for r in ratios))
            print(f"{label:<18}{name:<16}{min(ratios):>18.2f}{max(ratios):>7.2f}")
    print(f"largest pass-to-pass deviation: {widest:.0%}")


def median_by_level(results: list[dict]) -> list[dict]:
    """One row per load level: each client's p50 TTFT and ITL (its own and the server's) over
    all the passes' requests together, its other figures the median over the passes."""
    merged: dict[str, dict] = {}
    for row in results:
        merged.setdefault(row["load"], {"load": row["load"], "runs": []})["runs"].append(row)

    def median(values: list) -> float | None:
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    for level in merged.values():
        runs = level.pop("runs")
        for client in ("ours", "guidellm"):
            if client in runs[0]:
                figures = runs[0][client]
                level[client] = {
                    k: median([r[client][k] for r in runs])
                    for k, v in figures.items()
                    if v is None or isinstance(v, (int, float))
                }
                level[client].update(pooled_p50([r[client] for r in runs]))
                level[client]["requests"] = sum(r[client]["requests"] for r in runs)
                # The prompt lengths the server counted for this client, over all passes.
                level[client]["server_prompt_tokens"] = sorted(
                    {n for r in runs for n in r[client].get("server_prompt_tokens", [])}
                )
        if "server_steps_ratio" in runs[0]:
            level["server_steps_ratio"] = median([r["server_steps_ratio"] for r in runs])
    return list(merged.values())


def read_jsonl(path: Path) -> list[dict]:
    """A server log's whole lines so far (a step log, a request log)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def server_truth(
    records: list[dict], warmup: int, concurrency: int | None,
    trace: list[float] | None = None, steps: list[dict] | None = None,
) -> dict:  # fmt: skip
    """The server's own view of one client's requests at a level (``--request-log``), the
    first ``warmup`` by arrival left out: p50 TTFT (received to first token handed to the
    connection), p50 ITL ((last - first token) / (tokens - 1)), the prompt tokens it counted
    and the coefficient of variation of the gaps between arrivals; and, in a closed loop of
    ``concurrency`` clients, the time from a request's end to the next arrival (the k-th
    arrival after the first ``concurrency`` answers the k-th end): its p50, and all of them in
    order, warm-up included (``resubmit_gaps_s``, the client's think time that the simulation
    of the level replays). Replaying a ``trace`` (arrival times of all the client's requests):
    how late the server received them against it (``schedule_lag``).
    With the server's ``steps`` (its step log over the same time): p50 of how long a request
    waited for the step in progress to end (the engine takes new requests between steps) and
    p50 of its TTFT from the start of the step that took it (``step_wait_s``, ``from_step_s``):
    TTFT = the two, and the first depends on when in a step a client's request happens to
    arrive, not on how fast the server serves it."""
    records = streamed(records)
    kept = records[warmup:]
    ttft = [r["first_token_at_s"] - r["received_at_s"] for r in kept if "first_token_at_s" in r]
    itl = [
        (r["last_token_at_s"] - r["first_token_at_s"]) / (r["num_output_tokens"] - 1)
        for r in kept
        if r["num_output_tokens"] > 1
    ]
    every_gap: list[float] = []
    if concurrency is not None:
        arrivals = [r["received_at_s"] for r in records]
        ends = sorted(r["finished_at_s"] for r in records)
        every_gap = [max(0.0, a - e) for a, e in zip(arrivals[concurrency:], ends, strict=False)]
    gaps = every_gap[max(0, warmup - (concurrency or 0)) :]
    # How bursty the client's arrivals were (Poisson: 1; a closed loop: below 1).
    between = [b["received_at_s"] - a["received_at_s"] for a, b in itertools.pairwise(kept)]
    mean_gap = statistics.fmean(between) if len(between) > 1 else 0.0
    waits, served = step_waits(kept, steps) if steps else ([], [])
    return {
        "step_wait_s": statistics.median(waits) if waits else None,
        "from_step_s": statistics.median(served) if served else None,
        **schedule_lag(records, trace),
        "arrival_cv": statistics.stdev(between) / mean_gap if mean_gap > 0 else None,
        "truth_ttft_s": statistics.median(ttft) if ttft else None,
        "truth_itl_s": statistics.median(itl) if itl else None,
        "truth_ttft_values_s": ttft,
        "truth_itl_values_s": itl,
        "gap_s": statistics.median(gaps) if gaps else None,
        "server_prompt_tokens": sorted({r["num_prompt_tokens"] for r in kept}),
        "resubmit_gaps_s": every_gap,
    }


def streamed(records: list[dict]) -> list[dict]:
    """A client's answered streamed requests in the server's log, by arrival (`measure` first
    sends a few single-token probes, not streamed)."""
    return sorted(
        (r for r in records if r.get("ok") and r.get("stream")), key=lambda r: r["received_at_s"]
    )


def nearest_rank_p90(values: list[float]) -> float:
    """The value at rank 0.9 (n - 1) of the sorted values (no interpolation)."""
    return sorted(values)[int(0.9 * (len(values) - 1))]


def schedule_lag(records: list[dict], trace: list[float] | None) -> dict:
    """How late the server received a client's requests against the ``trace`` it replayed
    (all of its requests): p50 and p90 of received - trace time, less the smallest such
    difference (the client's start); None without a trace or when the counts differ."""
    records = streamed(records)
    if trace is None or len(trace) != len(records):
        return {"lag_p50_s": None, "lag_p90_s": None}
    offsets = [r["received_at_s"] - t for r, t in zip(records, sorted(trace), strict=True)]
    start = min(offsets)
    lag = [offset - start for offset in offsets]
    return {"lag_p50_s": statistics.median(lag), "lag_p90_s": nearest_rank_p90(lag)}


def step_waits(records: list[dict], steps: list[dict]) -> tuple[list[float], list[float]]:
    """For each request (server log): the wait from its arrival to the start of the first step
    that began after it (step start = its wall-clock end less its seconds), and its TTFT from
    that step's start."""
    starts = sorted(s["finished_at_s"] - s["seconds"] for s in steps if "finished_at_s" in s)
    waits, served = [], []
    for r in records:
        index = bisect.bisect_left(starts, r["received_at_s"])
        if index < len(starts) and "first_token_at_s" in r:
            waits.append(starts[index] - r["received_at_s"])
            served.append(r["first_token_at_s"] - starts[index])
    return waits, served


def print_truth_table(results: list[dict]) -> None:
    """Each client's p50 TTFT and ITL beside the server's own times of the same requests."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.2f}"

    def ratio(value: float | None, truth: float | None) -> str:
        return "-" if not value or not truth else f"{value / truth:.3f}"

    print(
        "load | client | requests | TTFT ms | server TTFT ms | client/server | ITL ms | "
        "server ITL ms | client/server | server: end to next request ms | "
        "server: arrival gaps CV | server: received after the trace time p50 / p90 ms | "
        "server: TTFT = wait for the step in progress + from the start of the step that "
        "took it, p50 ms | server: prompt tokens"
    )
    for row in results:
        for client in ("ours", "guidellm"):
            figures = row.get(client)
            if not figures:
                continue
            print(" | ".join((
                row["load"], client, f"{figures.get('requests', 0):g}",
                ms(figures["ttft_s"]), ms(figures["truth_ttft_s"]),
                ratio(figures["ttft_s"], figures["truth_ttft_s"]), ms(figures["itl_s"]),
                ms(figures["truth_itl_s"]), ratio(figures["itl_s"], figures["truth_itl_s"]),
                ms(figures["gap_s"]),
                "-" if figures.get("arrival_cv") is None else f"{figures['arrival_cv']:.2f}",
                "-" if figures.get("lag_p50_s") is None
                else f"{ms(figures['lag_p50_s'])} / {ms(figures['lag_p90_s'])}",
                "-" if figures.get("step_wait_s") is None
                else f"{ms(figures['step_wait_s'])} + {ms(figures['from_step_s'])}",
                "/".join(map(str, figures.get("server_prompt_tokens") or [])) or "-",
            )))  # fmt: skip
    counted = {
        client: {n for row in results for n in (row.get(client) or {}).get(
            "server_prompt_tokens", [])}
        for client in ("ours", "guidellm")
    }  # fmt: skip
    if counted["guidellm"]:
        same = counted["ours"] == counted["guidellm"] and len(counted["ours"]) == 1
        print(
            f"prompt tokens as the server counted them, ours {sorted(counted['ours'])}, guidellm "
            f"{sorted(counted['guidellm'])}: {'the same prefill' if same else 'DIFFERENT'}"
        )


def keep_level(
    folder: Path, name: str, rows: list[dict], steps: list[dict], simulated: list[dict],
    served: list[dict], results: dict,
) -> None:  # fmt: skip
    """A level's measured rows, the server's steps and request log of them and their
    simulation (on the fit of those steps), for a look request by request (``--keep``)."""
    folder.mkdir(parents=True, exist_ok=True)
    kinds = (("measured", rows), ("steps", steps), ("served", served), ("simulated", simulated))
    for kind, records in kinds:
        with (folder / f"{name}-{kind}.jsonl").open("w") as handle:
            handle.writelines(json.dumps(r, default=str) + "\n" for r in records)
    (folder / f"{name}-clients.json").write_text(json.dumps(results, default=str))


def step_drift(fit: Any, steps: list[dict]) -> tuple[float, int]:
    """Total seconds of the server's engine steps over what the profile's fit predicts for the
    same steps: 1.0 when the engine ran in the server as fast as in the profile."""
    from idealized_runtime.cost_model.serving.step_time import StepWork

    predicted = sum(
        float(fit.seconds(StepWork.of(s["decode_contexts"], s["chunks"]))[0]) for s in steps
    )
    served = sum(s["seconds"] for s in steps)
    return (served / predicted if predicted else float("nan")), len(steps)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16, help="measured requests per level")
    parser.add_argument("--warmup", type=int, default=8, help="warm-up requests per level")
    parser.add_argument("--max-batch", type=int, default=4)
    parser.add_argument("--token-budget", type=int, default=256)
    parser.add_argument("--guidellm", default=None, help="guidellm executable (or $GUIDELLM)")
    parser.add_argument("--repeats", type=int, default=1, help="passes over the levels")
    parser.add_argument(
        "--together-requests", type=int, default=96,
        help="measured requests per client with both clients at once (each at half the level)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a smoke run: few requests")
    parser.add_argument(
        "--no-think-time", dest="think_time", action="store_false",
        help="simulate closed loops without the client's measured re-submit gaps",
    )  # fmt: skip
    parser.add_argument(
        "--keep", type=Path, default=None,
        help="folder to keep each level's measured rows, served steps and simulated rows in",
    )  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.requests, args.warmup, args.together_requests = 4, 2, 8
    started = time.perf_counter()
    print(f"load average at start: {load_average()}")

    from idealized_runtime.cost_model.serving.simulator import ServerConfig
    from idealized_runtime.cost_model.serving.step_time import fit_step_timings
    from idealized_runtime.processes import free_port, running_server
    from idealized_runtime.timing.summary import summarize

    guidellm = find_guidellm(args.guidellm)
    if guidellm is None:
        print("guidellm: not found (--guidellm PATH or GUIDELLM), its comparison is skipped")
    clients = client_cpus()
    server_cpus = SERVER_CPUS if clients else None
    print(f"server (and its engine profiles) on CPUs "
          f"{sorted(server_cpus or os.sched_getaffinity(0))}, "
          f"clients on {sorted(clients or os.sched_getaffinity(0))}")  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="simulator-vs-served-") as tmp:
        folder = Path(tmp)
        (folder / "llama-25m").mkdir()
        config_path = folder / "llama-25m" / "config.json"
        config_path.write_text(json.dumps(CONFIG))
        tokenizer_dir = make_tokenizer(folder / "tokenizer")
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        step_log = folder / "served-steps.jsonl"
        request_log = folder / "served-requests.jsonl"
        # (level, served / profiled step time: profile before, after, both; steps)
        drift: list[tuple[str, float, float, float, int]] = []
        within: list[tuple[str, list[float]]] = []  # (level, served / fit by quarter)
        command = [
            sys.executable, "-m", "idealized_runtime", "serve-model", "--arch", str(config_path),
            "--port", str(port), "--max-batch", str(args.max_batch),
            "--token-budget", str(args.token_budget),
            "--tokenizer", str(tokenizer_dir / "tokenizer.json"), "--step-log", str(step_log),
            "--request-log", str(request_log),
        ]  # fmt: skip
        server = ServerConfig(max_batch=args.max_batch, token_budget=args.token_budget)
        levels: list[Level] = [
            (f"concurrency={c}", c, None) for c in sorted({1, 2, args.max_batch})
        ]
        measured: list[dict] = []
        by_pass: dict[str, list[list[dict]]] = {}  # level -> each pass's measured rows
        simulated: dict[str, list[dict]] = {"before": [], "both": [], "log": []}
        # (level, ms per request / per token beyond: the profile before, both, the logged steps)
        calibrations: list[tuple[str, list[float]]] = []
        versus: list[dict] = []
        together: list[dict] = []  # both clients at once, each at half the level
        with contextlib.ExitStack() as stack:
            with pinned(server_cpus):
                stack.enter_context(
                    running_server(
                        command, f"{base}/health", env={"OMP_NUM_THREADS": THREADS},
                        timeout_s=120, log_path=folder / "serve.log",
                    )
                )  # fmt: skip
            model = served_model_name(base)

            def profiled(warmup: bool = False) -> list[dict]:
                return profile_engine(base, args.max_batch, warmup, args.quick)

            def calibrate(label: str, repetition: int) -> tuple[list[dict], Any]:
                """Unloaded single requests right before a level: their rows, and the fit of
                the server's logged steps while it served them (which already hold what
                streaming took from the engine)."""
                logged = len(read_jsonl(step_log))
                with pinned(clients):
                    _, rows = ours_level(
                        base, model, tokenizer_dir, concurrency=1, requests=CALIBRATION,
                        warmup=1, prompt_tokens=PROMPT, output_tokens=OUTPUT, work=folder,
                        tag=f"calibration-{label.replace('=', '')}-{repetition}",
                    )  # fmt: skip
                return rows[1:], fit_step_timings(read_jsonl(step_log)[logged:], model)

            profiled(warmup=True)  # a first pass that warms the engine up
            for repetition in range(args.repeats):
                number = 0
                while number < len(levels):
                    level = levels[number]
                    label, concurrency, rate = level
                    print(f"{label} ...", file=sys.stderr, flush=True)
                    warmup = max(args.warmup, concurrency or 1)
                    shape = {
                        "concurrency": concurrency, "rate": rate, "requests": args.requests,
                        "warmup": warmup, "output_tokens": OUTPUT, "work": folder,
                        "tag": f"{label.replace('=', '')}-{repetition}",
                    }  # fmt: skip
                    if rate is not None:
                        # One Poisson draw, replayed by both clients (a trace): the same
                        # arrivals whichever client sends them.
                        shape["arrivals"] = poisson_arrivals(
                            rate, args.requests + warmup, seed=repetition
                        )
                    results: dict[str, Any] = {}
                    steps: dict[str, list[dict]] = {}
                    served: dict[str, list[dict]] = {}
                    with pinned(clients):
                        first = (number + repetition) % 2 == 0
                        order = ("ours", "guidellm") if first else ("guidellm", "ours")
                        for client in order:
                            if client == "guidellm" and guidellm is None:
                                continue
                            logged = len(read_jsonl(step_log))
                            received = len(read_jsonl(request_log))
                            if client == "ours":
                                # The profiles bracket our client's run alone (not guidellm's
                                # too): the machine's speed drifts from one minute to the next.
                                calibration_rows, calibration_log_fit = calibrate(label, repetition)
                                before = profiled()
                                logged = len(read_jsonl(step_log))
                                received = len(read_jsonl(request_log))
                                results["ours"], rows = ours_level(
                                    base, model, tokenizer_dir, prompt_tokens=PROMPT, **shape
                                )
                                after = profiled()
                            else:
                                results["guidellm"] = guidellm_level(
                                    guidellm, base, tokenizer_dir, prompt_tokens=PROMPT,
                                    **shape,
                                )  # fmt: skip
                            # Up to the end of the client's own requests (our profile after
                            # them adds steps, not requests).
                            served[client] = read_jsonl(request_log)[received:]
                            steps[client] = read_jsonl(step_log)[logged:]
                            results[client].update(
                                server_truth(
                                    served[client],
                                    warmup,
                                    concurrency,
                                    shape.get("arrivals"),
                                    steps[client],
                                )
                            )
                    fits = {
                        "before": fit_step_timings(before, model),
                        "both": fit_step_timings(before + after, model),
                    }
                    our_steps = steps["ours"]
                    row = {"load": label, **results}
                    if "guidellm" in results:
                        # How fast the server's engine ran during each client's run (its steps over
                        # the same fit): a latency ratio the server's speed explains is drift.
                        row["server_steps_ratio"] = (
                            step_drift(fits["both"], our_steps)[0]
                            / step_drift(fits["both"], steps["guidellm"])[0]
                        )
                    versus.append(row)
                    if guidellm is not None:
                        both_shape = {
                            **{k: v for k, v in shape.items() if k != "arrivals"},
                            "requests": args.together_requests, "seed": repetition,
                            "output_cycle": OUTPUT_CYCLE,
                        }  # fmt: skip
                        if concurrency == 1:  # taking turns: each request alone on the server
                            # Half a period at least twice the p90 latency: the machine
                            # slows by a third from one minute to the next.
                            p90 = nearest_rank_p90(
                                [r["finished_at_s"] - r["started_at_s"] for r in rows if r["ok"]]
                            )
                            both_shape["period_s"] = round(max(0.5, 4 * p90), 3)
                            # One request each per period (slower than a closed loop): half as many.
                            both_shape["requests"] = max(8, args.together_requests // 2)
                        together.append(side_by_side(
                            guidellm, base, model, tokenizer_dir, request_log, step_log,
                            both_shape,
                        ))  # fmt: skip
                    drift.append((
                        label, step_drift(fits["before"], our_steps)[0],
                        step_drift(fit_step_timings(after, model), our_steps)[0],
                        *step_drift(fits["both"], our_steps),
                    ))  # fmt: skip
                    rows = [{**r, "load": label} for r in rows]
                    kept = [r for r in rows[warmup:] if r.get("ok")]
                    measured += kept
                    by_pass.setdefault(label, []).append(kept)
                    fits["log"] = fit_step_timings(our_steps, model)
                    # The machine's speed during the level: its steps over the fit of all of
                    # them, by quarter of the level (the one fit cannot follow this).
                    quarter = -(-len(our_steps) // 4)
                    within.append((label, [
                        step_drift(fits["log"], our_steps[i : i + quarter])[0]
                        for i in range(0, len(our_steps), quarter)
                    ]))  # fmt: skip
                    # The server's HTTP overhead: what the calibration requests took beyond the
                    # engine steps the server logged while serving them. Measured beyond the
                    # profile instead, it would also hold how much slower or faster the
                    # machine ran during the calibration than during the profile (printed).
                    beyond_profile = calibrate_overheads(
                        fits["before"], server, model, calibration_rows
                    )
                    per_request, per_token = calibrate_overheads(
                        calibration_log_fit, server, model, calibration_rows
                    )
                    overheads = [1e3 * x for x in (*beyond_profile, per_request, per_token)]
                    gaps = results["ours"]["resubmit_gaps_s"] if args.think_time else 0.0
                    for name, fit in fits.items():
                        simulated[name] += simulate_level(
                            replace(fit, per_sequence_s=fit.per_sequence_s + per_token),
                            replace(server, request_overhead_s=per_request),
                            model, level, rows, args.requests, warmup, gaps,
                        )  # fmt: skip
                    if args.keep:
                        keep_level(args.keep, f"{label}-{repetition}", rows, our_steps,
                                   simulated["log"][-args.requests:], served["ours"],
                                   results)  # fmt: skip
                    calibrations.append((label, overheads))
                    if number == len(levels) - 1 and rate is None:
                        # A Poisson rate at half of the saturated throughput.
                        saturated = {s.load: s for s in summarize(measured)}[label]
                        half = round(0.5 * saturated.requests_per_s, 2)
                        levels.append((f"rate={half}", None, half))
                    number += 1

    print(
        f"\nSimulated (engine step-time fit + measured server overhead) vs measured "
        f"(serve-model --max-batch {args.max_batch}, measure), {PROMPT} prompt + {OUTPUT} "
        f"output tokens, {args.requests} requests per level after {args.warmup} warm-up, "
        f"{args.repeats} pass(es) pooled; ratio = simulated / measured"
    )
    print(
        "server overhead from unloaded single requests right before each level, ms per "
        "request / per streamed token, beyond: the profile before (not used: it holds the "
        "machine's drift too); the engine steps logged while serving them (used):"
    )
    for label, values in calibrations:
        pairs = [f"{values[i]:.2f} / {values[i + 1]:.2f}" for i in range(0, len(values), 2)]
        print(f"  {label}: {'; '.join(pairs)}")
    print(
        "engine steps in the server (serve-model --step-log) / the fit of the server's own "
        "engine profile for the same work, profile before the level, after it, both: "
        + ", ".join(
            f"{label} {b:.2f} {a:.2f} {both:.2f} ({n} steps)" for label, b, a, both, n in drift
        )
    )
    print(
        "the engine's speed within each level: its logged steps / the fit of all of the "
        "level's steps, by quarter of the level (what one step-time fit averages over): "
        + ", ".join(f"{label} {' '.join(f'{x:.2f}' for x in q)}" for label, q in within)
    )
    print("\nSimulated on the server's engine profile taken right before each level (a prediction)")
    print_simulator_table(measured, simulated["before"], levels)
    print(
        "\nSimulated on the server's engine profiles right before and right after each level, "
        "pooled (the machine's drift during the level halved)"
    )
    print_simulator_table(measured, simulated["both"], levels)
    print(
        "\nSimulated on the server's own engine steps of the level (serve-model --step-log fit "
        "+ the overhead beyond them) vs measured: the scheduler and the overheads alone"
    )
    print_simulator_table(measured, simulated["log"], levels)
    if args.repeats > 1:
        print(
            "\nThe machine's repeatability: each pass of a level measured against another pass of "
            "the same level (measured / measured, every ordered pair of passes), the same "
            "figures; a prediction made before a level cannot be closer than this"
        )
        print_repeatability(by_pass, levels)
    merged = median_by_level(versus)
    if guidellm is not None:
        print(
            "\nOur client vs guidellm on the same server and levels (ITL as guidellm: per "
            "request (last - first token) / (tokens - 1); ratio = ours / guidellm; target: "
            "TTFT and ITL within 5%, CPU no higher)"
        )
        print_table(merged)
        both = median_by_level(together)
        print(
            "\nBoth clients at once on the same server, each at half the level (taking turns "
            "at concurrency 1; concurrency / 2 streams, output lengths "
            f"{'/'.join(map(str, OUTPUT_CYCLE))} in turn; or one draw of rate / 2 both replay "
            "on one schedule: requests in pairs), "
            "so that the machine's speed is the same for both; requests while both were "
            "sending, after each one's warm-up, over all passes (ratio = ours / guidellm; "
            "target: TTFT and ITL within 5%)"
        )
        print_table(both)
        print_truth_table(both)
    else:
        print("\nguidellm at the same levels: skipped (not found)")
    print(
        "\nEach client against the server's own times of the same requests (serve-model "
        "--request-log: received, first and last token handed to the connection; medians over "
        "the passes); the server's TTFT leaves out the network and HTTP parsing, so a client's "
        "ratio is above 1 by what those take"
    )
    print_truth_table(merged)
    print(f"\nload average at end: {load_average()}")
    print(f"wall time: {time.perf_counter() - started:.0f} s")


def ours_request(record: dict) -> bool:
    """Whether a request in the server's log came from `measure` (it names itself)."""
    return (record.get("user_agent") or "").startswith("idealized-runtime/")


def side_by_side(
    guidellm: str, base: str, model: str, tokenizer_dir: Path, request_log: Path,
    step_log: Path, shape: dict[str, Any],
) -> dict:  # fmt: skip
    """Both clients at once at the level of ``shape`` (``side_by_side_level``), each beside the
    server's own times of its requests within the compared window (told apart by User-Agent:
    `measure` names itself)."""
    received, logged = len(read_jsonl(request_log)), len(read_jsonl(step_log))

    def guidellm_received() -> list[float]:
        """When the server received guidellm's requests it has answered so far, in order."""
        theirs = [r for r in streamed(read_jsonl(request_log)[received:]) if not ours_request(r)]
        return sorted(r["received_at_s"] for r in theirs)

    result = side_by_side_level(
        guidellm, base, model, tokenizer_dir, prompt_tokens=PROMPT,
        guidellm_received=guidellm_received, **shape,
    )  # fmt: skip
    start, end = result.pop("window")
    arrivals = result.pop("arrivals")
    every = read_jsonl(request_log)[received:]
    steps = read_jsonl(step_log)[logged:]
    for client, ours in (("ours", True), ("guidellm", False)):
        sent = [r for r in every if ours_request(r) == ours]
        compared = [r for r in sent if start <= r["received_at_s"] and r["finished_at_s"] <= end]
        result[client].update(server_truth(compared, 0, None, steps=steps))
        # Against the whole trace the client replayed, not only the compared window.
        result[client].update(schedule_lag(sent, arrivals[client]))
    label = (
        f"concurrency={shape['concurrency']}" if shape["rate"] is None else f"rate={shape['rate']}"
    )
    return {"load": label, **result}


def served_model_name(base: str) -> str:
    """The served model's name (``GET /v1/models``)."""
    import httpx

    return httpx.get(f"{base}/v1/models", timeout=30).json()["data"][0]["id"]


if __name__ == "__main__":
    main()
