"""Greedy generation with a static KV cache: one prefill forward, then one step per token.

On CPU every step runs eagerly, attending to exactly the cached prefix. On CUDA the decode step
is captured in CUDA graphs, one per KV-length bucket (a multiple of ``GRAPH_BUCKET`` tokens, so
attention reads at most a bucket of padding, hidden by a mask). Each graph reads the current
token and position from static tensors, and writes the next token and position back into them,
so the decode loop is nothing but ``graph.replay()``: no Python or launch overhead per kernel,
which is what made HELM's 2022 reference stack launch-bound on small models.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.model import Transformer, build_model
from idealized_runtime.local_runner.parallel import SINGLE, TensorParallel
from idealized_runtime.local_runner.quantize import (
    parse_kv_format,
    parse_weight_format,
    quantize_kv_cache,
    quantize_weights,
)

GRAPH_BUCKET = 256
WARMUP_STEPS = 2  # runs of a step on a side stream before it is captured
DEFAULT_MAX_SEQ_LEN = 4096  # when not given: keeps the cache small for 128k-context models


class Generator:
    """A model with random weights and a static KV cache, ready to time or to serve."""

    def __init__(
        self,
        arch: Architecture,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        max_batch_size: int = 1,
        max_seq_len: int | None = None,
        seed: int = 0,
        num_layers: int | None = None,
        tensor_parallel: TensorParallel = SINGLE,
        cuda_graphs: bool | None = None,
        compile: bool = False,
        weights: str | None = None,
        kv_cache: str | None = None,
    ) -> None:
        self.arch = arch
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self.max_seq_len = max_seq_len or min(arch.max_context, DEFAULT_MAX_SEQ_LEN)
        self.model: Transformer = build_model(
            arch, device=device, dtype=dtype, num_layers=num_layers, tp=tensor_parallel, seed=seed
        )
        # Quantized weights and caches (local_runner/quantize.py): None keeps the compute dtype.
        if weights is not None:
            quantize_weights(self.model, parse_weight_format(weights))
        self.model.setup_cache(max_batch_size, self.max_seq_len)
        if kv_cache is not None:
            quantize_kv_cache(self.model, parse_kv_format(kv_cache))
        on_cuda = self.device.type == "cuda"
        self.use_graphs = on_cuda if cuda_graphs is None else (cuda_graphs and on_cuda)
        self._step = self.model.forward
        self._compiled = compile
        if compile:
            # Fuses the elementwise work (norms, rotary, activations) between the GEMVs; the
            # graphs below then replay the compiled kernels. Static shapes: one compile per
            # (bucket, batch, depth), so the recompile limit (8 by default) must allow for them
            # all, or the later buckets would silently run uncompiled.
            self._step = torch.compile(self.model.forward, fullgraph=True, dynamic=False)
            _raise_recompile_limit(4 * -(-self.max_seq_len // GRAPH_BUCKET) * max_batch_size)
        self._graphs: dict[tuple[int, int, int], torch.cuda.CUDAGraph] = {}
        self._graph_pool = None
        # Static decode inputs/outputs shared by every graph (see module docstring).
        self._tokens = torch.zeros((max_batch_size, 1), dtype=torch.long, device=self.device)
        self._pos = torch.zeros(1, dtype=torch.long, device=self.device)

    # -- public API ---------------------------------------------------------------------------

    @torch.inference_mode()
    def generate(
        self,
        prompt_tokens: torch.Tensor,
        num_output_tokens: int,
        on_token: Callable[[torch.Tensor], None] | None = None,
    ) -> torch.Tensor:
        """Exactly ``num_output_tokens`` greedy tokens after ``prompt_tokens`` [batch, p]
        (no early stop). ``on_token(tokens[batch])`` is called as each token is produced."""
        batch, prompt_len = self._check(prompt_tokens, num_output_tokens)
        prompt_tokens = prompt_tokens.to(self.device)
        out = torch.empty((batch, num_output_tokens), dtype=torch.long, device=self.device)
        token = self.prefill(prompt_tokens)
        out[:, 0] = token
        if on_token is not None:
            on_token(out[:, 0])
        for i in range(1, num_output_tokens):
            token = self.decode_step(token, prompt_len + i - 1)
            out[:, i] = token
            if on_token is not None:
                on_token(out[:, i])  # a stable view: the graph's static token buffer is reused
        return out

    @torch.inference_mode()
    def prefill(self, prompt_tokens: torch.Tensor) -> torch.Tensor:
        """Process the prompt in one forward; return the first generated token [batch]."""
        prompt_len = prompt_tokens.shape[1]
        positions = torch.arange(prompt_len, device=self.device)
        logits = self.model(prompt_tokens, positions, prompt_len, last_only=True)
        return logits[:, -1].argmax(dim=-1)

    @torch.inference_mode()
    def decode_step(self, token: torch.Tensor, position: int) -> torch.Tensor:
        """Feed ``token`` [batch] at ``position``; return the next token [batch]."""
        static = self._static_shapes(token.shape[0])
        if self.use_graphs and static:
            return self._graph_step(token, position)
        positions = torch.tensor([position], device=self.device)
        if self._compiled and static:
            # Compiled without graphs: the same static bucket shapes, so it compiles once per
            # bucket rather than once per position.
            logits = self._step(token.view(-1, 1), positions, self._bucket(position), exact=False)
        else:
            logits = self.model(token.view(-1, 1), positions, position + 1)
        return logits[:, -1].argmax(dim=-1)

    def set_active_layers(self, num_layers: int) -> None:
        """Run only the first ``num_layers`` layers (layer-sampled profiling)."""
        if not 1 <= num_layers <= self.model.num_layers:
            raise ValueError(f"active layers must be in [1, {self.model.num_layers}]")
        self.model.active_layers = num_layers

    @torch.inference_mode()
    def logits(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Logits of every position of ``tokens`` [batch, T] placed at ``start`` (writes the
        cache; for tests and verification)."""
        seq = tokens.shape[1]
        positions = torch.arange(start, start + seq, device=self.device)
        return self.model(tokens.to(self.device), positions, start + seq)

    # -- internals ----------------------------------------------------------------------------

    def _check(self, prompt_tokens: torch.Tensor, num_output_tokens: int) -> tuple[int, int]:
        if prompt_tokens.dim() != 2 or prompt_tokens.dtype != torch.long:
            raise ValueError("prompt_tokens must be an int64 tensor [batch, prompt_len]")
        batch, prompt_len = prompt_tokens.shape
        if not 1 <= batch <= self.max_batch_size:
            raise ValueError(f"batch size {batch} not in [1, {self.max_batch_size}]")
        if prompt_len < 1 or num_output_tokens < 1:
            raise ValueError("need at least one prompt token and one output token")
        if prompt_len + num_output_tokens - 1 > self.max_seq_len:
            raise ValueError(
                f"{prompt_len} prompt + {num_output_tokens} output tokens exceed max_seq_len "
                f"{self.max_seq_len}"
            )
        return batch, prompt_len

    def _bucket(self, position: int) -> int:
        """The KV length a step at ``position`` attends to: the next multiple of GRAPH_BUCKET
        (capped at the cache), padding hidden by the mask."""
        return min(-(-(position + 1) // GRAPH_BUCKET) * GRAPH_BUCKET, self.max_seq_len)

    def _static_shapes(self, batch: int) -> bool:
        """Whether a decode step of this batch has static shapes and no host sync, so it can be
        graph-captured (or compiled with fullgraph). A mixture-of-experts step with more routed
        slots than experts groups tokens by expert, which needs the group sizes on the host
        (``.tolist()``: not capturable); such steps run eagerly."""
        arch = self.arch
        return arch.num_experts <= 1 or batch * arch.experts_per_token <= arch.num_experts

    def _graph_step(self, token: torch.Tensor, position: int) -> torch.Tensor:
        batch = token.shape[0]
        kv_len = self._bucket(position)
        tokens = self._tokens[:batch]
        # The previous replay already left its output token in the static input; the copy only
        # matters after a prefill or a batch change. Inputs are set before any capture so that
        # the capture's warm-up writes the same cache entry the real step writes.
        if tokens.data_ptr() != token.data_ptr():
            tokens.copy_(token.view(-1, 1))
        self._pos.fill_(position)
        key = (batch, kv_len, self.model.active_layers)
        graph = self._graphs.get(key) or self._capture(key)
        graph.replay()
        return tokens.view(-1)

    def _decode_into_static(self, batch: int, kv_len: int) -> None:
        tokens = self._tokens[:batch]
        logits = self._step(tokens, self._pos, kv_len, exact=False)
        tokens.copy_(logits[:, -1].argmax(dim=-1, keepdim=True))
        self._pos.add_(1)

    def _capture(self, key: tuple[int, int, int]) -> torch.cuda.CUDAGraph:
        batch, kv_len, _ = key
        # Warm up on a side stream (allocator, cuBLAS workspaces, compiled kernels) as the CUDA
        # graph docs require, then capture (capturing runs no kernel: the inputs stay as set).
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self._warm_up(batch, kv_len)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        if self._graph_pool is None:
            self._graph_pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._graph_pool):
            self._decode_into_static(batch, kv_len)
        self._graphs[key] = graph
        return graph

    def _warm_up(self, batch: int, kv_len: int, steps: int = WARMUP_STEPS) -> None:
        """Run the step ``steps`` times, each from the current static token and position, then
        restore them. Every run writes the cache entry the replay will write, with the same
        values, and nothing beyond it: running on from the previous run's output would write
        position + 1, which is out of the cache when the step is the last one it holds."""
        saved_tokens, saved_pos = self._tokens.clone(), self._pos.clone()
        for _ in range(steps):
            self._tokens.copy_(saved_tokens)
            self._pos.copy_(saved_pos)
            self._decode_into_static(batch, kv_len)
        self._tokens.copy_(saved_tokens)
        self._pos.copy_(saved_pos)


def _raise_recompile_limit(needed: int) -> None:
    """Let torch.compile keep one compiled step per static shape (the option's name changed
    from ``cache_size_limit`` to ``recompile_limit`` in torch 2.6)."""
    import torch._dynamo.config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), needed))
            return
