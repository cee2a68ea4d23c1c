"""Refit the engine stacks from the kernel database and write ``data/engines/*.json``:

python -m idealized_runtime.cost_model.hardware.engines [--database DIR] [--out FOLDER]

``--database``: the ``systems/data`` folder of AIConfigurator's kernel databases (default: the
installed ``aiconfigurator-core``, ``pip install 'idealized-runtime[calibration]'``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from idealized_runtime.core.catalog import get_hardware
from idealized_runtime.cost_model.hardware.engines.catalog import (
    EngineStack,
    engines_dir,
    save_engine,
)
from idealized_runtime.cost_model.hardware.engines.kernel_fit import (
    DATABASE_ENGINES,
    DATABASE_GPUS,
    database_root,
    fit_gpu_kernels,
    package_version,
)
from idealized_runtime.cost_model.hardware.engines.step import SchedulerDefaults

# Each engine's defaults as its OpenAI-compatible server starts on a datacenter GPU (>= 80 GB);
# the host times per step are a priori figures. The request path (hardware.engines.request_path):
# tokenization and incremental detokenization per token as benchmarks/tokenizer_costs.py
# measures a Hugging Face fast tokenizer (a 128k-token byte-level BPE, random-token prompts of
# 1k-8k tokens: encode 1.2-5.0 us per token, decode 1.8-2.3 us; medians rounded); the front end's
# hand-offs a priori, about 0.5 ms per Python process hop the engine's code makes (below); the
# scheduler's look-ahead from the engines' overlap schedulers. The residual request overhead is
# fitted across models and sources only (benchmarks/serving_vs_published.py): SGLang's below;
# vLLM's figures at load hold one model and TensorRT-LLM's two from one source, so none there.
DECODE_OVERHEAD_S = 0.5e-3  # a decode step replayed from a CUDA graph: schedule, sample, launch
STEP_OVERHEAD_S = 2.0e-3  # a step with prompt chunks runs outside the graphs
# Between two decode graph replays when the host plans ahead: the sampling kernels and the
# next step's input copies (a handful of small kernels and copies, a priori)
OVERLAP_GAP_S = 0.1e-3
TOKENIZE_S_PER_TOKEN = 3.0e-6
DETOKENIZE_S_PER_TOKEN = 2.0e-6
HOP_S = 0.5e-3  # one hand-off between an engine's Python processes (ZMQ/IPC, pickling)
# SGLang's residual TTFT per layer of the model, fitted across models: the mean of the medians
# of DeepSeek-R1 (0.66 ms x 61 layers, InferenceX) and Qwen3-235B-A22B (0.72 ms x 94, SGLang's
# cookbook) at <= 8 clients, `python benchmarks/serving_vs_published.py` (2026-11-27, with the
# elementwise kernels and the prompt-attention grids).
SGLANG_OVERHEAD_S_PER_LAYER = 0.69e-3


def _scheduler(**own: Any) -> SchedulerDefaults:
    """An engine's defaults: its own settings, and what the three engines share here (a token
    budget of 8192 per step, CUDA graphs every 8 batch sizes, the host times per step)."""
    return SchedulerDefaults(
        token_budget=8192,
        cuda_graph_step=8,
        decode_overhead_s=DECODE_OVERHEAD_S,
        step_overhead_s=STEP_OVERHEAD_S,
        overlap_gap_s=OVERLAP_GAP_S,
        tokenize_s_per_token=TOKENIZE_S_PER_TOKEN,
        detokenize_s_per_token=DETOKENIZE_S_PER_TOKEN,
        request_overhead_s=0.0,
        **own,
    )


NOTES = (
    "Kernel parameters fitted on the engine's measured kernels (held-out shapes: errors per "
    "operation); scheduler defaults and admission rule from the engine's documented defaults "
    "and source; host times per step a priori (with an overlap scheduler a decode step's "
    "forward pass takes the longer of its kernels + 0.1 ms and the host's 0.5 ms); the "
    "request path from the engine's code and measurements: tokenize_s_per_token and "
    "detokenize_s_per_token measured on a Hugging Face "
    "fast tokenizer (benchmarks/tokenizer_costs.py), request_http_s and stream_s a priori "
    "(0.5 ms per hand-off between the engine's processes), schedule_ahead_steps from the "
    "engine's overlap scheduler; the elementwise kernels between the matmuls (norms, rotary "
    "embedding, KV-cache write, top-k routing, activations) counted from the engine's model "
    "code, each timed by the database's one-pass elementwise kernel; request_overhead_s + "
    "request_overhead_s_per_layer x layers "
    "(what the request path and the kernels leave of published TTFTs) is fitted across models "
    "only (benchmarks/serving_vs_published.py, leave one model out), per layer as the residuals "
    "scale: SGLang 0.69 ms per layer (DeepSeek-R1 and Qwen3-235B-A22B, the mean of their "
    "medians); 0 where the published serving figures at load hold one model (vLLM) or "
    "their models one source (TensorRT-LLM: DeepSeek-R1 and gpt-oss-120b, both InferenceX's)"
)
ENGINES: dict[str, tuple[str, SchedulerDefaults]] = {
    "vllm": (
        "vLLM (V1 engine): chunked prefill, decode tokens first, then prompt chunks in the "
        "token budget; max_num_batched_tokens 8192, max_num_seqs 1024, "
        "gpu_memory_utilization 0.9, CUDA graphs up to batch 512; async scheduling (the next "
        "step planned while one runs, on by default since early 2026); a request is admitted "
        "when the KV cache holds the prompt tokens it reads now, and the newest is preempted "
        "(recomputed later) when decoding fills the cache; under data parallelism each "
        "engine core (rank) takes max_num_seqs and max_num_batched_tokens; with chunked "
        "prefill off it will not start unless max_num_batched_tokens holds max_model_len "
        "(prompt + output)",
        _scheduler(
            max_running=1024, chunked_prefill=True, prefill_first=False, memory_fraction=0.9,
            cuda_graph_max_batch=512, admission="allocated", limits_per_rank=True,
            unchunked_limit="sequence", budget_setting="max_num_batched_tokens",
            request_http_s=HOP_S, stream_s=HOP_S, schedule_ahead_steps=1,
        ),
    ),
    "sglang": (
        "SGLang: prefill first (a step with waiting prompts runs prompts only), chunked "
        "prefill of 8192 tokens (16384 on GPUs reporting 160 GiB or more), "
        "mem_fraction_static 0.88, CUDA graphs up to batch 256 (512 at tensor-parallel size 4 "
        "or more, and on GPUs of 160 GiB or more), as its ServerArgs size them by the GPU's "
        "memory; "
        "admission against a decaying estimate of the running requests' future tokens "
        "(new_token_ratio), retraction when decoding fills the cache; DeepSeek's shared "
        "experts fused into the routed experts' kernel (tensor-parallel experts, not FP4); "
        "with chunked prefill off the budget is max_prefill_tokens (16384) and a prompt "
        "longer than it runs alone",
        _scheduler(
            max_running=4096, chunked_prefill=True, prefill_first=True, memory_fraction=0.88,
            cuda_graph_max_batch=256, admission="ratio", fuse_shared_experts=True,
            unchunked_limit="none", budget_setting="chunked_prefill_size", unchunked_budget=16384,
            request_http_s=HOP_S, stream_s=2 * HOP_S, schedule_ahead_steps=1,
            request_overhead_s_per_layer=SGLANG_OVERHEAD_S_PER_LAYER,
            wide_tp_graph_max_batch=512,
        ),
    ),
    "tensorrt-llm": (
        "TensorRT-LLM (PyTorch backend, trtllm-serve): in-flight batching of decode tokens and "
        "whole prompts (no chunked prefill by default) within max_num_tokens 8192, "
        "max_batch_size 2048, KV cache 0.9 of the memory the weights leave, CUDA graphs up "
        "to batch 128; GUARANTEED_NO_EVICT: a request is admitted when the cache holds its "
        "whole sequence beside the running ones'; under attention DP max_batch_size and "
        "max_num_tokens hold per rank; a prompt longer than max_num_tokens is refused, and "
        "unless the budget is given it is sized as deployments size max_num_tokens: the "
        "longest prompt beside every running sequence, + 64, in 64s, at least 8192; the "
        "residual add and RMSNorm fused into the tensor-parallel all-reduce, the rotary "
        "embedding and KV-cache write into one kernel before the attention",
        _scheduler(
            max_running=2048, chunked_prefill=False, prefill_first=False, memory_fraction=0.9,
            of_free=True, cuda_graph_max_batch=128, admission="reserve", limits_per_rank=True,
            unchunked_limit="prompt", sized_budget=True, budget_setting="max_num_tokens",
            request_http_s=2 * HOP_S, stream_s=HOP_S, schedule_ahead_steps=1,
            norms_in_allreduce=True, rope_in_attention=True,
        ),
    ),
}  # fmt: skip


# SGLang sizes chunked_prefill_size and cuda_graph_max_bs by the memory the GPU reports
# (ServerArgs, B200 and larger: "chunked_prefill_size 16k, cuda_graph_max_bs 512"; H100 and
# H200: 8k, and graphs up to 256 below TP 4, else 512: ``wide_tp_graph_max_batch``).
SGLANG_LARGE_GPU_MIB = 160 * 1024
SGLANG_LARGE_GPU_DEFAULTS = {"token_budget": 16384, "cuda_graph_max_batch": 512}


def gpu_defaults(engine: str, gpus: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The scheduler defaults ``engine`` sizes by each of ``gpus`` (``gpu_defaults``)."""
    if engine != "sglang":
        return {}
    return {
        gpu: dict(SGLANG_LARGE_GPU_DEFAULTS)
        for gpu in gpus
        if (get_hardware(gpu).driver_memory_mib or 0) >= SGLANG_LARGE_GPU_MIB
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Refit the engine stacks from kernel measurements")
    parser.add_argument("--database", default=None, help="the kernel database's systems/data")
    parser.add_argument("--out", default=str(engines_dir()), help="folder to write to")
    args = parser.parse_args(argv)
    root = database_root(args.database)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name, (description, scheduler) in ENGINES.items():
        gpus = {}
        for database_gpu, gpu in DATABASE_GPUS.items():
            kernels = fit_gpu_kernels(root, database_gpu, DATABASE_ENGINES[name], get_hardware(gpu))
            gpus[gpu] = kernels
            print(f"{name} on {gpu} ({kernels.version}): " + ", ".join(
                f"{op} {e.get('median', float('nan')):.0%}" for op, e in kernels.errors.items()
            ))  # fmt: skip
        engine = EngineStack(
            name=name,
            description=description,
            scheduler=scheduler,
            gpus=gpus,
            provenance={
                "package": "aiconfigurator-core",
                "version": package_version() or "unknown",
                "license": "Apache-2.0",
                "database": "aiconfigurator_core/systems/data (files per GPU below)",
            },
            notes=NOTES,
            gpu_defaults=gpu_defaults(name, list(gpus)),
        )
        print(f"wrote {save_engine(engine, args.out)}")


if __name__ == "__main__":
    main()
