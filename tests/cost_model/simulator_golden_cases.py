"""Simulator runs whose rows and summaries are pinned bit for bit (``test_simulator_golden``):
every scheduler rule the simulator has (chunked and whole prompts, prefill-first, the four
admission rules with evictions, attention DP with and without the balance, speculative
decoding, the request path, think times, a stop time), the engines' own servers, and xPyD open
and closed loops. Each case returns its rows."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.types import Disaggregation, Slo, SpeculativeDecoding
from idealized_runtime.cost_model.hardware.engines.request_path import RequestPath
from idealized_runtime.cost_model.serving.disaggregated import (
    Server,
    simulate_closed_loop,
    simulate_disaggregated,
)
from idealized_runtime.cost_model.serving.engines import engine_server
from idealized_runtime.cost_model.serving.simulator import ServerConfig, simulate
from idealized_runtime.cost_model.serving.step_time import FittedStepTime
from idealized_runtime.cost_model.serving.workload import RequestShape, poisson_arrivals
from idealized_runtime.timing.summary import summarize_level
from tests.deployments import deploy

SLO = Slo(ttft_s=0.5, tpot_s=0.02, e2e_s=5.0)
# Step times with every term non-zero, so that sums in a different order would show.
STEPS = FittedStepTime(
    "m", intercept_s=0.0071, per_token_s=3.3e-5, per_attended_s=1.7e-8, per_sequence_s=2.9e-6
)
PATH = RequestPath(
    http_s=0.0013,
    tokenize_s_per_token=2.1e-6,
    detokenize_s_per_token=7e-6,
    stream_s=1.1e-4,
    schedule_ahead_steps=1,
)


def shapes(
    count: int, seed: int, prompt: int = 600, output: int = 90, rate: float = 0.0, cached: int = 0
) -> list[RequestShape]:
    """``count`` requests of lengths drawn from a third of the stated to the stated, at Poisson
    arrival times when ``rate`` is given (else closed loop)."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(prompt // 3, prompt + 1, size=count)
    outputs = rng.integers(max(output // 3, 1), output + 1, size=count)
    arrivals = poisson_arrivals(rate, count, seed) if rate else [None] * count
    return [
        RequestShape(int(p), int(o), None if a is None else float(a), min(cached, int(p) - 1))
        for p, o, a in zip(prompts, outputs, arrivals, strict=True)
    ]


def _closed(
    config: ServerConfig,
    concurrency: int,
    count: int,
    seed: int,
    output: int = 90,
    too_long: bool = False,
    **options: Any,
):
    def run() -> list[dict[str, Any]]:
        requests = shapes(count, seed, output=output)
        if too_long:  # requests whose sequence fills the KV cache, and one that overflows it
            capacity = config.kv_capacity_tokens or 10
            requests.insert(count // 3, RequestShape(capacity - 5, 5))
            requests.insert(count // 2, RequestShape(capacity, 5))
        return simulate(requests, STEPS, config, concurrency=concurrency, **options)

    return run


def _open(config: ServerConfig, count: int, seed: int, rate: float, **options: Any):
    def run() -> list[dict[str, Any]]:
        return simulate(shapes(count, seed, rate=rate, **options), STEPS, config)

    return run


def _engine(engine: str, concurrency: int, count: int, seed: int, **layout: Any):
    def run() -> list[dict[str, Any]]:
        arch = get_architecture(layout.pop("model", "llama-3.1-8b"))
        deployment = deploy(arch, get_hardware(layout.pop("gpu", "h100-sxm")), **layout)
        kv = layout_kv.get(engine)
        step_time, config = engine_server(engine, deployment, kv_tokens=kv, longest_prompt=600)
        return simulate(shapes(count, seed), step_time, config, concurrency=concurrency)

    layout_kv = {"vllm": 9_000, "sglang": 9_000}
    return run


def _xpyd(concurrency: int | None, count: int, seed: int):
    def run() -> list[dict[str, Any]]:
        split = Disaggregation(prefill_workers=2, decode_workers=3, prefill_tp=1)
        deployment = deploy(
            get_architecture("llama-3.1-8b"), get_hardware("h100-sxm"), disaggregation=split
        )
        prefill = Server(STEPS, ServerConfig(max_batch=16, token_budget=1024, request_path=PATH))
        decode = Server(
            STEPS,
            ServerConfig(
                max_batch=24,
                token_budget=512,
                request_path=PATH,
                kv_capacity_tokens=9_000,
                admission="allocated",
            ),
        )
        if concurrency is None:
            requests = shapes(count, seed, rate=40.0)
            return simulate_disaggregated(requests, deployment, prefill, decode)
        result = simulate_closed_loop(shapes(count, seed), deployment, prefill, decode, concurrency)
        rows = result.rows
        rows[0] = {**rows[0], "passes": result.passes, "converged": result.converged}
        return rows

    return run


def _odd_values() -> list[dict[str, Any]]:
    """Rows as other sources write them: inter-token latencies with integers, booleans, None,
    numbers as text, NaN and infinities, a failed row's leftovers, a row without latencies."""
    rows = _closed(ServerConfig(max_batch=8, token_budget=256), 8, 24, 22)()
    odd: list[Any] = [1, True, None, "0.5", float("nan"), float("inf"), -0.25, "x", False, 2**60]
    for i, row in enumerate(rows):
        gaps = list(row["inter_token_latencies_s"])
        gaps[i % len(gaps)] = odd[i % len(odd)]
        row["inter_token_latencies_s"] = gaps
    rows[3] = {**rows[3], "ok": False, "runtime_s": None}
    rows[4] = {**rows[4], "inter_token_latencies_s": None, "num_output_tokens": "7"}
    rows[5] = {**rows[5], "ttft_s": float("nan"), "run_id": "second"}
    return rows


CASES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "summary-odd-values": _odd_values,
    "chunked-closed": _closed(ServerConfig(max_batch=24, token_budget=512), 32, 96, 1),
    "chunked-path-think-stop": _closed(
        ServerConfig(max_batch=16, token_budget=384, request_path=PATH),
        20,
        90,
        2,
        think_time_s=[0.05, 0.0, 0.2],
        stop_after_s=6.0,
    ),
    "whole-prompt-limit": _closed(
        ServerConfig(
            max_batch=16, token_budget=1024, chunked_prefill=False, unchunked_limit="prompt"
        ),
        24,
        72,
        3,
    ),
    "whole-sequence-limit": _closed(
        ServerConfig(
            max_batch=16, token_budget=1024, chunked_prefill=False, unchunked_limit="sequence"
        ),
        24,
        72,
        4,
    ),
    "prefill-first-recv": _closed(
        ServerConfig(
            max_batch=16,
            token_budget=700,
            prefill_first=True,
            chunked_prefill=False,
            recv_interval=4,
        ),
        24,
        72,
        5,
    ),
    "reserve-kv-limited": _closed(
        ServerConfig(max_batch=32, token_budget=512, kv_capacity_tokens=4_000),
        32,
        96,
        6,
        too_long=True,
    ),
    "allocated-evicts": _closed(
        ServerConfig(
            max_batch=32, token_budget=512, kv_capacity_tokens=5_000, admission="allocated"
        ),
        32,
        96,
        7,
    ),
    "ratio-retracts": _closed(
        ServerConfig(
            max_batch=32,
            token_budget=512,
            kv_capacity_tokens=3_000,
            admission="ratio",
            prefill_first=True,
        ),
        32,
        96,
        8,
        output=300,
        too_long=True,
    ),
    "forecast-retracts": _closed(
        ServerConfig(
            max_batch=32, token_budget=512, kv_capacity_tokens=3_000, admission="forecast"
        ),
        32,
        96,
        9,
        output=300,
    ),
    "attention-dp": _closed(ServerConfig(max_batch=32, token_budget=1024, dp_ranks=4), 40, 120, 10),
    "attention-dp-balance": _closed(
        ServerConfig(
            max_batch=32,
            token_budget=1024,
            dp_ranks=4,
            balance_timeout_steps=5,
            chunked_prefill=False,
            kv_capacity_tokens=12_000,
        ),
        40,
        120,
        11,
    ),
    "speculative": _closed(
        ServerConfig(max_batch=24, token_budget=512, tokens_per_step=2.37, decode_tokens=3),
        24,
        72,
        12,
    ),
    "speculative-allocated-evicts": _closed(
        ServerConfig(
            max_batch=24,
            token_budget=512,
            tokens_per_step=1.81,
            decode_tokens=2,
            kv_capacity_tokens=4_500,
            admission="allocated",
        ),
        24,
        72,
        13,
    ),
    "open-loop-poisson": _open(
        ServerConfig(max_batch=16, token_budget=512, request_path=PATH), 120, 14, 6.0
    ),
    "open-loop-prefix-cached": _open(
        ServerConfig(max_batch=16, token_budget=256, kv_capacity_tokens=6_000, admission="ratio"),
        100,
        15,
        8.0,
        cached=200,
    ),
    "tensorrt-llm": _engine("tensorrt-llm", 48, 96, 16),
    "tensorrt-llm-attention-dp-mtp": _engine(
        "tensorrt-llm",
        64,
        128,
        17,
        model="deepseek-v3",
        gpu="b200",
        tp=8,
        ep=8,
        attention_dp=8,
        speculative=SpeculativeDecoding(draft_tokens=3, acceptance_rate=0.7),
    ),
    "vllm": _engine("vllm", 48, 96, 18),
    "sglang": _engine("sglang", 48, 96, 19),
    "xpyd-open": _xpyd(None, 90, 20),
    "xpyd-closed": _xpyd(36, 108, 21),
}


def digest(value: Any) -> str:
    """A short hash of ``value``'s JSON (floats written exactly, as repr does)."""
    text = json.dumps(value, sort_keys=True, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the golden file keeps of a case: hashes of the rows and of their summaries (all,
    and without each client's first request, as ``plan``'s verification summarizes them), and
    per row (request, ok, TTFT, end, tokens) rounded to 1e-12 to show where a difference is."""
    summary = summarize_level("m", "golden", rows, SLO).model_dump(mode="json")
    steady = summarize_level("m", "golden", rows[len(rows) // 3 :], SLO).model_dump(mode="json")
    return {
        "rows": digest(rows),
        "summary": digest(summary),
        "steady_summary": digest(steady),
        "requests": len(rows),
        "per_row": [
            [
                row["request_index"],
                row["ok"],
                _rounded(row["ttft_s"]),
                _rounded(row["finished_at_s"]),
                row["num_output_tokens"],
            ]
            for row in rows
        ],
    }


def _rounded(value: float | None) -> float | str | None:
    """To 1e-12, comparable as JSON (NaN as text)."""
    return None if value is None else round(value, 12) if math.isfinite(value) else repr(value)
