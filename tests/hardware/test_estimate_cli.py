"""`idealized-runtime estimate` in both modes, through a real subprocess."""

from __future__ import annotations

import json

import pytest

from idealized_runtime.core.types import Provenance
from idealized_runtime.cost_model.fitting.fit_files import write_fit_file
from tests.fits import two_point_fit
from tests.servers import run_cli


@pytest.fixture(scope="module")
def fit_file(tmp_path_factory) -> str:
    fit = two_point_fit(
        "my-model",
        (0.05, 0.25),
        0.02,
        stack=Provenance(hardware="a100-80gb", num_devices=2, tensor_parallel_size=2),
    )
    path = tmp_path_factory.mktemp("fits") / "fits.json"
    write_fit_file({"my-model": fit}, path)
    return str(path)


def test_fit_mode(fit_file: str) -> None:
    result = run_cli(
        "estimate", "--fit", fit_file, "--model", "my-model", "-p", "1000", "-o", "11", "--json"
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["source"] == "profiled"
    assert data["runtime_s"] == pytest.approx(0.25 + 10 * 0.02)
    assert data["num_gpus"] == 2 and data["gpu_seconds"] == pytest.approx(0.9)


def test_fit_mode_unknown_model(fit_file: str) -> None:
    result = run_cli("estimate", "--fit", fit_file, "--model", "other", "-p", "10", "-o", "1")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "my-model" in result.stderr


def test_arch_mode_calibrated_text() -> None:
    result = run_cli(
        "estimate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "-p", "512", "-o", "64"
    )
    assert result.returncode == 0, result.stderr
    assert "calibrated" in result.stdout and "GPU-seconds" in result.stdout


def test_arch_mode_json_ideal_vs_calibrated() -> None:
    args = ("--arch", "llama-3.1-70b", "--hardware", "h100-sxm", "-p", "1000", "-o", "100")
    ideal = json.loads(run_cli("estimate", *args, "--ideal", "--json").stdout)
    calibrated = json.loads(run_cli("estimate", *args, "--json").stdout)
    assert ideal["source"] == "analytic" and calibrated["source"] == "calibrated"
    assert ideal["runtime_s"] < calibrated["runtime_s"]
    assert ideal["num_gpus"] == 2 and ideal["energy_j"] > 0 and ideal["cost_usd"] > 0


def test_arch_mode_uses_a_profile_when_given(fit_file: str) -> None:
    args = ("--arch", "llama-3.1-8b", "--hardware", "a100-80gb", "-p", "100", "-o", "2")
    result = run_cli("estimate", *args, "--fit", fit_file, "--model", "my-model", "--json")
    assert json.loads(result.stdout)["source"] == "profiled"
    fallback = json.loads(run_cli("estimate", *args, "--fit", fit_file, "--json").stdout)
    assert fallback["source"] == "calibrated" and fallback["notes"]


@pytest.mark.parametrize(
    "args",
    [
        ("--arch", "no-such-model", "--hardware", "h100-sxm", "-p", "1", "-o", "1"),
        ("--arch", "llama-3.1-8b", "--hardware", "tpu-v9", "-p", "1", "-o", "1"),
        ("--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "-p", "0", "-o", "1"),
        ("--arch", "gpt2-124m", "--hardware", "h100-sxm", "-p", "1", "-o", "1", "--tp", "8"),
        ("--arch", "llama-3.1-8b", "-p", "1", "-o", "1"),
        ("--fit", "/no/such/file.json", "--model", "x", "-p", "1", "-o", "1"),
        ("-p", "1", "-o", "1"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: tuple[str, ...]) -> None:
    result = run_cli("estimate", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert result.stderr.strip().count("\n") == 0
