"""The estimate endpoints on a reference stack: the hardware model, not a stored fit."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from cost_model.roofline import predict_runtime
from cost_model.stacks import HELM_STACK, get_stack
from idealized_runtime.core.architectures import load_architecture
from idealized_runtime.core.catalog import get_hardware
from tests.api.conftest import Service


@pytest.fixture(scope="module")
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as http:
        yield http


def _expected(stack: str, p: float, o: float, tp: int, hardware: str = "a100-80gb") -> float:
    return float(
        predict_runtime(
            load_architecture("llama-3.1-8b"),
            get_hardware(hardware),
            p,
            o,
            tp=tp,
            efficiency=get_stack(stack).efficiency,
        )
    )


def test_single_estimate_on_a_stack(client: httpx.Client) -> None:
    params = {"model": "llama-3.1-8b", "prompt_tokens": 5, "output_tokens": 200}
    modern = client.get("/v1/estimate", params={**params, "stack": "pytorch-compiled"})
    assert modern.status_code == 200, modern.text
    body = modern.json()
    assert body["stack"] == "pytorch-compiled" and body["fit_id"] is None
    assert body["method"] == "calibrated" and body["cost"]["hardware"] == "a100-80gb"
    tp = body["cost"]["num_gpus"]
    assert body["runtime_s"] == pytest.approx(_expected("pytorch-compiled", 5, 200, tp))
    helm = client.get(
        "/v1/estimate",
        params={**params, "stack": "a100-megatron-2022", "hardware": "h100-sxm", "num_gpus": 2},
    ).json()
    assert helm["stack"] == HELM_STACK and helm["cost"]["num_gpus"] == 2
    assert helm["runtime_s"] == pytest.approx(_expected(HELM_STACK, 5, 200, 2, "h100-sxm"))


def test_batch_estimate_on_a_stack(client: httpx.Client) -> None:
    p, o = [5, 512, 2048], [200, 64, 1]
    response = client.post(
        "/v1/estimate/batch",
        json={"model": "llama-3.1-8b", "prompt_tokens": p, "output_tokens": o,
              "stack": "tensorrt-llm", "num_gpus": 4},
    )  # fmt: skip
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["stack"] == "tensorrt-llm" and body["fit_id"] is None
    expected = [_expected("tensorrt-llm", a, b, 4) for a, b in zip(p, o, strict=True)]
    np.testing.assert_allclose(body["runtime_s"], expected, rtol=1e-9)


@pytest.mark.parametrize(
    ("params", "status", "fragment"),
    [
        ({"model": "llama-3.1-8b", "stack": "nope"}, 404, "unknown stack 'nope'"),
        ({"model": "no/such-model", "stack": "lmdeploy"}, 404, "no architecture"),
        ({"model": "llama-3.1-8b", "stack": "lmdeploy", "hardware": "tpu"}, 404, "tpu"),
        ({"model": "llama-3.1-8b", "stack": "lmdeploy", "num_gpus": 3}, 422, "tensor-parallel"),
    ],
)
def test_stack_estimate_errors(
    client: httpx.Client, params: dict[str, object], status: int, fragment: str
) -> None:
    query = {"prompt_tokens": 5, "output_tokens": 20, **params}
    single = client.get("/v1/estimate", params=query)
    assert single.status_code == status, single.text
    assert fragment in single.json()["detail"]
    body = {**query, "prompt_tokens": [5], "output_tokens": [20]}
    batch = client.post("/v1/estimate/batch", json=body)
    assert batch.status_code == status, batch.text
    assert fragment in batch.json()["detail"]
