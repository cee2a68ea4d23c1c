"""The serving simulator against a real continuous-batching server, on this machine.

1. Profile a small Llama-shaped model (random weights, CPU, one thread) at batch 1..B with the
   local runner's profiler (``local_runner.profile.time_point``) and fit step times to it
   (``cost_model.simulate.fit_step_time``).
2. Serve the same model with ``serve-model --max-batch B`` (continuous batching, chunked
   prefill) and sweep it with the timing client (``measure``) at several concurrency levels and
   one Poisson rate.
3. Simulate the same sweep from the profiled fit (``cost_model.simulate``), and print simulated
   vs measured p50/p90 TTFT and TPOT and output throughput per level, as ratios.

Usage: python benchmarks/simulator_vs_served.py [--requests 16] [--max-batch 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

PROMPT, OUTPUT = 64, 16
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
THREADS = "1"  # the profiler, the server and the simulation's fit see the same CPU


def profile(config_path: Path, max_batch: int) -> list[dict]:
    import torch

    from local_runner.generate import Generator
    from local_runner.hf_config import resolve_architecture
    from local_runner.profile import GridPoint, time_point

    torch.set_num_threads(int(THREADS))
    arch = resolve_architecture(str(config_path))
    generator = Generator(arch, max_batch_size=max_batch, max_seq_len=512)
    rows = []
    for batch in sorted({1, 2, max_batch} | {b for b in (2, 4, 8) if b <= max_batch}):
        for prompt in (16, 96):
            point = GridPoint(prompt, OUTPUT, batch)
            timing = time_point(generator, point, repeats=3, warmup=1)
            rows.append(
                {
                    "model": arch.name,
                    "num_prompt_tokens": prompt,
                    "num_output_tokens": OUTPUT,
                    "batch_size": batch,
                    "runtime_s": timing.runtime_s,
                    "ttft_s": timing.ttft_s,
                }
            )
    return rows


def measure_levels(
    base_url: str, model: str, levels: list[tuple[str, int | None, float | None]], requests: int,
    folder: Path,
) -> list[dict]:  # fmt: skip
    from idealized_runtime.timing.client import MeasureConfig, run_measure
    from idealized_runtime.timing.grids import GridPoint

    rows: list[dict] = []
    for label, concurrency, rate in levels:
        output = folder / f"{label}.jsonl"
        config = MeasureConfig(
            base_url=base_url,
            model=model,
            grid=[GridPoint(PROMPT, OUTPUT)],
            repeats=requests,
            concurrency=concurrency or 64,
            rate=rate,
            stream=True,
            tokenizer="bytes",
            shuffle=False,
        )
        run_measure(config, output)
        for line in output.read_text().splitlines():
            row = json.loads(line)
            row["load"] = label
            rows.append(row)
    return rows


def simulate_levels(
    fit: object, model: str, levels: list[tuple[str, int | None, float | None]], requests: int,
    max_batch: int, token_budget: int, measured: list[dict],
) -> list[dict]:  # fmt: skip
    """The same sweep on the simulated server; a rate level replays the measured arrival times
    (the same Poisson draw, not another one)."""
    from datetime import datetime

    from cost_model.simulate import RequestShape, ServerConfig, simulate

    config = ServerConfig(max_batch=max_batch, token_budget=token_budget)
    rows: list[dict] = []
    for label, concurrency, rate in levels:
        if rate is not None:
            sent = sorted(
                datetime.fromisoformat(r["started_at"].replace("Z", "+00:00")).timestamp()
                for r in measured
                if r["load"] == label
            )
            shapes = [RequestShape(PROMPT, OUTPUT, t - sent[0]) for t in sent]
            rows += simulate(shapes, fit, config, model=model, load=label)  # type: ignore[arg-type]
        else:
            shapes = [RequestShape(PROMPT, OUTPUT)] * requests
            rows += simulate(
                shapes,
                fit,  # type: ignore[arg-type]
                config,
                concurrency=concurrency,
                model=model,
                load=label,
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=12, help="requests per load level")
    parser.add_argument("--max-batch", type=int, default=4)
    parser.add_argument("--token-budget", type=int, default=256)
    args = parser.parse_args()
    started = time.perf_counter()
    os.environ.setdefault("OMP_NUM_THREADS", THREADS)

    from cost_model.simulate import fit_step_time
    from idealized_runtime.processes import free_port, running_server
    from idealized_runtime.timing.summary import summarize

    with tempfile.TemporaryDirectory(prefix="simulator-vs-served-") as tmp:
        folder = Path(tmp)
        (folder / "llama-25m").mkdir()
        config_path = folder / "llama-25m" / "config.json"
        config_path.write_text(json.dumps(CONFIG))
        print(f"profiling at batch 1..{args.max_batch} ...", file=sys.stderr, flush=True)
        profiled = profile(config_path, args.max_batch)
        fit = fit_step_time(profiled)
        model = profiled[0]["model"]
        print(f"step-time fit: {json.dumps(fit.to_dict())}", file=sys.stderr, flush=True)

        # Concurrency levels, then a Poisson rate at about half of the measured saturation
        # throughput (set below from the highest concurrency level).
        levels: list[tuple[str, int | None, float | None]] = [
            (f"concurrency={c}", c, None) for c in (1, 2, args.max_batch)
        ]
        port = free_port()
        command = [
            sys.executable, "-m", "idealized_runtime", "serve-model", "--arch", str(config_path),
            "--port", str(port), "--max-batch", str(args.max_batch),
            "--token-budget", str(args.token_budget),
        ]  # fmt: skip
        env = {"OMP_NUM_THREADS": THREADS}
        with running_server(
            command, f"http://127.0.0.1:{port}/health", env=env, timeout_s=120,
            log_path=folder / "serve.log",
        ):  # fmt: skip
            base = f"http://127.0.0.1:{port}/v1"
            print("measuring ...", file=sys.stderr, flush=True)
            measured = measure_levels(base, model, levels, args.requests, folder)
            saturated = {s.load: s for s in summarize(measured)}[levels[-1][0]]
            rate = round(0.5 * saturated.requests_per_s, 2)
            rate_level = [(f"rate={rate}", None, rate)]
            measured += measure_levels(base, model, rate_level, args.requests, folder)
        levels += rate_level
        simulated = simulate_levels(
            fit, model, levels, args.requests, args.max_batch, args.token_budget, measured
        )

    real = {s.load: s for s in summarize(measured)}
    ideal = {s.load: s for s in summarize(simulated)}
    print(
        f"Simulated (profiled step-time fit) vs measured (serve-model --max-batch "
        f"{args.max_batch}, measure), {PROMPT} prompt + {OUTPUT} output tokens, "
        f"{args.requests} requests per level; ratio = simulated / measured"
    )
    header = f"{'load':<18}{'metric':<18}{'measured':>12}{'simulated':>12}{'ratio':>8}"
    print(header)
    print("-" * len(header))
    worst = 0.0
    for label, *_ in levels:
        measured_level, simulated_level = real[label], ideal[label]
        metrics = [
            ("TTFT p50 (ms)", measured_level.ttft_s.p50, simulated_level.ttft_s.p50, 1e3),
            ("TTFT p90 (ms)", measured_level.ttft_s.p90, simulated_level.ttft_s.p90, 1e3),
            ("TPOT p50 (ms)", measured_level.tpot_s.p50, simulated_level.tpot_s.p50, 1e3),
            ("TPOT p90 (ms)", measured_level.tpot_s.p90, simulated_level.tpot_s.p90, 1e3),
            ("output tok/s", measured_level.output_tokens_per_s,
             simulated_level.output_tokens_per_s, 1.0),
        ]  # fmt: skip
        for name, real_value, sim_value, scale in metrics:
            ratio = sim_value / real_value if real_value else float("nan")
            worst = max(worst, abs(ratio - 1.0))
            print(
                f"{label:<18}{name:<18}{real_value * scale:>12.2f}{sim_value * scale:>12.2f}"
                f"{ratio:>8.2f}"
            )
    print(f"largest deviation: {worst:.0%} (target: within 20% below saturation)")
    print(f"wall time: {time.perf_counter() - started:.0f} s")
    print("guidellm at the same levels: not part of this run (see benchmarks/ for its own)")


if __name__ == "__main__":
    main()
