"""A discrete-event simulation of an ideal continuous-batching server.

The server holds up to ``max_batch`` requests. Each scheduler step is one forward pass: every
running request past its prompt decodes one token, and what is left of a ``token_budget`` goes
to prompt chunks of the requests still prefilling, first come first served (Dynamic SplitFuse).
Requests wait in a FCFS queue until a slot is free and the KV cache lets them in
(``admission``: by default only when it can hold their whole sequence, prompt + output tokens;
engines admit against the cache in use now or an estimate, and preempt or retract when it runs
out; the capacity comes from the memory planner, ``hardware.counts.memory_per_gpu``). A
request's first token comes with the step that finishes its prompt, each further token with one
later step.

A step's duration comes from a ``StepTime`` (``step_time``).

The request path (``RequestPath``, ``hardware.engines.request_path``): a request reaches the
scheduler's queue after the front end and its prompt's tokenization (plus any fitted
``request_overhead_s``); a busy scheduler takes it in only at a step boundary (an engine that
schedules a step ahead, at the boundary after the first step that started after it arrived);
an idle one at once. Every token reaches the client ``delivery_s`` after its step ends
(detokenization, the streamed chunk), and a closed-loop client sends again when the last one
has.

Load (``workload``): open-loop arrival times (Poisson at a rate, or a trace's timestamps), or
closed-loop clients (``concurrency``: each client sends its next request ``think_time_s`` after
the previous one ends; a real client's re-submit time, one value or the measured sequence
replayed).

Rows have the shape of ``measure``'s raw rows (model, load, num_prompt_tokens, num_output_tokens,
ok, runtime_s, ttft_s, inter_token_latencies_s, started_at_s, finished_at_s, ...), so the same
summaries apply to simulated and measured runs. Pure numpy: no torch.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.scheduling import DEFAULT_TOKEN_BUDGET, prompt_chunks
from idealized_runtime.core.types import Deployment
from idealized_runtime.cost_model.hardware.counts import memory_per_gpu
from idealized_runtime.cost_model.hardware.engines.request_path import RequestPath
from idealized_runtime.cost_model.hardware.engines.step import UNCHUNKED_LIMITS, budget_refusal
from idealized_runtime.cost_model.hardware.planner import DEFAULT_RESERVE_FRACTION, GB
from idealized_runtime.cost_model.serving.admission import (
    SGLANG_CLIP_NEW_TOKENS,
    KvCache,
    ceil_tokens,
    check_admission,
    clipped_output_left,
    clipped_outputs_left,
)
from idealized_runtime.cost_model.serving.step_time import StepTime, StepWork
from idealized_runtime.cost_model.serving.workload import RequestShape, think_times

# --- KV capacity --------------------------------------------------------------------------------


def kv_capacity_tokens(
    deployment: Deployment, *, reserve_fraction: float = DEFAULT_RESERVE_FRACTION
) -> int:
    """Tokens of KV cache that fit next to the weights on the deployment's ``tp`` GPUs (the
    memory planner's accounting); InputError when the weights alone do not fit."""
    arch, hardware, tp = deployment.architecture, deployment.hardware, deployment.tp
    weights, kv_per_token = memory_per_gpu(arch, deployment.precision, tp=tp, context_tokens=1)
    usable = hardware.memory_gb * GB * (1.0 - reserve_fraction)
    if weights >= usable:
        raise InputError(
            f"{arch.name} ({deployment.precision.compute_dtype}) weights need "
            f"{weights / GB:.1f} GB per GPU at tensor-parallel size {tp}; {hardware.name} has "
            f"{usable / GB:.1f} GB usable (raise --tp)"
        )
    return int((usable - weights) // kv_per_token)


# --- the simulation -----------------------------------------------------------------------------


@dataclass(eq=False)
class _Request:
    index: int
    shape: RequestShape
    arrival_s: float
    prefilled: int = 0
    token_times: list[float] = field(default_factory=list)
    decode_steps: int = 0  # decode steps taken (speculative decoding yields more tokens each)
    recompute: int = 0  # generated tokens read again as prompt after losing the KV cache
    rank: int = 0  # the attention-DP rank serving it
    # Its place in the running batch's order (``_Batch``: the order it was admitted in).
    seq: int = -1
    # While it decodes one token per step, its tokens since ``since`` are the batch's step
    # ends from that index on (``_Batch.ticks``), copied into ``token_times`` only when it
    # leaves the batch (``settle``): a step then costs nothing per running request.
    ticks: list[float] | None = None
    since: int = 0

    def __post_init__(self) -> None:
        # Plain ints: admission reads them for every running request at every step.
        self.prompt = self.shape.num_prompt_tokens
        self.output = self.shape.num_output_tokens
        self.need = self.prompt + self.output  # prompt + output tokens

    @property
    def decoding(self) -> bool:
        return self.prefilled == self.prompt + self.recompute

    @property
    def to_prefill(self) -> int:
        return self.prompt + self.recompute - self.prefilled

    @property
    def outputs(self) -> int:
        if self.ticks is None:
            return len(self.token_times)
        return min(len(self.token_times) + len(self.ticks) - self.since, self.output)

    @property
    def output_left(self) -> int:
        return self.output - self.outputs

    @property
    def held(self) -> int:
        """Tokens in the KV cache (the newest token's entry counted: the next step writes it)."""
        if self.prefilled == self.prompt + self.recompute:
            return self.prompt + self.outputs
        return self.prefilled

    def settle(self) -> None:
        """Copy the steps decoded since ``since`` into ``token_times``."""
        if self.ticks is None:
            return
        times = self.ticks[self.since :]
        self.token_times.extend(times[: self.output - len(self.token_times)])
        self.decode_steps += len(times)
        self.since = len(self.ticks)

    def evict(self) -> None:
        """The KV cache is freed: prompt and generated tokens are read again (recompute)."""
        self.settle()
        self.ticks = None
        self.prefilled, self.recompute = 0, len(self.token_times)


@dataclass(frozen=True)
class ServerConfig:
    max_batch: int = 64
    token_budget: int = DEFAULT_TOKEN_BUDGET
    kv_capacity_tokens: int | None = None  # None: unlimited
    # Seconds from a request's arrival until the scheduler sees it beyond the request path's
    # own (a fitted residual, or a measured server's overhead; 0 for the ideal server).
    request_overhead_s: float = 0.0
    # The engine's request path: front end, tokenization, look-ahead, delivery (``RequestPath``;
    # all zero for the ideal server).
    request_path: RequestPath = field(default_factory=RequestPath)
    # How an engine shares a step between prompts and decode tokens: ``prefill_first`` runs
    # waiting prompts in steps of their own (SGLang); otherwise decode tokens come first and
    # prompts get what is left of the budget (vLLM, TensorRT-LLM). Without
    # ``chunked_prefill`` a prompt joins a step only whole, first come first served: the first
    # that does not fit what is left stops the prompts behind it (``chunks``).
    prefill_first: bool = False
    chunked_prefill: bool = True
    # Without chunked prefill, what must fit the (rank's) token budget, else the engine refuses
    # the request and ``simulate`` refuses the run (``check_budget``): "prompt" (TensorRT-LLM),
    # "sequence", prompt + output (vLLM), or "none": a longer prompt runs alone in a step of
    # its own (SGLang: the first prompt of a prefill batch, whatever its length).
    unchunked_limit: str = "none"
    # The engine's name for the token budget (e.g. max_num_tokens), for refusals and warnings.
    budget_setting: str = ""
    # Output tokens a decoding sequence gains per step (speculative decoding: > 1, on average).
    tokens_per_step: float = 1.0
    # When a request comes into the KV cache and what happens when the cache runs out
    # (``admission``: reserve, allocated, ratio, forecast).
    admission: str = "reserve"
    # The scheduler takes in new requests only every this many decode steps (SGLang's
    # --scheduler-recv-interval; at once after a step with prompts, or when idle).
    recv_interval: int = 1
    # Attention-DP ranks (``Deployment.attention_dp``): each schedules its own requests, a new
    # request going to the rank with the fewest; running sequences and token budget split evenly.
    dp_ranks: int = 1
    # Tokens a decoding sequence puts in a step, as the token budget counts them (1 + draft
    # tokens under speculative decoding).
    decode_tokens: int = 1
    # TensorRT-LLM's attention-DP balance (``attention_dp_config: enable_balance,
    # timeout_iters``; 0: off): prompts join a step only when every rank has one to schedule and
    # a free slot, or some rank decodes nothing, or on the step a counter reaches this many. The
    # counter counts every step that holds prompts back or has none to hold, and restarts when
    # prompts are scheduled or it reaches the timeout.
    balance_timeout_steps: int = 0

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise InputError(f"--max-batch must be >= 1, got {self.max_batch}")
        if self.token_budget < 1:
            raise InputError(f"--token-budget must be >= 1, got {self.token_budget}")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < 1:
            raise InputError("the KV cache must hold at least one token")
        if not (math.isfinite(self.request_overhead_s) and self.request_overhead_s >= 0):
            raise InputError(f"request overhead must be >= 0 s, got {self.request_overhead_s}")
        if not (math.isfinite(self.tokens_per_step) and self.tokens_per_step >= 1):
            raise InputError(f"tokens per decode step must be >= 1, got {self.tokens_per_step}")
        check_admission(self.admission)
        if self.recv_interval < 1:
            raise InputError(f"the receive interval must be >= 1 step, got {self.recv_interval}")
        if self.dp_ranks < 1 or self.max_batch < self.dp_ranks:
            raise InputError(
                f"attention-DP ranks must be >= 1 and hold a sequence each, got {self.dp_ranks} "
                f"ranks for {self.max_batch} running sequences"
            )
        if self.token_budget < self.dp_ranks:
            raise InputError(f"a token budget of {self.token_budget} leaves a rank no token")
        if self.decode_tokens < 1 or self.balance_timeout_steps < 0:
            raise InputError("decode tokens must be >= 1 and the balance timeout >= 0 steps")
        if self.unchunked_limit not in UNCHUNKED_LIMITS:
            raise InputError(
                f"unknown unchunked limit {self.unchunked_limit!r}; known: "
                f"{', '.join(UNCHUNKED_LIMITS)}"
            )

    def to_scheduler_s(self, prompt_tokens: ArrayLike) -> np.ndarray:
        """Seconds from sending a request of ``prompt_tokens`` tokens until the scheduler's
        queue holds it: the residual overhead, then the request path's front end and
        tokenizer."""
        return self.request_overhead_s + self.request_path.to_scheduler_s(prompt_tokens)

    @property
    def budget_flag(self) -> str:
        """The option that sets the token budget, with the engine's name for it."""
        return (
            f"--token-budget ({self.budget_setting})" if self.budget_setting else "--token-budget"
        )

    @property
    def rank_slots(self) -> int:
        """Running sequences one attention-DP rank holds."""
        return self.max_batch // self.dp_ranks

    @property
    def rank_budget(self) -> int:
        """Tokens one attention-DP rank puts in a step."""
        return self.token_budget // self.dp_ranks

    def emitted(self, steps_done: np.ndarray, steps: int) -> np.ndarray:
        """Tokens each decoding sequence gains in each of its next ``steps`` steps, having taken
        ``steps_done``: the running total floor(s x tokens_per_step) grows by >= 1 per step."""
        rate = self.tokens_per_step
        counts = np.floor((steps_done[:, None] + np.arange(steps + 1)[None, :]) * rate + 1e-9)
        return np.diff(counts, axis=1).astype(np.int64)

    def chunks(self, num_decoding: int, prompt_left: Iterable[int], budget: int = 0) -> list[int]:
        """Prompt tokens each waiting prompt reads in this step (the engine's rule), beside
        ``num_decoding`` decoding sequences, within ``budget`` tokens (default: the token
        budget). Chunked: Dynamic SplitFuse (``prompt_chunks``). Whole prompts, first come
        first served, the first that does not fit stopping the rest: within what the decode
        tokens leave (TensorRT-LLM's micro-batch scheduler, vLLM's waiting queue); SGLang
        (``unchunked_limit`` "none") takes the first prompt of a step whatever its length and
        a later one only while it is shorter than what is left (PrefillAdder). A step's first
        prompt longer than the budget runs alone under every rule (the refusing engines never
        see one: ``check_budget``), so no request waits forever."""
        budget = budget or self.token_budget
        decode = num_decoding * self.decode_tokens
        if self.chunked_prefill:
            return prompt_chunks(decode, prompt_left, budget)
        room, sizes = budget - decode, []
        strict = self.unchunked_limit == "none"
        for left in prompt_left:
            first = not sizes and not num_decoding
            if not first and (left >= room if strict else left > room):
                break
            sizes.append(left)
            room -= left
        return sizes


def check_budget(shapes: Sequence[RequestShape], config: ServerConfig) -> None:
    """InputError in one line when the engine would refuse a request for its token budget
    (``budget_refusal``: without chunked prefill, a prompt or a prompt + output longer than a
    rank's budget)."""
    if config.chunked_prefill or config.unchunked_limit == "none" or not shapes:
        return
    whole = config.unchunked_limit == "sequence"
    longest = max(shapes, key=lambda s: s.num_prompt_tokens + whole * s.num_output_tokens)
    refusal = budget_refusal(
        config.unchunked_limit, False, config.rank_budget, longest.num_prompt_tokens,
        longest.num_output_tokens, config.budget_flag,
    )  # fmt: skip
    if refusal:
        raise InputError(refusal)


def starved_budget(config: ServerConfig, prompt_tokens: float, running: ArrayLike) -> np.ndarray:
    """The budget a rank needs for prompts of ``prompt_tokens`` new tokens (the longest) to
    join a step beside ``running`` running sequences (capped at the server's batch; split
    evenly among the attention-DP ranks), where that exceeds the rank's budget, else 0 (also
    for prefill-first engines, which run prompts in steps of their own: SGLang). Decode
    tokens come first in a step (vLLM, TensorRT-LLM): a whole prompt joins only a step whose
    decode tokens leave room for it, a chunk only one they do not fill; else the prompt waits
    until enough requests have finished (TTFT of whole requests)."""
    running = np.minimum(np.asarray(running, dtype=np.float64), config.max_batch)
    if config.prefill_first:
        return np.zeros_like(running)
    beside = np.maximum(np.ceil(running / config.dp_ranks) - 1, 0)  # the others on the rank
    need = beside * config.decode_tokens + (1 if config.chunked_prefill else prompt_tokens)
    return np.where(need > config.rank_budget, need, 0.0)


def starvation_warning(
    config: ServerConfig, prompt_tokens: int, running: int | None = None
) -> str | None:
    """One line when prompts of ``prompt_tokens`` new tokens (the longest) wait for running
    decodes to end beside ``running`` running sequences (default: the server's batch), naming
    the setting to raise, else None (``starved_budget``)."""
    running = config.max_batch if running is None else min(running, config.max_batch)
    need = int(starved_budget(config, prompt_tokens, running))
    if not need:
        return None
    beside = max(math.ceil(running / config.dp_ranks) - 1, 0)
    room = max(config.rank_budget - (0 if config.chunked_prefill else prompt_tokens), 0)
    room //= config.decode_tokens
    what = "prompt chunks" if config.chunked_prefill else f"prompts of {prompt_tokens} tokens"
    return (
        f"{what} fit the {config.rank_budget}-token step budget beside at most {room} of the "
        f"{beside} other running sequences: they wait for decodes to end (TTFT of whole "
        f"requests); raise {config.budget_flag} to >= {need}"
    )


def simulate(
    shapes: Sequence[RequestShape],
    step_time: StepTime,
    config: ServerConfig = ServerConfig(),
    *,
    concurrency: int | None = None,
    model: str = "model",
    load: str = "simulated",
    stop_after_s: float | None = None,
    think_time_s: float | Sequence[float] = 0.0,
    latencies: bool = True,
) -> list[dict[str, Any]]:
    """Serve ``shapes`` (with arrival times, or closed loop with ``concurrency`` clients) and
    return one row per request served, in request order (see the module docstring). Closed
    loop: clients send no new request after ``stop_after_s``; a client sends its next request
    ``think_time_s`` after its previous one ended (the client's own time to read the answer
    and send again): one value for every request, or one per re-submission in order (the k-th
    request sent after an end waits the k-th, cycled), e.g. a real client's measured gaps.
    ``latencies=False`` leaves each row's inter-token latencies empty (summaries of TTFT, TPOT
    and throughput need none; a long run at load then holds a few numbers per request)."""
    if concurrency is not None and concurrency < 1:
        raise InputError(f"--concurrency must be >= 1, got {concurrency}")
    if concurrency is None and any(s.arrival_s is None for s in shapes):
        raise InputError("open-loop requests need arrival times")
    thinks = think_times(think_time_s)
    if concurrency is None and any(thinks):
        raise InputError("--think-time applies to closed-loop clients (--concurrency) only")
    check_budget(shapes, config)
    capacity = config.kv_capacity_tokens
    rows: list[dict[str, Any] | None] = [None] * len(shapes)
    # Heap of (when the scheduler's queue holds it, request index, arrival time).
    arrivals: list[tuple[float, int, float]] = []
    path = config.request_path
    delays = config.to_scheduler_s([s.num_prompt_tokens for s in shapes]).tolist()
    delivery = path.delivery_s
    ahead = path.schedule_ahead_steps
    next_closed = 0
    if concurrency is None:
        arrivals = [
            (float(s.arrival_s) + delays[i], i, float(s.arrival_s))  # type: ignore[arg-type]
            for i, s in enumerate(shapes)
        ]
        heapq.heapify(arrivals)
    else:
        for _ in range(min(concurrency, len(shapes))):
            heapq.heappush(arrivals, (delays[next_closed], next_closed, 0.0))
            next_closed += 1

    waiting: deque[_Request] = deque()
    batch = _Batch(config)
    cache = KvCache(capacity, config.admission)
    per_token = ceil_tokens(config.tokens_per_step)  # cache slots a decoding sequence takes
    since_receive = config.recv_interval  # decode steps since the scheduler took requests in
    balance_count = 0  # the attention-DP balance's counter (steps)
    now = 0.0
    # Requests queued by this time are in the next step: the step's start, or with a
    # scheduler a step ahead, the start of the step before (an idle engine: now).
    seen_until = 0.0

    def finish(request: _Request, ok: bool, error: str | None = None) -> None:
        nonlocal next_closed
        rows[request.index] = _row(request, model, load, ok, error, now, delivery, latencies)
        read = now + delivery if ok else now  # the client has the last token
        more = stop_after_s is None or read < stop_after_s
        if concurrency is not None and next_closed < len(shapes) and more:
            sent = read + thinks[(next_closed - concurrency) % len(thinks)]
            heapq.heappush(arrivals, (sent + delays[next_closed], next_closed, sent))
            next_closed += 1

    while arrivals or waiting or batch.running:
        if not batch.running or since_receive >= config.recv_interval:
            since_receive = 0
            while arrivals and arrivals[0][0] <= seen_until:
                _, index, arrival = heapq.heappop(arrivals)
                request = _Request(index, shapes[index], arrival, shapes[index].cached_tokens)
                if capacity is not None and request.need > capacity:
                    error = f"needs {request.need} tokens of KV cache, has {capacity}"
                    finish(request, False, error)
                    continue
                waiting.append(request)
        _admit(waiting, batch, cache, config, per_token)
        if waiting and not batch.running:
            # Refused by an idle server: the engine's rule never lets this request in
            # (e.g. SGLang's estimate wants a spare token per request beyond its length).
            request = waiting.popleft()
            finish(
                request,
                False,
                f"never admitted: needs {request.need} tokens of KV cache "
                f"with its output, the {config.admission} rule's idle cache holds {capacity}",
            )
            continue
        if not batch.running:
            cache.idle()
            since_receive = config.recv_interval
            if not arrivals:
                break
            now = max(now, arrivals[0][0])
            seen_until = now  # an idle engine takes a request in as it arrives
            continue

        decoders, chunks = _step_plan(batch, config)
        if cache.evicts:
            decoders, chunks = _make_room(decoders, chunks, batch, waiting, cache, config)
        held_back = 0  # decode-only steps the attention-DP balance holds the prompts back for
        if config.balance_timeout_steps and chunks:
            busy = batch.decoding_per_rank if decoders else [0] * config.dp_ranks
            held_back = _balance(busy, chunks, config, balance_count)
            if held_back:
                chunks = []
            else:
                balance_count = 0
        context = batch.context if decoders else 0  # cached tokens of the decoding sequences
        if chunks:
            work = StepWork.of_totals(decoders, context, [(n, r.prefilled) for r, n in chunks])
            started, now = now, now + float(step_time.seconds(work)[0])
            seen_until = started if ahead else now
            if decoders:
                batch.decode(np.array([now]))
            for request, n in chunks:
                batch.prefill(request, n, now)
            since_receive = config.recv_interval  # after prompts, SGLang takes requests in
        else:
            free = cache.free_beside(batch.held)
            limit = cache.decode_steps_that_fit((), decoders * per_token, free=free)
            if waiting and cache.admission == "ratio":
                limit = min(limit, _RATIO_RECHECK_STEPS)  # the decaying ratio may admit one
            if held_back:
                limit = min(limit, held_back)
            started, now, steps = _decode_until_change(
                batch, decoders, context, config, step_time, now, arrivals, max(limit, 1),
                since_receive,
            )  # fmt: skip
            seen_until = started if ahead else now
            # The scheduler polled for requests every recv_interval steps: what is left.
            total, interval = since_receive + steps, config.recv_interval
            since_receive = total if total <= interval else (total % interval or interval)
            cache.after_decode_steps(steps)
            if config.balance_timeout_steps:  # prompts held back wait for the counter to reach
                # the timeout; with none to hold it runs on, restarting at the timeout
                balance_count += steps
                if not held_back:
                    balance_count %= config.balance_timeout_steps
        for request in batch.finished():
            batch.remove(request)
            finish(request, True)
    return [row for row in rows if row is not None]


# SGLang checks admission at every step; with requests waiting for memory under its decaying
# estimate, the simulation checks at least this often (decode-only steps are run in stretches).
_RATIO_RECHECK_STEPS = 8


class _Batch:
    """The running requests, in the order they were admitted, with the totals the scheduler
    reads at every step kept up to date as requests come, go, read prompt chunks and decode
    (a step costs nothing per running request when each decodes one token per step: their
    tokens stay in the shared list of step ends, ``ticks``, until they leave)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.running: dict[int, _Request] = {}  # by admission order (``_Request.seq``)
        self.prefilling: dict[int, _Request] = {}
        self.decoding: dict[int, _Request] = {}
        self.admitted = 0  # requests admitted so far: the next one's ``seq``
        self.pending = 0  # prompt tokens the prefilling requests have still to read
        self.held = 0  # tokens in the KV cache
        self.need = 0  # prompt + output tokens of the running requests
        self.context = 0  # tokens cached for the decoding requests (their attention context)
        # Output tokens the running requests ask for and have generated, and how many ask for
        # more than SGLang clips its estimate at: its admission reads the tokens they have
        # left at every scheduling point, which these totals give without a pass over them.
        self.outputs_asked = 0
        self.outputs_made = 0
        self.over_clip = 0
        self.per_rank = [0] * config.dp_ranks  # running requests per attention-DP rank
        self.decoding_per_rank = [0] * config.dp_ranks
        # One token per decode step: every decoding request decodes in every step that has
        # decoding at all, so their token times are the ends of those steps.
        self.lazy = config.tokens_per_step == 1.0
        self.ticks: list[float] = []
        # (steps in ``ticks`` when it has all its tokens, seq) of each decoding request (lazy);
        # entries of requests that left are skipped when met.
        self.ends: list[tuple[int, int]] = []

    def add(self, request: _Request) -> None:
        request.seq = self.admitted
        self.admitted += 1
        self.running[request.seq] = request
        self.per_rank[request.rank] += 1
        self.need += request.need
        self.held += request.held
        self.outputs_asked += request.output
        self.outputs_made += request.outputs
        self.over_clip += request.output > SGLANG_CLIP_NEW_TOKENS
        if request.decoding:
            self._start_decoding(request)
        else:
            self.prefilling[request.seq] = request
            self.pending += request.to_prefill

    def _start_decoding(self, request: _Request) -> None:
        self.decoding[request.seq] = request
        self.decoding_per_rank[request.rank] += 1
        self.context += request.prompt + len(request.token_times) - 1
        if self.lazy:
            request.ticks, request.since = self.ticks, len(self.ticks)
            end = len(self.ticks) + request.output - len(request.token_times)
            heapq.heappush(self.ends, (end, request.seq))

    def remove(self, request: _Request) -> None:
        """``request`` leaves the batch (ended, or evicted): its token times settled."""
        request.settle()
        del self.running[request.seq]
        self.per_rank[request.rank] -= 1
        self.need -= request.need
        self.held -= request.held
        self.outputs_asked -= request.output
        self.outputs_made -= request.outputs
        self.over_clip -= request.output > SGLANG_CLIP_NEW_TOKENS
        if self.decoding.pop(request.seq, None) is not None:
            self.decoding_per_rank[request.rank] -= 1
            self.context -= request.prompt + len(request.token_times) - 1
        else:
            del self.prefilling[request.seq]
            self.pending -= request.to_prefill
        request.ticks = None

    def prefill(self, request: _Request, tokens: int, now: float) -> None:
        """``request`` reads ``tokens`` prompt tokens in the step ending at ``now``; the last
        chunk yields its first token (or, recomputing, its next)."""
        before = request.held
        request.prefilled += tokens
        self.pending -= tokens
        if request.decoding:
            request.token_times.append(now)
            self.outputs_made += 1
            del self.prefilling[request.seq]
            self._start_decoding(request)
        self.held += request.held - before

    def decode(self, ends: np.ndarray) -> None:
        """Every decoding request decodes in the steps ending at ``ends`` (none ends before
        the last: a stretch of steps stops where the first does)."""
        if self.lazy:
            self.ticks.extend(ends.tolist())
            gained = len(self.decoding) * len(ends)
        else:
            gained = _decode(list(self.decoding.values()), self.config, ends)
        self.held += gained
        self.context += gained
        self.outputs_made += gained

    def clipped_outputs_left(self) -> int:
        """Output tokens the running requests have still to make, each at most SGLang's clip
        (``admission.clipped_outputs_left``), from the batch's totals when none asks for more."""
        if self.over_clip:
            return clipped_outputs_left(self.running.values())
        return self.outputs_asked - self.outputs_made

    def steps_to_first_end(self) -> int:
        """Decode steps until the first decoding request has its last token: at least that
        of the fewest tokens left (speculative decoding: the first to end may need a step
        more)."""
        if self.lazy:
            while self.ends[0][1] not in self.decoding:
                heapq.heappop(self.ends)
            return max(1, self.ends[0][0] - len(self.ticks))
        left = np.array([r.output - len(r.token_times) for r in self.decoding.values()])
        return max(1, int(np.min(np.ceil(left / self.config.tokens_per_step))))

    def finished(self) -> list[_Request]:
        """The decoding requests that have all their tokens, in the batch's order."""
        if not self.lazy:
            done = [r for r in self.decoding.values() if len(r.token_times) == r.output]
            return sorted(done, key=lambda r: r.seq)
        done, steps = [], len(self.ticks)
        while self.ends and self.ends[0][0] <= steps:
            _, seq = heapq.heappop(self.ends)
            request = self.decoding.get(seq)
            if request is not None:
                done.append(request)
        done.sort(key=lambda r: r.seq)
        return done

    def in_order(self) -> list[_Request]:
        """The running requests in the order they were admitted (what SGLang's admission
        and the choice of a request to evict read one by one)."""
        return list(self.running.values())


def _balance(busy: list[int], chunks: list[tuple[_Request, int]], config: ServerConfig,
             count: int) -> int:  # fmt: skip
    """TensorRT-LLM's attention-DP balance on a step with prompts planned, ``busy``: the
    sequences each rank decodes in it: 0 when they run (every rank has a prompt and a free
    slot, some rank decodes nothing, or the counter, at ``count``, reaches the timeout on this
    step), else the decode-only steps they wait."""
    ranks = config.dp_ranks
    with_prompts = {request.rank for request, _ in chunks}
    ready = len(with_prompts) == ranks and max(busy) < config.rank_slots
    if ready or min(busy) == 0 or count + 1 >= config.balance_timeout_steps:
        return 0
    return config.balance_timeout_steps - 1 - count


def _admit(
    waiting: deque[_Request],
    batch: _Batch,
    cache: KvCache,
    config: ServerConfig,
    per_token: int,
) -> None:
    """Let waiting requests in, first come first served, while a slot is free and the cache's
    rule admits the head of the queue; under attention DP each to the rank holding the fewest
    (the lowest of equals; under closed-loop clients, the rank whose request just ended) while
    one has a free slot. Under the engines' rules (all but ``reserve``) a request comes in only
    in a step that has token budget left for its prompt."""
    admitted: list[_Request] = []
    decoding = len(batch.decoding)
    pending = batch.pending
    free = cache.free_beside(batch.held)
    held = batch.per_rank  # counts the ones admitted here too (``_Batch.add``)
    # SGLang's forecast reads every running request; its ratio rule the tokens those running
    # before this scheduling point have left, and those promised to the ones it admits.
    each = cache.capacity is not None and cache.admission == "forecast"
    ratio = cache.capacity is not None and cache.admission == "ratio"
    older_left = batch.clipped_outputs_left() if ratio else 0
    promised = 0
    while waiting and len(batch.running) < config.max_batch:
        head = waiting[0]
        rank = held.index(min(held))
        if held[rank] >= config.rank_slots:
            break  # every rank is full
        decode = 0 if config.prefill_first else decoding * config.decode_tokens
        budget = config.token_budget - pending - decode
        if cache.admission != "reserve" and budget <= 0:
            break
        step_need = decoding * per_token + min(pending, config.token_budget)
        chunk = min(head.to_prefill, budget)
        if ratio:
            fits = cache.ratio_admits(head, free - pending, older_left, promised)
        else:
            running = batch.in_order() if each else ()
            fits = cache.admits(head, running, admitted, step_need, chunk, free, batch.need)
        if not fits:
            break  # FCFS: the head of the queue waits for memory
        head.rank = rank
        batch.add(waiting.popleft())
        admitted.append(head)
        pending += head.to_prefill
        promised += clipped_output_left(head)


def _step_plan(batch: _Batch, config: ServerConfig) -> tuple[int, list[tuple[_Request, int]]]:
    """The next step's decoding sequences (all the batch's, or none) and prompt chunks (the
    engine's rule; under attention DP each rank's prompts within the rank's share of the
    budget)."""
    prefilling = batch.prefilling
    # A prefill-first engine runs the waiting prompts in a step of their own.
    decoders = 0 if config.prefill_first and prefilling else len(batch.decoding)
    if not prefilling:
        return decoders, []
    if config.dp_ranks == 1:
        sizes = config.chunks(decoders, (r.to_prefill for r in prefilling.values()))
        return decoders, list(zip(prefilling.values(), sizes, strict=False))
    by_rank: list[list[_Request]] = [[] for _ in range(config.dp_ranks)]
    for request in prefilling.values():
        by_rank[request.rank].append(request)
    busy = batch.decoding_per_rank if decoders else [0] * config.dp_ranks
    chunks: list[tuple[_Request, int]] = []
    for rank, mine in enumerate(by_rank):
        if mine:
            sizes = config.chunks(busy[rank], (r.to_prefill for r in mine), config.rank_budget)
            chunks.extend(zip(mine, sizes, strict=False))
    return decoders, chunks


def _make_room(
    decoders: int,
    chunks: list[tuple[_Request, int]],
    batch: _Batch,
    waiting: deque[_Request],
    cache: KvCache,
    config: ServerConfig,
) -> tuple[int, list[tuple[_Request, int]]]:
    """When the step's tokens do not fit the cache, running requests give theirs back (the
    engine's victim, requeued to recompute) until they do; the step is planned again."""
    per_token = ceil_tokens(config.tokens_per_step)
    if cache.free_beside(batch.held) >= decoders * per_token + sum(n for _, n in chunks):
        return decoders, chunks
    while len(batch.running) > 1:
        need = decoders * per_token + sum(n for _, n in chunks)
        if cache.free_beside(batch.held) >= cache.room_wanted(decoders, need):
            break
        victim = cache.victim(batch.in_order())
        batch.remove(victim)
        victim.evict()
        if cache.requeue_first:
            waiting.appendleft(victim)
        else:
            waiting.append(victim)
        decoders, chunks = _step_plan(batch, config)
    cache.after_eviction(batch.in_order())
    return decoders, chunks


def _decode(decoding: list[_Request], config: ServerConfig, ends: np.ndarray) -> int:
    """Give each decoding request its tokens of the steps ending at ``ends`` under speculative
    decoding (more than one token a step; one a step, ``_Batch`` keeps them as ``ticks``); the
    tokens given."""
    if not decoding:
        return 0
    before = sum(len(r.token_times) for r in decoding)
    done = np.array([r.decode_steps for r in decoding], dtype=np.float64)
    emitted = config.emitted(done, len(ends))
    for request, counts in zip(decoding, emitted, strict=True):
        request.token_times.extend(np.repeat(ends, counts)[: request.output_left].tolist())
        request.decode_steps += len(ends)
    return sum(len(r.token_times) for r in decoding) - before


def _decode_until_change(
    batch: _Batch,
    decoders: int,
    context: int,
    config: ServerConfig,
    step_time: StepTime,
    now: float,
    arrivals: list[tuple[float, int, float]],
    limit: int,
    since_receive: int,
) -> tuple[float, float, int]:
    """Decode-only steps of the ``decoders`` sequences, ``context`` tokens cached for them:
    nothing changes the batch until a request ends, one arrives (and the scheduler, which
    polls for requests every ``recv_interval`` steps, ``since_receive`` of them gone, sees it:
    at the end of the step it arrived in, or with a scheduler a step ahead, of the first step
    that started after it arrived) or the KV cache fills (``limit`` steps), so the steps up to
    then are computed at once (contexts grow by the tokens each step yields). Returns the last
    step's start, its end and the steps taken."""
    rate = config.tokens_per_step
    steps = min(batch.steps_to_first_end(), limit)
    index = np.arange(steps, dtype=np.float64)
    size = float(decoders)
    context_s = float(context) + size * rate * index
    work = StepWork(
        np.full(steps, size), context_s + size, np.full(steps, size), context_s,
        np.full(steps, size), context_s + size,
    )  # fmt: skip
    ends = now + np.cumsum(step_time.seconds(work))
    if arrivals:  # stop at the first poll after the step that can take the next one in
        if config.request_path.schedule_ahead_steps:
            starts = np.concatenate(([now], ends[:-1]))
            arrives = int(np.searchsorted(starts, arrivals[0][0])) + 1
        else:
            arrives = int(np.searchsorted(ends, arrivals[0][0])) + 1
        interval = config.recv_interval
        first_poll = max(interval - since_receive, 1)
        polls = -(-max(arrives - first_poll, 0) // interval)
        steps = min(steps, first_poll + polls * interval)
    batch.decode(ends[:steps])
    started = float(ends[steps - 2]) if steps > 1 else now
    return started, float(ends[steps - 1]), steps


def _row(
    request: _Request,
    model: str,
    load: str,
    ok: bool,
    error: str | None,
    now: float,
    delivery: float = 0.0,
    latencies: bool = True,
) -> dict[str, Any]:
    """The request's row; each token read by the client ``delivery`` seconds after its step."""
    shape = request.shape
    times = request.token_times
    if ok and delivery:
        times = (np.asarray(times) + delivery).tolist()
    row: dict[str, Any] = {
        "model": model,
        "load": load,
        "num_prompt_tokens": shape.num_prompt_tokens,
        "num_output_tokens": shape.num_output_tokens if ok else 0,
        "requested_prompt_tokens": shape.num_prompt_tokens,
        "requested_output_tokens": shape.num_output_tokens,
        "batch_size": 1,
        "ok": ok,
        "error": error,
        "runtime_s": times[-1] - request.arrival_s if ok else None,
        "ttft_s": times[0] - request.arrival_s if ok else None,
        "inter_token_latencies_s": np.diff(times).tolist() if ok and latencies else [],
        "started_at_s": request.arrival_s,
        "finished_at_s": times[-1] if ok else now,
        "request_index": request.index,
        "source": "simulated",
    }
    return row
