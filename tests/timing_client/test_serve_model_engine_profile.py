"""`serve-model`'s engine profile (`POST /v1/engine/profile`) and request log (`--request-log`):
the served engine timed in its own process, and the server-side times of each request."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from idealized_runtime.core.architectures import load_architecture
from idealized_runtime.cost_model.serving.step_time import fit_step_timings, read_step_fit
from idealized_runtime.local_runner.openai_server import ApiError, ModelService, ProfileRequest
from tests.servers import cli_command
from tests.timing_client.conftest import run_cli

SMALL_PROFILE = {"batch_sizes": [1, 2, 4], "prompt_tokens": [4, 12], "output_tokens": 4}


def test_the_engine_profile_times_the_served_engine_for_simulate_fit(
    batched_served: str, tmp_path: Path
) -> None:
    response = httpx.post(f"{batched_served}/engine/profile", json=SMALL_PROFILE, timeout=120)
    assert response.status_code == 200, response.text
    profile = response.json()
    assert profile["object"] == "engine.profile"
    assert profile["model"] == "tiny-llama"
    assert (profile["max_batch"], profile["token_budget"]) == (4, 16)
    steps = profile["steps"]
    assert steps and all(step["seconds"] > 0 for step in steps)
    for step in steps:  # the server's own limits: 4 sequences, 16 tokens a step
        assert len(step["decode_contexts"]) + len(step["chunks"]) <= 4
        assert len(step["decode_contexts"]) + sum(n for n, _ in step["chunks"]) <= 16
    assert max(len(step["decode_contexts"]) for step in steps) == 4  # batch 4 decoded together
    assert any(step["decode_contexts"] and step["chunks"] for step in steps)  # mixed steps
    fit = fit_step_timings(steps, profile["model"])
    assert fit.max_batch == 4
    # The saved JSON is what `simulate --fit` reads.
    saved = tmp_path / "engine-profile.json"
    saved.write_text(response.text)
    assert read_step_fit(saved) == fit
    simulate = cli_command(
        "simulate", "--fit", str(saved), "--concurrency", "2", "--prompt-tokens", "12",
        "--output-tokens", "4", "--requests", "20", "-o", str(tmp_path / "sim.jsonl"),
    )  # fmt: skip
    result = run_cli(simulate)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "sim.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and all(row["ok"] for row in rows)


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"batch_sizes": [8]}, "batch_sizes", "batch_sizes: each must be 1 to 4"),
        ({"batch_sizes": [0, 2]}, "batch_sizes", "batch_sizes: each must be 1 to 4"),
        ({"prompt_tokens": [100000]}, "prompt_tokens", None),
        ({"output_tokens": 0}, "output_tokens", None),
        ({"repeats": "2"}, "repeats", None),
        ({"tokens": 3}, "tokens", None),
    ],
)
def test_bad_profile_settings_are_refused_with_the_field(
    batched_served: str, body: dict[str, Any], param: str, message: str | None
) -> None:
    response = httpx.post(f"{batched_served}/engine/profile", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["message"].startswith(message or f"{param}:")


def test_a_profile_body_that_is_not_json_is_refused(batched_served: str) -> None:
    response = httpx.post(f"{batched_served}/engine/profile", content=b"{not json", timeout=60)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "request body is not valid JSON"


def _stream_chat(client: httpx.Client, base: str, tokens: int) -> dict[str, float]:
    """One streamed chat request; the client's own clock around it."""
    body = {
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": tokens,
        "stream": True,
    }
    times: dict[str, float] = {"sent": time.time()}
    with client.stream("POST", f"{base}/chat/completions", json=body) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if '"content"' in line and "first" not in times:
                times["first"] = time.time()
            if '"content"' in line:
                times["last"] = time.time()
    times["done"] = time.time()
    return times


def test_the_request_log_holds_each_requests_server_side_times(
    batched_served: str, request_log: Path
) -> None:
    before = len(request_log.read_text().splitlines()) if request_log.exists() else 0
    with httpx.Client(timeout=60) as client:
        seen = [_stream_chat(client, batched_served, tokens) for tokens in (1, 3, 6)]
        plain = client.post(
            f"{batched_served}/completions",
            json={"model": "tiny-llama", "prompt": [5, 6, 7], "max_tokens": 2},
        )
        assert plain.status_code == 200
    records = [json.loads(line) for line in request_log.read_text().splitlines()[before:]]
    assert [(r["endpoint"], r["stream"], r["num_output_tokens"]) for r in records] == [
        ("chat", True, 1), ("chat", True, 3), ("chat", True, 6), ("completions", False, 2),
    ]  # fmt: skip
    assert all(r["ok"] for r in records)
    assert records[-1]["num_prompt_tokens"] == 3
    for record, client_times in zip(records, seen, strict=False):
        # The server's clock is the client's (one machine): causality orders the two records.
        assert client_times["sent"] <= record["received_at_s"]
        assert record["received_at_s"] <= record["first_token_at_s"] <= record["last_token_at_s"]
        assert record["last_token_at_s"] <= record["finished_at_s"] <= client_times["done"]
        assert record["first_token_at_s"] <= client_times["first"]
        assert record["last_token_at_s"] <= client_times["last"]
    assert records[0]["first_token_at_s"] == records[0]["last_token_at_s"]  # one token
    assert {r["user_agent"] for r in records} == {f"python-httpx/{httpx.__version__}"}


def test_the_request_log_tells_our_clients_requests_apart(
    batched_served: str, request_log: Path, tmp_path: Path
) -> None:
    """`measure` names itself in User-Agent, so that a server shared with other clients (a
    load test beside ours) can tell whose request each logged one was."""
    from idealized_runtime import __version__

    before = len(request_log.read_text().splitlines()) if request_log.exists() else 0
    grid = tmp_path / "grid.csv"
    grid.write_text("num_prompt_tokens,num_output_tokens\n4,2\n")
    out = tmp_path / "rows.jsonl"
    result = run_cli(cli_command(
        "measure", "--base-url", batched_served, "--model", "tiny-llama", "-o", str(out),
        "--grid", str(grid), "--repeats", "2", "--no-progress",
    ))  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in request_log.read_text().splitlines()[before:]]
    assert records and {r["user_agent"] for r in records} == {f"idealized-runtime/{__version__}"}


# --- the in-flight rule, on the service itself (deterministic: the test holds the request) ---


@pytest.fixture(scope="module")
def service() -> ModelService:
    return ModelService(load_architecture("tiny-llama"), max_batch_size=2, token_budget=8)


SETTINGS = ProfileRequest(batch_sizes=[1, 2], prompt_tokens=[3], output_tokens=2, warmup=False)


def test_a_profile_is_refused_while_a_request_is_in_flight(service: ModelService) -> None:
    async def scenario() -> tuple[int, list[int], dict[str, Any]]:
        tokens = service.tokens([1, 2, 3], 4)
        first = await anext(tokens)  # the request holds the engine from here to its end
        try:
            await service.profile(SETTINGS)
        except ApiError as error:
            status = error.status
        rest = [token async for token in tokens]
        return status, [first, *rest], await service.profile(SETTINGS)  # idle again

    status, tokens, profile = asyncio.run(scenario())
    assert status == 409
    assert len(tokens) == 4
    assert profile["steps"]


def test_a_request_arriving_during_a_profile_waits_and_is_unchanged(service: ModelService) -> None:
    async def alone() -> list[int]:
        return [token async for token in service.tokens([9, 8, 7, 6], 5)]

    async def during_profile() -> tuple[list[int], dict[str, Any]]:
        profiling = asyncio.create_task(service.profile(SETTINGS))
        await asyncio.sleep(0)  # the profile has started: it holds the engine
        assert service._profiling is not None
        tokens = await alone()
        return tokens, await profiling

    expected = asyncio.run(alone())
    tokens, profile = asyncio.run(during_profile())
    assert tokens == expected
    assert profile["steps"]


def test_profiling_needs_continuous_batching() -> None:
    single = ModelService(load_architecture("tiny-llama"), max_batch_size=1)
    with pytest.raises(ApiError) as refused:
        asyncio.run(single.profile(ProfileRequest()))
    assert refused.value.status == 400
    assert "continuous batching" in refused.value.message


def test_a_request_log_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "requests.jsonl"
    result = run_cli(
        cli_command("serve-model", "--arch", "tiny-llama", "--request-log", str(missing))
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()[-1] == f"error: --request-log {missing}: no such folder"
    )
