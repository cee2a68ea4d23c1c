"""HELM's runtime tables (inference_idealized_runtimes.json, inference_denoised_runtimes.json).

Shape: ``{model: {"runtime_per_output_token": beta, "runtime_for_prompt_tokens": {"1": a, ...},
"overhead": c (denoised tables only)}}``. HELM evaluates them with its scale-up lookup, so an
imported table gets ``alpha_rule="helm_scale_up"``. HELM's 2022 code, before its first release,
keyed the alpha table ``runtime_for_input_tokens`` and looked it up without scaling inside the
grid: such entries get ``alpha_rule="helm_next_size"`` (docs/cost_model.md, "HELM's tables").
Import then export gives HELM's JSON back exactly (same keys, same floats; the prompt sizes in
increasing order, as HELM writes them: a JSON object has no order, so an import sorts them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from idealized_runtime.core.errors import InputError, plain
from idealized_runtime.core.types import MAX_RUNTIME_S, AlphaRule, FitMethod, FittedCostModel
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime

BETA_KEY = "runtime_per_output_token"
ALPHA_KEY = "runtime_for_prompt_tokens"
OLDER_ALPHA_KEY = "runtime_for_input_tokens"
OVERHEAD_KEY = "overhead"
# Each table form's alpha key and the lookup rule HELM's code applied to it.
ALPHA_RULE_OF_KEY: dict[str, AlphaRule] = {
    ALPHA_KEY: "helm_scale_up",
    OLDER_ALPHA_KEY: "helm_next_size",
}
# Output lengths over which a fit that HELM's form cannot hold exactly is projected onto it.
_PROJECTION_OUTPUT_TOKENS = np.array([2, 4, 8, 12, 16, 24, 32, 48, 64], dtype=np.float64)


def _alpha_keys(entry: Mapping[str, Any]) -> list[str]:
    return [key for key in ALPHA_RULE_OF_KEY if key in entry]


def looks_like_helm_table(data: Any) -> bool:
    return (
        isinstance(data, Mapping)
        and bool(data)
        and all(
            isinstance(entry, Mapping) and BETA_KEY in entry and bool(_alpha_keys(entry))
            for entry in data.values()
        )
    )


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{where}: expected a finite number, got {plain(value)!r}")
    if not 0 <= value <= MAX_RUNTIME_S:
        raise InputError(f"{where}: seconds between 0 and {MAX_RUNTIME_S:g}, got {plain(value)!r}")
    return float(value)


def import_helm_table(
    table: Mapping[str, Any], method: FitMethod = "helm"
) -> dict[str, FittedCostModel]:
    """HELM JSON -> fits, each entry with the lookup rule of its table form (helm_scale_up for
    ``runtime_for_prompt_tokens``, helm_next_size for ``runtime_for_input_tokens``). ``method``
    labels the fits: "helm" for an idealized table, "denoised" for a denoised one."""
    if not isinstance(table, Mapping) or not table:
        raise InputError("a HELM runtime table is a non-empty JSON object of models")
    fits: dict[str, FittedCostModel] = {}
    for model, entry in table.items():
        if not isinstance(entry, Mapping) or BETA_KEY not in entry or not _alpha_keys(entry):
            raise InputError(
                f"model {model!r}: expected keys {BETA_KEY!r} and {ALPHA_KEY!r} "
                f"(or, in HELM's older tables, {OLDER_ALPHA_KEY!r})"
            )
        alpha_keys = _alpha_keys(entry)
        if len(alpha_keys) > 1:
            raise InputError(
                f"model {model!r}: has both {ALPHA_KEY!r} and {OLDER_ALPHA_KEY!r}; HELM looks "
                "them up differently, so an entry holds one of them"
            )
        alpha_key = alpha_keys[0]
        unknown = set(entry) - {BETA_KEY, alpha_key, OVERHEAD_KEY}
        if unknown:
            raise InputError(f"model {model!r}: unknown keys {', '.join(sorted(unknown))}")
        alpha_table = entry[alpha_key]
        if not isinstance(alpha_table, Mapping) or not alpha_table:
            raise InputError(f"model {model!r}: {alpha_key} must be a non-empty object")
        for key in alpha_table:
            if not (isinstance(key, str) and key.isdigit() and str(int(key)) == key):
                raise InputError(f"model {model!r}: prompt size {key!r} is not an integer")
        # JSON objects have no order; HELM's lookup needs the sizes increasing.
        keys = sorted(alpha_table, key=int)
        sizes = [int(key) for key in keys]
        if sizes[0] < 1:
            raise InputError(f"model {model!r}: prompt sizes must be positive integers")
        alphas = [_number(alpha_table[k], f"model {model!r}: {alpha_key}[{k}]") for k in keys]
        overhead = entry.get(OVERHEAD_KEY)
        fits[model] = FittedCostModel(
            model=model,
            method=method,
            alpha_rule=ALPHA_RULE_OF_KEY[alpha_key],
            prompt_sizes=sizes,
            prompt_runtimes_s=alphas,
            beta_s=_number(entry[BETA_KEY], f"model {model!r}: {BETA_KEY}"),
            overhead_s=None if overhead is None else _number(overhead, f"{model!r}: overhead"),
        )
    return fits


def helm_form(fit: FittedCostModel) -> tuple[list[int], list[float], float]:
    """(sizes, alphas, beta) in HELM's form. Exact for HELM-form fits (either table form);
    otherwise a projection: the alpha table is kept (the lookup rules agree at the tabulated
    sizes) and beta is the least-squares time per decode step of this model's own decode times,
    runtime(p, o) - runtime(p, 1), at those sizes and o = 2..64."""
    if fit.alpha_rule in ALPHA_RULE_OF_KEY.values() and fit.beta_per_context_token_s == 0:
        return list(fit.prompt_sizes), list(fit.prompt_runtimes_s), fit.beta_s
    p, o = np.meshgrid(np.asarray(fit.prompt_sizes, float), _PROJECTION_OUTPUT_TOKENS)
    steps = o.ravel() - 1.0
    decode_time = predict_runtime(fit, p.ravel(), o.ravel(), include_overhead=False) - (
        predict_runtime(fit, p.ravel(), np.ones(p.size), include_overhead=False)
    )
    beta = float(np.dot(steps, decode_time) / np.dot(steps, steps))
    return list(fit.prompt_sizes), list(fit.prompt_runtimes_s), beta


def export_helm_table(fits: Mapping[str, FittedCostModel]) -> dict[str, Any]:
    """Fits -> HELM's JSON shape, keyed by the mapping's keys, in its order. A fit read from an
    older table (helm_next_size) is written back in that form, so that HELM reads it the same."""
    table: dict[str, Any] = {}
    for model, fit in fits.items():
        sizes, alphas, beta = helm_form(fit)
        alpha_key = OLDER_ALPHA_KEY if fit.alpha_rule == "helm_next_size" else ALPHA_KEY
        entry: dict[str, Any] = {
            BETA_KEY: beta,
            alpha_key: {str(size): alpha for size, alpha in zip(sizes, alphas, strict=True)},
        }
        if fit.overhead_s is not None:
            entry[OVERHEAD_KEY] = fit.overhead_s
        table[model] = entry
    return table
