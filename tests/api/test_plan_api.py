"""POST /v1/plan against the real server: the library's answer for the same question, from a
stored architecture or an HF config.json object; 4xx with a detail for bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.cost_model.planning.request import PlanRequest, PlanResult
from idealized_runtime.cost_model.planning.search import plan
from tests.api.conftest import Service

CONFIGS = Path(__file__).parents[1] / "hardware" / "hf_configs"
BODY = {
    "architecture": "llama-3.1-8b",
    "hardware": ["h100-sxm"],
    "stacks": ["sglang"],
    "workload": {"prompt_tokens": 1024, "output_tokens": 128, "min_length_fraction": 0.8},
    "slo": {"ttft_s": 0.5, "tpot_s": 0.02},
    "rate": 20,
    "max_gpus": 2,
    "concurrency": [1, 8, 64],
    "verify": False,
}


@pytest.fixture(scope="module")
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as http:
        yield http


def test_plan_answers_as_the_library(client: httpx.Client) -> None:
    response = client.post("/v1/plan", json=BODY)
    assert response.status_code == 200, response.text
    served = PlanResult.model_validate(response.json())
    settings = {k: v for k, v in BODY.items() if k not in ("architecture", "hardware")}
    local = plan(
        PlanRequest(
            architecture=get_architecture("llama-3.1-8b"),
            hardware=[get_hardware("h100-sxm")],
            **settings,  # type: ignore[arg-type]
        )
    )
    assert served.best == local.best and served.frontiers == local.frontiers
    assert served.gpus_for_rate == local.gpus_for_rate and served.best is not None
    # The candidates passed over come with their simulations, as the library gives them.
    assert "rejected_checks" in response.json()
    assert served.rejected_checks == local.rejected_checks


def test_plan_from_a_config_json(client: httpx.Client) -> None:
    config = json.loads((CONFIGS / "llama-3.3-70b.json").read_text())
    body = {**BODY, "architecture": None, "config": config, "concurrency": [8]}
    response = client.post("/v1/plan", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["deployments"] > 0


def test_plan_keeps_its_points_within_the_clients_asked(client: httpx.Client) -> None:
    response = client.post("/v1/plan", json={**BODY, "max_concurrency": 6})
    assert response.status_code == 200, response.text
    clients = [p["concurrency"] for f in response.json()["frontiers"] for p in f["points"]]
    assert clients and max(clients) == 6


def test_plan_takes_one_kv_cache_format_or_a_list(client: httpx.Client) -> None:
    """``kv_cache``: "fp8" asks for that cache alone, as ["fp8"] does."""
    answers = []
    for asked in ("fp8", ["fp8"]):
        response = client.post("/v1/plan", json={**BODY, "kv_cache": asked, "concurrency": [8]})
        assert response.status_code == 200, response.text
        points = [p for f in response.json()["frontiers"] for p in f["points"]]
        assert points and {p["kv_cache"] for p in points} == {"fp8"}
        answers.append(response.json()["frontiers"])
    assert answers[0] == answers[1]


@pytest.mark.parametrize(
    ("change", "status", "fragment"),
    [
        ({"hardware": ["tpu-v9"]}, 404, "tpu-v9"),
        ({"architecture": "no-such-model"}, 404, "no-such-model"),
        ({"config": {"model_type": "llama"}}, 422, "exactly one of"),
        ({"stacks": ["nope"]}, 422, "unknown stack 'nope'"),
        ({"architecture": "llama-3.1-405b", "max_gpus": 1}, 422, "no deployment"),
        ({"modes": ["disaggregated"], "max_gpus": 1}, 422, "disaggregated serving needs 2 GPUs"),
        ({"workload": {"prompt_tokens": 0, "output_tokens": 2}}, 422, "prompt_tokens"),
        (
            {"workload": {"prompt_tokens": 1000, "output_tokens": 1}},
            422,
            "a plan needs at least 2 output tokens, not 1",
        ),
        (
            {"workload": {"prompt_tokens": 131000, "output_tokens": 128}},
            422,
            "exceed the context length of llama-3.1-8b (131072 tokens)",
        ),
        (
            {"workload": {**BODY["workload"], "shared_prefix_tokens": 2048}},
            422,
            "a shared prefix of 2048 tokens is longer than the prompts (1024 tokens)",
        ),
        ({"modes": ["sideways"]}, 422, "modes"),
        ({"surprise": 1}, 422, "surprise"),
        ({"activations": "fp8"}, 422, "bf16 weights compute in bf16"),
        ({"max_concurrency": 0}, 422, "max_concurrency"),
        ({"kv_cache": "fp9"}, 422, "unknown KV-cache format 'fp9'"),
        ({"verify": True, "verify_candidates": 100}, 422, "verify_candidates"),
        ({"kv_cache": []}, 422, "kv_cache"),
        ({"moe_runner": "triton"}, 422, "moe_runner 'triton': sglang on h100-sxm has measured"),
    ],
)
def test_bad_plans_are_4xx_with_a_detail(
    client: httpx.Client, change: dict, status: int, fragment: str
) -> None:
    response = client.post("/v1/plan", json={**BODY, **change})
    assert response.status_code == status, response.text
    assert fragment in json.dumps(response.json()["detail"])
