"""Disaggregated serving (xPyD): prompts on prefill instances, decoding on decode instances.

A request goes to one of the ``prefill_workers`` prefill instances (round robin in arrival
order), which reads its prompt (its first output token comes with the last prompt chunk, as on
an aggregated server); its KV cache then moves to one of the ``decode_workers`` decode instances
(round robin in the order the transfers end), which decodes the remaining tokens with the prompt
and first token already cached. Each instance is the simulator's server (``simulator.simulate``)
with its own step times and scheduler; the two pools are coupled only by the requests they pass.

The KV transfer of a prompt of p tokens takes p x layers x (the KV bytes per token and layer one
GPU holds, the larger of the sending and receiving layout's) / the per-GPU link bandwidth: every
GPU sends or receives its own share at once (``kv_transfer_seconds``). The user sees the first
token once the transfer has ended (the decode instance streams it), so TTFT includes it.

Closed loop (``concurrency`` clients, each sending its next request when its last one ends):
client c sends requests c, c + C, c + 2C, ...; the arrival times follow from the ends, which
follow from the arrivals, so both pools are simulated again with each pass's ends until no
arrival moves by more than 0.5% of the run's span (``ClosedLoopResult.passes``: about as many
as requests per client; the medians then agree with the fixed point's within 0.1%).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Deployment
from idealized_runtime.cost_model.hardware.counts import kv_bytes_per_token_layer
from idealized_runtime.cost_model.serving.simulator import ServerConfig, simulate
from idealized_runtime.cost_model.serving.step_time import RememberedStepTime, StepTime
from idealized_runtime.cost_model.serving.workload import RequestShape

GB = 1e9
# Closed loop: passes until no arrival moves by more than this share of the run's span (the
# medians then move by less than 0.1%), at most MAX_PASSES.
ARRIVAL_TOLERANCE = 0.005
MAX_PASSES = 40


@dataclass(frozen=True)
class Server:
    """One engine instance: its step times and its scheduler."""

    step_time: StepTime
    config: ServerConfig


def transfer_bandwidth_gbps(deployment: Deployment) -> float:
    """GB/s per GPU and direction the KV cache moves at: the layout's, else the catalog's."""
    split = deployment.disaggregation
    if split is None:
        raise InputError("KV transfer applies to a disaggregated deployment")
    bandwidth = split.transfer_gbps or deployment.hardware.interconnect_gbps
    if not bandwidth > 0:
        raise InputError(
            f"{deployment.hardware.name} has no interconnect bandwidth in the catalog; give the "
            "KV transfer bandwidth of a disaggregated deployment (transfer_gbps)"
        )
    return float(bandwidth)


def kv_transfer_seconds(deployment: Deployment, prompt_tokens: Any) -> np.ndarray:
    """Seconds to move the KV cache of prompts of ``prompt_tokens`` tokens from a prefill to a
    decode instance (see the module docstring)."""
    arch, precision = deployment.architecture, deployment.precision
    prefill, decode = deployment.prefill_instance(), deployment.decode_instance()
    per_gpu = max(
        kv_bytes_per_token_layer(arch, precision, prefill.attention_tp),
        kv_bytes_per_token_layer(arch, precision, decode.attention_tp),
    )
    seconds_per_token = per_gpu * arch.num_layers / (transfer_bandwidth_gbps(deployment) * GB)
    return np.asarray(prompt_tokens, dtype=np.float64) * seconds_per_token


def simulate_disaggregated(
    shapes: Sequence[RequestShape],
    deployment: Deployment,
    prefill: Server,
    decode: Server,
    *,
    concurrency: int | None = None,
    model: str = "model",
    load: str = "simulated",
) -> list[dict[str, Any]]:
    """Serve ``shapes`` on the deployment's prefill and decode pools (open loop: their arrival
    times; closed loop: ``concurrency`` clients) and return one row per request, in request
    order, shaped as ``simulate``'s rows."""
    split = deployment.disaggregation
    if split is None:
        raise InputError("simulate_disaggregated needs a deployment with a disaggregation")
    if concurrency is None:
        if any(s.arrival_s is None for s in shapes):
            raise InputError("open-loop requests need arrival times")
        return _serve(shapes, deployment, prefill, decode, model, load)
    return simulate_closed_loop(
        shapes, deployment, prefill, decode, concurrency, model=model, load=load
    ).rows


@dataclass(frozen=True)
class ClosedLoopResult:
    rows: list[dict[str, Any]]
    passes: int
    converged: bool


def simulate_closed_loop(
    shapes: Sequence[RequestShape], deployment: Deployment, prefill: Server, decode: Server,
    concurrency: int, *, model: str = "model", load: str = "simulated",
) -> ClosedLoopResult:  # fmt: skip
    """The closed loop of ``simulate_disaggregated``, with how many passes it took."""
    if concurrency < 1:
        raise InputError(f"--concurrency must be >= 1, got {concurrency}")
    # Each pass repeats most of the last one's steps: their times are computed once.
    prefill = Server(RememberedStepTime(prefill.step_time), prefill.config)
    decode = Server(RememberedStepTime(decode.step_time), decode.config)
    count = len(shapes)
    arrivals = np.zeros(count)
    rows: list[dict[str, Any]] = []
    for passes in range(1, MAX_PASSES + 1):
        timed = [replace(s, arrival_s=float(a)) for s, a in zip(shapes, arrivals, strict=True)]
        rows = _serve(timed, deployment, prefill, decode, model, load)
        ends = np.array([row["finished_at_s"] for row in rows])
        following = arrivals.copy()
        following[concurrency:] = ends[: max(count - concurrency, 0)]
        moved = float(np.max(np.abs(following - arrivals), initial=0.0))
        arrivals = following
        if moved <= ARRIVAL_TOLERANCE * float(np.max(ends, initial=0.0)):
            return ClosedLoopResult(rows, passes, True)
    return ClosedLoopResult(rows, MAX_PASSES, False)


def _serve(
    shapes: Sequence[RequestShape],
    deployment: Deployment,
    prefill: Server,
    decode: Server,
    model: str,
    load: str,
) -> list[dict[str, Any]]:
    """One open-loop pass through both pools; rows in request order."""
    split = deployment.disaggregation
    assert split is not None
    order = sorted(range(len(shapes)), key=lambda i: (shapes[i].arrival_s, i))
    prompts = [replace(s, num_output_tokens=1) for s in shapes]
    # The request path: front end and tokenization before the prefill instance; the decode
    # instance streams every token (its delivery added to the user's times in ``_user_row``).
    path = prefill.config.request_path
    reads = replace(path, detokenize_s_per_token=0.0, stream_s=0.0)
    prefill = Server(prefill.step_time, replace(prefill.config, request_path=reads))
    first_token = _pool(prompts, order, split.prefill_workers, prefill)
    transfer = kv_transfer_seconds(deployment, [s.num_prompt_tokens for s in shapes])
    ready = {
        i: row["finished_at_s"] + float(transfer[i]) for i, row in first_token.items() if row["ok"]
    }
    # The decode instance holds the prompt and the first token: its first step makes token 2.
    continued = {
        i: RequestShape(
            shapes[i].num_prompt_tokens + 1,
            shapes[i].num_output_tokens - 1,
            ready[i],
            cached_tokens=shapes[i].num_prompt_tokens + 1,
        )
        for i in ready
        if shapes[i].num_output_tokens > 1
    }
    by_ready = sorted(continued, key=lambda i: (ready[i], i))
    # The request's overhead (HTTP, tokenization) was spent on the prefill instance; the KV
    # cache arrives at the decode instance's scheduler directly.
    streams = decode.config.request_path
    delivery = streams.delivery_s
    inner = replace(streams, http_s=0.0, tokenize_s_per_token=0.0, detokenize_s_per_token=0.0,
                    stream_s=0.0)  # fmt: skip
    direct = Server(
        decode.step_time, replace(decode.config, request_overhead_s=0.0, request_path=inner)
    )
    decoded = _pool(continued, by_ready, split.decode_workers, direct)
    return [
        _user_row(first_token[i], shape, ready.get(i), decoded.get(i), model, load, i, delivery)
        for i, shape in enumerate(shapes)
    ]


def _pool(
    shapes: Sequence[RequestShape] | dict[int, RequestShape],
    order: Sequence[int],
    workers: int,
    server: Server,
) -> dict[int, dict[str, Any]]:
    """Simulate each instance of a pool on its round-robin share of ``order``; rows by the
    requests' indices in ``shapes``."""
    found: dict[int, dict[str, Any]] = {}
    for worker in range(workers):
        mine = list(order[worker::workers])
        if not mine:
            continue
        served = simulate([shapes[i] for i in mine], server.step_time, server.config)
        for row in served:
            found[mine[row["request_index"]]] = row
    return found


def _user_row(
    first: dict[str, Any],
    shape: RequestShape,
    ready: float | None,
    decoded: dict[str, Any] | None,
    model: str,
    load: str,
    index: int,
    delivery: float = 0.0,
) -> dict[str, Any]:
    """The user's view of one request: the prefill instance's row, with the first token when
    the KV cache reached the decode instance (``ready``) and the rest as that one made them,
    each read by the client ``delivery`` seconds later (the decode instance streams them)."""
    row = {**first, "model": model, "load": load, "request_index": index,
           "requested_output_tokens": shape.num_output_tokens}  # fmt: skip
    if ready is None:  # the prompt never fitted the prefill instance
        return row
    if decoded is not None and not decoded["ok"]:
        row.update(ok=False, error=decoded["error"], num_output_tokens=0, runtime_s=None,
                   ttft_s=None, inter_token_latencies_s=[],
                   finished_at_s=decoded["finished_at_s"])  # fmt: skip
        return row
    gaps = [] if decoded is None else [decoded["ttft_s"], *decoded["inter_token_latencies_s"]]
    end = ready if decoded is None else decoded["finished_at_s"]
    arrival, ready, end = first["started_at_s"], ready + delivery, end + delivery
    row.update(num_output_tokens=shape.num_output_tokens, ttft_s=ready - arrival,
               runtime_s=end - arrival, inter_token_latencies_s=gaps,
               finished_at_s=end)  # fmt: skip
    return row
