"""Honest errors of a stack: in sample, held out by source and by model, per weight format.

``held_out_errors`` predicts each figure with a calibration that never saw its group (its
source, or its model); ``quantized_held_out_errors`` does the same for quantized figures, with
their kernel factors refitted without the group; ``error_summary`` reduces errors to n, median
and p90 per kind (decode, ttft); speed-up ratios (quantized / 16-bit, TP=k / TP=1) are checked
against the published ratios of the same workload.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from idealized_runtime.core.types import IDEAL, Efficiency
from idealized_runtime.cost_model.hardware.stacks.fit import (
    MIN_OWN_ROWS,
    fit_all_format_factors,
    fit_stack,
    format_efficiency,
    kernel_format,
    pooled_fit,
)
from idealized_runtime.cost_model.hardware.stacks.targets import (
    DENSE_WEIGHTS,
    Target,
    predict_target,
    relative_errors,
)


def precision_errors(
    targets: Sequence[Target],
    efficiency: Efficiency,
    factors: Mapping[str, Mapping[str, float]] | None = None,
) -> dict:
    """Errors on quantized figures of a stack calibrated on 16-bit ones, per weight format;
    without ``factors`` the precision transfer rests on the byte and FLOP counts alone."""
    by_format: dict[str, list[Target]] = {}
    for t in targets:
        if t.quantized:
            by_format.setdefault(t.weights, []).append(t)
    summaries = {}
    for weights, rows in sorted(by_format.items()):
        eff = format_efficiency(efficiency, (factors or {}).get(kernel_format(weights)))
        summaries[weights] = error_summary(relative_errors(rows, eff), [t.kind for t in rows])
    return {weights: summary["all"] for weights, summary in summaries.items()}


def quantized_speedup_errors(
    targets: Sequence[Target],
    efficiency: Efficiency,
    factors: Mapping[str, Mapping[str, float]] | None = None,
    *,
    predicted: Mapping[str, float] | None = None,
) -> list[dict]:
    """Error of quantized / 16-bit ratios of the same figure (model, source, GPU, TP, batch,
    lengths, metric), predicted by one stack calibration (with per-format ``factors``), or
    taken from ``predicted`` (row id -> predicted figure, e.g. held-out predictions)."""

    def predict(t: Target) -> float:
        if predicted is not None and t.row_id in predicted:
            return predicted[t.row_id]
        factor = (factors or {}).get(kernel_format(t.weights))
        return predict_target(t, format_efficiency(efficiency, factor))

    by_case: dict[tuple, dict[str, Target]] = {}
    for t in targets:
        case = (t.source_id, t.model, t.gpu, t.tp, t.batch, t.prompt_tokens, t.output_tokens,
                t.metric)  # fmt: skip
        by_case.setdefault(case, {})[t.weights] = t
    results = []
    for case, per_format in sorted(by_case.items()):
        base = next((per_format[w] for w in DENSE_WEIGHTS if w in per_format), None)
        if base is None:
            continue
        base_predicted = predict(base)
        for weights, t in sorted(per_format.items()):
            if not t.quantized:
                continue
            published = t.value / base.value
            ratio_predicted = predict(t) / base_predicted
            results.append(
                {
                    "source_id": case[0],
                    "model": case[1],
                    "gpu": case[2],
                    "tp": case[3],
                    "weights": weights,
                    "metric": case[7],
                    "published": published,
                    "predicted": ratio_predicted,
                    "error": ratio_predicted / published - 1.0,
                }
            )
    return results


def error_summary(errors: Sequence[float] | np.ndarray, kinds: Sequence[str]) -> dict:
    """n, median and 90th percentile of |error|, overall and per kind (decode, ttft)."""
    errors = np.abs(np.asarray(errors, dtype=np.float64))
    kinds_arr = np.asarray(kinds)

    def stats(values: np.ndarray) -> dict:
        if values.size == 0:
            return {"n": 0, "median": None, "p90": None}
        return {
            "n": int(values.size),
            "median": float(np.median(values)),
            "p90": float(np.percentile(values, 90)),
        }

    summary = {"all": stats(errors)}
    for kind in ("decode", "ttft"):
        summary[kind] = stats(errors[kinds_arr == kind]) if errors.size else stats(errors)
    return summary


def _held_out_priors(
    train: Sequence[Target], fallback: Sequence[Target]
) -> tuple[Efficiency | None, Efficiency | None]:
    """(prior, tp_prior) of a held-out calibration on ``train``: the averaged calibration of
    ``fallback`` (the other stacks' figures) as the whole prior when ``train`` is too thin to
    pin the parameters (fewer than ``MIN_OWN_ROWS``), or for the all-reduce parameters alone
    when ``train`` is all on one GPU (the group held the stack's only multi-GPU figures)."""
    if not fallback:
        return None, None
    if len(train) < MIN_OWN_ROWS:
        return pooled_fit(tuple(fallback)), None
    if all(t.tp == 1 for t in train):
        return None, pooled_fit(tuple(fallback))
    return None, None


def held_out_errors(
    targets: Sequence[Target],
    key: Callable[[Target], str],
    *,
    fallback: Sequence[Target] = (),
) -> np.ndarray:
    """Error of each target when the stack is calibrated without its group (``key``).

    A group that leaves fewer than ``MIN_OWN_ROWS`` of the stack's figures behind (too few to
    pin its parameters) is predicted by a calibration on what is left, pulled toward the
    calibration of ``fallback`` (the other stacks' rows) instead of the typical values, or by
    that calibration itself when nothing is left; with no fallback, NaN."""
    errors = np.full(len(targets), np.nan)
    for group in sorted({key(t) for t in targets}):
        held = [i for i, t in enumerate(targets) if key(t) == group]
        train = [t for t in targets if key(t) != group]
        prior, tp_prior = _held_out_priors(train, fallback)
        if not train and prior is None:
            continue
        efficiency = fit_stack(train, prior=prior, tp_prior=tp_prior) if train else prior
        errors[held] = relative_errors([targets[i] for i in held], efficiency)
    return errors


def quantized_held_out_errors(
    targets: Sequence[Target],
    key: Callable[[Target], str] | None,
    *,
    fallback: Sequence[Target] = (),
) -> np.ndarray:
    """Error of each quantized target of one stack (``targets``: its 16-bit and quantized
    figures) predicted by a calibration that never saw the target's group (``key``; None: in
    sample): the 16-bit parameters refitted without the group, then each format's kernel
    factors refitted on that format's remaining figures (none left: bytes and FLOPs alone)."""
    errors = np.full(len(targets), np.nan)
    quantized = [i for i, t in enumerate(targets) if t.quantized]
    groups = sorted({key(targets[i]) for i in quantized}) if key else [None]
    for group in groups:
        held = [i for i in quantized if key is None or key(targets[i]) == group]
        train = [t for t in targets if key is None or key(t) != group]
        dense = [t for t in train if not t.quantized]
        prior, tp_prior = _held_out_priors(dense, fallback)
        if not dense and prior is None:
            continue
        base = fit_stack(dense, prior=prior, tp_prior=tp_prior) if dense else prior
        assert base is not None
        factors = fit_all_format_factors([t for t in train if t.quantized], base)
        for i in held:
            t = targets[i]
            eff = format_efficiency(base, factors.get(kernel_format(t.weights)))
            errors[i] = predict_target(t, eff) / t.value - 1.0
    return errors


def tp_speedup_errors(targets: Sequence[Target], predicted: Sequence[float]) -> list[dict]:
    """Error of TP=k / TP=1 ratios of the same figure (model, source, GPU, batch, lengths)."""
    by_case: dict[tuple, dict[int, tuple[float, float]]] = {}
    for t, pred in zip(targets, predicted, strict=True):
        if t.metric not in ("decode_tokens_per_s", "ttft_s"):
            continue
        case = (t.source_id, t.model, t.gpu, t.batch, t.prompt_tokens, t.output_tokens, t.metric)
        by_case.setdefault(case, {})[t.tp] = (t.value, pred)
    results = []
    for case, per_tp in sorted(by_case.items()):
        if 1 not in per_tp:
            continue
        base_measured, base_predicted = per_tp[1]
        for tp, (measured, pred) in sorted(per_tp.items()):
            if tp == 1 or not np.isfinite(pred) or not np.isfinite(base_predicted):
                continue
            ratio = measured / base_measured
            ratio_predicted = pred / base_predicted
            results.append(
                {
                    "source_id": case[0],
                    "model": case[1],
                    "gpu": case[2],
                    "metric": case[6],
                    "tp": tp,
                    "published": ratio,
                    "predicted": ratio_predicted,
                    "error": ratio_predicted / ratio - 1.0,
                }
            )
    return results


def quantized_errors(
    targets: Sequence[Target], *, fallback: Sequence[Target] = (), held_out: bool = True
) -> dict:
    """Per quantized weight format of one stack's figures (16-bit and quantized), the errors
    with per-format kernel factors: in sample and held out by source and by model, and the
    error of quantized / 16-bit speed-ups held out by source."""
    splits: dict[str, Callable[[Target], str] | None] = {"in_sample": None}
    if held_out:
        splits |= {
            "leave_one_source_out": lambda t: t.source_id,
            "leave_one_model_out": lambda t: t.model,
        }
    formats = sorted({t.weights for t in targets if t.quantized})
    result: dict = {weights: {} for weights in formats}
    for split, key in splits.items():
        values = quantized_held_out_errors(targets, key, fallback=fallback)
        for weights in formats:
            at = [i for i, t in enumerate(targets) if t.weights == weights]
            kinds = [targets[i].kind for i in at]
            result[weights][split] = error_summary(values[at], kinds)["all"]
        if split == "leave_one_source_out":
            predicted = {
                t.row_id: t.value * (1 + e)
                for t, e in zip(targets, values, strict=True)
                if t.quantized and np.isfinite(e)
            }
            # 16-bit figures as predicted by the calibration without their source, too.
            dense_errors = held_out_errors(
                [t for t in targets if not t.quantized], key, fallback=fallback
            )
            dense = [t for t in targets if not t.quantized]
            predicted |= {
                t.row_id: t.value * (1 + e) for t, e in zip(dense, dense_errors, strict=True)
            }
            ratios = quantized_speedup_errors(targets, IDEAL, predicted=predicted)
            for weights in formats:
                absolute = np.abs([r["error"] for r in ratios if r["weights"] == weights])
                if absolute.size:
                    result[weights]["speedup_leave_one_source_out"] = {
                        "n": int(absolute.size),
                        "median": float(np.median(absolute)),
                        "max": float(np.max(absolute)),
                    }
    return result
