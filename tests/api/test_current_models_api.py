"""Today's models over the REST API: /v1/leaderboard and its HTML page with current_models=,
each model at plan's best deployment under the standard SLO from the shipped figures, as the
CLI's board; unknown names are 422."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from idealized_runtime.leaderboard.best_deployments import REGENERATE, STANDARD, read_shipped
from idealized_runtime.report.current_tables import SLO_DEPLOYMENT_HEADER, SLO_TOKENS_HEADER
from tests.api.conftest import Service


@pytest.fixture(scope="module")
def client(service: Service) -> Iterator[httpx.Client]:
    with service.client() as http:
        yield http


def test_leaderboard_serves_todays_models_at_their_best_deployment(client: httpx.Client) -> None:
    plain = client.get("/v1/leaderboard")
    assert plain.status_code == 200 and plain.json()["current_models"] is None
    params = {"current_models": ["qwen3-8b", "deepseek-v3"], "current_gpu": "h200"}
    response = client.get("/v1/leaderboard", params=params)
    assert response.status_code == 200, response.text
    board = response.json()["current_models"]
    assert board["hardware"] == "h200" and board["serving"] == "shipped"
    assert board["serving_standard"] == STANDARD.label and REGENERATE in board["serving_provenance"]
    shipped = read_shipped()
    assert [row["model"] for row in board["models"]] == ["qwen3-8b", "deepseek-v3"]
    for row in board["models"]:
        expected = shipped.find(row["model"], "h200").model_dump(mode="json")
        assert row["best_deployment"] == {**expected, "source": "shipped"}
    page = client.get("/v1/leaderboard.html", params=params)
    assert page.status_code == 200 and 'id="current-models-table"' in page.text
    assert f">{SLO_TOKENS_HEADER}</th>" in page.text and SLO_DEPLOYMENT_HEADER in page.text
    mixed = {"current_models": ["phi-4", "flagship", "llama-3.1-8b", "phi-4"]}
    flagship = client.get("/v1/leaderboard", params=mixed).json()["current_models"]["models"]
    names = [row["model"] for row in flagship]
    assert names[:2] == ["phi-4", "llama-3.3-70b"] and names[-1] == "llama-3.1-8b"
    assert len(names) == 11 == len(set(names))
    # A model outside the shipped figures says how to plan it.
    assert flagship[-1]["best_deployment"]["status"] == "not-computed"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"current_models": "gpt-5"}, "'qwen3-8b'"),
        ({"current_gpu": "tpu-v9"}, "'h100-sxm'"),
    ],
)
def test_unknown_current_names_are_422(client: httpx.Client, params: dict, message: str) -> None:
    response = client.get("/v1/leaderboard", params=params)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"][:2] == ["query", next(iter(params))] and message in error["msg"]
