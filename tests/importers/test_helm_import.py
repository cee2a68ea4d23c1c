"""HELM runs written in HELM's own file format, imported, converted and fitted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from idealized_runtime.core import catalog
from idealized_runtime.timing.importers.helm import find_runs, import_helm
from tests.servers import run_cli

MODEL = "openai/davinci"


def stat(name: str, value: float, split: str = "test", perturbation: dict | None = None) -> dict:
    metric = {"name": name, "split": split}
    if perturbation:
        metric["perturbation"] = perturbation
    return {"name": metric, "count": 1, "sum": value, "sum_squared": value * value,
            "min": value, "max": value, "mean": value, "variance": 0.0, "stddev": 0.0}  # fmt: skip


def write_run(root: Path, name: str, scenario_class: str, instances: list[dict]) -> Path:
    run = root / name
    run.mkdir(parents=True)
    spec = {
        "name": name,
        "scenario_spec": {"class_name": scenario_class, "args": {}},
        "adapter_spec": {"method": "generation", "model": MODEL, "model_deployment": MODEL},
        "metric_specs": [],
        "groups": [],
    }
    (run / "run_spec.json").write_text(json.dumps(spec))
    (run / "per_instance_stats.json").write_text(json.dumps(instances, indent=2))
    states = [
        {
            "instance": {"id": i["instance_id"], "split": "test"},
            "train_trial_index": i["train_trial_index"],
            "request": {"model_deployment": MODEL, "model": MODEL, "prompt": "..."},
            "result": {"success": True, "completions": [], "request_time": 1.0},
        }
        for i in instances
    ]
    state = {"adapter_spec": spec["adapter_spec"], "request_states": states}
    (run / "scenario_state.json").write_text(json.dumps(state))
    (run / "stats.json").write_text("[]")
    return run


def instance(iid: str, p: int, o: int, runtime: float, trial: int = 0, perturbation=None) -> dict:
    stats = [
        stat("num_prompt_tokens", p, perturbation=perturbation),
        stat("num_output_tokens", o, perturbation=perturbation),
        stat("inference_runtime", runtime, perturbation=perturbation),
        stat("exact_match", 1.0, perturbation=perturbation),
    ]
    entry = {"instance_id": iid, "train_trial_index": trial, "stats": stats}
    if perturbation:
        entry["perturbation"] = perturbation
    return entry


@pytest.fixture
def helm_output(tmp_path: Path) -> Path:
    suite = tmp_path / "benchmark_output" / "runs" / "v1"
    typos = {"name": "typos", "robustness": True, "fairness": False, "prob": 0.1}
    # Language modeling: 0 output tokens per request.
    write_run(suite, "the_pile:subset=pile-cc,model=openai_davinci",
              "helm.benchmark.scenarios.the_pile_scenario.ThePileScenario",
              [instance("id1", 900, 0, 0.4), instance("id2", 1500, 0, 0.6)])  # fmt: skip
    write_run(suite, "boolq:model=openai_davinci",
              "helm.benchmark.scenarios.boolq_scenario.BoolQScenario",
              [instance("id7", 300, 1, 0.3), instance("id7", 300, 1, 0.35, trial=1),
               instance("id7", 310, 1, 0.31, perturbation=typos),
               instance("id8", 200, 30, 1.2), instance("id9", 150, 12, 0.7)])  # fmt: skip
    write_synthetic_efficiency_run(suite, "openai_davinci", seed=3)
    return tmp_path / "benchmark_output"


def write_synthetic_efficiency_run(suite: Path, model: str, *, seed: int) -> None:
    """A run with enough requests for a denoised fit: 0.05 s overhead, alpha(p) = 0.0004 p,
    0.02 s per further token, plus contention noise that only ever adds time."""
    rng = np.random.default_rng(seed)
    timed = []
    for k in range(60):
        p, o = int(rng.choice([64, 256, 1024])), int(rng.choice([0, 1, 8, 32, 64]))
        runtime = 0.05 + 0.0004 * p + 0.02 * max(o - 1, 0) + float(rng.exponential(0.01))
        timed.append(instance(f"s{k}", p, o, runtime))
    write_run(suite, f"synthetic_efficiency:model={model}",
              "helm.benchmark.scenarios.synthetic_efficiency_scenario.SyntheticEfficiencyScenario",
              timed)  # fmt: skip


def helm_rule(entry: dict, p: int, o: int) -> float:
    sizes = sorted(int(k) for k in entry["runtime_for_prompt_tokens"])
    key = next((s for s in sizes if p <= s), sizes[-1])
    runtime = entry["runtime_for_prompt_tokens"][str(key)] * p / key
    return runtime + (entry["runtime_per_output_token"] * (o - 1) if o > 0 else 0.0)


def test_runs_are_found_at_any_level(helm_output: Path) -> None:
    runs = find_runs([helm_output])
    assert [r.name.split(":")[0] for r in runs] == ["boolq", "synthetic_efficiency", "the_pile"]
    assert find_runs([runs[0], runs[0].parent]) == runs


def test_rows_keep_trials_and_perturbations_apart(helm_output: Path) -> None:
    frame = import_helm([helm_output / "runs" / "v1"])
    assert len(frame) == 67
    boolq = frame[frame["scenario"] == "BoolQScenario"]
    id7 = boolq[boolq["instance_id"] == "id7"]
    assert id7[["train_trial_index", "perturbation", "runtime_s"]].values.tolist() == [
        [0, "", 0.3], [1, "", 0.35], [0, "typos", 0.31]
    ]  # fmt: skip
    pile = frame[frame["scenario"] == "ThePileScenario"]
    assert pile["num_output_tokens"].tolist() == [0, 0]
    assert set(frame["model"]) == {MODEL} and set(frame["suite"]) == {"v1"}


def test_import_then_convert_equals_helms_rule_and_fits_denoised(
    helm_output: Path, tmp_path: Path
) -> None:
    table = catalog.helm_table("idealized")
    fit_path = tmp_path / "helm_fit.json"
    fit_path.write_text(json.dumps({MODEL: table[MODEL]}))
    requests = tmp_path / "requests.parquet"
    result = run_cli("import-helm", str(helm_output), "-o", str(requests))
    assert result.returncode == 0, result.stderr
    assert "wrote 67 requests of 3 run(s)" in result.stderr
    out = tmp_path / "converted.csv"
    result = run_cli("convert", str(requests), "--fit", str(fit_path), "-o", str(out))
    assert result.returncode == 0, result.stderr
    converted = pd.read_csv(out, keep_default_na=False, na_values=[""])
    tokens = zip(converted["num_prompt_tokens"], converted["num_output_tokens"], strict=True)
    expected = [helm_rule(table[MODEL], p, o) for p, o in tokens]
    np.testing.assert_allclose(converted["idealized_runtime_s"], expected, rtol=1e-12)
    pile = converted[converted["scenario"] == "ThePileScenario"]
    assert pile["num_output_tokens"].tolist() == [0, 0]
    # The imported runtimes are black-box timings: a denoised fit takes them as they are.
    result = run_cli("fit", str(requests), "--method", "denoised", "-o", str(tmp_path / "d.json"))
    assert result.returncode == 0, result.stderr
    fitted = json.loads((tmp_path / "d.json").read_text())
    assert fitted, fitted


def test_bad_runs_are_one_line_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("import-helm", str(empty), "-o", str(tmp_path / "r.csv"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "no HELM run found" in result.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "run_spec.json").write_text("{")
    result = run_cli("import-helm", str(broken), "-o", str(tmp_path / "r.csv"))
    assert result.returncode == 2 and "not valid JSON" in result.stderr
    assert not (tmp_path / "r.csv").exists()
    (broken / "run_spec.json").write_text('{"name": "a", "name": "b"}')
    result = run_cli("import-helm", str(broken), "-o", str(tmp_path / "r.csv"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "the key 'name' is given twice in one object" in result.stderr, result.stderr
    assert not (tmp_path / "r.csv").exists()
