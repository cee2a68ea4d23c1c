"""Fixtures: the misbehaving fake OpenAI server, and helpers to run and read `measure`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import REPO_ROOT, cli_command, free_port, running_server

ENV = {"PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@contextlib.contextmanager
def fake_server(tmp_path: Path, *options: str) -> Iterator[str]:
    """Start tests/timing_client/fake_openai.py; yields its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "tests.timing_client.fake_openai", "--port", str(port)]
    with running_server(
        [*command, *options],
        f"http://127.0.0.1:{port}/health",
        env=ENV,
        timeout_s=30,
        log_path=tmp_path / f"fake-{port}.log",
    ):
        yield f"http://127.0.0.1:{port}/v1"


@contextlib.contextmanager
def batched_serve_model(folder: Path, *options: str) -> Iterator[str]:
    """`serve-model` of tiny-llama with continuous batching (4 sequences, 16 tokens a step)
    and ``options``; yields its base URL."""
    port = free_port()
    command = cli_command(
        "serve-model", "--arch", "tiny-llama", "--port", str(port),
        "--max-batch", "4", "--token-budget", "16", *options,
    )  # fmt: skip
    with running_server(
        command,
        f"http://127.0.0.1:{port}/health",
        env=ENV,
        timeout_s=90,
        log_path=folder / "serve-model.log",
    ):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def step_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where ``batched_served`` logs its steps (``--step-log``)."""
    return tmp_path_factory.mktemp("steps") / "steps.jsonl"


@pytest.fixture(scope="module")
def request_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where ``batched_served`` logs its requests (``--request-log``)."""
    return tmp_path_factory.mktemp("requests") / "requests.jsonl"


@pytest.fixture(scope="module")
def batched_served(
    tmp_path_factory: pytest.TempPathFactory, step_log: Path, request_log: Path
) -> Iterator[str]:
    """One `batched_serve_model` per test module, logging its steps and its requests; its base
    URL."""
    folder = tmp_path_factory.mktemp("serve")
    logs = ("--step-log", str(step_log), "--request-log", str(request_log))
    with batched_serve_model(folder, *logs) as base_url:
        yield base_url


@pytest.fixture
def start_fake(tmp_path: Path) -> Iterator[Callable[..., str]]:
    with contextlib.ExitStack() as stack:
        yield lambda *options: stack.enter_context(fake_server(tmp_path, *options))


def measure_args(base_url: str, output: Path, *extra: str) -> list[str]:
    return cli_command(
        "measure", "--base-url", base_url, "--model", "fake", "-o", str(output),
        "--no-progress", *extra,
    )  # fmt: skip


def run_cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env={**os.environ, **ENV, **(env or {})},
    )


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def keys(rows: list[dict[str, Any]]) -> list[tuple]:
    return [
        (r["model"], r["endpoint"], r["requested_prompt_tokens"], r["requested_output_tokens"],
         r["repeat"])
        for r in rows
    ]  # fmt: skip
