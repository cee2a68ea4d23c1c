"""Where does an engine profile's drift come from: the process it runs in, or the moment?

The serving engine of `serve-model --max-batch 4` (the ~25M Llama of
benchmarks/simulator_vs_served.py, one torch thread) is profiled with the same steps
(``local_runner.batching.profile_steps``: batch 1, 2, 4, prompts of 16 and 64 tokens, whole and
staggered arrivals, 16 output tokens) by three processes, all pinned to CPU 0, taking turns
(A B C, then C B A, ...) for several rounds:

  A  this process, on its own ``Generator`` (what the simulator benchmark used to profile),
  B  a second Python process with its own ``Generator``,
  C  the server itself, on its own model and cache (``POST /v1/engine/profile``).

Each round then serves a few streamed requests at concurrency 1 and at concurrency 4 (clients on
CPU 1) and reads the server's step log: the served steps' time over what each profile's fit of
the round predicts for the same work (served / fit; at concurrency 4 the server's event loop,
streaming four requests' chunks, shares CPU 0 with the engine). Printed: per round and source,
the profile's total step time (identical work each time), the fit's time for three reference
steps, the steal time of CPU 0 while it ran, and served / fit; then the spread between the
processes within a round against the spread of each process over the rounds.

Usage: python benchmarks/engine_profile_drift.py [--rounds 6] [--requests 8]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from client_vs_guidellm import SERVER_CPUS, client_cpus, pinned
from simulator_vs_served import (
    CONFIG,
    OUTPUT,
    PROMPT,
    THREADS,
    post_engine_profile,
    served_model_name,
)

MAX_BATCH, TOKEN_BUDGET = 4, 256
PROFILE = {"batch_sizes": [1, 2, 4], "prompt_tokens": [16, 64], "output_tokens": OUTPUT}
# Reference steps for the fitted times: (decode contexts, prompt chunks).
REFERENCE = {
    "decode b=1": ([PROMPT + 8], []),
    "decode b=4": ([PROMPT + 8] * 4, []),
    "prompt 64": ([], [(PROMPT, 0)]),
}


def build_generator(config_path: Path) -> Any:
    import torch

    from idealized_runtime.local_runner.generate import Generator
    from idealized_runtime.local_runner.hf_config import resolve_architecture

    torch.set_num_threads(int(THREADS))
    # The server's own model: same weights seed, cache size and dtype.
    return Generator(resolve_architecture(str(config_path)), max_batch_size=MAX_BATCH, seed=0)


def profile_here(generator: Any, warmup: bool = False) -> list[dict]:
    from idealized_runtime.local_runner.batching import profile_steps

    steps = profile_steps(generator, token_budget=TOKEN_BUDGET, warmup=warmup, **PROFILE)
    return [step.to_dict() for step in steps]


def worker(config_path: Path) -> None:
    """Process B: one profile per line read from stdin, its steps as one JSON line."""
    generator = build_generator(config_path)
    profile_here(generator, warmup=True)
    print("ready", flush=True)
    for _ in sys.stdin:
        print(json.dumps(profile_here(generator)), flush=True)


def cpu0_steal() -> tuple[int, int]:
    """(steal, total) jiffies of CPU 0 so far (0, 0 where /proc/stat is not there)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("cpu0 "):
                values = [int(v) for v in line.split()[1:]]
                return (values[7] if len(values) > 7 else 0), sum(values[:8])
    return 0, 0


def serve_requests(base: str, model: str, count: int, concurrency: int = 1) -> None:
    """Streamed chat requests, ``count`` per client, ``concurrency`` clients (closed loop)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(one_client, base, model, count) for _ in range(concurrency)]:
            future.result()


def one_client(base: str, model: str, count: int) -> None:
    import httpx

    body = {
        "model": model,
        "messages": [{"role": "user", "content": "a " * (PROMPT - 4)}],
        "max_tokens": OUTPUT,
        "stream": True,
    }
    with httpx.Client(timeout=120) as client:
        for _ in range(count):
            with client.stream("POST", f"{base}/v1/chat/completions", json=body) as response:
                response.raise_for_status()
                for _line in response.iter_lines():
                    pass


def fitted_ms(fit: Any) -> dict[str, float]:
    from idealized_runtime.cost_model.serving.step_time import StepWork

    return {
        name: 1e3 * float(fit.seconds(StepWork.of(contexts, chunks))[0])
        for name, (contexts, chunks) in REFERENCE.items()
    }


def predicted_s(fit: Any, steps: list[dict]) -> float:
    from idealized_runtime.cost_model.serving.step_time import StepWork

    return sum(float(fit.seconds(StepWork.of(s["decode_contexts"], s["chunks"]))[0]) for s in steps)


def spread(values: list[float]) -> float:
    """max / min - 1."""
    return max(values) / min(values) - 1.0 if values and min(values) > 0 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=8, help="served per round and level")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = THREADS
    if args.worker is not None:
        worker(args.worker)
        return

    from idealized_runtime.cost_model.serving.step_time import fit_step_timings
    from idealized_runtime.processes import free_port, running_server

    started = time.perf_counter()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    clients = client_cpus()
    server_cpus = SERVER_CPUS if clients else None
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="profile-drift-")))
        config_path = folder / "llama-25m" / "config.json"
        config_path.parent.mkdir()
        config_path.write_text(json.dumps(CONFIG))
        step_log = folder / "steps.jsonl"
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        command = [
            sys.executable, "-m", "idealized_runtime", "serve-model", "--arch", str(config_path),
            "--port", str(port), "--max-batch", str(MAX_BATCH), "--token-budget",
            str(TOKEN_BUDGET), "--step-log", str(step_log),
        ]  # fmt: skip
        with pinned(server_cpus):
            stack.enter_context(
                running_server(
                    command, f"{base}/health", env={"OMP_NUM_THREADS": THREADS}, timeout_s=120,
                    log_path=folder / "serve.log",
                )
            )  # fmt: skip
            process_b = subprocess.Popen(
                [sys.executable, __file__, "--worker", str(config_path)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                env={**os.environ, "OMP_NUM_THREADS": THREADS},
            )  # fmt: skip
        stack.callback(process_b.wait, 30)
        stack.callback(process_b.stdin.close)  # type: ignore[union-attr]
        model = served_model_name(base)
        generator = build_generator(config_path)

        def profile_server(warmup: bool = False) -> list[dict]:
            return post_engine_profile(base, {**PROFILE, "warmup": warmup})

        def profile_b() -> list[dict]:
            process_b.stdin.write("profile\n")  # type: ignore[union-attr]
            process_b.stdin.flush()  # type: ignore[union-attr]
            return json.loads(process_b.stdout.readline())  # type: ignore[union-attr]

        def profile_a() -> list[dict]:
            with pinned(server_cpus):
                return profile_here(generator)

        sources = {"A this process": profile_a, "B other process": profile_b,
                   "C the server": profile_server}  # fmt: skip
        with pinned(server_cpus):
            profile_here(generator, warmup=True)
        profile_server(warmup=True)
        assert process_b.stdout is not None and process_b.stdout.readline().strip() == "ready"

        rows: list[dict[str, Any]] = []
        header = (
            f"{'round':>5}  {'source':<16}{'profile s':>10}"
            + "".join(f"{name + ' ms':>15}" for name in REFERENCE)
            + f"{'steal %':>9}{'served/fit c=1':>16}{'c=4':>6}"
        )
        print(header)
        print("-" * len(header))
        for number in range(args.rounds):
            order = list(sources) if number % 2 == 0 else list(reversed(sources))
            fits = {}
            for name in order:
                steal0, total0 = cpu0_steal()
                steps = sources[name]()
                steal1, total1 = cpu0_steal()
                fits[name] = fit_step_timings(steps, model)
                rows.append({
                    "round": number + 1, "source": name,
                    "seconds": sum(s["seconds"] for s in steps),
                    "fitted_ms": fitted_ms(fits[name]),
                    "steal": (steal1 - steal0) / (total1 - total0) if total1 > total0 else 0.0,
                })  # fmt: skip
            for concurrency in (1, 4):
                logged = len(step_log.read_text().splitlines()) if step_log.exists() else 0
                with pinned(clients):
                    serve_requests(base, model, max(1, args.requests // concurrency), concurrency)
                served = [json.loads(line) for line in step_log.read_text().splitlines()[logged:]]
                served_s = sum(s["seconds"] for s in served)
                for row in rows[-len(order) :]:
                    ratio = served_s / predicted_s(fits[row["source"]], served)
                    row[f"served_over_fit_c{concurrency}"] = ratio
            for row in sorted(rows[-len(order) :], key=lambda r: r["source"]):
                print(
                    f"{row['round']:>5}  {row['source']:<16}{row['seconds']:>10.3f}"
                    + "".join(f"{row['fitted_ms'][name]:>15.2f}" for name in REFERENCE)
                    + f"{100 * row['steal']:>9.1f}{row['served_over_fit_c1']:>16.2f}"
                    + f"{row['served_over_fit_c4']:>6.2f}"
                )

    print("\nspread = max / min - 1 of the profile's total step time (the same work each time)")
    by_source: dict[str, list[float]] = {}
    by_round: dict[int, list[float]] = {}
    for row in rows:
        by_source.setdefault(row["source"], []).append(row["seconds"])
        by_round.setdefault(row["round"], []).append(row["seconds"])
    between = [spread(values) for values in by_round.values()]
    print(
        "between the three processes within a round: median "
        f"{statistics.median(between):.1%}, largest {max(between):.1%}"
    )
    for name, values in by_source.items():
        served = {
            c: [r[f"served_over_fit_c{c}"] for r in rows if r["source"] == name] for c in (1, 4)
        }
        print(
            f"{name} over the rounds: {spread(values):.1%} (median {statistics.median(values):.3f}"
            " s); served steps / its fit: "
            + ", ".join(
                f"c={c} {min(v):.2f}-{max(v):.2f} (median {statistics.median(v):.2f})"
                for c, v in served.items()
            )
        )
    medians = {name: statistics.median(values) for name, values in by_source.items()}
    print(
        "median profile time relative to A: "
        + ", ".join(
            f"{name} {value / medians['A this process']:.3f}" for name, value in medians.items()
        )
    )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"wall time: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
