"""A discrete-event simulation of an ideal continuous-batching server.

The server holds up to ``max_batch`` requests. Each scheduler step is one forward pass: every
running request past its prompt decodes one token, and what is left of a ``token_budget`` goes
to prompt chunks of the requests still prefilling, first come first served (Dynamic SplitFuse).
Requests wait in a FCFS queue until a slot is free and the KV cache can hold their whole
sequence (prompt + output tokens; the capacity comes from the memory planner,
``cost_model.serving.memory_per_gpu``). A request's first token comes with the step that
finishes its prompt, each further token with one later step.

A step's duration comes from a ``StepTime``: ``HardwareStepTime`` (the roofline hardware model:
the FLOPs and bytes of the step's decode tokens and prompt chunks, weights read once per step),
or ``FittedStepTime`` (a linear model of step time in the step's tokens and attended positions,
fitted to profiled batched runs, ``fit_step_time``, or to timed engine steps,
``fit_step_timings``, which also corrects each small token count on its own).

Load: open-loop arrival times (Poisson at a rate, or a trace's timestamps), or closed-loop
clients (``concurrency``: each client sends its next request ``think_time_s`` after the previous
one ends; a real client's re-submit time, one value or the measured sequence replayed).

Rows have the shape of ``measure``'s raw rows (model, load, num_prompt_tokens, num_output_tokens,
ok, runtime_s, ttft_s, inter_token_latencies_s, started_at_s, finished_at_s, ...), so the same
summaries apply to simulated and measured runs. Pure numpy: no torch.
"""

from __future__ import annotations

import csv
import functools
import heapq
import json
import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.scheduling import DEFAULT_TOKEN_BUDGET, prompt_chunks
from idealized_runtime.core.types import Architecture, Dtype, Hardware, Precision
from idealized_runtime.cost_model.roofline import (
    IDEAL,
    Efficiency,
    PhaseCosts,
    compute_hardware,
    forward_costs,
    pass_time,
)
from idealized_runtime.cost_model.serving import DEFAULT_RESERVE_FRACTION, GB, memory_per_gpu

STEP_FIT_KIND = "step_time_fit"


# --- step times ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepWork:
    """What a step's time depends on, summed over its sequences (arrays: one entry per step).

    tokens: new tokens in the pass; attended: positions attended to (causal: a decode token
    sees context + 1, prompt-chunk token i sees context + i); sequences: sequences in the pass;
    context: cached tokens summed over the sequences."""

    tokens: np.ndarray
    attended: np.ndarray
    sequences: np.ndarray
    context: np.ndarray

    @classmethod
    def of(cls, decode_contexts: Sequence[int], chunks: Sequence[tuple[int, int]]) -> StepWork:
        """One step: a decode token per entry of ``decode_contexts`` (tokens cached), plus
        prompt chunks of (new tokens, tokens cached)."""
        decode = float(len(decode_contexts))
        context = float(sum(decode_contexts))
        tokens, attended, chunk_context = decode, context + decode, 0.0
        for n, cached in chunks:
            tokens += n
            attended += n * cached + n * (n + 1) / 2
            chunk_context += cached
        return cls(
            np.array([tokens]),
            np.array([attended]),
            np.array([decode + len(chunks)]),
            np.array([context + chunk_context]),
        )


class StepTime(Protocol):
    def seconds(self, work: StepWork) -> np.ndarray:
        """Seconds of each step described by ``work``."""
        ...


# Per-sequence work of one forward pass is linear in these features of a sequence with n new
# tokens on c cached: (n, attended = n c + n (n + 1) / 2, 1, c). Four (n, c) probes solve for
# the coefficients of every counted quantity (see HardwareStepTime).
_PROBES = ((1, 0), (1, 1), (2, 0), (3, 0))
_COST_FIELDS = (
    "flops",
    "unaligned_flops",
    "kv_bytes",
    "activation_bytes",
    "score_bytes",
    "allreduce_bytes",
)


@dataclass(frozen=True)
class HardwareStepTime:
    """A step's time from the roofline model: the FLOPs and bytes of its decode tokens and
    prompt chunks added up, the weights read once (they are shared by every token of the pass;
    mixture-of-experts: the experts the step's tokens touch)."""

    arch: Architecture
    hardware: Hardware
    tp: int = 1
    dtype: Dtype = "bfloat16"
    efficiency: Efficiency = IDEAL
    precision: Precision | None = None  # None: ``dtype`` everywhere

    @functools.cached_property
    def _coefficients(self) -> dict[str, np.ndarray]:
        n = np.array([p[0] for p in _PROBES], dtype=np.float64)
        c = np.array([p[1] for p in _PROBES], dtype=np.float64)
        probe = forward_costs(self.arch, n, c, **self._counting)
        features = np.stack([n, n * c + n * (n + 1) / 2, np.ones_like(n), c], axis=1)
        return {name: np.linalg.solve(features, getattr(probe, name)) for name in _COST_FIELDS}

    @functools.cached_property
    def _dense_pass(self) -> tuple[float, float]:
        """(weight bytes, all-reduces) of a pass, the same whatever its tokens (dense models)."""
        one = forward_costs(self.arch, 1.0, 0.0, **self._counting)
        return float(one.weight_bytes), float(one.num_allreduces)

    @property
    def _counting(self) -> dict:
        return {"dtype": self.dtype, "tp": self.tp, "precision": self.precision}

    def costs(self, work: StepWork) -> PhaseCosts:
        features = np.stack([work.tokens, work.attended, work.sequences, work.context], axis=1)
        fields = {name: features @ k for name, k in self._coefficients.items()}
        if self.arch.num_experts > 1:  # the experts touched depend on the step's tokens
            weight_bytes = forward_costs(self.arch, work.tokens, 0.0, **self._counting).weight_bytes
        else:
            weight_bytes = np.full_like(work.tokens, self._dense_pass[0])
        return PhaseCosts(
            weight_bytes=weight_bytes,
            num_allreduces=np.full_like(work.tokens, self._dense_pass[1]),
            num_passes=np.ones_like(work.tokens),
            **fields,
        )

    def seconds(self, work: StepWork) -> np.ndarray:
        time = pass_time(
            self.costs(work),
            compute_hardware(self.hardware, self.precision),
            num_layers=self.arch.num_layers,
            tp=self.tp,
            efficiency=self.efficiency,
        )
        return np.asarray(time.total_s, dtype=np.float64)


@dataclass(frozen=True)
class FittedStepTime:
    """step_s = intercept + per_token * tokens + per_attended * attended positions + per_sequence
    * sequences in the step: the cost of reading the weights, of the matmuls per token, of
    attention, and of the per-sequence work (sampling, bookkeeping). Fitted by
    ``fit_step_time`` to runs profiled at several batch sizes.

    ``small_steps_s`` adds, for steps of only a few new tokens (decode batches), seconds that
    the linear model misses: the matmul kernels change regime there (on a CPU, one token is a
    matrix-vector product, 2 or 3 tokens can cost what 4 do). Keys: new tokens in the step;
    steps between two keys are interpolated, steps outside them get nothing."""

    model: str
    intercept_s: float
    per_token_s: float
    per_attended_s: float
    per_sequence_s: float = 0.0
    max_batch: int | None = None  # the largest batch it was fitted on
    small_steps_s: Mapping[int, float] = field(default_factory=dict)

    def seconds(self, work: StepWork) -> np.ndarray:
        linear = (
            self.intercept_s
            + self.per_token_s * work.tokens
            + self.per_attended_s * work.attended
            + self.per_sequence_s * work.sequences
        )
        if not self.small_steps_s:
            return linear
        keys, extras = self._small_step_table
        extra = np.interp(work.tokens, keys, extras)
        inside = (work.tokens >= keys[0]) & (work.tokens <= keys[-1])
        return linear + np.where(inside, extra, 0.0)

    @functools.cached_property
    def _small_step_table(self) -> tuple[np.ndarray, np.ndarray]:
        """``small_steps_s`` as sorted arrays, built once: ``seconds`` runs once per step."""
        keys = sorted(self.small_steps_s)
        return np.array(keys, dtype=np.float64), np.array([self.small_steps_s[k] for k in keys])

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": STEP_FIT_KIND,
            "model": self.model,
            "intercept_s": self.intercept_s,
            "per_token_s": self.per_token_s,
            "per_attended_s": self.per_attended_s,
            "per_sequence_s": self.per_sequence_s,
            "max_batch": self.max_batch,
            "small_steps_s": {str(k): v for k, v in sorted(self.small_steps_s.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FittedStepTime:
        try:
            small = {int(k): float(v) for k, v in (data.get("small_steps_s") or {}).items()}
            return cls(
                model=str(data["model"]),
                intercept_s=float(data["intercept_s"]),
                per_token_s=float(data["per_token_s"]),
                per_attended_s=float(data["per_attended_s"]),
                per_sequence_s=float(data.get("per_sequence_s", 0.0)),
                max_batch=data.get("max_batch"),
                small_steps_s=small,
            )
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise InputError(f"not a step-time fit: {error}") from None


def _features(decode_contexts: Sequence[int], chunks: Sequence[tuple[int, int]]) -> list[float]:
    work = StepWork.of(decode_contexts, chunks)
    return [1.0, float(work.tokens[0]), float(work.attended[0]), float(work.sequences[0])]


def fit_step_time(rows: Iterable[Mapping[str, Any]], model: str | None = None) -> FittedStepTime:
    """Fit ``FittedStepTime`` to profiled rows (``profile``'s CSV: batch_size,
    num_prompt_tokens, num_output_tokens, runtime_s, ttft_s), by non-negative least squares on
    relative errors. Each row gives two equations: the prompt pass (TTFT: batch x p tokens) and
    the mean decode step ((runtime - TTFT) / (o - 1): batch tokens at mean context)."""
    design, target, names, batches = [], [], set(), []
    for row in rows:
        try:
            batch = int(row.get("batch_size") or 1)
            p, o = int(row["num_prompt_tokens"]), int(row["num_output_tokens"])
            runtime = float(row["runtime_s"])
            ttft = float(row["ttft_s"]) if row.get("ttft_s") not in (None, "") else None
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"profiled row lacks a usable field: {error}") from None
        names.add(str(row.get("model", "")))
        batches.append(batch)
        if ttft is not None and ttft > 0:
            design.append(_features([], [(p, 0)] * batch))
            target.append(ttft)
            if o > 1 and runtime > ttft:
                contexts = [p + (o - 1) // 2] * batch  # the mean decode step's context
                design.append(_features(contexts, []))
                target.append((runtime - ttft) / (o - 1))
        elif o == 1:
            design.append(_features([], [(p, 0)] * batch))
            target.append(runtime)
    if len(design) < 4:
        raise InputError(
            "a step-time fit needs at least 4 timings (profile with TTFT at several prompt "
            "sizes and batch sizes)"
        )
    label = model or (sorted(names)[0] if len(names) == 1 else ",".join(sorted(names)))
    return _solve(design, target, label, max(batches))


def _solve(
    design: list[list[float]],
    target: list[float],
    label: str,
    max_batch: int | None,
    small_steps: Sequence[int] = (),
) -> FittedStepTime:
    """Least squares on relative errors (short steps count as much as long), the linear
    coefficients non-negative; with ``small_steps`` (token counts) one more coefficient each, of
    either sign, for the steps of exactly that many new tokens."""
    a, b = np.asarray(design), np.asarray(target)
    if not small_steps:
        from scipy.optimize import nnls

        coefficients, _ = nnls(a / b[:, None], np.ones_like(b))
        return FittedStepTime(label, *map(float, coefficients), max_batch=max_batch)
    from scipy.optimize import lsq_linear

    tokens = a[:, 1]
    indicators = np.stack([tokens == k for k in small_steps], axis=1).astype(np.float64)
    full = np.hstack([a, indicators])
    lower = [0.0] * a.shape[1] + [-np.inf] * len(small_steps)
    solution = lsq_linear(full / b[:, None], np.ones_like(b), bounds=(lower, np.inf))
    linear, extra = solution.x[: a.shape[1]], solution.x[a.shape[1] :]
    small = {int(k): float(e) for k, e in zip(small_steps, extra, strict=True)}
    return FittedStepTime(label, *map(float, linear), max_batch=max_batch, small_steps_s=small)


# A token count gets its own correction when at least this many steps of it were timed.
_SMALL_STEP_EVIDENCE = 3


def _small_steps(design: list[list[float]], max_batch: int) -> list[int]:
    """Token counts up to ``max_batch`` timed often enough for a correction of their own, if the
    steps of more tokens still pin the linear model down (4 different ones)."""
    counts = Counter(round(row[1]) for row in design)
    small = sorted(k for k, n in counts.items() if k <= max_batch and n >= _SMALL_STEP_EVIDENCE)
    rest = {tuple(row) for row in design if round(row[1]) not in small}
    return small if len(rest) >= 4 else []


def fit_step_timings(timings: Iterable[Any], model: str = "model") -> FittedStepTime:
    """Fit ``FittedStepTime`` to timed steps of a serving engine, each with ``decode_contexts``
    (cached tokens of each decoding sequence), ``chunks`` ((new, cached) tokens of each prompt
    chunk) and ``seconds``, as attributes or keys (``local_runner.batching.profile_steps``
    returns them; their ``to_dict`` gives the JSON form). The steps are the very work the
    simulator schedules, so no decode-step averaging is needed. Each token count up to the
    largest batch that was timed often enough gets its own correction
    (``FittedStepTime.small_steps_s``)."""
    design, target, batches = [], [], []
    for timing in timings:
        get = timing.get if isinstance(timing, Mapping) else functools.partial(getattr, timing)
        try:
            contexts = [int(c) for c in get("decode_contexts")]
            chunks = [(int(n), int(c)) for n, c in get("chunks")]
            seconds = float(get("seconds"))
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise InputError(f"not a timed step: {error}") from None
        if not (contexts or chunks) or not (math.isfinite(seconds) and seconds > 0):
            raise InputError("a timed step needs some work and a positive duration")
        design.append(_features(contexts, chunks))
        target.append(seconds)
        batches.append(len(contexts) + len(chunks))
    if len({tuple(row) for row in design}) < 4:
        raise InputError("a step-time fit needs at least 4 different timed steps")
    max_batch = max(batches)
    return _solve(design, target, model, max_batch, _small_steps(design, max_batch))


def read_step_fit(path: str | Path) -> FittedStepTime:
    """A step-time fit: the JSON ``FittedStepTime.to_dict`` writes, or a profile CSV, a
    server's step log (JSONL, ``serve-model --step-log``) or a served engine's profile (the
    JSON of serve-model's ``POST /v1/engine/profile``), fitted on the spot."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror or error}") from None
    if path.suffix.lower() == ".csv":
        return fit_step_time(csv.DictReader(text.splitlines()))
    if path.suffix.lower() == ".jsonl":  # a server's step log (serve-model --step-log)
        try:
            steps = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as error:
            raise InputError(f"{path}: not JSON lines ({error.msg})") from None
        return fit_step_timings(steps)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
    if isinstance(data, dict) and data.get("object") == "engine.profile":
        # A served engine's own profile (serve-model's POST /v1/engine/profile), fitted here.
        if not isinstance(data.get("steps"), list):
            raise InputError(f"{path}: an engine profile without a list of steps")
        return fit_step_timings(data["steps"], str(data.get("model") or "model"))
    if not isinstance(data, dict) or data.get("kind") != STEP_FIT_KIND:
        raise InputError(
            f"{path}: not a step-time fit (give a profile CSV with a batch grid, or the JSON "
            "that `simulate --save-fit` writes)"
        )
    return FittedStepTime.from_dict(data)


# --- KV capacity --------------------------------------------------------------------------------


def kv_capacity_tokens(
    arch: Architecture,
    hardware: Hardware,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
    precision: Precision | None = None,
) -> int:
    """Tokens of KV cache that fit next to the weights on ``tp`` GPUs (the memory planner's
    accounting); InputError when the weights alone do not fit."""
    weights, kv_per_token = memory_per_gpu(arch, tp, 1, 1, 1, dtype, precision)
    usable = hardware.memory_gb * GB * (1.0 - reserve_fraction)
    if weights >= usable:
        raise InputError(
            f"{arch.name} ({dtype}) weights need {weights / GB:.1f} GB per GPU at tensor-parallel "
            f"size {tp}; {hardware.name} has {usable / GB:.1f} GB usable (raise --tp)"
        )
    return int((usable - weights) // kv_per_token)


# --- workloads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestShape:
    num_prompt_tokens: int
    num_output_tokens: int
    arrival_s: float | None = None  # None: closed loop (sent when a client is free)


def poisson_arrivals(rate: float, count: int, seed: int) -> np.ndarray:
    """``count`` arrival times of a Poisson process at ``rate`` per second."""
    if not (math.isfinite(rate) and rate > 0):
        raise InputError(f"--rate must be a positive number of requests per second, got {rate}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=count)
    return np.cumsum(gaps) - gaps[0]  # the first request at t = 0


TRACE_ALIASES = {
    "arrival_s": ("arrival_s", "timestamp", "timestamp_s", "arrival_time"),
    "num_prompt_tokens": ("num_prompt_tokens", "prompt_tokens", "input_length", "input_tokens"),
    "num_output_tokens": ("num_output_tokens", "output_tokens", "output_length", "max_tokens"),
}


def read_workload(path: str | Path) -> list[RequestShape]:
    """A request trace: CSV, JSON (a list) or JSONL of rows with arrival_s (or timestamp),
    num_prompt_tokens and num_output_tokens. Arrivals are relative to the first one."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read workload {path}: {error.strerror or error}") from None
    rows: list[Any]
    try:
        if path.suffix.lower() == ".csv":
            rows = list(csv.DictReader(text.splitlines()))
        elif path.suffix.lower() == ".json":
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise InputError(f"workload {path}: not JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(rows, list) or not rows:
        raise InputError(f"workload {path}: no requests")
    shapes = []
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise InputError(f"workload {path}, request {number}: not an object")
        values = {}
        for key, aliases in TRACE_ALIASES.items():
            raw = next((row[a] for a in aliases if row.get(a) not in (None, "")), None)
            try:
                values[key] = float(raw) if raw is not None else None
            except (TypeError, ValueError):
                raise InputError(
                    f"workload {path}, request {number}: {key} {raw!r} is not a number"
                ) from None
        if values["arrival_s"] is None or not math.isfinite(values["arrival_s"]):
            raise InputError(f"workload {path}, request {number}: needs arrival_s (seconds)")
        for key in ("num_prompt_tokens", "num_output_tokens"):
            value = values[key]
            if value is None or value != int(value) or value < 1:
                raise InputError(
                    f"workload {path}, request {number}: {key} must be an integer >= 1"
                )
        shapes.append(
            RequestShape(
                int(values["num_prompt_tokens"]),
                int(values["num_output_tokens"]),
                values["arrival_s"],
            )
        )
    first = min(s.arrival_s for s in shapes if s.arrival_s is not None)
    shapes = [
        RequestShape(s.num_prompt_tokens, s.num_output_tokens, s.arrival_s - first) for s in shapes
    ]
    return sorted(shapes, key=lambda s: s.arrival_s)


# --- the simulation -----------------------------------------------------------------------------


@dataclass
class _Request:
    index: int
    shape: RequestShape
    arrival_s: float
    prefilled: int = 0
    token_times: list[float] = field(default_factory=list)

    @property
    def need(self) -> int:
        return self.shape.num_prompt_tokens + self.shape.num_output_tokens

    @property
    def decoding(self) -> bool:
        return self.prefilled == self.shape.num_prompt_tokens


@dataclass(frozen=True)
class ServerConfig:
    max_batch: int = 64
    token_budget: int = DEFAULT_TOKEN_BUDGET
    kv_capacity_tokens: int | None = None  # None: unlimited
    # Seconds from a request's arrival until the scheduler sees it (a real server's HTTP
    # parsing and tokenization; 0 for the ideal server).
    request_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise InputError(f"--max-batch must be >= 1, got {self.max_batch}")
        if self.token_budget < 1:
            raise InputError(f"--token-budget must be >= 1, got {self.token_budget}")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < 1:
            raise InputError("the KV cache must hold at least one token")
        if not (math.isfinite(self.request_overhead_s) and self.request_overhead_s >= 0):
            raise InputError(f"request overhead must be >= 0 s, got {self.request_overhead_s}")


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
) -> list[dict[str, Any]]:
    """Serve ``shapes`` (with arrival times, or closed loop with ``concurrency`` clients) and
    return one row per request served, in request order (see the module docstring). Closed
    loop: clients send no new request after ``stop_after_s``; a client sends its next request
    ``think_time_s`` after its previous one ended (the client's own time to read the answer
    and send again): one value for every request, or one per re-submission in order (the k-th
    request sent after an end waits the k-th, cycled), e.g. a real client's measured gaps."""
    if concurrency is not None and concurrency < 1:
        raise InputError(f"--concurrency must be >= 1, got {concurrency}")
    if concurrency is None and any(s.arrival_s is None for s in shapes):
        raise InputError("open-loop requests need arrival times")
    thinks = think_times(think_time_s)
    if concurrency is None and any(thinks):
        raise InputError("--think-time applies to closed-loop clients (--concurrency) only")
    capacity = config.kv_capacity_tokens
    rows: list[dict[str, Any] | None] = [None] * len(shapes)
    # Heap of (when the scheduler sees it, request index, arrival time).
    arrivals: list[tuple[float, int, float]] = []
    delay = config.request_overhead_s
    next_closed = 0
    if concurrency is None:
        arrivals = [
            (float(s.arrival_s) + delay, i, float(s.arrival_s))  # type: ignore[arg-type]
            for i, s in enumerate(shapes)
        ]
        heapq.heapify(arrivals)
    else:
        for _ in range(min(concurrency, len(shapes))):
            heapq.heappush(arrivals, (delay, next_closed, 0.0))
            next_closed += 1

    waiting: deque[_Request] = deque()
    running: list[_Request] = []
    reserved = 0
    now = 0.0

    def finish(request: _Request, ok: bool, error: str | None = None) -> None:
        nonlocal next_closed
        rows[request.index] = _row(request, model, load, ok, error, now)
        more = stop_after_s is None or now < stop_after_s
        if concurrency is not None and next_closed < len(shapes) and more:
            sent = now + thinks[(next_closed - concurrency) % len(thinks)]
            heapq.heappush(arrivals, (sent + delay, next_closed, sent))
            next_closed += 1

    while arrivals or waiting or running:
        while arrivals and arrivals[0][0] <= now:
            _, index, arrival = heapq.heappop(arrivals)
            request = _Request(index, shapes[index], arrival)
            if capacity is not None and request.need > capacity:
                finish(request, False, f"needs {request.need} tokens of KV cache, has {capacity}")
                continue
            waiting.append(request)
        while waiting and len(running) < config.max_batch:
            if capacity is not None and reserved + waiting[0].need > capacity:
                break  # FCFS: the head of the queue waits for memory
            request = waiting.popleft()
            reserved += request.need
            running.append(request)
        if not running:
            if not arrivals:
                break
            now = max(now, arrivals[0][0])
            continue

        decoding = [r for r in running if r.decoding]
        contexts = [r.shape.num_prompt_tokens + len(r.token_times) - 1 for r in decoding]
        prefilling = [r for r in running if not r.decoding]
        left = [r.shape.num_prompt_tokens - r.prefilled for r in prefilling]
        sizes = prompt_chunks(len(decoding), left, config.token_budget)  # the engine's rule
        chunks = list(zip(prefilling, sizes, strict=False))
        if chunks:
            work = StepWork.of(contexts, [(n, r.prefilled) for r, n in chunks])
            now += float(step_time.seconds(work)[0])
            for request in decoding:
                request.token_times.append(now)
            for request, n in chunks:
                request.prefilled += n
                if request.decoding:
                    request.token_times.append(now)
        else:
            # Decode only: nothing changes the batch until a request ends or one arrives, so
            # the steps up to then are computed at once (contexts grow by one per step).
            left = min(r.shape.num_output_tokens - len(r.token_times) for r in decoding)
            steps = np.arange(left, dtype=np.float64)
            size = float(len(decoding))
            context = float(sum(contexts)) + size * steps
            work = StepWork(np.full(left, size), context + size, np.full(left, size), context)
            ends = now + np.cumsum(step_time.seconds(work))
            if arrivals:  # stop at the step during which the next request arrives
                left = min(left, int(np.searchsorted(ends, arrivals[0][0])) + 1)
            times = ends[:left].tolist()
            for request in decoding:
                request.token_times.extend(times)
            now = times[-1]
        for request in [r for r in running if len(r.token_times) == r.shape.num_output_tokens]:
            running.remove(request)
            reserved -= request.need
            finish(request, True)
    return [row for row in rows if row is not None]


def think_times(think_time_s: float | Sequence[float]) -> list[float]:
    """The closed loop's think times as a non-empty list; InputError unless each is a finite
    number of seconds >= 0."""
    values = [think_time_s] if isinstance(think_time_s, (int, float)) else list(think_time_s)
    if not values:
        raise InputError("--think-time needs at least one value")
    for value in values:
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise InputError(f"--think-time must be >= 0 seconds, got {value}")
    return [float(value) for value in values]


def _row(
    request: _Request, model: str, load: str, ok: bool, error: str | None, now: float
) -> dict[str, Any]:
    shape, times = request.shape, request.token_times
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
        "inter_token_latencies_s": [float(x) for x in np.diff(times)] if ok else [],
        "started_at_s": request.arrival_s,
        "finished_at_s": times[-1] if ok else now,
        "request_index": request.index,
        "source": "simulated",
    }
    return row
