"""KV-cache admission and eviction as the engines do it: vLLM's allocation now with preemption,
SGLang's decaying estimate and its forecast with retraction, TensorRT-LLM's whole-sequence
reservation; SGLang's receive interval. Hand calculations and properties (the cache never
overflows, every request ends with its exact tokens)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.serving.admission import (
    SGLANG_INIT_RATIO,
    SGLANG_MIN_RATIO,
    KvCache,
)
from idealized_runtime.cost_model.serving.simulator import ServerConfig, simulate
from idealized_runtime.cost_model.serving.step_time import FittedStepTime, StepWork
from idealized_runtime.cost_model.serving.workload import RequestShape

ONE_SECOND_STEPS = FittedStepTime("m", intercept_s=1.0, per_token_s=0.0, per_attended_s=0.0)


@dataclass
class _Held:
    """A request as admission sees it."""

    prompt: int
    output: int
    outputs: int = 0
    prefilled: int = 0

    @property
    def need(self) -> int:
        return self.prompt + self.output

    @property
    def held(self) -> int:
        return self.prompt + self.outputs if self.prefilled == self.prompt else self.prefilled

    @property
    def to_prefill(self) -> int:
        return self.prompt - self.prefilled

    @property
    def output_left(self) -> int:
        return self.output - self.outputs


def _running(prompt: int, output: int, outputs: int) -> _Held:
    return _Held(prompt, output, outputs, prefilled=prompt)


def test_reserve_counts_whole_sequences() -> None:
    cache = KvCache(100, "reserve")
    running = [_running(10, 40, 5)]  # reserves 50
    assert cache.admits(_Held(10, 40), running, [], 0, 10)  # 50 + 50 = 100
    assert not cache.admits(_Held(10, 41), running, [], 0, 10)
    assert not cache.evicts


def test_allocated_counts_what_is_held_and_this_steps_tokens() -> None:
    cache = KvCache(100, "allocated")
    running = [_running(10, 400, 60)]  # holds 70; its decode token takes 1 this step
    assert cache.admits(_Held(29, 1000), running, [], 1, 29)  # 70 + 1 + 29 = 100
    assert not cache.admits(_Held(30, 1), running, [], 1, 30)
    newest = _running(1, 5, 0)
    assert cache.victim([running[0], newest]) is newest and cache.requeue_first


def test_sglang_ratio_estimate_by_hand() -> None:
    cache = KvCache(1000, "ratio")
    # Holds 300 (200 prompt + 100 outputs), 5000 outputs left (clipped to 4096): estimate
    # 4096 x 0.7 = 2867 > 700 free, so nothing comes in.
    assert not cache.admits(_Held(10, 10), [_running(200, 5100, 100)], [], 0, 10)
    # 500 left: 500 x 0.7 = 350; free 700 - 350 = 350 > 100 + 200 (its prompt and outputs).
    running = [_running(200, 600, 100)]
    assert cache.admits(_Held(100, 200), running, [], 0, 100)
    assert not cache.admits(_Held(100, 250), running, [], 0, 100)  # 350 !> 350
    # One admitted at this scheduling point counts whole: 350 - (100 + 200) = 50 left.
    admitted = _Held(100, 200)
    assert cache.admits(_Held(10, 35), [*running, admitted], [admitted], 0, 10)
    assert not cache.admits(_Held(10, 45), [*running, admitted], [admitted], 0, 10)


def test_sglang_ratio_decays_resets_and_follows_retraction() -> None:
    cache = KvCache(1000, "ratio")
    cache.after_decode_steps(300)
    assert cache.ratio == pytest.approx((SGLANG_INIT_RATIO + SGLANG_MIN_RATIO) / 2)
    cache.after_decode_steps(10_000)
    assert cache.ratio == pytest.approx(SGLANG_MIN_RATIO) == pytest.approx(0.098)
    cache.idle()
    assert cache.ratio == SGLANG_INIT_RATIO
    # After a retraction: (decoded + 20 per request) / output tokens of those left.
    left = [_running(10, 100, 30), _running(10, 300, 50)]
    cache.after_eviction(left)
    assert cache.ratio == pytest.approx((30 + 50 + 40) / 400)
    # The victim: fewest outputs, then the longest prompt.
    a, b, c = _running(10, 100, 5), _running(50, 100, 5), _running(90, 100, 6)
    assert cache.victim([a, b, c]) is b and not cache.requeue_first


def test_sglang_forecast_by_hand() -> None:
    cache = KvCache(100, "forecast")
    a = _running(10, 40, 10)  # holds 20, 30 tokens left
    # B (10 + 45): 100 - 20 - 10 = 70 free once its prompt is read; until A ends both grow
    # 30: 70 - 60 = 10 > 2 spare; then A's 20 come back and B grows 45: 70 + 20 - 45 > 1.
    assert cache.admits(_Held(10, 45), [a], [], 0, 10)
    # (40 + 40): 100 - 20 - 40 = 40; until A ends both grow 30: 40 - 60 < 0 (at that point A
    # would hold 50 and it 70).
    assert not cache.admits(_Held(40, 40), [a], [], 0, 40)
    # (60 + 5) ends first: 20 - 10 > 2, then its 60 come back: 20 + 60 - 30 > 1.
    assert cache.admits(_Held(60, 5), [a], [], 0, 60)
    # Two like A: 100 - 40 - 10 = 50; three grow 30 until the first ends: 50 - 90 < 0.
    assert not cache.admits(_Held(10, 45), [a, _running(10, 40, 10)], [], 0, 10)


class _CacheWatcher:
    """A step time that records the KV tokens each step leaves in the cache."""

    def __init__(self) -> None:
        self.held: list[float] = []

    def seconds(self, work: StepWork) -> np.ndarray:
        self.held.append(float(work.context[0] + work.tokens[0]))
        return np.full_like(work.tokens, 1e-3) + 1e-6 * work.tokens


@settings(max_examples=30, deadline=None)
@given(
    admission=st.sampled_from(["reserve", "allocated", "ratio", "forecast"]),
    clients=st.integers(1, 10),
    prompt=st.integers(1, 60),
    output=st.integers(1, 40),
    spare=st.integers(2, 200),  # SGLang's rules keep room beyond the sequence
    prefill_first=st.booleans(),
)
def test_the_cache_never_overflows_and_every_request_ends_whole(
    admission: str, clients: int, prompt: int, output: int, spare: int, prefill_first: bool
) -> None:
    capacity = prompt + output + spare  # one request always fits
    watcher = _CacheWatcher()
    config = ServerConfig(
        max_batch=8,
        token_budget=32,
        kv_capacity_tokens=capacity,
        admission=admission,
        prefill_first=prefill_first,
    )
    shapes = [RequestShape(prompt, output) for _ in range(3 * clients)]
    rows = simulate(shapes, watcher, config, concurrency=clients)
    assert len(rows) == len(shapes) and all(r["ok"] for r in rows)
    assert all(r["num_output_tokens"] == output for r in rows)
    assert all(len(r["inter_token_latencies_s"]) == output - 1 for r in rows)
    assert max(watcher.held) <= capacity


def test_vllm_admits_more_than_whole_sequences_and_preempts_the_newest() -> None:
    # Cache 40: whole sequences (10 + 20) fit one at a time; vLLM lets the second in on its
    # prompt, and when decoding fills the cache the second is preempted and recomputed.
    shapes = [RequestShape(10, 20, 0.0), RequestShape(10, 20, 0.0)]
    reserve = simulate(shapes, ONE_SECOND_STEPS, ServerConfig(kv_capacity_tokens=40))
    allocated = simulate(
        shapes, ONE_SECOND_STEPS, ServerConfig(kv_capacity_tokens=40, admission="allocated")
    )
    assert reserve[1]["ttft_s"] == reserve[0]["runtime_s"] + 1.0  # waits for the whole first
    assert allocated[1]["ttft_s"] == 1.0  # both prompts read in the first step
    # Preempted while decoding: a gap of a recompute step (and waiting) in its tokens.
    assert max(allocated[1]["inter_token_latencies_s"]) > 1.0
    assert max(allocated[0]["inter_token_latencies_s"]) == 1.0  # the oldest is never preempted
    assert all(r["num_output_tokens"] == 20 for r in allocated)


def test_sglang_receive_interval_delays_a_new_request_to_the_next_poll() -> None:
    # A decodes one token a second from t = 1; B arrives at 1.5 s, during the step ending at
    # 2 s. Polling every step, B's prompt joins the step ending at 3 s; polling every 4 decode
    # steps (the count starts after A's prompt step), it is seen after the step ending at 5 s.
    shapes = [RequestShape(1, 20, 0.0), RequestShape(1, 3, 1.5)]
    every = simulate(shapes, ONE_SECOND_STEPS, ServerConfig(token_budget=8))
    fourth = simulate(shapes, ONE_SECOND_STEPS, ServerConfig(token_budget=8, recv_interval=4))
    assert every[1]["ttft_s"] == 3.0 - 1.5
    assert fourth[1]["ttft_s"] == 6.0 - 1.5
    assert fourth[0]["runtime_s"] == every[0]["runtime_s"]


def test_bad_admission_settings_are_one_line_errors() -> None:
    with pytest.raises(InputError, match="unknown admission rule 'lifo'"):
        ServerConfig(admission="lifo")
    with pytest.raises(InputError, match="receive interval"):
        ServerConfig(recv_interval=0)


def test_attention_dp_ranks_schedule_their_own_prompts_in_their_share_of_the_budget() -> None:
    # Two ranks of 2 sequences and 4 tokens each. A and B arrive at once: one prompt per rank,
    # both in the first step. C and D arrive at 1.5 s (seen after the step ending at 2 s): C
    # on rank 0, D on rank 1 (each rank then decodes one sequence: 3 prompt tokens left).
    ranks = ServerConfig(max_batch=4, token_budget=8, dp_ranks=2)
    pooled = ServerConfig(max_batch=4, token_budget=8)
    shapes = [RequestShape(2, 30, 0.0)] * 2 + [RequestShape(6, 3, 1.5), RequestShape(1, 3, 1.5)]
    rows = simulate(shapes, ONE_SECOND_STEPS, ranks)
    assert [r["ttft_s"] for r in rows] == [1.0, 1.0, 4.0 - 1.5, 3.0 - 1.5]  # C: 3 + 3 tokens
    assert simulate(shapes, ONE_SECOND_STEPS, pooled)[2]["ttft_s"] == 3.0 - 1.5  # 6 of 6 left
    with pytest.raises(InputError, match="attention-DP ranks"):
        ServerConfig(max_batch=2, dp_ranks=4)


def test_attention_dp_balance_holds_prompts_until_every_rank_has_one_or_the_counter_times_out(
) -> None:  # fmt: skip
    # TensorRT-LLM's balance, timeout 5 steps: its counter counts every step without prompts
    # on all ranks. A and B decode from t = 1 (one per rank; an idle rank never waits). C
    # arrives at 1.5 s, seen after the step ending at 2 s (the counter at 1), alone on rank 0:
    # held back for the steps ending at 3, 4 and 5 s, it runs when the counter reaches 5.
    balance = ServerConfig(max_batch=4, token_budget=8, dp_ranks=2, balance_timeout_steps=5)
    two = [RequestShape(2, 30, 0.0)] * 2
    alone = [*two, RequestShape(1, 3, 1.5)]
    assert simulate(alone, ONE_SECOND_STEPS, balance)[2]["ttft_s"] == 6.0 - 1.5
    no_balance = replace(balance, balance_timeout_steps=0)
    assert simulate(alone, ONE_SECOND_STEPS, no_balance)[2]["ttft_s"] == 3.0 - 1.5
    # A prompt for every rank runs at once.
    pair = [*two, RequestShape(1, 3, 1.5), RequestShape(1, 3, 1.5)]
    assert [r["ttft_s"] for r in simulate(pair, ONE_SECOND_STEPS, balance)[2:]] == [1.5, 1.5]
    # A prompt longer than its rank's share finishes alone on its rank: held back again.
    long = [*two, RequestShape(6, 3, 1.5), RequestShape(1, 3, 1.5)]
    rows = simulate(long, ONE_SECOND_STEPS, balance)
    assert rows[3]["ttft_s"] == 3.0 - 1.5  # D, with C's first 3 tokens
    assert rows[2]["ttft_s"] == 8.0 - 1.5  # C's last 3: the counter from 0 at 3 s reaches 5
    with pytest.raises(InputError, match="balance timeout"):
        ServerConfig(balance_timeout_steps=-1)


@pytest.mark.parametrize("admission", ["forecast", "ratio"])
def test_a_request_an_idle_engine_never_admits_ends_with_an_error_not_missing(
    admission: str,
) -> None:
    # Its 15 tokens fit a 15-token cache, but SGLang's rules want room beyond the sequence
    # (a spare token per request): the engine never lets it in, and the run says so.
    shapes = [RequestShape(4, 3, 0.0), RequestShape(10, 5, 0.0), RequestShape(4, 3, 0.0)]
    config = ServerConfig(kv_capacity_tokens=15, admission=admission)
    rows = simulate(shapes, ONE_SECOND_STEPS, config)
    assert [r["ok"] for r in rows] == [True, False, True]
    assert "never admitted" in rows[1]["error"] and "\n" not in rows[1]["error"]
    assert all(r["num_output_tokens"] == 3 for r in (rows[0], rows[2]))


@settings(max_examples=40, deadline=None)
@given(
    clients=st.integers(1, 12),
    prompt=st.integers(1, 60),
    output=st.integers(1, 40),
    spare=st.integers(2, 120),
    tokens_per_step=st.sampled_from([1.0, 1.7]),
    dp_ranks=st.sampled_from([1, 2]),
    cached=st.booleans(),
    clip=st.sampled_from([4096, 12]),
)
def test_sglang_admission_reads_the_batch_totals_a_pass_over_its_requests_would_give(
    clients: int, prompt: int, output: int, spare: int, tokens_per_step: float,
    dp_ranks: int, cached: bool, clip: int,
) -> None:  # fmt: skip
    """The ratio rule reads the output tokens the running requests have left from totals the
    batch keeps as they decode, prefill, leave and are retracted (a pass over thousands of
    running requests at every scheduling point made a 4,096-client simulation quadratic):
    at every scheduling point they equal the pass, clipped outputs (a clip under the outputs)
    and speculative decoding included."""
    import idealized_runtime.cost_model.serving.admission as admission_module
    import idealized_runtime.cost_model.serving.simulator as simulator_module

    checked: list[int] = []
    fast = simulator_module._Batch.clipped_outputs_left

    def checking(batch: simulator_module._Batch) -> int:
        total = fast(batch)
        assert total == admission_module.clipped_outputs_left(batch.running.values())
        checked.append(total)
        return total

    config = ServerConfig(
        max_batch=8, token_budget=32, kv_capacity_tokens=prompt + output + spare,
        admission="ratio", tokens_per_step=tokens_per_step, dp_ranks=dp_ranks,
    )  # fmt: skip
    shapes = [
        RequestShape(prompt, output, cached_tokens=prompt // 2 if cached else 0)
        for _ in range(3 * clients)
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(simulator_module._Batch, "clipped_outputs_left", checking)
        patch.setattr(simulator_module, "SGLANG_CLIP_NEW_TOKENS", clip)
        patch.setattr(admission_module, "SGLANG_CLIP_NEW_TOKENS", clip)
        rows = simulate(shapes, _CacheWatcher(), config, concurrency=clients)
    assert checked and len(rows) == len(shapes) and all(r["ok"] for r in rows)
    assert all(r["num_output_tokens"] == output for r in rows)
