"""One hardware-model estimate of a request for every front end: the REST body, a benchmark
file's estimate and ``estimate --arch`` give the same figures for the same request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.api.schemas import HardwareModelEstimateIn
from idealized_runtime.bench.config import EstimateSpec, load_config
from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.hardware.estimate import estimate_request

ARCH, HARDWARE = "llama-3.1-8b", "h100-sxm"


@settings(max_examples=25, deadline=None)
@given(
    prompt=st.integers(1, 32_000),
    output=st.integers(1, 4_000),
    batch=st.sampled_from([1, 4, 64]),
    weights=st.sampled_from([None, "bf16", "int8", "int4", "fp8"]),
    stack=st.sampled_from([None, "helm-megatron-2022", "lmdeploy"]),
)
def test_rest_body_and_bench_entry_estimate_alike(prompt, output, batch, weights, stack) -> None:
    fields = {"prompt_tokens": prompt, "output_tokens": output, "batch_size": batch}
    fields |= {"weights": weights, "stack": stack}
    body = HardwareModelEstimateIn(architecture=ARCH, hardware=HARDWARE, **fields)
    entry = EstimateSpec(architecture=ARCH, hardware=HARDWARE, **fields)
    arch, hardware = get_architecture(ARCH), get_hardware(HARDWARE)
    from_body, precision, calibration = estimate_request(body, arch, hardware)
    assert entry.evaluate() == {**from_body.to_dict(), "calibration": calibration or None}
    assert precision.weights == (weights or "bf16").replace("int4", "int4-g128")


def test_the_command_line_gives_the_same_estimate() -> None:
    body = HardwareModelEstimateIn(
        architecture=ARCH, hardware=HARDWARE, prompt_tokens=900, output_tokens=50,
        weights="int4", tensor_parallel_size=2, stack="lmdeploy",
    )  # fmt: skip
    expected, _, calibration = estimate_request(
        body, get_architecture(ARCH), get_hardware(HARDWARE)
    )
    done = subprocess.run(
        [sys.executable, "-m", "idealized_runtime", "estimate", "--arch", ARCH, "--hardware",
         HARDWARE, "-p", "900", "-o", "50", "--weights", "int4", "--tp", "2", "--stack",
         "lmdeploy", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    printed = json.loads(done.stdout)
    assert printed["runtime_s"] == pytest.approx(expected.runtime_s, rel=1e-12)
    assert printed["num_gpus"] == expected.num_gpus == 2 and printed["stack"] == calibration


def test_a_bench_entry_with_both_a_stack_and_the_ideal_roofline_is_refused(
    tmp_path: Path,
) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text(
        "estimates:\n  - {architecture: llama-3.1-8b, hardware: h100-sxm, prompt_tokens: 5, "
        "output_tokens: 9, ideal: true, stack: lmdeploy}\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError, match="exclude one another"):
        load_config(config)
