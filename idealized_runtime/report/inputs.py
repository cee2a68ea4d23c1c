"""Load leaderboard inputs: from the bundled HELM data, a ``bench`` results folder, or the
service database. Each loader only gathers data into ``LeaderboardInputs``; the metrics are
computed by ``idealized_runtime.leaderboard.build_leaderboard``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from idealized_runtime.core.architectures import load_architecture
from idealized_runtime.core.catalog import (
    MEGATRON_A100_STACK,
    architectures,
    hardware_catalog,
    helm_model_shapes,
    helm_table,
    megatron_a100_measurements,
)
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.scenarios import (
    ScenarioResult,
    helm_scenario_results,
    helm_workloads,
)
from idealized_runtime.core.types import Architecture, FittedCostModel, Measurement, Provenance
from idealized_runtime.leaderboard.rows import (
    CostRates,
    LeaderboardInputs,
    ModelInput,
    ProfileInput,
)

HELM_HARDWARE = "a100-80gb"  # the paper profiled on A100 80 GB (fp16, Megatron-LM)
# Method whose fit stands for a profiled shape's idealized runtime: the better default first.
IDEALIZED_METHOD_PREFERENCE = ("default", "helm")
PROFILE_METHODS = ("default", "helm")


def cost_rates() -> dict[str, CostRates]:
    """Rates of every accelerator in the hardware catalog."""
    return {name: CostRates.from_hardware(hw) for name, hw in hardware_catalog().items()}


def preferred_idealized_fit(fits: Iterable[FittedCostModel]) -> FittedCostModel | None:
    by_method = {fit.method: fit for fit in fits}
    for method in IDEALIZED_METHOD_PREFERENCE:
        if method in by_method:
            return by_method[method]
    return None


def _helm_table_fits(kind: str) -> dict[str, FittedCostModel]:
    """HELM's fitted table as cost models; empty if the importer is not installed. The idealized
    table was fitted to the A100 Megatron profiles, so its fits carry that stack."""
    try:
        from idealized_runtime.cost_model.fitting.helm_format import import_helm_table
    except ImportError:
        return {}
    if kind == "denoised":
        return import_helm_table(helm_table(kind), method="denoised")
    fits = import_helm_table(helm_table(kind), method="helm")
    return {
        name: fit.model_copy(update={"stack": MEGATRON_A100_STACK}) for name, fit in fits.items()
    }


def helm_reference_models(hardware: str = HELM_HARDWARE) -> list[ModelInput]:
    """Every model in HELM's idealized or denoised table or its scenario results, with HELM's
    fits and, where the paper profiled its shape, the architecture."""
    idealized, denoised = _helm_table_fits("idealized"), _helm_table_fits("denoised")
    shapes, known = helm_model_shapes(), architectures()
    names = list(
        dict.fromkeys([*idealized, *denoised, *(r.model for r in helm_scenario_results())])
    )
    return [
        ModelInput(
            name=name,
            architecture=known.get(shapes.get(name, "")),
            idealized_fit=idealized.get(name),
            denoised_fit=denoised.get(name),
            hardware=hardware,
        )
        for name in names
    ]


def _group_by_model(measurements: Iterable[Measurement]) -> dict[str, list[Measurement]]:
    grouped: dict[str, list[Measurement]] = {}
    for measurement in measurements:
        grouped.setdefault(measurement.model, []).append(measurement)
    return grouped


def fit_profiles(
    measurements: Sequence[Measurement],
    methods: Sequence[str] = PROFILE_METHODS,
    *,
    stack: Provenance | None = None,
) -> list[ProfileInput]:
    """Fit timings with each method; one ``ProfileInput`` per model (empty without fitting)."""
    try:
        from idealized_runtime.cost_model.fitting.methods import fit_measurements
    except ImportError:
        return []
    fits = {
        method: fit_measurements(list(measurements), method=method, stack=stack)
        for method in methods
    }
    return [
        ProfileInput(
            name=model,
            fits=tuple(fits[method][model] for method in methods if model in fits[method]),
            measurements=tuple(rows),
        )
        for model, rows in _group_by_model(measurements).items()
    ]


def a100_reference_profiles() -> list[ProfileInput]:
    """The paper's Megatron A100 profiles, fitted with HELM's and the default method."""
    return fit_profiles(megatron_a100_measurements(), stack=MEGATRON_A100_STACK)


def bundled_helm_inputs() -> LeaderboardInputs:
    """Leaderboard inputs from the shipped HELM data alone: HELM's idealized and denoised
    tables, its per-scenario runtimes and accuracies, and the A100 profiles."""
    return LeaderboardInputs(
        models=tuple(helm_reference_models()),
        scenario_results=helm_scenario_results(),
        workloads=helm_workloads(),
        profiles=tuple(a100_reference_profiles()),
        cost_rates=cost_rates(),
        source="bundled HELM data (idealized/denoised tables, scenario results, A100 profiles)",
    )


# --- bench results folders ---------------------------------------------------------------------


def _read_manifest(root: Path) -> dict:
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        raise InputError("not a bench results folder (no manifest.json)", path=str(root))
    try:
        return json.loads(manifest_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InputError(f"manifest.json is not valid JSON ({error.msg})", path=str(root)) from None


def read_fits(item_dir: str | Path) -> list[FittedCostModel]:
    """Every fit written for a ``bench`` item (its ``fits-<method>.json`` files, all models)."""
    from idealized_runtime.cost_model.fitting.fit_files import read_fit_file

    fits: list[FittedCostModel] = []
    for path in sorted(Path(item_dir).glob("fits-*.json")):
        fits.extend(read_fit_file(path).values())
    return fits


def results_dir_inputs(path: str | Path, *, with_helm: bool = True) -> LeaderboardInputs:
    """Inputs from a ``bench`` results folder (its finished items), optionally beside the HELM
    reference models and their scenario results. A local item gives its model's idealized fit,
    an API item with the same label its denoised fit."""
    from idealized_runtime.cost_model.fitting.measurements_io import read_measurements

    root = Path(path)
    manifest = _read_manifest(root)
    by_model: dict[str, dict] = {}
    profiles: list[ProfileInput] = []
    for item in manifest.get("items", []):
        if item.get("status") != "done":
            continue
        item_dir = root / item["dir"]
        fits = read_fits(item_dir)
        measurements: list[Measurement] = []
        for name in ("measurements.csv", "timings.jsonl"):
            if (item_dir / name).is_file():
                measurements = read_measurements(item_dir / name)
        entry = by_model.setdefault(item["model"], {"name": item["model"]})
        if item.get("kind") == "local":
            entry["architecture"] = architecture_for(item.get("architecture"))
            entry["idealized_fit"] = preferred_idealized_fit(fits)
            entry["hardware"] = item.get("hardware")
        else:
            entry["denoised_fit"] = next((f for f in fits if f.method == "denoised"), None)
        profiles.append(ProfileInput(item["name"], tuple(fits), tuple(measurements)))
    if not by_model and not with_helm:
        raise InputError("no finished items in the results folder", path=str(root))
    helm = bundled_helm_inputs() if with_helm else None
    return LeaderboardInputs(
        models=tuple(ModelInput(**entry) for entry in by_model.values())
        + (helm.models if helm else ()),
        scenario_results=helm.scenario_results if helm else (),
        workloads=helm_workloads(),
        profiles=tuple(profiles) + (helm.profiles if helm else ()),
        cost_rates=cost_rates(),
        source=f"bench results {root}" + (" + bundled HELM data" if helm else ""),
    )


def architecture_for(spec: str | None) -> Architecture | None:
    """The architecture a catalog name or HF config path names; None if it names none (the
    report still shows the model, without its shape)."""
    if not spec:
        return None
    try:
        return load_architecture(spec)
    except InputError:
        return None


def scenario_results_from_scores(
    scores: Iterable[tuple[str, str, str, float]],
) -> tuple[ScenarioResult, ...]:
    """Scenario results from (model, scenario, metric, value) rows as the service stores them:
    metrics ``accuracy`` (or ``exact_match``), ``raw_runtime_s``, ``idealized_runtime_s``,
    ``mean_prompt_tokens``, ``mean_output_tokens``."""
    table: dict[tuple[str, str], dict[str, float]] = {}
    for model, scenario, metric, value in scores:
        table.setdefault((scenario, model), {})[metric] = value
    results = []
    for (scenario, model), metrics in sorted(table.items()):
        accuracy = metrics.get("accuracy", metrics.get("exact_match"))
        results.append(
            ScenarioResult(
                scenario=scenario,
                group=scenario.split(":", 1)[0],
                model=model,
                raw_runtime_s=metrics.get("raw_runtime_s"),
                idealized_runtime_s=metrics.get("idealized_runtime_s"),
                mean_prompt_tokens=metrics.get("mean_prompt_tokens"),
                mean_output_tokens=metrics.get("mean_output_tokens"),
                accuracy=accuracy,
            )
        )
    return tuple(results)
