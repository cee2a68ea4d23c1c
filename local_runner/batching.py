"""Continuous batching over the runner's static KV cache, with chunked prefill (Dynamic SplitFuse).

Each row of the KV cache is a slot holding one request. A scheduler step builds one forward pass:
every running request that has finished its prompt contributes one decode token, and what is
left of a token budget goes to prompt chunks of the requests still prefilling, first come first
served. New requests take free slots between steps, so they join the running batch without
waiting for it to drain. The pass runs every matmul once over all of its tokens (the point of
batching: the weights are read once per step); attention runs per group, a padded and masked
batch for the decode tokens (each slot attends to its own prefix) and one causal block per
prompt chunk.

Tokens are greedy and each request gets exactly its ``length`` tokens (no early stop), as in
``Generator.generate``; a request's tokens equal the unbatched ones up to float rounding.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from idealized_runtime.core.scheduling import DEFAULT_TOKEN_BUDGET, prompt_chunks
from idealized_runtime.local_runner.generate import Generator
from idealized_runtime.local_runner.model import Attention, Block, Transformer, apply_rotary
from idealized_runtime.local_runner.parallel import (
    all_gather_last_dim,
    all_reduce,
    vocab_parallel_embedding,
)


@dataclass
class Sequence:
    """One request in the engine."""

    prompt: list[int]
    length: int
    on_token: Callable[[int], None]
    on_done: Callable[[BaseException | None], None]
    order: int
    slot: int = -1
    prefilled: int = 0  # prompt tokens already in the cache
    generated: list[int] = field(default_factory=list)
    cancelled: bool = False

    @property
    def decoding(self) -> bool:
        return self.prefilled == len(self.prompt)

    def cancel(self) -> None:
        """Stop producing tokens; the engine frees the slot before its next step."""
        self.cancelled = True


@dataclass(frozen=True)
class Segment:
    """Consecutive tokens of one slot in a step: a decode token or a prompt chunk."""

    sequence: Sequence
    tokens: list[int]
    start: int  # cache position of the first token


@dataclass(frozen=True)
class StepTiming:
    """One engine step: the cached tokens of each decoding sequence, the (new tokens, cached
    tokens) of each prompt chunk, and the step's wall-clock seconds."""

    decode_contexts: list[int]
    chunks: list[tuple[int, int]]
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return {
            "decode_contexts": self.decode_contexts,
            "chunks": [list(chunk) for chunk in self.chunks],
            "seconds": self.seconds,
        }


class BatchEngine:
    """Schedules requests over a ``Generator``'s cache; ``step`` runs one batched forward."""

    def __init__(self, generator: Generator, *, token_budget: int = DEFAULT_TOKEN_BUDGET) -> None:
        if token_budget < 1:
            raise ValueError("token_budget must be >= 1")
        self.generator = generator
        self.model: Transformer = generator.model
        self.max_batch = generator.max_batch_size
        self.token_budget = token_budget
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._free_slots = list(range(self.max_batch - 1, -1, -1))
        self._order = itertools.count()
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.steps = 0
        # Called after each step with what it did and how long it took (scheduling, the
        # forward pass and the token callbacks): what a serving simulator is fitted to.
        self.on_step: Callable[[StepTiming], None] | None = None

    # -- submitting ------------------------------------------------------------------------

    def submit(
        self,
        prompt: list[int],
        length: int,
        on_token: Callable[[int], None] = lambda _: None,
        on_done: Callable[[BaseException | None], None] = lambda _: None,
    ) -> Sequence:
        """Queue a request; ``on_token`` gets each token id, then ``on_done`` (None or the
        failure). Both are called on the engine's thread (or the caller of ``step``)."""
        if not prompt or length < 1:
            raise ValueError("need at least one prompt token and one output token")
        if len(prompt) + length - 1 > self.generator.max_seq_len:
            raise ValueError(
                f"{len(prompt)} prompt + {length} output tokens exceed max_seq_len "
                f"{self.generator.max_seq_len}"
            )
        sequence = Sequence(list(prompt), length, on_token, on_done, next(self._order))
        with self._lock:
            self._waiting.append(sequence)
            self._lock.notify()
        return sequence

    def generate(self, prompts: list[list[int]], lengths: list[int]) -> list[list[int]]:
        """Run requests to completion on the calling thread (all submitted at once)."""
        sequences = [self.submit(p, n) for p, n in zip(prompts, lengths, strict=True)]
        while self.step():
            pass
        return [s.generated for s in sequences]

    # -- the background loop -----------------------------------------------------------------

    def start(self) -> None:
        """Run steps on a daemon thread whenever there is work."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="batch-engine", daemon=True)
            self._thread.start()

    @property
    def idle(self) -> bool:
        """No request waiting or running: the engine will not touch the model until the next
        ``submit``."""
        with self._lock:
            return not self._waiting and not self._running

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not self._waiting and not self._running:
                    self._lock.wait()
                if self._stopping:
                    return
            try:
                self.step()
            except BaseException as error:  # fail every request in flight, keep serving
                with self._lock:
                    failed = self._running + list(self._waiting)
                    self._running, self._waiting = [], deque()
                    self._free_slots = list(range(self.max_batch - 1, -1, -1))
                for sequence in failed:
                    sequence.on_done(error)

    # -- scheduling ------------------------------------------------------------------------

    def _schedule(self) -> list[Segment]:
        with self._lock:
            for sequence in [s for s in self._running if s.cancelled]:
                self._finish(sequence)
            self._waiting = deque(s for s in self._waiting if not s.cancelled)
            while self._free_slots and self._waiting:
                sequence = self._waiting.popleft()
                sequence.slot = self._free_slots.pop()
                self._running.append(sequence)
            running = list(self._running)
        # Decode tokens first (each running request gets its next token every step), then
        # prompt chunks within what is left of the budget (the rule the simulator models).
        segments = [
            Segment(s, [s.generated[-1]], len(s.prompt) + len(s.generated) - 1)
            for s in running
            if s.decoding
        ]
        prefilling = [s for s in running if not s.decoding]
        left = [len(s.prompt) - s.prefilled for s in prefilling]
        for sequence, size in zip(
            prefilling, prompt_chunks(len(segments), left, self.token_budget), strict=False
        ):
            start = sequence.prefilled
            segments.append(Segment(sequence, sequence.prompt[start : start + size], start))
        return segments

    def _finish(self, sequence: Sequence) -> None:
        self._running.remove(sequence)
        self._free_slots.append(sequence.slot)

    def step(self) -> bool:
        """One batched forward over the scheduled tokens; False when there was nothing to do."""
        began = time.perf_counter()
        segments = self._schedule()
        if not segments:
            return False
        decode_contexts = [s.start for s in segments if s.sequence.decoding]
        chunks = [(len(s.tokens), s.start) for s in segments if not s.sequence.decoding]
        next_tokens = batched_forward(self.model, segments)
        self.steps += 1
        for segment, token in zip(segments, next_tokens, strict=True):
            sequence = segment.sequence
            if not sequence.decoding:
                sequence.prefilled += len(segment.tokens)
                if not sequence.decoding:
                    continue  # more prompt chunks to come: no token yet
            sequence.generated.append(token)
            sequence.on_token(token)
            if len(sequence.generated) == sequence.length:
                with self._lock:
                    self._finish(sequence)
                sequence.on_done(None)
        if self.on_step is not None:
            seconds = time.perf_counter() - began
            self.on_step(StepTiming(decode_contexts, chunks, seconds))
        return True


# --- the ragged forward ------------------------------------------------------------------------


@torch.inference_mode()
def batched_forward(model: Transformer, segments: list[Segment]) -> list[int]:
    """Feed each segment's tokens into its slot's cache; return each segment's next token
    (greedy, from its last position). Decode segments (one token) must come first."""
    logits = batched_logits(model, segments)
    return logits.argmax(dim=-1).tolist()


@torch.inference_mode()
def batched_logits(model: Transformer, segments: list[Segment]) -> torch.Tensor:
    """Logits [segments, vocab] at the last token of each segment."""
    device = model.device
    tokens = torch.tensor([t for s in segments for t in s.tokens], device=device).view(1, -1)
    positions = torch.tensor(
        [s.start + i for s in segments for i in range(len(s.tokens))], device=device
    )
    cos = sin = None
    if model.arch.position == "rotary":
        cos = model.rope_cos[positions].to(model.dtype).unsqueeze(1)
        sin = model.rope_sin[positions].to(model.dtype).unsqueeze(1)
    x = vocab_parallel_embedding(tokens, model.embed, model.tp)
    if model.pos_embed is not None:
        x = x + model.pos_embed[positions]
    if model.embed_norm is not None:
        x = model.embed_norm(x)
    plan = _AttentionPlan(model, segments, positions, cos, sin)
    for layer in model.layers[: model.active_layers]:
        x = _block(layer, x, plan)
    last = torch.tensor(list(itertools.accumulate(len(s.tokens) for s in segments)), device=device)
    x = model.final_norm(x[0, last - 1])
    head = model.embed if model.lm_head is None else model.lm_head
    logits = all_gather_last_dim(F.linear(x, head), model.tp)
    return logits[..., : model.arch.vocab_size]


class _AttentionPlan:
    """Per-step index tensors and masks shared by every layer."""

    def __init__(
        self,
        model: Transformer,
        segments: list[Segment],
        positions: torch.Tensor,
        cos: torch.Tensor | None,
        sin: torch.Tensor | None,
    ) -> None:
        device = positions.device
        self.cos, self.sin = cos, sin
        self.num_decode = sum(1 for s in segments if len(s.tokens) == 1 and s.sequence.decoding)
        decode = segments[: self.num_decode]
        self.decode_slots = torch.tensor([s.sequence.slot for s in decode], device=device)
        self.decode_pos = positions[: self.num_decode]
        self.decode_kv_len = int(self.decode_pos.max()) + 1 if decode else 0
        self.decode_mask = None
        if decode:
            keys = torch.arange(self.decode_kv_len, device=device)
            allowed = keys.unsqueeze(0) <= self.decode_pos.unsqueeze(1)  # [D, kv_len]
            self.decode_mask = _mask(
                model, allowed, keys, self.decode_pos, per_query_batch=True
            ).unsqueeze(-2)
        # Prompt chunks: (offset in the step, slot, start, length, mask or None for causal).
        self.chunks: list[tuple[int, int, int, int, torch.Tensor | None]] = []
        offset = self.num_decode
        for segment in segments[self.num_decode :]:
            n, start = len(segment.tokens), segment.start
            mask = None
            if start > 0 or model.alibi is not None:
                keys = torch.arange(start + n, device=device)
                chunk_pos = positions[offset : offset + n]
                allowed = keys.unsqueeze(0) <= chunk_pos.unsqueeze(1)  # [n, kv_len]
                mask = _mask(model, allowed, keys, chunk_pos)
            self.chunks.append((offset, segment.sequence.slot, start, n, mask))
            offset += n
        self.alibi = model.alibi is not None


def _mask(
    model: Transformer,
    allowed: torch.Tensor,
    keys: torch.Tensor,
    query_pos: torch.Tensor,
    *,
    per_query_batch: bool = False,
) -> torch.Tensor:
    """A bool mask broadcasting over heads, or ALiBi's float bias with the heads in it.
    allowed: [queries, keys]. Result: [heads|1, queries, keys], or with ``per_query_batch``
    (decode: each query is its own batch row) [queries, heads|1, keys]."""
    head_dim = 1 if per_query_batch else 0
    if model.alibi is None:
        return allowed.unsqueeze(head_dim)
    distance = (keys.unsqueeze(0) - query_pos.unsqueeze(1)).to(torch.float32)  # [q, k]
    slopes = model.alibi.view(-1, 1)  # [heads, 1]
    bias = (
        slopes.unsqueeze(0) * distance.unsqueeze(1)
        if per_query_batch
        else (slopes.unsqueeze(1) * distance.unsqueeze(0))
    )
    bias = bias.masked_fill(~allowed.unsqueeze(head_dim), float("-inf"))
    return bias.to(model.dtype)


def _block(block: Block, x: torch.Tensor, plan: _AttentionPlan) -> torch.Tensor:
    if block.parallel:
        h = block.attn_norm(x)
        mlp_in = h if block.mlp_norm is None else block.mlp_norm(x)
        return x + _attention(block.attn, h, plan) + block.mlp(mlp_in)
    x = x + _attention(block.attn, block.attn_norm(x), plan)
    return x + block.mlp(block.mlp_norm(x))


def _attention(attn: Attention, x: torch.Tensor, plan: _AttentionPlan) -> torch.Tensor:
    """Attention.forward for a ragged step: x [1, N, hidden]."""
    _, total, _ = x.shape
    heads, kv_heads, d = attn.local_heads, attn.local_kv_heads, attn.head_dim
    qkv = F.linear(x, attn.qkv_weight, attn.qkv_bias)
    qk, v = qkv.split([(heads + kv_heads) * d, kv_heads * d], dim=-1)
    qk = qk.view(1, total, heads + kv_heads, d)
    if plan.cos is not None:
        qk = apply_rotary(qk, plan.cos, plan.sin)
    q, k = qk[0].split([heads, kv_heads], dim=1)  # [N, heads, d], [N, kv_heads, d]
    v = v.view(total, kv_heads, d)
    cache = attn.kv_cache
    assert cache is not None, "call setup_cache() first"
    gqa = heads != kv_heads
    outputs = []
    num_decode = plan.num_decode
    if num_decode:
        slots, pos = plan.decode_slots, plan.decode_pos
        cache.k[slots, :, pos] = k[:num_decode]
        cache.v[slots, :, pos] = v[:num_decode]
        keys = cache.k[slots, :, : plan.decode_kv_len]  # [D, kv_heads, kv_len, d]
        values = cache.v[slots, :, : plan.decode_kv_len]
        y = F.scaled_dot_product_attention(
            q[:num_decode].unsqueeze(2), keys, values, attn_mask=plan.decode_mask, enable_gqa=gqa
        )
        outputs.append(y.reshape(num_decode, heads * d))
    for offset, slot, start, n, mask in plan.chunks:
        end = start + n
        cache.k[slot, :, start:end] = k[offset : offset + n].transpose(0, 1)
        cache.v[slot, :, start:end] = v[offset : offset + n].transpose(0, 1)
        y = F.scaled_dot_product_attention(
            q[offset : offset + n].transpose(0, 1).unsqueeze(0),
            cache.k[slot : slot + 1, :, :end],
            cache.v[slot : slot + 1, :, :end],
            attn_mask=mask,
            is_causal=mask is None and n > 1,
            enable_gqa=gqa,
        )
        outputs.append(y[0].transpose(0, 1).reshape(n, heads * d))
    y = torch.cat(outputs).unsqueeze(0)
    if not attn.tp.enabled:
        return F.linear(y, attn.out_weight, attn.out_bias)
    y = all_reduce(F.linear(y, attn.out_weight), attn.tp)
    return y + attn.out_bias if attn.out_bias is not None else y


# --- profiling the engine's own steps ------------------------------------------------------------


def profile_steps(
    generator: Generator,
    *,
    batch_sizes: list[int],
    prompt_tokens: list[int],
    output_tokens: int,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    repeats: int = 1,
    warmup: bool = True,
    seed: int = 0,
) -> list[StepTiming]:
    """Time the serving engine's steps (no HTTP): for each batch size and prompt length, the
    requests once all submitted together (prompt chunks, then batched decode steps) and once
    joining one per step (decode steps mixed with prompt chunks, as under load). With
    ``warmup`` a first pass is run and not recorded."""
    if not batch_sizes or not prompt_tokens or output_tokens < 1 or repeats < 1:
        raise ValueError("need batch sizes, prompt lengths, output_tokens >= 1 and repeats >= 1")
    if max(batch_sizes) > generator.max_batch_size:
        raise ValueError(f"batch {max(batch_sizes)} > the cache's {generator.max_batch_size}")
    engine = BatchEngine(generator, token_budget=token_budget)
    timings: list[StepTiming] = []
    rng = torch.Generator().manual_seed(seed)
    vocab = generator.model.arch.vocab_size
    for repeat in range(-1 if warmup else 0, repeats):
        engine.on_step = timings.append if repeat >= 0 else None
        for batch in batch_sizes:
            for prompt in prompt_tokens:
                for staggered in (False, True):
                    prompts = torch.randint(0, vocab, (batch, prompt), generator=rng).tolist()
                    for ids in prompts:
                        engine.submit(ids, output_tokens)
                        if staggered:
                            engine.step()
                    while engine.step():
                        pass
    return timings
