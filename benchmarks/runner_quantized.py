"""Decode speed of the local runner per weight precision, beside bf16, on one device.

For one architecture (default: small-llama-100m, ~100M parameters), each precision builds the
same random-weight model, then decodes at batch 1 after a prompt of --context tokens:
  * bytes per decoded token = the weights the step reads (packed data and scales) + the KV
    cache of the context, as the runner holds them (local_runner.quantize);
  * decode tokens/s as the slope of runtime(o) between o = 1 and o = 1 + --decode-tokens
    (prefill cancels out), median of --repeats runs, precisions interleaved so that a slow
    period of a shared machine hits all of them alike;
  * the ratios to bf16: bytes read, and speed.

    python benchmarks/runner_quantized.py
    python benchmarks/runner_quantized.py --device cuda --arch llama-3.1-8b --layers 8
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.local_runner.generate import Generator
from idealized_runtime.local_runner.quantize import kv_cache_bytes_per_token, weight_bytes

PRECISIONS = ("bf16", "int8", "int4-g128", "fp8")


def decode_seconds(generator: Generator, prompt: torch.Tensor, tokens: int) -> float:
    """Seconds of ``tokens`` decode steps: generate(1 + tokens) - generate(1)."""

    def run(count: int) -> float:
        if generator.device.type == "cuda":
            torch.cuda.synchronize(generator.device)
        start = time.perf_counter()
        generator.generate(prompt, count)
        if generator.device.type == "cuda":
            torch.cuda.synchronize(generator.device)
        return time.perf_counter() - start

    return run(1 + tokens) - run(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="small-llama-100m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, default=None, help="build only K layers")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (CPU only)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile each decode step (fuses dequant)"
    )
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    arch = get_architecture(args.arch)
    precisions = args.precisions.split(",")
    generators = {
        name: Generator(
            arch,
            device=args.device,
            dtype="bfloat16",
            max_seq_len=args.context + args.decode_tokens + 1,
            num_layers=args.layers,
            weights=None if name == "bf16" else name,
            compile=args.compile,
        )
        for name in precisions
    }
    prompt = torch.randint(0, arch.vocab_size, (1, args.context))
    for generator in generators.values():  # warm-up: allocations, kernels, caches
        decode_seconds(generator, prompt, 2)
    times: dict[str, list[float]] = {name: [] for name in precisions}
    for _ in range(args.repeats):
        for name, generator in generators.items():
            times[name].append(decode_seconds(generator, prompt, args.decode_tokens))

    rows = []
    for name, generator in generators.items():
        per_token = statistics.median(times[name]) / args.decode_tokens
        step_bytes = weight_bytes(generator.model) + kv_cache_bytes_per_token(generator.model) * (
            args.context + args.decode_tokens // 2
        )
        rows.append((name, step_bytes, per_token))
    base_bytes, base_time = next((b, t) for n, b, t in rows if n == "bf16")
    layers = args.layers or arch.num_layers
    print(
        f"{arch.name} ({layers} layers), {args.device}"
        + (f", {args.threads} thread(s)" if args.device == "cpu" else "")
        + (", torch.compile" if args.compile else "")
        + f", batch 1, context {args.context}, {args.decode_tokens} decoded tokens, "
        f"median of {args.repeats}"
    )
    header = (
        f"{'weights':<10} {'MB/token':>9} {'bytes vs bf16':>14} {'ms/token':>9} "
        f"{'tokens/s':>9} {'speed vs bf16':>14} {'GB/s read':>10}"
    )
    print(header)
    print("-" * len(header))
    for name, step_bytes, per_token in rows:
        print(
            f"{name:<10} {step_bytes / 1e6:>9.1f} {step_bytes / base_bytes:>14.2f} "
            f"{per_token * 1e3:>9.2f} {1 / per_token:>9.1f} {base_time / per_token:>14.2f} "
            f"{step_bytes / per_token / 1e9:>10.2f}"
        )


if __name__ == "__main__":
    main()
