"""Step times of a continuous-batching server: what one scheduler step (one forward pass) takes.

A ``StepWork`` describes the steps (new tokens, attended positions, sequences, context); a
``StepTime`` turns it into seconds: ``HardwareStepTime`` (the roofline hardware model: the FLOPs
and bytes of the step's decode tokens and prompt chunks, weights read once per step), or
``EngineStepTime`` (an engine stack's measured kernels, ``hardware.engines``), or
``FittedStepTime`` (a linear model of step time in the step's tokens and attended positions,
fitted to profiled batched runs, ``fit_step_time``, or to timed engine steps,
``fit_step_timings``, which also corrects each small token count on its own; saved and read
back exactly, ``read_step_fit``).
"""

from __future__ import annotations

import csv
import functools
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Deployment
from idealized_runtime.cost_model.hardware.counts import PhaseCosts, forward_costs
from idealized_runtime.cost_model.hardware.engines.step import EngineStepModel
from idealized_runtime.cost_model.hardware.roofline import compute_hardware, pass_time

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
    # The decoding sequences among ``sequences`` and the positions they attend to (None: every
    # sequence decodes, as in a decode-only step).
    decode_sequences: np.ndarray | None = None
    decode_attended: np.ndarray | None = None

    @classmethod
    def of(cls, decode_contexts: Sequence[int], chunks: Sequence[tuple[int, int]]) -> StepWork:
        """One step: a decode token per entry of ``decode_contexts`` (tokens cached), plus
        prompt chunks of (new tokens, tokens cached)."""
        return cls.of_totals(len(decode_contexts), sum(decode_contexts), chunks)

    @classmethod
    def of_totals(
        cls, decoding: int, decode_context: int, chunks: Sequence[tuple[int, int]]
    ) -> StepWork:
        """``of`` for ``decoding`` decode tokens whose sequences hold ``decode_context``
        tokens cached in all."""
        decode = float(decoding)
        context = float(decode_context)
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
            np.array([decode]),
            np.array([context + decode]),
        )

    def split(self) -> tuple[np.ndarray, ...]:
        """(decoding sequences, their attended positions, prompt tokens, prompt attended
        positions, prompt chunks) of each step."""
        decode = self.sequences if self.decode_sequences is None else self.decode_sequences
        decode_attended = self.attended if self.decode_attended is None else self.decode_attended
        return (
            decode,
            decode_attended,
            self.tokens - decode,
            self.attended - decode_attended,
            self.sequences - decode,
        )


class StepTime(Protocol):
    def seconds(self, work: StepWork) -> np.ndarray:
        """Seconds of each step described by ``work``."""
        ...


class RememberedStepTime:
    """A ``StepTime`` that keeps the seconds of every ``StepWork`` it was asked for, by the
    work's exact values, and answers the same work again from them (the closed loop of
    ``disaggregated.simulate_closed_loop`` serves its requests again in passes whose steps
    mostly repeat the last pass's). The seconds are the step time's own, bit for bit; past
    ``max_bytes`` of works and answers it starts afresh."""

    def __init__(self, step_time: StepTime, max_bytes: int = 128 << 20) -> None:
        self.step_time = step_time
        self.max_bytes = max_bytes
        self._known: dict[tuple[Any, ...], np.ndarray] = {}
        self._bytes = 0

    def seconds(self, work: StepWork) -> np.ndarray:
        key = tuple(
            None if part is None else (part.dtype.str, part.shape, part.tobytes())
            for part in (work.tokens, work.attended, work.sequences, work.context,
                         work.decode_sequences, work.decode_attended)
        )  # fmt: skip
        known = self._known.get(key)
        if known is None:
            known = np.array(self.step_time.seconds(work))
            known.setflags(write=False)  # shared by every caller of this work
            size = known.nbytes + sum(len(part[2]) for part in key if part is not None)
            if self._bytes + size > self.max_bytes:
                self._known.clear()
                self._bytes = 0
            self._known[key] = known
            self._bytes += size
        return known


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
    mixture-of-experts: the experts the step's tokens touch). The deployment's batch size is
    not used: each step counts its own sequences."""

    deployment: Deployment

    @functools.cached_property
    def _coefficients(self) -> dict[str, np.ndarray]:
        n = np.array([p[0] for p in _PROBES], dtype=np.float64)
        c = np.array([p[1] for p in _PROBES], dtype=np.float64)
        probe = self._forward_costs(n, c)
        features = np.stack([n, n * c + n * (n + 1) / 2, np.ones_like(n), c], axis=1)
        return {name: np.linalg.solve(features, getattr(probe, name)) for name in _COST_FIELDS}

    @functools.cached_property
    def _dense_pass(self) -> tuple[float, float]:
        """(weight bytes, all-reduces) of a pass, the same whatever its tokens (dense models)."""
        one = self._forward_costs(1.0, 0.0)
        return float(one.weight_bytes), float(one.num_allreduces)

    def _forward_costs(self, new_tokens: ArrayLike, context_tokens: ArrayLike) -> PhaseCosts:
        deployment = self.deployment
        return forward_costs(
            deployment.architecture,
            new_tokens,
            context_tokens,
            tp=deployment.tp,
            precision=deployment.precision,
        )

    def costs(self, work: StepWork) -> PhaseCosts:
        features = np.stack([work.tokens, work.attended, work.sequences, work.context], axis=1)
        fields = {name: features @ k for name, k in self._coefficients.items()}
        if self.deployment.architecture.num_experts > 1:  # experts touched depend on the tokens
            weight_bytes = self._forward_costs(work.tokens, 0.0).weight_bytes
        else:
            weight_bytes = np.full_like(work.tokens, self._dense_pass[0])
        return PhaseCosts(
            weight_bytes=weight_bytes,
            num_allreduces=np.full_like(work.tokens, self._dense_pass[1]),
            num_passes=np.ones_like(work.tokens),
            **fields,
        )

    def seconds(self, work: StepWork) -> np.ndarray:
        deployment = self.deployment
        time = pass_time(
            self.costs(work),
            compute_hardware(deployment.hardware, deployment.precision),
            num_layers=deployment.architecture.num_layers,
            tp=deployment.tp,
            efficiency=deployment.efficiency,
        )
        return np.asarray(time.total_s, dtype=np.float64)


@dataclass(frozen=True)
class EngineStepTime:
    """A step's time on an engine stack (``hardware.engines``): the engine's measured kernels
    over the step's decode tokens and prompt chunks, plus its host time per step."""

    model: EngineStepModel

    def seconds(self, work: StepWork) -> np.ndarray:
        return self.model.seconds(*work.split())


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
