"""What a served request spends outside the engine's forward passes: the request path.

A request sent to an engine's OpenAI-compatible server goes through the HTTP front end (parse,
validate, hand to the engine process), is tokenized, waits for the scheduler to take it in at a
step boundary, runs its prompt in the engine's steps, and its first token comes back through
incremental detokenization and a streamed (SSE) chunk. ``RequestPath`` holds the terms that are
not forward passes:

- ``http_s``: per request, front end to scheduler: HTTP parsing and validation and the hand-off
  to the engine's scheduler process (vLLM's API server to its engine core, SGLang's tokenizer
  manager to its scheduler, TensorRT-LLM's LLM proxy to its executor worker);
- ``tokenize_s_per_token``: the prompt's tokenization (a Hugging Face fast tokenizer in the
  front-end process of all three engines), per prompt token;
- ``detokenize_s_per_token`` and ``stream_s``: each streamed token's incremental detokenization
  and its way back (the engine's output hand-off, the SSE write), per chunk;
- ``schedule_ahead_steps``: steps the scheduler plans ahead of the GPU. An engine with an
  overlap scheduler (TensorRT-LLM's, on by default; SGLang's zero-overhead scheduler, on by
  default; vLLM's async scheduling, on by default since early 2026, its pull request 27614)
  schedules step n + 1 while step n runs, so a request that arrives during step n runs its
  prompt in step n + 2 at the earliest: it waits the rest of step n and all of step n + 1.
  Without one (vLLM with ``--no-async-scheduling``, or an earlier release) it waits for the
  step boundary only. The wait scales with the model's step time, so it is the simulator's to
  count (``simulate``: a request is seen at the first boundary after it arrived, or with
  look-ahead, at the first boundary after the first step that started after it arrived;
  ``boundary_wait_steps`` gives the mean in steps for estimates). An idle engine takes a
  request in as it arrives.

The figures per engine live in ``SchedulerDefaults`` (``data/engines/<engine>.json``); what the
path and the kernels do not explain of published TTFTs, if anything, is
``SchedulerDefaults.request_overhead_s``, fitted across models (``held_out_median``: the
benchmark fits it for each point without the point's model and source).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from idealized_runtime.core.errors import InputError


@dataclass(frozen=True)
class RequestPath:
    """The request path's times outside the forward passes (see the module docstring); all
    zero: an ideal server that sees a request the instant it is sent."""

    http_s: float = 0.0
    tokenize_s_per_token: float = 0.0
    detokenize_s_per_token: float = 0.0
    stream_s: float = 0.0
    schedule_ahead_steps: int = 0

    def __post_init__(self) -> None:
        times = (self.http_s, self.tokenize_s_per_token, self.detokenize_s_per_token,
                 self.stream_s)  # fmt: skip
        if not all(math.isfinite(t) and t >= 0 for t in times):
            raise InputError("request path times must be finite and >= 0 s")
        if self.schedule_ahead_steps not in (0, 1):
            raise InputError(
                f"an engine schedules 0 or 1 steps ahead, got {self.schedule_ahead_steps}"
            )

    def to_scheduler_s(self, prompt_tokens: ArrayLike) -> np.ndarray:
        """Seconds from sending a request of ``prompt_tokens`` tokens until the scheduler's
        queue holds it: the front end and the tokenizer."""
        tokens = np.asarray(prompt_tokens, dtype=np.float64)
        return self.http_s + self.tokenize_s_per_token * tokens

    @property
    def delivery_s(self) -> float:
        """Seconds from the step that samples a token until the client reads it: its
        detokenization and its streamed chunk."""
        return self.detokenize_s_per_token + self.stream_s

    def boundary_wait_steps(self, mid_step: bool) -> float:
        """Mean steps a request waits for the scheduler on a busy engine: half a step when it
        arrives at a uniformly random point in one (``mid_step``; a closed-loop client that
        resubmits the instant its answer ends, with no time in between, arrives at a
        boundary), plus the steps the scheduler plans ahead."""
        return self.schedule_ahead_steps + (0.5 if mid_step else 0.0)

    def first_token_s(self, prompt_tokens: float, prompt_steps_s: float) -> float:
        """TTFT of one request on an idle engine: to the scheduler, its prompt's steps
        (``prompt_steps_s``), the first token's delivery."""
        return float(self.to_scheduler_s(prompt_tokens)) + prompt_steps_s + self.delivery_s


def held_out_median(
    residuals: Iterable[tuple[str, str, float]], model: str, source: str
) -> float | None:
    """The median of ``residuals`` ((model, source, value) each) over those of other models
    AND other sources than ``model`` and ``source``: a constant fitted without the point it is
    used on, its model or its source. None when no residual is left (e.g. only one model has
    figures): the caller falls back to a prior from the engine's code or a measurement."""
    left = [value for m, s, value in residuals if m != model and s != source]
    return float(np.median(left)) if left else None
