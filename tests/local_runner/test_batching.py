"""Continuous batching: batched tokens and logits equal unbatched ones, whatever joins when."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.local_runner.batching import (
    BatchEngine,
    Segment,
    Sequence,
    StepTiming,
    batched_logits,
    profile_steps,
)
from idealized_runtime.local_runner.generate import Generator

ARCHS = ["tiny-llama", "tiny-gpt2", "tiny-alibi"]
SEQ_LEN = 64


def _arch(name: str):
    if name == "tiny-alibi":  # BLOOM-style positions: the masks carry the ALiBi bias
        return get_architecture("tiny-gpt2").model_copy(update={"position": "alibi"})
    return get_architecture(name)


def _prompts(arch_vocab: int, lengths: list[int], seed: int = 0) -> list[list[int]]:
    rng = torch.Generator().manual_seed(seed)
    return [torch.randint(0, arch_vocab, (n,), generator=rng).tolist() for n in lengths]


def _unbatched(name: str, prompts: list[list[int]], lengths: list[int]) -> list[list[int]]:
    generator = Generator(_arch(name), max_seq_len=SEQ_LEN, seed=1)
    return [
        generator.generate(torch.tensor([p]), n)[0].tolist()
        for p, n in zip(prompts, lengths, strict=True)
    ]


@pytest.mark.parametrize("name", ARCHS)
def test_batched_tokens_equal_unbatched_with_chunked_prefill(name: str) -> None:
    arch = _arch(name)
    prompt_lengths, lengths = [5, 17, 9, 30, 1], [6, 3, 8, 4, 7]
    prompts = _prompts(arch.vocab_size, prompt_lengths)
    # 3 slots for 5 requests (two join later) and a budget of 8 tokens: prompts are split in
    # chunks and mixed with decode tokens in the same steps.
    engine = BatchEngine(
        Generator(arch, max_batch_size=3, max_seq_len=SEQ_LEN, seed=1), token_budget=8
    )
    batched = engine.generate(prompts, lengths)
    assert [len(tokens) for tokens in batched] == lengths
    assert batched == _unbatched(name, prompts, lengths)
    assert engine.steps < sum(lengths)  # decode steps were shared


@pytest.mark.parametrize("name", ARCHS)
def test_mixed_step_logits_equal_unbatched_logits(name: str) -> None:
    arch = _arch(name)
    prompts = _prompts(arch.vocab_size, [7, 12], seed=3)
    batched = Generator(arch, max_batch_size=2, max_seq_len=SEQ_LEN, seed=1)
    # Slot 0: the whole first prompt; then one step: slot 0 decodes while slot 1 prefills a
    # chunk of its prompt in the same forward.
    first = Sequence(prompts[0], 4, lambda _: None, lambda _: None, 0, slot=0)
    second = Sequence(prompts[1], 4, lambda _: None, lambda _: None, 1, slot=1)
    logits0 = batched_logits(batched.model, [Segment(first, prompts[0], 0)])
    token = int(logits0.argmax())
    first.prefilled = len(prompts[0])
    mixed = batched_logits(
        batched.model, [Segment(first, [token], len(prompts[0])), Segment(second, prompts[1], 0)]
    )
    reference = Generator(arch, max_seq_len=SEQ_LEN, seed=1)
    expect_decode = reference.logits(torch.tensor([prompts[0] + [token]]))[0, -1]
    expect_prefill = Generator(arch, max_seq_len=SEQ_LEN, seed=1).logits(
        torch.tensor([prompts[1]])
    )[0, -1]
    torch.testing.assert_close(logits0[0], reference.logits(torch.tensor([prompts[0]]))[0, -1])
    torch.testing.assert_close(mixed[0], expect_decode, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[1], expect_prefill, atol=1e-5, rtol=1e-4)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 6)), min_size=1, max_size=6),
    max_batch=st.integers(1, 4),
    budget=st.integers(1, 16),
)
def test_every_request_gets_exactly_its_tokens(
    shapes: list[tuple[int, int]], max_batch: int, budget: int
) -> None:
    arch = get_architecture("tiny-llama")
    engine = BatchEngine(
        Generator(arch, max_batch_size=max_batch, max_seq_len=32, seed=1), token_budget=budget
    )
    prompts = _prompts(arch.vocab_size, [p for p, _ in shapes])
    lengths = [o for _, o in shapes]
    produced: list[list[int]] = [[] for _ in shapes]
    done: list[int] = []
    for i, (prompt, length) in enumerate(zip(prompts, lengths, strict=True)):
        engine.submit(prompt, length, produced[i].append, lambda error, i=i: done.append(i))
    while engine.step():
        pass
    assert [len(tokens) for tokens in produced] == lengths
    assert sorted(done) == list(range(len(shapes)))


@settings(max_examples=30, deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 6)), min_size=1, max_size=6),
    max_batch=st.integers(1, 4),
    budget=st.integers(1, 16),
    staggered=st.booleans(),
)
def test_the_simulator_schedules_every_step_as_the_engine(
    shapes: list[tuple[int, int]], max_batch: int, budget: int, staggered: bool
) -> None:
    # The serving simulator with one-second steps gives each token the number of the step
    # that produced it; the engine's steps must produce the same tokens in the same steps,
    # with requests all submitted at once or one joining before each step.
    from idealized_runtime.cost_model.serving.simulator import ServerConfig, simulate
    from idealized_runtime.cost_model.serving.step_time import FittedStepTime
    from idealized_runtime.cost_model.serving.workload import RequestShape

    arch = get_architecture("tiny-llama")
    engine = BatchEngine(
        Generator(arch, max_batch_size=max_batch, max_seq_len=32, seed=1), token_budget=budget
    )
    prompts = _prompts(arch.vocab_size, [p for p, _ in shapes])
    steps_of: list[list[int]] = [[] for _ in shapes]
    for i, (prompt, (_, length)) in enumerate(zip(prompts, shapes, strict=True)):
        engine.submit(prompt, length, lambda _, i=i: steps_of[i].append(engine.steps))
        if staggered:
            engine.step()
    while engine.step():
        pass
    unit = FittedStepTime("unit", intercept_s=1.0, per_token_s=0.0, per_attended_s=0.0)
    requests = [
        RequestShape(p, o, float(i) if staggered else 0.0) for i, (p, o) in enumerate(shapes)
    ]
    rows = simulate(requests, unit, ServerConfig(max_batch=max_batch, token_budget=budget))
    for row, steps in zip(rows, steps_of, strict=True):
        first = row["started_at_s"] + row["ttft_s"]
        simulated = [first, *(first + sum(row["inter_token_latencies_s"][:k]) for k in
                              range(1, len(row["inter_token_latencies_s"]) + 1))]  # fmt: skip
        assert [round(t) for t in simulated] == steps


def test_cancelled_request_frees_its_slot() -> None:
    arch = get_architecture("tiny-llama")
    engine = BatchEngine(Generator(arch, max_batch_size=1, max_seq_len=32, seed=1))
    first = engine.submit([1, 2, 3], 20)
    second = engine.submit([4, 5], 3)
    engine.step()
    first.cancel()
    while engine.step():
        pass
    assert len(first.generated) < 20
    assert len(second.generated) == 3


def test_rejects_requests_beyond_the_cache() -> None:
    engine = BatchEngine(Generator(get_architecture("tiny-llama"), max_seq_len=16))
    with pytest.raises(ValueError, match="max_seq_len"):
        engine.submit([1] * 10, 8)
    with pytest.raises(ValueError):
        engine.submit([], 3)


def test_each_step_reports_the_work_it_did() -> None:
    # Budget 4, prompts of 6 and 2 tokens, 2 and 3 output tokens: the schedule by hand.
    engine = BatchEngine(
        Generator(get_architecture("tiny-llama"), max_batch_size=2, max_seq_len=32, seed=1),
        token_budget=4,
    )
    steps: list[StepTiming] = []
    engine.on_step = steps.append
    engine.submit(list(range(1, 7)), 2)
    engine.submit([7, 8], 3)
    while engine.step():
        pass
    work = [(s.decode_contexts, s.chunks) for s in steps]
    assert work == [
        ([], [(4, 0)]),  # the first prompt's first chunk fills the budget
        ([], [(2, 4), (2, 0)]),  # its rest, then all of the second prompt: both first tokens
        ([6, 2], []),  # one decode token each; the first request is done
        ([3], []),  # the second one's last token
    ]
    assert all(s.seconds > 0 for s in steps)
    assert steps[0].to_dict() == {
        "decode_contexts": [],
        "chunks": [[4, 0]],
        "seconds": steps[0].seconds,
    }


def test_profile_steps_times_batched_chunked_and_mixed_steps() -> None:
    generator = Generator(get_architecture("tiny-llama"), max_batch_size=2, max_seq_len=32)
    steps = profile_steps(
        generator, batch_sizes=[1, 2], prompt_tokens=[3], output_tokens=3, token_budget=4
    )
    decode_batches = {len(s.decode_contexts) for s in steps if not s.chunks}
    assert decode_batches == {1, 2}
    assert any(s.decode_contexts and s.chunks for s in steps)  # a request joined a running one
    assert all(sum(n for n, _ in s.chunks) + len(s.decode_contexts) <= 4 for s in steps)
    # The warm-up pass is not recorded: as many steps as a run without one.
    assert len(steps) == len(
        profile_steps(
            generator, batch_sizes=[1, 2], prompt_tokens=[3], output_tokens=3, token_budget=4,
            warmup=False,
        )
    )  # fmt: skip
    with pytest.raises(ValueError, match="batch 3"):
        profile_steps(generator, batch_sizes=[3], prompt_tokens=[3], output_tokens=3)
