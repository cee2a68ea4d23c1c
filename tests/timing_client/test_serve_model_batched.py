"""`serve-model --max-batch B` (continuous batching) under concurrent real HTTP clients."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from idealized_runtime.cost_model.serving.step_time import read_step_fit
from tests.servers import cli_command
from tests.timing_client.conftest import ENV

CLIENTS = 8


def _prompt(i: int) -> list[int]:
    return [(7 * i + j) % 200 for j in range(5 + 9 * i)]


async def _complete(client: httpx.AsyncClient, base: str, i: int, stream: bool) -> dict:
    body = {"model": "tiny-llama", "prompt": _prompt(i), "max_tokens": 3 + 2 * i}
    if not stream:
        response = await client.post(f"{base}/completions", json=body)
        assert response.status_code == 200, response.text
        data = response.json()
        return {"text": data["choices"][0]["text"], "usage": data["usage"], "pieces": None}
    pieces, usage = [], None
    async with client.stream("POST", f"{base}/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            elif chunk["choices"][0]["finish_reason"] is None:
                pieces.append(chunk["choices"][0]["text"])
    return {"text": "".join(pieces), "usage": usage, "pieces": len(pieces)}


def _run_concurrently(base: str, stream: bool) -> list[dict]:
    async def main() -> list[dict]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(
                *(_complete(client, base, i, stream) for i in range(CLIENTS))
            )

    return asyncio.run(main())


@pytest.mark.parametrize("stream", [True, False])
def test_concurrent_clients_each_get_exactly_max_tokens(batched_served: str, stream: bool) -> None:
    results = _run_concurrently(batched_served, stream)
    for i, result in enumerate(results):
        expected = 3 + 2 * i
        assert result["usage"] == {
            "prompt_tokens": len(_prompt(i)),
            "completion_tokens": expected,
            "total_tokens": len(_prompt(i)) + expected,
        }
        if stream:
            assert result["pieces"] == expected


def test_batched_text_equals_one_at_a_time(batched_served: str) -> None:
    together = _run_concurrently(batched_served, stream=False)
    with httpx.Client(timeout=60) as client:
        for i, result in enumerate(together):
            body = {"model": "tiny-llama", "prompt": _prompt(i), "max_tokens": 3 + 2 * i}
            alone = client.post(f"{batched_served}/completions", json=body).json()
            assert alone["choices"][0]["text"] == result["text"]


def test_the_step_log_records_each_batched_step_for_the_simulator(
    batched_served: str, step_log: Path
) -> None:
    _run_concurrently(batched_served, stream=True)
    steps = [json.loads(line) for line in step_log.read_text().splitlines()]
    assert steps and all(s["seconds"] > 0 for s in steps)
    for step in steps:  # within the server's limits: 4 sequences, 16 tokens a step
        assert len(step["decode_contexts"]) + len(step["chunks"]) <= 4
        assert len(step["decode_contexts"]) + sum(n for n, _ in step["chunks"]) <= 16
    assert any(len(s["decode_contexts"]) > 1 for s in steps)  # requests were batched
    # Each step ends on the server's wall clock after the previous one, and began after it.
    ends = [s["finished_at_s"] for s in steps]
    assert ends == sorted(ends)
    for before, after in itertools.pairwise(steps):
        assert after["finished_at_s"] - after["seconds"] >= before["finished_at_s"] - 1e-3
    fit = read_step_fit(step_log)  # what `simulate --fit steps.jsonl` uses
    assert fit.max_batch is not None and fit.max_batch <= 4


def test_step_log_needs_batching(tmp_path: Path) -> None:
    result = subprocess.run(
        cli_command("serve-model", "--arch", "tiny-llama", "--step-log", str(tmp_path / "s")),
        capture_output=True, text=True, timeout=60, env={**os.environ, **ENV},
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --step-log needs continuous batching (--max-batch 2 or more)"
    )
