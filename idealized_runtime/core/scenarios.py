"""HELM scenarios shipped with the package: per (scenario, model) raw and idealized runtimes,
mean token counts and accuracy; and the workloads (mean prompt/output tokens) they define.

A scenario is named as HELM runs are, without the model: ``mmlu:subject=anatomy``. Its *group*
is the part before the colon (``mmlu``); either name selects a workload.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache

from idealized_runtime.core.catalog import UnknownNameError, helm_scenarios_csv_path


@dataclass(frozen=True)
class ScenarioResult:
    """One row of HELM's per-scenario efficiency/accuracy table."""

    scenario: str  # HELM run name without the model, e.g. "mmlu:subject=anatomy"
    group: str  # part before ':', e.g. "mmlu"
    model: str  # HELM model name, e.g. "openai/davinci"
    raw_runtime_s: float | None
    idealized_runtime_s: float | None
    mean_prompt_tokens: float | None  # None where HELM did not record token counts
    mean_output_tokens: float | None
    accuracy: float | None  # exact match, where HELM reports it


@dataclass(frozen=True)
class Workload:
    """Mean request shape of a scenario (over the models HELM ran on it)."""

    name: str
    mean_prompt_tokens: float
    mean_output_tokens: float
    num_results: int


def _optional_float(text: str) -> float | None:
    if text is None or text.strip() == "":
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _split_run_name(run: str) -> tuple[str, str] | None:
    """'mmlu:subject=anatomy,model=openai_davinci' -> ('mmlu:subject=anatomy', 'openai/davinci')."""
    head, separator, model = run.rpartition("model=")
    if not separator:
        return None  # a handful of HELM rows carry no model; they cannot be attributed
    model = model.split(",", 1)[0]
    scenario = head.rstrip(",").rstrip(":")
    organisation, _, model_name = model.partition("_")
    return scenario, f"{organisation}/{model_name}"


@lru_cache(maxsize=1)
def helm_scenario_results() -> tuple[ScenarioResult, ...]:
    """One result per (model, scenario): HELM ran a few pairs twice; the first run counts (for
    workloads, the leaderboard's frontiers and summaries, and what the service stores)."""
    results: list[ScenarioResult] = []
    seen: set[tuple[str, str]] = set()
    with helm_scenarios_csv_path().open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            parsed = _split_run_name(row["scenario"])
            if parsed is None:
                continue
            scenario, model = parsed
            if (model, scenario) in seen:
                continue
            seen.add((model, scenario))
            results.append(
                ScenarioResult(
                    scenario=scenario,
                    group=scenario.split(":", 1)[0],
                    model=model,
                    raw_runtime_s=_optional_float(row["inference_runtime"]),
                    idealized_runtime_s=_optional_float(row["inference_idealized_runtime"]),
                    mean_prompt_tokens=_optional_float(row["num_tokens_in_prompt"]),
                    mean_output_tokens=_optional_float(row["num_output_tokens"]),
                    accuracy=_optional_float(row["exact_match"]),
                )
            )
    return tuple(results)


def scenario_groups() -> list[str]:
    return sorted({result.group for result in helm_scenario_results()})


def scenario_names() -> list[str]:
    return sorted({result.scenario for result in helm_scenario_results()})


def scenario_workload(name: str) -> Workload:
    """Mean prompt and output tokens of a scenario (full name) or scenario group."""
    matching = [
        (r.mean_prompt_tokens, r.mean_output_tokens)
        for r in helm_scenario_results()
        if name in (r.scenario, r.group)
        and r.mean_prompt_tokens is not None
        and r.mean_output_tokens is not None
    ]
    if not matching:
        known = ", ".join(workload_names())
        raise UnknownNameError(f"unknown scenario {name!r}; scenario groups: {known}")
    return Workload(
        name=name,
        mean_prompt_tokens=sum(prompt for prompt, _ in matching) / len(matching),
        mean_output_tokens=sum(output for _, output in matching) / len(matching),
        num_results=len(matching),
    )


def workload_names() -> list[str]:
    """Scenario groups that have token counts, so can be used as workloads."""
    return sorted({r.group for r in helm_scenario_results() if r.mean_prompt_tokens is not None})


def helm_workloads() -> tuple[Workload, ...]:
    """One workload per HELM scenario group: its mean prompt and output tokens."""
    return tuple(scenario_workload(name) for name in workload_names())
