"""Calibrating the reference stacks: one per engine family with published figures.

``calibrate_stack`` fits a stack on its targets and records its in-sample and held-out errors;
``calibrate_published`` does it for every engine family in the published table (16-bit
parameters, then per-format kernel factors); ``helm_stack`` wraps the shipped calibration of HELM's
2022 Megatron A100 grid as a stack.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from idealized_runtime.cost_model.hardware.stacks.catalog import (
    ALIASES,
    HELM_STACK,
    StackCalibration,
)
from idealized_runtime.cost_model.hardware.stacks.evaluation import (
    error_summary,
    held_out_errors,
    precision_errors,
    quantized_errors,
    tp_speedup_errors,
)
from idealized_runtime.cost_model.hardware.stacks.fit import (
    fit_all_format_factors,
    fit_stack,
    pooled_fit,
)
from idealized_runtime.cost_model.hardware.stacks.targets import (
    Target,
    beyond_roofline,
    published_targets,
    relative_errors,
    roofline_fraction,
)

FAMILY_DESCRIPTIONS: dict[str, str] = {
    "pytorch-compiled": "PyTorch with torch.compile and CUDA graphs (gpt-fast, torchao), batch 1",
    "lmdeploy": "LMDeploy TurboMind v0.1, static batches, last prompt token in the 1st decode step",
    "tensorrt-llm": "TensorRT-LLM engines with in-flight batching",
    "vllm": "vLLM with CUDA graphs",
    "sglang": "SGLang with CUDA graphs",
}


def calibrate_stack(
    name: str,
    targets: Sequence[Target],
    *,
    fallback: Sequence[Target] = (),
    description: str | None = None,
    held_out: bool = True,
) -> StackCalibration:
    """Fit a stack on ``targets`` and record its in-sample (and held-out) errors."""
    single_gpu = all(t.tp == 1 for t in targets)
    tp_prior = pooled_fit(tuple(fallback)) if single_gpu and fallback else None
    efficiency = replace(
        fit_stack(targets, tp_prior=tp_prior),
        last_prompt_token_in_decode=all(t.last_prompt_token_in_decode for t in targets),
        ring_allreduce=all(t.ring_allreduce for t in targets),
    )
    kinds = [t.kind for t in targets]
    in_sample = relative_errors(targets, efficiency)
    errors: dict = {"in_sample": error_summary(in_sample, kinds)}
    marked = np.array([beyond_roofline(t) for t in targets])
    if marked.any():
        errors["beyond_roofline"] = {
            t.row_id: round(roofline_fraction(t), 3) for t in targets if beyond_roofline(t)
        }
    if held_out:
        by_source = held_out_errors(targets, lambda t: t.source_id, fallback=fallback)
        by_model = held_out_errors(targets, lambda t: t.model, fallback=fallback)
        for split, values in (
            ("leave_one_source_out", by_source),
            ("leave_one_model_out", by_model),
        ):
            keep = ~np.isnan(values)
            kept_kinds = [k for k, m in zip(kinds, keep, strict=True) if m]
            errors[split] = error_summary(values[keep], kept_kinds)
            if marked.any():
                keep &= ~marked
                kept_kinds = [k for k, m in zip(kinds, keep, strict=True) if m]
                errors[f"{split}_unmarked"] = error_summary(values[keep], kept_kinds)
        if len({t.source_id for t in targets}) == 1:
            errors["held_out_note"] = (
                "one source: held out by source means predicted by the other stacks' averaged "
                "calibration"
            )
        predicted = [t.value * (1 + e) for t, e in zip(targets, by_source, strict=True)]
        ratios = tp_speedup_errors(targets, predicted)
        if ratios:
            absolute = np.abs([r["error"] for r in ratios])
            errors["tp_speedup_leave_one_source_out"] = {
                "n": len(ratios),
                "median": float(np.median(absolute)),
                "max": float(np.max(absolute)),
            }
    return StackCalibration(
        name=name,
        description=description or FAMILY_DESCRIPTIONS.get(name, name),
        efficiency=efficiency,
        engines=tuple(sorted({t.engine for t in targets})),
        hardware=tuple(sorted({t.gpu for t in targets})),
        models=tuple(sorted({t.model for t in targets})),
        sources=tuple(sorted({t.source_id for t in targets})),
        rows=tuple(t.row_id for t in targets),
        errors=errors,
    )


def helm_stack() -> StackCalibration:
    """HELM's 2022 Megatron-LM A100 stack, from its shipped calibration."""
    from idealized_runtime.cost_model.hardware.calibration import (
        SHIPPED_CALIBRATION,
        shipped_calibration,
    )

    shipped = shipped_calibration(SHIPPED_CALIBRATION)
    return StackCalibration(
        name=HELM_STACK,
        description="Megatron-LM (2022), fp16, no CUDA graphs: the HELM efficiency paper's stack",
        efficiency=shipped.efficiency,
        engines=("megatron-lm-2022",),
        hardware=(shipped.hardware,),
        models=shipped.models,
        sources=("helm-efficiency-megatron-a100-grid",),
        errors={
            "in_sample": {
                "ttft": {"n": len(shipped.models), "median": shipped.alpha_mape, "p90": None},
                "decode": {"n": len(shipped.models), "median": shipped.beta_mape, "p90": None},
            }
        },
        aliases=tuple(a for a, target in ALIASES.items() if target == HELM_STACK),
        notes="Fitted on the profiled (p, o) grid of 13 models; see data/calibrations/.",
    )


def calibrate_published(
    targets: Sequence[Target] | None = None, *, held_out: bool = True
) -> list[StackCalibration]:
    """One stack per engine family with rows in the published table."""
    targets = list(published_targets() if targets is None else targets)
    dense = [t for t in targets if not t.quantized]
    families = sorted({t.family for t in dense})
    stacks = []
    for family in families:
        own = [t for t in dense if t.family == family]
        others = [t for t in dense if t.family != family]
        stack = calibrate_stack(family, own, fallback=others, held_out=held_out)
        quantized = [t for t in targets if t.family == family and t.quantized]
        if quantized:
            factors = fit_all_format_factors(quantized, stack.efficiency)
            stack = replace(stack, format_factors=factors)
            stack.errors["quantized_predicted"] = precision_errors(quantized, stack.efficiency)
            stack.errors["quantized_calibrated"] = quantized_errors(
                own + quantized, fallback=others, held_out=held_out
            )
        stacks.append(stack)
    return stacks
