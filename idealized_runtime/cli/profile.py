"""CLI: ``idealized-runtime profile`` — time an architecture on the local runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from idealized_runtime.cli.app import app
from idealized_runtime.cli.common import fail

if TYPE_CHECKING:  # the runner (torch) is imported only when a command runs
    from idealized_runtime.local_runner.settings import ProfileSettings


@app.command("profile")
def profile_command(
    arch: str = typer.Option(..., "--arch", help="Catalog name, or path to an HF config.json."),
    output: Path = typer.Option(..., "-o", "--output", help="Measurements CSV (resumable)."),
    device: str = typer.Option("cpu", help="cpu or cuda."),
    dtype: str = typer.Option(None, help="float32, bfloat16 or float16 (default: bf16 on GPU)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size (relaunches under torchrun)."),
    grid: str = typer.Option("quick", help="helm or quick."),
    layers: int = typer.Option(None, help="Profile K layers and extrapolate to all of them."),
    repeats: int = typer.Option(3, help="Timed runs per point (median is kept)."),
    warmup: int = typer.Option(1, help="Untimed runs per point."),
    max_prompt_tokens: int = typer.Option(None, help="Leave out longer prompts."),
    batch_size: list[int] = typer.Option([1], "--batch-size", help="Batch sizes (repeatable)."),
    weights: str = typer.Option(
        None,
        help="Weight format: int8, int4[-gN] (groups of N, default 128) or fp8; default: dtype.",
    ),
    kv_cache: str = typer.Option(None, "--kv-cache", help="KV-cache format: fp8 or int8."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
) -> None:
    """Profile a (prompt, output, batch) grid with random weights; write a CSV for `fit`."""
    from idealized_runtime.core.architectures import load_architecture
    from idealized_runtime.local_runner.grids import make_grid
    from idealized_runtime.local_runner.profile import check_profile, profile_grid
    from idealized_runtime.local_runner.settings import ProfileSettings

    if device not in ("cpu", "cuda"):
        fail(f"--device must be cpu or cuda, got {device!r}")
    # Quantized kernels take bf16 activations (int4 on CUDA only those).
    dtype = dtype or ("bfloat16" if device == "cuda" or weights else "float32")
    if dtype not in ("float32", "float16", "bfloat16"):
        fail(f"--dtype must be float32, float16 or bfloat16, got {dtype!r}")
    if device == "cpu" and dtype == "float16":
        fail("float16 is not supported on CPU; use float32 or bfloat16")
    if any(b < 1 for b in batch_size):
        fail("--batch-size must be >= 1")
    architecture = load_architecture(arch)
    points = make_grid(
        grid, architecture, max_prompt_tokens=max_prompt_tokens, batch_sizes=batch_size
    )
    settings = ProfileSettings(
        device=device,
        dtype=dtype,
        tp_size=tp,
        layers=layers,
        repeats=repeats,
        warmup=warmup,
        weights=weights,
        kv_cache=kv_cache,
    )
    # Everything that can be refused is refused here, once: under torchrun every rank would
    # fail on its own, and the CUDA memory check needs valid settings.
    check_profile(architecture, points, output, settings)
    if device == "cuda":
        _check_cuda(architecture, settings, points)
    if tp > 1 and "WORLD_SIZE" not in os.environ:
        raise typer.Exit(_relaunch_under_torchrun(tp))
    profile_grid(
        architecture,
        points,
        output,
        settings,
        progress=progress,
        command=" ".join(["idealized-runtime", *sys.argv[1:]]),
    )
    if int(os.environ.get("RANK", "0")) == 0:
        typer.echo(str(output))


def _check_cuda(architecture, settings: ProfileSettings, points) -> None:
    import torch

    tp = settings.tp_size
    if not torch.cuda.is_available():
        fail("--device cuda: no CUDA device is available (torch sees none)")
    if tp > torch.cuda.device_count():
        fail(f"--tp {tp} needs {tp} GPUs; {torch.cuda.device_count()} visible")
    from idealized_runtime.local_runner.memory import check_fits

    message = check_fits(architecture, settings.dtype, tp, settings.layers, points)
    if message:
        fail(message)


def _relaunch_under_torchrun(tp: int) -> int:
    """Run this same command as ``tp`` ranks on this machine (loopback rendezvous)."""
    from idealized_runtime.processes import free_port

    port = free_port()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={tp}",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        "-m",
        "idealized_runtime",
        *sys.argv[1:],
    ]
    return subprocess.call(command)
