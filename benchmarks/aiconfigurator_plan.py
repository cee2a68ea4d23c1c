"""Run under the benchmark's own AIConfigurator venv (``pip install aiconfigurator==0.12.0``),
for ``plan_vs_aiconfigurator.py``: AIConfigurator's own search (``cli_default``) and its
estimate of one deployment (``cli_estimate``).

Reads one JSON object on stdin and writes one to stdout:

- ``{"op": "default", "model_path", "system", "backend", "total_gpus", "isl", "osl", "ttft_ms",
  "tpot_ms"}``: its best configuration per mode (agg, disagg) as a flat dict of its table's
  columns, and the seconds its search took;
- ``{"op": "estimate", ..., "mode", layout fields}``: TTFT, TPOT (ms) and tokens/s per GPU of one
  deployment, or the error it raised.

This file imports only AIConfigurator, pandas (its dependency) and the standard library.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import tempfile
import time


def _row(frame) -> dict | None:  # type: ignore[no-untyped-def]
    if frame is None or len(frame) == 0:
        return None
    best = frame.sort_values("tokens/s/gpu", ascending=False).iloc[0]
    return {
        str(k): (v.item() if hasattr(v, "item") else v)
        for k, v in best.items()
        if not (isinstance(v, float) and math.isnan(v))
    }


def default(job: dict) -> dict:
    from aiconfigurator.cli.api import cli_default

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        result = cli_default(
            model_path=job["model_path"], total_gpus=job["total_gpus"], system=job["system"],
            backend=job["backend"], isl=job["isl"], osl=job["osl"], ttft=job["ttft_ms"],
            tpot=job["tpot_ms"], save_dir=folder,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    best = {mode: _row(frame) for mode, frame in result.best_configs.items()}
    return {"seconds": seconds, "best": best, "chosen": result.chosen_exp}


def estimate(job: dict) -> dict:
    from aiconfigurator.cli.api import cli_estimate

    start = time.perf_counter()
    try:
        result = cli_estimate(
            model_path=job["model_path"], system_name=job["system"], mode=job["mode"],
            backend_name=job["backend"], isl=job["isl"], osl=job["osl"],
            **job["layout"],
        )  # fmt: skip
    except Exception as error:
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}
    raw = {k: v for k, v in (result.raw or {}).items() if isinstance(v, int | float | str)}
    return {
        "ttft_ms": float(result.ttft),
        "tpot_ms": float(result.tpot),
        "raw": raw,
        "seconds": time.perf_counter() - start,
    }


def main() -> None:
    logging.disable(logging.WARNING)
    job = json.load(sys.stdin)
    answer = default(job) if job["op"] == "default" else estimate(job)
    json.dump(answer, sys.stdout, default=str)


if __name__ == "__main__":
    main()
