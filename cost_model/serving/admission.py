"""KV-cache admission and eviction: when a server lets a waiting request in, and what it does
when its KV cache runs out. One rule per engine, as their schedulers do it:

``reserve``    a request waits until the cache can hold its whole sequence (prompt + output
               tokens) beside the whole sequences of the running ones; nothing is ever evicted.
               TensorRT-LLM's default capacity policy (GUARANTEED_NO_EVICT), and the ideal server.
``allocated``  a request is let in when the cache holds the prompt tokens it reads in this step,
               beside what the running requests hold now and need for this step; a decode step
               that finds the cache full preempts the newest running request, which frees its
               cache and later reads its prompt and generated tokens again (recompute). vLLM's
               v1 scheduler (and TensorRT-LLM's MAX_UTILIZATION policy).
``ratio``      SGLang's estimate: the running requests will still need their remaining output
               tokens (at most 4096 each) times a ``new_token_ratio`` that starts at 0.7, falls
               by (0.7 - 0.098) / 600 after each decode step to 0.098, and goes back to 0.7 when
               the server is idle; a new request is let in when its prompt and output tokens fit
               beside that estimate. A decode step that finds the cache full retracts the
               running requests with the fewest output tokens until the others have room for 20
               more steps each, and the ratio becomes (tokens decoded + 20 per request) / output
               tokens of the requests left.
``forecast``   SGLang with the prefix cache off and requests that ignore end-of-sequence tokens
               (benchmark clients): a request is let in only when, running every request to its
               end in order of the tokens it has left, the cache never overflows (requests that
               end first free their cache). Retraction as ``ratio``.

A request's cache: the prompt tokens it has read plus the tokens it has generated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.hardware.engines.step import ADMISSIONS

# SGLang's scheduler constants (global_config; schedule_policy.CLIP_MAX_NEW_TOKENS).
SGLANG_INIT_RATIO = 0.7
SGLANG_MIN_RATIO = SGLANG_INIT_RATIO * 0.14
SGLANG_RATIO_DECAY = (SGLANG_INIT_RATIO - SGLANG_MIN_RATIO) / 600
SGLANG_CLIP_NEW_TOKENS = 4096
SGLANG_RETRACT_STEPS = 20


class CachedRequest(Protocol):
    """What admission needs to know of a request (``simulator._Request``)."""

    @property
    def need(self) -> int: ...  # prompt + output tokens

    @property
    def held(self) -> int: ...  # tokens in the cache now

    @property
    def to_prefill(self) -> int: ...  # prompt (and recomputed) tokens still to read

    @property
    def outputs(self) -> int: ...  # output tokens generated so far

    @property
    def output_left(self) -> int: ...


def check_admission(admission: str) -> str:
    if admission not in ADMISSIONS:
        raise InputError(f"unknown admission rule {admission!r}; known: {', '.join(ADMISSIONS)}")
    return admission


@dataclass
class KvCache:
    """One simulation's KV cache under an admission rule (mutable: SGLang's ratio moves)."""

    capacity: int | None
    admission: str = "reserve"
    ratio: float = SGLANG_INIT_RATIO

    def __post_init__(self) -> None:
        check_admission(self.admission)

    @property
    def evicts(self) -> bool:
        """Whether running requests can lose their cache (all rules but ``reserve``)."""
        return self.capacity is not None and self.admission != "reserve"

    def free(self, running: Sequence[CachedRequest]) -> int:
        return self.free_beside(sum(r.held for r in running))

    def free_beside(self, held: int) -> int:
        """The cache left beside ``held`` tokens in use."""
        return (self.capacity or 0) - held

    def admits(
        self,
        request: CachedRequest,
        running: Sequence[CachedRequest],
        admitted: Sequence[CachedRequest],
        step_need: int,
        chunk: int,
        free: int | None = None,
        running_need: int | None = None,
    ) -> bool:
        """Whether ``request`` comes in now, beside ``running`` (``admitted`` of them came in
        at this scheduling point); ``step_need``: cache the running requests take in this
        step; ``chunk``: prompt tokens the request would read in it; ``free``: the cache the
        running requests leave, ``running_need``: their prompt + output tokens (each computed
        when not given; with both given, only SGLang's rules read ``running``)."""
        if self.capacity is None:
            return True
        if self.admission == "reserve":
            if running_need is None:
                running_need = sum(r.need for r in running)
            return running_need + request.need <= self.capacity
        free = self.free(running) if free is None else free
        if self.admission == "allocated":
            return free - step_need >= chunk
        # SGLang counts the prompt tokens every admitted request still has to read.
        pending = sum(r.to_prefill for r in running)
        if self.admission == "forecast":
            return _forecast_fits(request, running, free - pending - request.to_prefill)
        ids = {id(a) for a in admitted}
        older = clipped_outputs_left(r for r in running if id(r) not in ids)
        return self.ratio_admits(request, free - pending, older, clipped_outputs_left(admitted))

    def ratio_admits(
        self, request: CachedRequest, free: int, older_left: int, promised: int
    ) -> bool:
        """SGLang's estimate (``ratio``): ``request`` comes in when its prompt and clipped
        output tokens fit the ``free`` cache (beside every admitted prompt still to read) less
        the ratio of ``older_left``, the clipped tokens the requests running before this
        scheduling point have left, and ``promised``, those of the ones admitted at it."""
        left = clipped_output_left(request)
        return left < free - request.to_prefill - older_left * self.ratio - promised

    def victim(self, running: Sequence[CachedRequest]) -> CachedRequest:
        """The running request that gives its cache back when the cache is full: vLLM
        preempts the newest; SGLang retracts the one with the fewest output tokens (of those,
        the longest prompt)."""
        if self.admission == "allocated":
            return running[-1]
        return min(running, key=lambda r: (r.outputs, -(r.need - r.outputs - r.output_left)))

    @property
    def requeue_first(self) -> bool:
        """vLLM puts a preempted request back at the head of the queue; SGLang at its end."""
        return self.admission == "allocated"

    def room_wanted(self, decoding: int, step_need: int) -> int:
        """Free tokens a step must find to run without evicting: its own need; SGLang
        retracts until the decoding requests have room for 20 more steps."""
        if self.admission in ("ratio", "forecast"):
            return max(step_need, decoding * SGLANG_RETRACT_STEPS) if step_need else 0
        return step_need

    def after_eviction(self, running: Sequence[CachedRequest]) -> None:
        """SGLang's new ratio after a retraction: what the remaining requests decoded so far
        plus 20 steps each, over their output tokens."""
        if self.admission not in ("ratio", "forecast") or not running:
            return
        decoded = sum(r.outputs for r in running) + SGLANG_RETRACT_STEPS * len(running)
        total = sum(r.outputs + r.output_left for r in running)
        self.ratio = min(1.0, decoded / max(total, 1))

    def after_decode_steps(self, steps: int) -> None:
        if self.admission == "ratio":
            self.ratio = max(self.ratio - steps * SGLANG_RATIO_DECAY, SGLANG_MIN_RATIO)

    def idle(self) -> None:
        self.ratio = SGLANG_INIT_RATIO

    def decode_steps_that_fit(
        self, running: Sequence[CachedRequest], per_step: int, free: int | None = None
    ) -> int:
        """Decode-only steps the cache holds before a step would find it full (``per_step``
        new tokens each step; ``free``: the cache ``running`` leaves, computed when not
        given); unbounded (a large number) for ``reserve``."""
        if not self.evicts or per_step <= 0:
            return 1 << 40
        return max(0, (self.free(running) if free is None else free) // per_step)


def clipped_output_left(request: CachedRequest) -> int:
    """Output tokens ``request`` has left, at most SGLang's clip (what its estimate reserves
    for it)."""
    return min(request.output_left, SGLANG_CLIP_NEW_TOKENS)


def clipped_outputs_left(requests: Iterable[CachedRequest]) -> int:
    """``clipped_output_left`` of ``requests``, added up."""
    return sum(clipped_output_left(r) for r in requests)


def _forecast_fits(request: CachedRequest, running: Sequence[CachedRequest], free: int) -> bool:
    """SGLang's check for requests that ignore end-of-sequence tokens: in order of the tokens
    each has left, the cache must hold every request's growth until the next one ends (one
    spare token each), counting the cache that the ones ended by then give back. ``free``:
    the cache left once every admitted prompt is read."""
    states = sorted(
        (r.output_left, r.need - r.output_left) for r in [*running, request] if r.output_left > 0
    )
    remaining, returned = free, 0
    for i, (left, occupied) in enumerate(states):
        alive = len(states) - i
        if remaining + returned - left * alive <= alive:
            return False
        returned += occupied
    return True


def ceil_tokens(tokens_per_step: float) -> int:
    """Cache slots a decoding sequence takes per step (speculative decoding: up to the
    accepted tokens, rounded up)."""
    return max(1, math.ceil(tokens_per_step - 1e-9))
