"""Hardware-model estimates at any precision through every entry point: the CLI (`estimate
--arch`), the REST API (POST /v1/estimate/hardware-model) and `bench` YAML give the same figures
for the same config.json, and refuse bad precisions in one line (exit 2 / 422), writing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.types import parse_precision
from idealized_runtime.cost_model.hardware.estimate import hardware_model_estimate
from tests.api.conftest import Service
from tests.servers import assert_refused_in_one_line, run_cli

CONFIGS = Path(__file__).parents[1] / "hardware" / "hf_configs"
DEEP = json.loads((CONFIGS / "llama-3.3-70b.json").read_text())
COMPARED = (
    "runtime_s",
    "alpha_s",
    "beta_s",
    "num_gpus",
    "tensor_parallel_size",
    "precision",
    "gpu_seconds",
    "energy_j",
    "cost_usd",
    "source",
    "calibration",
)


@pytest.fixture(scope="module")
def deepseek_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("deepseek-v3")
    config = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_config_json_gives_the_same_estimate_through_cli_api_and_bench(
    client: httpx.Client, service: Service, deepseek_folder: Path, tmp_path: Path
) -> None:
    config_path = deepseek_folder / "config.json"
    request = {"hardware": "h200", "prompt_tokens": 1000, "output_tokens": 200}
    by_cli = run_cli(
        "estimate", "--arch", str(config_path), "--hardware", "h200", "-p", "1000", "-o", "200",
        "--json",
    )  # fmt: skip
    assert by_cli.returncode == 0, by_cli.stderr
    from_cli = json.loads(by_cli.stdout)

    config = json.loads(config_path.read_text())
    response = client.post(
        "/v1/estimate/hardware-model", json={"config": config, **request}, headers=service.auth
    )
    assert response.status_code == 200, response.text
    from_api = response.json()

    bench_file = tmp_path / "bench.yaml"
    bench_file.write_text(
        "estimates:\n"
        f"- architecture: {config_path}\n"
        "  hardware: h200\n  prompt_tokens: 1000\n  output_tokens: 200\n"
    )
    results = tmp_path / "results"
    by_bench = run_cli("bench", str(bench_file), "-o", str(results), "--no-progress")
    assert by_bench.returncode == 0, by_bench.stderr
    from_bench = json.loads((results / "estimates.json").read_text())[0]["estimate"]

    # DeepSeek-V3's checkpoint is fp8 (quantization_config): 8 H200 hold it.
    assert from_cli["precision"] == "fp8 (fp8 compute)" and from_cli["num_gpus"] == 8
    for key in COMPARED:
        assert from_api[key] == pytest.approx(from_cli[key]), key
        assert from_bench[key] == pytest.approx(from_cli[key]), key


def test_stored_architectures_at_a_requested_precision(
    client: httpx.Client, service: Service
) -> None:
    body = {
        "architecture": "llama-3.1-70b",
        "hardware": "h100-sxm",
        "prompt_tokens": 1000,
        "output_tokens": 200,
        "weights": "int4",
        "ideal": True,
    }
    response = client.post("/v1/estimate/hardware-model", json=body, headers=service.auth)
    assert response.status_code == 200, response.text
    expected, _ = hardware_model_estimate(
        get_architecture("llama-3.1-70b"),
        get_hardware("h100-sxm"),
        1000,
        200,
        precision=parse_precision("int4"),
        ideal=True,
    )
    out = response.json()
    assert (out["num_gpus"], out["precision"], out["source"]) == (
        1,
        "int4-g128 (weight-only)",
        "analytic",
    )
    assert out["runtime_s"] == pytest.approx(expected.runtime_s)


@pytest.mark.parametrize(
    ("change", "status", "detail"),
    [
        ({"hardware": "a100-80gb", "weights": "fp8"}, 422, "a100-80gb has no fp8 tensor cores"),
        ({"weights": "int3"}, 422, "unknown weight format 'int3'"),
        ({"kv_cache": "int4"}, 422, "unknown KV-cache format"),
        (
            {"weights": "int4", "activations": "fp8"},
            422,
            "fp8 activations need fp8 or mxfp4 weights",
        ),
        ({"config": {"model_type": "mamba"}, "architecture": None}, 422, "mamba"),
        ({"config": {"model_type": "llama"}, "architecture": None}, 422, "missing key"),
        ({"config": {"model_type": "llama"}}, 422, "exactly one of"),
        ({"config": {**DEEP, "num_hidden_layers": 10**6}, "architecture": None}, 422, "at most"),
        ({"architecture": "no-such-model"}, 404, "unknown architecture"),
        ({"hardware": "no-such-gpu"}, 404, "unknown hardware"),
    ],
)
def test_api_refusals_are_4xx_with_detail(
    client: httpx.Client, service: Service, change: dict, status: int, detail: str
) -> None:
    body = {"architecture": "llama-3.1-8b", "hardware": "h100-sxm"}
    body |= {"prompt_tokens": 100, "output_tokens": 10, **change}
    body = {key: value for key, value in body.items() if value is not None}
    response = client.post("/v1/estimate/hardware-model", json=body, headers=service.auth)
    assert response.status_code == status, response.text
    assert detail in json.dumps(response.json()["detail"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--hardware", "a100-80gb", "--weights", "fp8"), "a100-80gb has no fp8 tensor cores"),
        (("--weights", "int4-g7"), "power of two"),
        (("--kv-cache", "fp4"), "unknown KV-cache format 'fp4'"),
    ],
)
def test_cli_refusals_are_one_line_and_exit_2(args: tuple[str, ...], message: str) -> None:
    base = ["estimate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "-p", "10", "-o", "2"]
    result = run_cli(*base, *args)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr


def test_bad_config_and_refused_bench_estimates_write_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama", "hidden_act": "silu"}))
    result = run_cli("estimate", "--arch", str(bad), "--hardware", "h100-sxm", "-p", "1", "-o", "1")
    assert result.returncode == 2 and "missing key" in result.stderr
    assert result.stderr.strip().count("\n") == 0
    bench_file = tmp_path / "bench.yaml"
    bench_file.write_text(
        "estimates:\n- architecture: llama-3.1-8b\n  hardware: a100-80gb\n"
        "  prompt_tokens: 10\n  output_tokens: 2\n  weights: fp8\n"
    )
    results = tmp_path / "results"
    refused = run_cli("bench", str(bench_file), "-o", str(results), "--no-progress")
    assert refused.returncode == 2, refused.stderr
    assert "estimates.0" in refused.stderr and "no fp8 tensor cores" in refused.stderr
    assert not results.exists()


def test_models_accept_an_hf_config_as_well_as_our_schema(
    client: httpx.Client, service: Service
) -> None:
    config = json.loads((CONFIGS / "qwen3-8b.json").read_text())
    body = {"name": "my-qwen3-8b", "config": config}
    created = client.post("/v1/models", json=body, headers=service.auth)
    assert created.status_code == 201, created.text
    stored = client.get("/v1/models/my-qwen3-8b").json()
    expected = get_architecture("qwen3-8b")
    assert stored["num_layers"] == expected.num_layers
    assert stored["num_kv_heads"] == expected.num_kv_heads
    assert stored["family"] == expected.family
    # The registered config estimates like the catalog entry it equals.
    request = {"hardware": "h100-sxm", "prompt_tokens": 500, "output_tokens": 50}
    mine = client.post(
        "/v1/estimate/hardware-model", json={**request, "architecture": "my-qwen3-8b"}
    )
    catalog = client.post("/v1/estimate/hardware-model", json={**request, "config": config})
    assert mine.status_code == catalog.status_code == 200, mine.text
    assert mine.json()["runtime_s"] == catalog.json()["runtime_s"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "mamba", "hidden_size": 8}, "mamba"),
        ({"model_type": "llama", "hidden_size": 64}, "missing key"),
    ],
)
def test_models_refuse_bad_hf_configs_with_the_reason(
    client: httpx.Client, service: Service, config: dict, message: str
) -> None:
    body = {"name": "bad-config", "config": config}
    response = client.post("/v1/models", json=body, headers=service.auth)
    assert response.status_code == 422
    assert message in json.dumps(response.json()["detail"])
    assert client.get("/v1/models/bad-config").status_code == 404


def test_an_engine_stack_estimate_through_cli_and_api(
    client: httpx.Client, service: Service
) -> None:
    body = {"architecture": "llama-3.1-8b", "hardware": "h100-sxm", "prompt_tokens": 1000,
            "output_tokens": 200, "weights": "fp8", "stack": "vllm"}  # fmt: skip
    response = client.post("/v1/estimate/hardware-model", json=body, headers=service.auth)
    assert response.status_code == 200, response.text
    by_cli = run_cli(
        "estimate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "-p", "1000", "-o",
        "200", "--weights", "fp8", "--stack", "vllm", "--json",
    )  # fmt: skip
    assert by_cli.returncode == 0, by_cli.stderr
    out, expected = response.json(), json.loads(by_cli.stdout)
    assert out["source"] == expected["source"] == "engine" and out["calibration"] == "vllm"
    assert out["runtime_s"] == pytest.approx(expected["runtime_s"])
    refused = client.post(
        "/v1/estimate/hardware-model", json={**body, "hardware": "a100-80gb", "weights": None},
        headers=service.auth,
    )  # fmt: skip
    assert refused.status_code == 422
    assert "no kernel measurements on a100-80gb" in json.dumps(refused.json()["detail"])
    # A stack that is neither kind: one line from the CLI and the service alike, naming both.
    unknown = client.post(
        "/v1/estimate/hardware-model", json={**body, "stack": "nope"}, headers=service.auth
    )
    assert unknown.status_code == 422
    by_cli = run_cli("estimate", "--arch", "llama-3.1-8b", "--hardware", "h100-sxm", "-p", "5",
                     "-o", "5", "--stack", "nope")  # fmt: skip
    assert_refused_in_one_line(by_cli, unknown.json()["detail"])
    assert "vllm" in by_cli.stderr and "lmdeploy" in by_cli.stderr
