"""Timing one grid point: warm-up runs, then ``repeats`` timed runs; CUDA events on GPU,
perf_counter after a synchronize on CPU; the median runtime and time to first token.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from idealized_runtime.local_runner.generate import Generator
from idealized_runtime.local_runner.grids import GridPoint

# --- timing ----------------------------------------------------------------------------------


class Timer:
    """Wall time of the device work: CUDA events on GPU, perf_counter after a sync on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        return end - start


@dataclass(frozen=True)
class Timing:
    runtime_s: float
    std_s: float
    ttft_s: float
    repeats: int
    extrapolation: str = "none"  # none | two_depth | proportional


# How a point is timed: (generator, point, repeats=, warmup=) -> Timing; injectable for tests.
TimePoint = Callable[..., Timing]


def time_point(generator: Generator, point: GridPoint, *, repeats: int, warmup: int) -> Timing:
    """Median runtime and TTFT of one request shape over ``repeats`` runs."""
    timer = Timer(generator.device)
    prompt = torch.randint(
        0,
        generator.arch.vocab_size,
        (point.batch_size, point.num_prompt_tokens),
        generator=torch.Generator().manual_seed(point.num_prompt_tokens),
    ).to(generator.device)
    runtimes, ttfts = [], []
    for run in range(warmup + repeats):
        marks: list[Any] = []

        def first_token(_tokens: torch.Tensor, marks: list[Any] = marks) -> None:
            if not marks:
                marks.append(timer.mark())

        synchronize(generator.device)
        start = timer.mark()
        generator.generate(prompt, point.num_output_tokens, on_token=first_token)
        end = timer.mark()
        synchronize(generator.device)
        if run >= warmup:
            runtimes.append(timer.seconds(start, end))
            ttfts.append(timer.seconds(start, marks[0]))
    std = statistics.stdev(runtimes) if len(runtimes) > 1 else 0.0
    return Timing(statistics.median(runtimes), std, statistics.median(ttfts), repeats)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
