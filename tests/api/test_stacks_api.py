"""The estimate endpoints on a reference stack: the hardware model, not a stored fit."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from idealized_runtime.core.architectures import load_architecture
from idealized_runtime.core.catalog import get_hardware
from idealized_runtime.core.types import Deployment
from idealized_runtime.cost_model.hardware.roofline import hardware_model_runtime
from idealized_runtime.cost_model.hardware.stacks.catalog import HELM_STACK, get_stack
from tests.api.conftest import Service


@pytest.fixture(scope="module")
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as http:
        yield http


def _expected(stack: str, p: float, o: float, tp: int, hardware: str = "a100-80gb") -> float:
    return float(
        hardware_model_runtime(
            Deployment(
                architecture=load_architecture("llama-3.1-8b"),
                hardware=get_hardware(hardware),
                tp=tp,
                efficiency=get_stack(stack).efficiency,
            ),
            p,
            o,
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
    requests = [{"prompt_tokens": a, "output_tokens": b} for a, b in zip(p, o, strict=True)]
    response = client.post(
        "/v1/estimate/batch",
        json={"model": "llama-3.1-8b", "requests": requests, "stack": "tensorrt-llm",
              "num_gpus": 4},
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
    body = {key: value for key, value in query.items() if not key.endswith("_tokens")}
    body["requests"] = [{"prompt_tokens": 5, "output_tokens": 20}]
    batch = client.post("/v1/estimate/batch", json=body)
    assert batch.status_code == status, batch.text
    assert fragment in batch.json()["detail"]


# --- the leaderboard under several stacks ------------------------------------------------------


def test_leaderboard_rows_name_their_stack_and_compare_stacks(client: httpx.Client) -> None:
    plain = client.get("/v1/leaderboard")
    assert plain.status_code == 200, plain.text
    body = plain.json()
    assert body["stacks"] is None and body["stack_models"] is None
    davinci = next(m for m in body["models"] if m["model"] == "openai/davinci")
    assert davinci["stack"] == HELM_STACK  # the seeded HELM table was fitted on Megatron A100
    assert all(
        w["stack"] == HELM_STACK for w in body["workloads"] if w["model"] == "openai/davinci"
    )

    modern = "pytorch-compiled"
    response = client.get("/v1/leaderboard", params={"stacks": ["a100-megatron-2022", modern]})
    assert response.status_code == 200, response.text
    board = response.json()
    assert board["stacks"] == [HELM_STACK, modern] and board["stack_hardware"] == "a100-80gb"
    rows = {(r["model"], r["stack"]): r for r in board["stack_models"]}
    assert {stack for _, stack in rows} == {HELM_STACK, modern}
    helm, today = rows[("openai/davinci", HELM_STACK)], rows[("openai/davinci", modern)]
    assert helm["source"] == "fit" and today["source"] == "hardware-model"
    assert today["ratio"] == pytest.approx(
        today["idealized_runtime_s"] / helm["idealized_runtime_s"]
    )
    assert today["tp"] == 8  # HELM profiled davinci's shape at TP 8
    per_workload = [r for r in board["stack_workloads"] if r["model"] == "openai/davinci"]
    assert {r["stack"] for r in per_workload} == {HELM_STACK, modern}

    page = client.get("/v1/leaderboard.html", params={"stacks": [HELM_STACK, modern]})
    assert page.status_code == 200 and "Stacks side by side" in page.text
    assert 'id="reference-stack-table"' in page.text


def test_leaderboard_rows_name_their_architecture_group(client: httpx.Client) -> None:
    models = client.get("/v1/leaderboard").json()["models"]
    gptj = {row["model"]: row for row in models if row["group"] == "megatron-gptj-6b"}
    assert {"gooseai/gpt-j-6b", "together/gpt-j-6b"} <= set(gptj)
    assert sum(row["group_headline"] for row in gptj.values()) == 1
    for name, row in gptj.items():
        assert sorted(row["also_listed_as"]) == sorted(set(gptj) - {name})
    page = client.get("/v1/leaderboard.html").text
    assert 'class="alias" data-model="gooseai/gpt-j-6b"' in page


@pytest.mark.parametrize("path", ["/v1/leaderboard", "/v1/leaderboard.html"])
def test_leaderboard_unknown_stack_is_422(client: httpx.Client, path: str) -> None:
    response = client.get(path, params={"stacks": [HELM_STACK, "nope"]})
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"][:2] == ["query", "stacks"] and "pytorch-compiled" in error["msg"]
