"""How wrong is layer sampling? Profile a model that fits with all its layers, then with k of
them, and compare the two extrapolation rules with the truth:

  * two-depth (ours): time k/2 and k layers, extrapolate linearly in layer count;
  * proportional (HELM's mt_nlg rule): time k layers, multiply by L / k.

All three are timed in one process on one model (the sampled runs use its first layers), point
by point, so machine noise hits them alike.

    python benchmarks/layer_sampling_error.py                    # small-llama-100m, k = 4 of 12
    python benchmarks/layer_sampling_error.py --device cuda --arch llama-3.1-8b --layers 8
"""

from __future__ import annotations

import argparse
import statistics

import torch

from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.local_runner.generate import Generator
from idealized_runtime.local_runner.grids import GridPoint
from idealized_runtime.local_runner.layer_sampling import extrapolate_layers
from idealized_runtime.local_runner.timer import Timing, time_point

POINTS = [
    GridPoint(16, 1),
    GridPoint(16, 8),
    GridPoint(128, 1),
    GridPoint(128, 8),
    GridPoint(256, 8),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="small-llama-100m")
    parser.add_argument("--layers", type=int, default=4, help="k, the sampled depth")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    arch = get_architecture(args.arch)
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    total, deep, shallow = arch.num_layers, args.layers, max(1, args.layers // 2)
    generator = Generator(
        arch, device=args.device, dtype=dtype, max_seq_len=max(p.max_seq_len for p in POINTS)
    )

    def measure(point: GridPoint) -> dict[int, Timing]:
        """Median per depth, the depths taking turns run by run so that a burst of load on a
        shared machine does not land on one of them only."""
        runs: dict[int, list[float]] = {depth: [] for depth in (total, shallow, deep)}
        ttfts: dict[int, list[float]] = {depth: [] for depth in runs}
        for run in range(args.repeats + 1):
            for depth in runs:
                generator.set_active_layers(depth)
                timing = time_point(generator, point, repeats=1, warmup=0)
                if run:  # the first round is warm-up
                    runs[depth].append(timing.runtime_s)
                    ttfts[depth].append(timing.ttft_s)
        return {
            depth: Timing(
                statistics.median(runs[depth]),
                statistics.stdev(runs[depth]),
                statistics.median(ttfts[depth]),
                args.repeats,
            )
            for depth in runs
        }

    print(
        f"\n{arch.name}: {total} layers, sampled {deep} (two-depth also {shallow}), {dtype}, "
        f"{args.device}, {args.repeats} repeats\n"
    )
    header = (
        f"{'p':>5}{'o':>4}{'full ms':>10}{'two-depth ms':>14}{'error':>8}"
        f"{'x L/k ms':>10}{'error':>8}"
    )
    print(header)
    print("-" * len(header))
    errors_two, errors_prop = [], []
    for point in POINTS:
        timings = measure(point)
        truth, low, high = timings[total], timings[shallow], timings[deep]
        two = extrapolate_layers(low, high, shallow, deep, total)
        prop = extrapolate_layers(high, high, deep, deep, total)
        e_two = two.runtime_s / truth.runtime_s - 1
        e_prop = prop.runtime_s / truth.runtime_s - 1
        errors_two.append(abs(e_two))
        errors_prop.append(abs(e_prop))
        print(
            f"{point.num_prompt_tokens:>5}{point.num_output_tokens:>4}"
            f"{truth.runtime_s * 1e3:>10.1f}{two.runtime_s * 1e3:>14.1f}{e_two:>+8.1%}"
            f"{prop.runtime_s * 1e3:>10.1f}{e_prop:>+8.1%}"
        )
    print(
        f"\nmean |error|: two-depth {statistics.mean(errors_two):.1%}, "
        f"proportional {statistics.mean(errors_prop):.1%}"
    )


if __name__ == "__main__":
    main()
