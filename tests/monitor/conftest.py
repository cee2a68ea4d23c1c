"""Loopback servers for the monitor's end-to-end tests: fake OpenAI-compatible providers whose
latency is injected (``tests/timing_client/fake_openai.py``: fixed delays, seeded noise, a
slowdown from a known request on) and a monitoring file that probes them."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.servers import free_port, running_server


@contextlib.contextmanager
def fake_provider(log_dir: Path, name: str, *options: str) -> Iterator[str]:
    """A fake provider on a free loopback port; yields its base URL (…/v1)."""
    port = free_port()
    command = [sys.executable, "-m", "tests.timing_client.fake_openai", "--port", str(port)]
    with running_server(
        [*command, *options],
        f"http://127.0.0.1:{port}/health",
        log_path=log_dir / f"{name}.log",
    ):
        yield f"http://127.0.0.1:{port}/v1"


def monitoring_file(
    path: Path,
    endpoints: Sequence[dict[str, Any]],
    *,
    shapes: Sequence[tuple[int, int]] = ((32, 4), (32, 12)),
    repeats: int = 2,
    concurrency: int = 1,
    **settings: Any,
) -> Path:
    """Write a monitoring file: a tiny interval and jitter unless ``settings`` say otherwise."""
    config = {
        "interval_s": 0.02,
        "jitter_s": 0.02,
        "seed": 7,
        "probe": {
            "shapes": [list(shape) for shape in shapes],
            "repeats": repeats,
            "concurrency": concurrency,
            "backoff_base_s": 0.01,
            "backoff_max_s": 0.05,
            **settings.pop("probe", {}),
        },
        "endpoints": list(endpoints),
        **settings,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path
