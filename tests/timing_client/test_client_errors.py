"""What `measure` does with answers that are not an OpenAI API (HTML pages, a server that does not
stream) and with outputs it cannot write: one readable line, no traceback, no stray files."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest

from idealized_runtime.core.errors import InputError
from idealized_runtime.timing.config import MeasureConfig
from idealized_runtime.timing.grids import GridPoint, load_grid
from idealized_runtime.timing.measure import measure
from idealized_runtime.timing.prompts import prepare_prompts
from idealized_runtime.timing.transport import ConnectionPool, EndpointClient, one_line
from tests.timing_client.conftest import measure_args, read_rows, run_cli

HTML_501 = """<!DOCTYPE HTML>
<html lang="en">
    <head>
        <meta charset="utf-8">
        <title>Error response</title>
    </head>
    <body>
        <h1>Error response</h1>
        <p>Error code: 501</p>
        <p>Message: Unsupported method ('POST').</p>
    </body>
</html>
"""
LOGIN_PAGE = "<html><head><title>Sign in</title></head><body>please log in</body></html>"
COMPLETION = {
    "id": "c-1",
    "model": "m",
    "choices": [{"index": 0, "text": "xyz", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
}


def _config(**changes) -> MeasureConfig:
    values = {
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
        "grid": [GridPoint(4, 3)],
        "max_retries": 2,
        "backoff_base_s": 0.0,
    }
    return MeasureConfig(**{**values, **changes})


def _attempt(handler, *, stream: bool, api_key: str | None = None):
    """One request of the client through an in-process transport (no sockets)."""
    config = _config(stream=stream)

    async def go():
        pool = ConnectionPool(1, {}, 5.0)
        client = EndpointClient(config, pool, api_key)
        http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        pool._clients.append(http)
        pool.release(http)
        try:
            return await client.request(client.payload("abcd", 3, stream=stream, fixed=False))
        finally:
            await pool.aclose()

    return asyncio.run(go())


def test_server_error_texts_become_one_line() -> None:
    assert one_line(HTML_501) == (
        "HTML page 'Error response': Error response Error code: 501 "
        "Message: Unsupported method ('POST')."
    )
    assert one_line('{"error": {"message": "model \'x\' not found"}}') == "model 'x' not found"
    assert one_line('{"detail": "Not Found"}') == "Not Found"
    # A list of validation errors keeps the field names (drop_rejected_fields reads them).
    detail = '{"detail": [{"loc": ["body", "ignore_eos"],\n "msg": "extra"}]}'
    assert "ignore_eos" in one_line(detail) and "\n" not in one_line(detail)
    assert len(one_line("x" * 2000)) == 500


@pytest.mark.parametrize("stream", [False, True])
def test_html_error_page_is_one_line_with_the_status(stream: bool) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(501, text=HTML_501, headers={"content-type": "text/html"})

    result, attempts, _ = _attempt(handler, stream=stream)
    assert not result.ok and attempts == 3  # 5xx is retried
    assert result.error.startswith("HTTP 501: HTML page 'Error response'")
    assert "\n" not in result.error


@pytest.mark.parametrize("stream", [False, True])
def test_a_200_html_page_is_a_failure_not_a_timing(stream: bool) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=LOGIN_PAGE, headers={"content-type": "text/html"})

    result, attempts, _ = _attempt(handler, stream=stream)
    assert not result.ok and result.runtime_s is None
    assert attempts == 1  # a page is not a transient failure: not retried
    assert "not an OpenAI-style completion (text/html)" in result.error
    assert "Sign in" in result.error


def test_a_server_that_ignores_stream_still_gives_a_timing_with_usage() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, json=COMPLETION)

    result, attempts, _ = _attempt(handler, stream=True)
    assert result.ok and attempts == 1 and result.runtime_s > 0
    assert result.usage == COMPLETION["usage"] and result.finish_reason == "length"
    assert result.ttft_s is None


def test_key_is_redacted_before_the_error_text_is_shortened() -> None:
    key = "sk-" + "k" * 40
    body = "e" * 480 + key + "f" * 100  # the key straddles the 500-character cut

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text=body)

    result, _, _ = _attempt(handler, stream=False, api_key=key)
    assert "sk-kkk" not in result.error and "***" in result.error


def test_unwritable_outputs_fail_before_any_request(tmp_path: Path) -> None:
    config = _config()  # port 9: any request would fail, so reaching one would show
    with pytest.raises(InputError, match="is a folder"):
        asyncio.run(measure(config, tmp_path, handle_sigint=False))
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write"):
        asyncio.run(measure(config, blocker / "raw.jsonl", handle_sigint=False))


def test_no_empty_output_is_left_when_nothing_was_measured(tmp_path: Path) -> None:
    out = tmp_path / "new" / "raw.jsonl"
    with pytest.raises(InputError, match="probe request"):
        asyncio.run(measure(_config(max_retries=0), out, handle_sigint=False))
    assert not out.exists()
    existing = tmp_path / "existing.jsonl"
    existing.write_text("")
    with pytest.raises(InputError, match="probe request"):
        asyncio.run(measure(_config(max_retries=0), existing, handle_sigint=False))
    assert existing.exists()  # not ours to delete


def test_grid_file_that_is_not_text_is_an_input_error(tmp_path: Path) -> None:
    for name in ("grid.csv", "grid.json"):
        path = tmp_path / name
        path.write_bytes(b"\xff\xfe\x00garbage")
        with pytest.raises(InputError, match="not a UTF-8 text file"):
            load_grid(str(path))


def test_cli_output_errors_and_summary_are_one_line(start_fake, tmp_path: Path) -> None:
    url = start_fake()
    result = run_cli(measure_args(url, tmp_path, "--grid", "quick"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path}: is a folder; -o names "
                                                  "the JSONL file to write"]  # fmt: skip
    # A long output path: the summary must not be wrapped onto a second line.
    out = tmp_path / ("a-rather-long-folder-name-" * 4) / "raw.jsonl"
    result = run_cli(measure_args(url, out, "--grid", "quick", "--repeats", "1"))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("concurrency=1: 9 rows written")
    assert str(out) in lines[0]
    assert len(read_rows(out)) == 9


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_cli_read_only_folder(start_fake, tmp_path: Path) -> None:  # pragma: no cover
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    result = run_cli(measure_args(start_fake(), locked / "raw.jsonl", "--grid", "quick"))
    assert result.returncode == 2 and "cannot write" in result.stderr


def test_calibration_cache_is_redone_when_more_repeats_need_more_units(tmp_path: Path) -> None:
    probes: list[str] = []

    async def probe(text: str) -> int:
        probes.append(text)
        return len(text.encode())  # one token per byte, nothing added

    cache = tmp_path / "raw.jsonl.calibration.json"

    def units(repeats: int) -> list[str]:
        return asyncio.run(prepare_prompts(_config(repeats=repeats), probe, cache)).recipe.units

    assert len(units(1)) == 1
    count = len(probes)
    assert len(units(1)) == 1 and len(probes) == count  # same command: the cache answers
    assert len(units(3)) == 3  # repeats 1 and 2 get prompts of their own
    assert len(probes) > count
