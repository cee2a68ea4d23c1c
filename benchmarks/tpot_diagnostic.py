"""Where the serving TPOT goes wrong: signed errors by group, and the decode step of the worst.

Reads the ``--json OUT`` of ``benchmarks/serving_vs_published.py`` (every point's published and
predicted figures, held out by source and by model) and prints the signed TPOT error
(predicted / published - 1: below 0 is fast) median and p90 of |error| per engine, GPU and
model, per engine, GPU and layout (TP / EP / attention DP / MTP) and per engine and concurrency
band; then, for the ``--worst N`` groups of engine, GPU, model and layout with the largest
signed median, one decode-only step at the group's median concurrency and mean context
operation by operation (per layer and per step, milliseconds), so that a kernel read wrongly
shows as the one term out of proportion. No kernel is timed here; the step is the engine
stack's own.

Usage: python benchmarks/tpot_diagnostic.py OUT.json [--min-concurrency 8] [--worst 4]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_vs_published import Point, deployment_of, launch_settings

from idealized_runtime.cost_model.hardware.engines.kernels import GpuKernels
from idealized_runtime.cost_model.serving.engines import engine_server

TPOT = "time_per_output_token_s"
# The operations a step is made of, as the engine stack's kernel model times them.
TIMED = (
    "gemm_time",
    "moe_time",
    "decode_attention_time",
    "context_attention_time",
    "elementwise_time",
    "allreduce_time",
    "alltoall_time",
)


def signed_errors(entries: list[dict], min_concurrency: int) -> list[tuple[Point, float]]:
    """(point, predicted / published TPOT - 1) of every point at ``min_concurrency`` or more
    clients with both figures."""
    out = []
    for entry in entries:
        point = Point(**entry["point"])
        published, predicted = entry["published"], entry["predicted"] or {}
        if point.concurrency < min_concurrency or TPOT not in published or TPOT not in predicted:
            continue
        out.append((point, predicted[TPOT] / published[TPOT] - 1.0))
    return out


def layout(point: Point) -> str:
    return (
        f"tp{point.tp} ep{point.ep}{' adp' if point.attention_dp else ''}"
        f"{' ' + point.speculative if point.speculative else ''}"
    )


def band(concurrency: int) -> str:
    for top in (16, 64, 256):
        if concurrency <= top:
            return f"<= {top} clients"
    return "> 256 clients"


GROUPS: dict[str, Callable[[Point], tuple[str, ...]]] = {
    "engine, GPU, model": lambda p: (p.engine, p.gpu, p.model),
    "engine, GPU, weights, layout": lambda p: (p.engine, p.gpu, p.weights, layout(p)),
    "engine, concurrency": lambda p: (p.engine, band(p.concurrency)),
}


def print_groups(errors: list[tuple[Point, float]]) -> None:
    for title, key_of in GROUPS.items():
        groups: dict[tuple[str, ...], list[float]] = defaultdict(list)
        for point, error in errors:
            groups[key_of(point)].append(error)
        print(f"-- TPOT by {title}: signed median, |error| median / p90, n")
        for key, values in sorted(groups.items()):
            v = np.asarray(values)
            print(
                f"{' '.join(key):<48} {np.median(v):+7.1%}  {np.median(np.abs(v)):6.1%} / "
                f"{np.percentile(np.abs(v), 90):6.1%}  {len(v):>4}"
            )


@contextmanager
def recording(totals: dict[str, float]) -> Iterator[None]:
    """Add each kernel call's seconds (summed over its array) to ``totals`` by operation (GEMMs
    by format) while inside."""
    originals = {name: getattr(GpuKernels, name) for name in TIMED}

    def wrap(name: str, method: Callable) -> Callable:
        def timed(self: GpuKernels, *args: object, **kwargs: object) -> np.ndarray:
            seconds = method(self, *args, **kwargs)
            key = name.removesuffix("_time")
            if name == "gemm_time":
                key = f"gemm {args[4] if len(args) > 4 else kwargs.get('fmt')}"
            totals[key] = totals.get(key, 0.0) + float(np.sum(seconds))
            return seconds

        return timed

    for name, method in originals.items():
        setattr(GpuKernels, name, wrap(name, method))
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(GpuKernels, name, method)


def decode_breakdown(point: Point) -> None:
    """One decode-only step of ``point``'s deployment with every client decoding at the mean
    context (prompt + half the output), operation by operation."""
    launch = launch_settings(point)
    settings = dict(launch.settings)
    max_batch = settings.pop("max_running", None)
    deployment = deployment_of(point, launch)
    step_time, _ = engine_server(point.engine, deployment, max_batch=max_batch, settings=settings)
    model = step_time.model
    sequences = np.float64(point.concurrency)
    context = point.prompt_tokens + point.output_tokens / 2
    whole = float(model.seconds(sequences, sequences * context, 0.0, 0.0, 0.0))
    scheduler, spec = model.scheduler, deployment.speculative
    padded = sequences
    if sequences <= scheduler.cuda_graph_max_batch:
        padded = scheduler.graph_batch(sequences)
    verify = 1.0 + (spec.draft_tokens if spec is not None else 0)
    zero = np.float64(0.0)
    work = (padded * verify, sequences * verify, sequences * context * verify, zero, zero, zero,
            sequences)  # fmt: skip
    totals: dict[str, float] = {}
    for layer, sliding, count in model._layer_groups:
        one: dict[str, float] = {}
        with recording(one):
            model._layer(layer, model._windowed(work) if sliding else work)
        for name, seconds in one.items():
            totals[name] = totals.get(name, 0.0) + count * seconds
    with recording(totals):
        model._head(padded * verify)
    layers = deployment.architecture.num_layers
    kernels = sum(totals.values())
    print(
        f"   step {whole * 1e3:.2f} ms at {point.concurrency} sequences x {context:.0f} positions"
        f" ({layers} layers, batch padded to {float(padded):g}); host time and draft passes "
        f"{(whole - kernels) * 1e3:.2f} ms"
    )
    for name, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        print(
            f"     {name:<22} {seconds * 1e3:8.3f} ms/step  {seconds / layers * 1e6:8.1f} us/layer"
            f"  {seconds / whole:6.1%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="the --json OUT of benchmarks/serving_vs_published.py")
    parser.add_argument("--min-concurrency", type=int, default=8)
    parser.add_argument("--worst", type=int, default=4, help="groups to break down")
    args = parser.parse_args()
    errors = signed_errors(json.loads(Path(args.json).read_text()), args.min_concurrency)
    if not errors:
        sys.exit(f"no point with TPOT at >= {args.min_concurrency} clients in {args.json}")
    print_groups(errors)
    groups: dict[tuple, list[tuple[Point, float]]] = defaultdict(list)
    for point, error in errors:
        groups[(point.engine, point.gpu, point.model, point.weights, layout(point))].append(
            (point, error)
        )
    ranked = sorted(
        groups.items(), key=lambda item: -abs(float(np.median([e for _, e in item[1]])))
    )
    print(f"-- decode step of the {args.worst} groups furthest off (signed median TPOT)")
    for key, members in ranked[: args.worst]:
        members.sort(key=lambda pe: pe[0].concurrency)
        point, error = members[len(members) // 2]
        print(f"{' '.join(key)}: {np.median([e for _, e in members]):+.1%} over {len(members)};"
              f" e.g. {point.prompt_tokens}/{point.output_tokens} c{point.concurrency} "
              f"{error:+.1%}")  # fmt: skip
        decode_breakdown(point)


if __name__ == "__main__":
    main()
