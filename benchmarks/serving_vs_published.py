"""Serving at load: the simulator on the engine stacks against published serving measurements.

Every row of ``data/published/measurements.csv`` measured at a concurrency (closed-loop
clients) is simulated as its source ran it: ``simulate`` with the row's engine stack (``vllm``,
``sglang``, ``tensorrt-llm``), GPU, tensor-parallel, expert-parallel and attention
data-parallel sizes, weight format, the engine flags the source's launch scripts set
(``launch_settings``: InferenceX's KV-cache format and memory fraction, running requests,
token budget, CUDA-graph batch, SGLang's receive interval, prefix cache off, MTP draft tokens;
else the engine's defaults, the KV cache in the engine's default for the checkpoint), and the
benchmark client's workload (ten requests per client, prompt and output lengths drawn from
80-100% of the stated ones, ignore_eos; SGLang's cookbook: 1-100%, five per client).
Speculative decoding (``mtp``) accepts its drafts at the published rate for the model
(``data/speculative/acceptance.csv``). The engine stacks come from kernel measurements, the
engines' rules and their request path (``RequestPath``: front end, tokenization, the wait for
the scheduler's step boundary, detokenization and streaming; from the engines' code and
measurements, none fitted here). The one figure fitted on serving measurements, each engine's
residual request overhead (what the request path and the kernels leave of published TTFTs), is
fitted for each point without the point's model AND its source family (``held_out_residuals``:
the median of the engine's residuals at concurrency <= 8 of other models from other sources);
where no other model's points are left, the point gets the stack's own value (fitted across
models only; 0 while one model has figures at load), and the run says on how many points. So
every figure printed is held out by source and by model.

Printed per engine and GPU, engine and model, engine and prompt length, source family, engine
and all: median, 90th percentile and signed median of predicted / published - 1 for median
TTFT, median TPOT and output throughput per GPU, at concurrency >= 8 and at all
concurrencies; beside them, with ``--aiconfigurator PYTHON`` (an interpreter with
``aiconfigurator==0.12.0``, e.g. a venv under a git-ignored folder), the same figures from
NVIDIA's AIConfigurator on the points it covers, and both on the points both cover.
Rows the model cannot express are counted with the one-line reason; so are the published
serving figures whose load is a dataset with unstated per-request lengths (MLPerf's OpenOrca
runs, the engines' README runs over ShareGPT), which no simulation can replay.

Where the time goes: a point at C clients simulates 10 C requests; at 512 clients (5,120
requests) one point took 144 s of one core (SGLang's admission forecast 33 s, per-token
bookkeeping 25 s, step times 21 s), and the rows kept every inter-token latency (51 MB at 128
clients). The rows now keep none (``simulate(..., latencies=False)``: 1.8 MB, the same
figures), points run on ``--jobs`` processes, the largest first, and a point is simulated
again only when its held-out residual is not 0. ``--only TEXT`` (repeatable) keeps the points
whose label contains every TEXT, to iterate on a subset; ``--no-request-path`` simulates the
ideal server's request path (an ablation).

``--reuse OUT`` takes our predictions from an earlier ``--json OUT`` (to rerun the comparison
without simulating again); ``--aiconfigurator-cache FILE`` keeps AIConfigurator's predictions
(its estimates take about 4 s a point) and reuses them.

Usage: python benchmarks/serving_vs_published.py [--aiconfigurator PYTHON]
       [--aiconfigurator-cache FILE] [--min-concurrency 8]
       [--json OUT] [--reuse OUT] [--offline | --only-offline] [--only TEXT]... [--jobs N]
       [--no-request-path]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.published import PublishedRow, load_published, published_sources
from idealized_runtime.core.types import Deployment, SpeculativeDecoding, parse_precision
from idealized_runtime.cost_model.hardware.engines.catalog import get_engine
from idealized_runtime.cost_model.hardware.engines.kernel_fit import MOE_FORMATS
from idealized_runtime.cost_model.hardware.engines.request_path import held_out_median
from idealized_runtime.cost_model.hardware.engines.step import kernel_format
from idealized_runtime.cost_model.serving.engines import engine_server, published_acceptance
from idealized_runtime.cost_model.serving.simulator import ServerConfig, simulate
from idealized_runtime.cost_model.serving.workload import RequestShape

METRICS = {
    "ttft_s": "ttft",
    "time_per_output_token_s": "tpot",
    "output_throughput_tokens_per_s_per_gpu": "tput/gpu",
    # the median gap between streamed tokens: the decode step between prompts, where TPOT
    # averages in the steps prompts interrupt (simulated where a source publishes it)
    "inter_token_latency_s": "itl",
}
ITL = "inter_token_latency_s"
REQUESTS_PER_CLIENT = 10
LENGTH_RANGE = 0.8  # the client draws lengths from 80-100% of the stated ones
AIC_SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm"}
AIC_BACKENDS = {"sglang": "sglang", "tensorrt-llm": "trtllm", "vllm": "vllm"}
# AIConfigurator's model paths (its model_configs); Llama-3.3-70B has Llama-3.1-70B's shapes.
AIC_MODELS = {
    "deepseek-r1": "deepseek-ai/DeepSeek-R1", "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3.3-70b": "meta-llama/Meta-Llama-3.1-70B", "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-32b": "Qwen/Qwen3-32B", "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "gpt-oss-120b": "openai/gpt-oss-120b",
}  # fmt: skip
AIC_FORMATS = {"fp8-block": "fp8_block", "nvfp4": "nvfp4", "fp8": "fp8", "bf16": "bfloat16"}
AIC_MOE_FORMATS = {ours: theirs for theirs, ours in MOE_FORMATS.items()}  # mxfp4 -> w4a16_mxfp4


@dataclass(frozen=True)
class Point:
    """One measured serving configuration (its figures are separate rows)."""

    engine: str
    gpu: str
    model: str
    weights: str
    tp: int
    ep: int
    attention_dp: bool
    speculative: str
    prompt_tokens: int
    output_tokens: int
    concurrency: int  # OFFLINE: every request queued at once (a max-throughput run)
    source_id: str
    requests: int = 0
    kv_cache: str = ""  # as the source states it ("": not stated)


OFFLINE = 1 << 30
SERVED = ("vllm", "sglang", "tensorrt-llm")
OFFLINE_METRICS = (
    "output_throughput_tokens_per_s", "output_throughput_tokens_per_s_per_gpu",
    "total_throughput_tokens_per_s",
)  # fmt: skip


def _point_of(row: PublishedRow) -> tuple[Point, bool] | None:
    """The point a published row is a figure of, and whether it is an offline
    max-throughput figure (None: the row is no figure of a point)."""
    offline = (
        row.concurrency is None and row.batch_size is None and row.engine in SERVED
        and row.metric in OFFLINE_METRICS and bool(row.prompt_tokens and row.output_tokens)
    )  # fmt: skip
    if not offline and (row.concurrency is None or row.metric not in METRICS):
        return None
    if row.statistic not in (None, "median"):
        return None
    point = Point(
        row.engine, row.gpu, row.model, row.weights, row.tensor_parallel_size,
        row.expert_parallel_size or 1, bool(row.attention_dp), row.speculative or "",
        row.prompt_tokens or 0, row.output_tokens or 0, row.concurrency or OFFLINE,
        row.source_id, row.num_requests or 0 if offline else 0, row.kv_cache or "",
    )  # fmt: skip
    return point, offline


def engine_versions(rows: list[PublishedRow]) -> dict[Point, str]:
    """The engine release each point's source states ("not stated" where it does not)."""
    versions: dict[Point, str] = {}
    for row in rows:
        found = _point_of(row)
        if found is not None:
            versions.setdefault(found[0], row.engine_version or "not stated")
    return versions


def points_of(rows: list[PublishedRow]) -> dict[Point, dict[str, float]]:
    """The serving points at a concurrency, and the engines' offline max-throughput points
    (all requests queued at once, fixed lengths: output tokens/s per GPU)."""
    found: dict[Point, dict[str, float]] = defaultdict(dict)
    for row in rows:
        figure = _point_of(row)
        if figure is None:
            continue
        point, offline = figure
        if offline:
            per_gpu = row.metric.endswith("_per_gpu")
            value = row.value if per_gpu else row.value / row.gpu_count
            if row.metric.startswith("total_"):  # every request done, fixed lengths: the
                # output tokens are this share of the prompt and output tokens counted
                value *= point.output_tokens / (point.prompt_tokens + point.output_tokens)
            found[point]["output_throughput_tokens_per_s_per_gpu"] = value
            continue
        found[point][row.metric] = row.value
    return found


def unsimulated(rows: list[PublishedRow]) -> dict[str, int]:
    """Serving figures (no fixed batch) of the served engines and MLPerf that ``points_of``
    leaves out, counted by source and reason: their load is a dataset (MLPerf's OpenOrca, the
    ShareGPT conversations of the engines' READMEs) whose per-request lengths they do not
    state, so no simulation can replay it."""
    left: dict[str, int] = defaultdict(int)
    for row in rows:
        serving = row.metric in METRICS or row.metric in OFFLINE_METRICS
        ours = row.engine in SERVED or row.source_id.startswith("mlperf")
        if not serving or not ours or row.batch_size is not None or row.concurrency is not None:
            continue
        if row.engine in SERVED and row.prompt_tokens and row.output_tokens:
            continue  # an offline point
        left[f"{row.source_id} ({row.gpu}): per-request prompt and output lengths not stated"] += 1
    return dict(left)


# InferenceX's launch scripts (SemiAnalysisAI/InferenceX, benchmarks/dsr1_fp8_b200.sh,
# dsr1_fp4_b200.sh, dsr1_fp8_h200.sh at 1fc5d73c, dsr1_fp8_h200_trt.sh at 1fc5d73c,
# dsr1_fp4_b200_trt.sh and dsr1_fp8_b200_trt_mtp.sh at 111f0312; SGLang's MTP runs on
# Blackwell: benchmarks/single_node/dsr1_fp8_b200_mtp.sh at ed5867f9 and dsr1_fp4_b200_mtp.sh
# at 292726bb, the versions of 2026-02 onwards, which every such run in the table postdates;
# B300 runs as B200's). Runs of other dates may have used other versions; TensorRT-LLM's
# token budget and CUDA-graph and memory settings without MTP follow the run's date.
INFERENCEX_SCRIPTS = "SemiAnalysisAI/InferenceX benchmarks/dsr1_*.sh"


@dataclass(frozen=True)
class Launch:
    """How a source started the engine (scheduler flags, KV-cache format, MTP drafts), and its
    client: the share of each stated length its shortest draw has, the requests it sends."""

    settings: dict
    kv_cache: str | None = None
    draft_tokens: int = 0
    length_range: float = LENGTH_RANGE
    requests: int = 0  # 0: ten per client
    activations: str | None = None  # the matmuls' input format, where the source sets it


def is_blackwell(gpu: str) -> bool:
    """Whether ``gpu`` multiplies fp4 (Blackwell), as the plan tells its GPUs apart."""
    return get_hardware(gpu).peak_fp4_tflops is not None


def inferencex_kv_cache(engine: str, gpu: str) -> str | None:
    """The KV-cache format InferenceX's scripts start an engine with: fp8 under TensorRT-LLM
    (kv_cache_config dtype fp8) on every GPU, and under SGLang (--kv-cache-dtype fp8_e4m3) and
    vLLM (--kv-cache-dtype fp8) on Blackwell; else the model's 16-bit cache (None)."""
    return "fp8" if engine == "tensorrt-llm" or is_blackwell(gpu) else None


def inferencex_activations(engine: str, gpu: str, weights: str) -> str | None:
    """The matmuls' input format InferenceX's scripts set where it is a knob: MXFP8 activations
    into gpt-oss's MXFP4 experts under vLLM on Blackwell (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8;
    TensorRT-LLM and SGLang run them so by default there); else the engine's default (None)."""
    return "fp8" if engine == "vllm" and weights == "mxfp4" and is_blackwell(gpu) else None


def inferencex_draft_tokens(engine: str, attention_dp: bool) -> int:
    """The MTP draft tokens InferenceX's DeepSeek-R1 scripts run: SGLang's EAGLE two steps
    (--speculative-num-steps 2, top-k 1), TensorRT-LLM's num_nextn_predict_layers 1 with
    attention DP and 3 without."""
    if engine == "sglang":
        return 2
    return 1 if attention_dp else 3


def published_moe_runner(source_id: str, weights: str, gpu: str) -> str:
    """The MoE runner a source's engine served the experts with, where it is not the engine
    stack's default ("": the default): SGLang 0.5.6 (the cookbook's pages) serves bf16 experts
    on Blackwell with its Triton fused MoE, --moe-runner-backend auto promoting only fp8
    DeepSeek-V3 and Qwen3 experts to FlashInfer's TensorRT-LLM kernels (sglang#13489), which
    the stack's tables time bf16 Qwen3 experts on."""
    cookbook = source_id.startswith("sglang-cookbook-")
    return "triton" if cookbook and weights == "bf16" and is_blackwell(gpu) else ""


def launch_settings(point: Point) -> Launch:
    """The engine flags ``point``'s source set (InferenceX), else the engine's defaults."""
    mtp = point.speculative == "mtp"
    if point.source_id.startswith(TRTLLM_BENCH_SOURCES):
        return trtllm_bench_launch(point)
    if point.source_id.startswith(VLLM_BENCH_SOURCES):
        if point.weights != "bf16":
            raise InputError(
                "vLLM serves torchao-quantized checkpoints through torchao's own kernels "
                "(quantization method torchao), which no engine stack has measurements of"
            )
        # ``vllm bench throughput`` runs the offline LLM class: on GPUs of 70 GiB or more but
        # A100 its defaults are 16384 batched tokens and 1024 sequences (EngineArgs'
        # get_batch_defaults); the KV cache in the model's bf16.
        return Launch({"token_budget": 16384}, point.kv_cache or "bf16")
    if not point.source_id.startswith("inferencex-"):
        kv = point.kv_cache or ("fp8" if point.weights == "nvfp4" else None)
        if point.source_id.startswith("sglang-cookbook-"):
            # sglang.bench_serving's random dataset draws lengths from 1 to the stated ones; the
            # pages send 10 requests to one client, five per client to more.
            requests = 10 if point.concurrency == 1 else 5 * point.concurrency
            runner = published_moe_runner(point.source_id, point.weights, point.gpu)
            settings = {"moe_runner": runner} if runner else {}
            return Launch(settings, kv, 3 if mtp else 0, length_range=0.0, requests=requests)
        return Launch({}, kv, 3 if mtp else 0)
    if point.model == "gpt-oss-120b" and point.engine in ("vllm", "tensorrt-llm"):
        return gptoss_launch(point)
    if point.model != "deepseek-r1" or point.engine not in ("sglang", "tensorrt-llm"):
        # llama70b_*.sh and gpt-oss under SGLang set other flags; none of their runs is here.
        raise InputError(f"InferenceX's {point.engine} launch flags for {point.model} not mapped")
    fp4, blackwell = point.weights == "nvfp4", is_blackwell(point.gpu)
    if point.engine == "sglang":
        tp4_fp8 = point.tp == 4 and not fp4 and blackwell
        if tp4_fp8:  # dsr1_fp8_b200.sh's TP=4 branch
            running, fraction, budget = 32, 0.95, 8192
        elif not blackwell:
            running = 512 if point.output_tokens == point.prompt_tokens == 1024 else 256
            fraction, budget = 0.82, 32768
        elif mtp:  # single_node/dsr1_fp{8,4}_b200_mtp.sh: 512 running and graphs, 16k chunks
            running, fraction, budget = 512, 0.82, 16384
        else:
            running = 256 if fp4 else 128
            fraction, budget = (0.85, 16384) if fp4 else (0.82, 32768)
        # The TP=4 branch polls every 10 decode steps whatever the concurrency.
        interval = 1 if not blackwell else (30 if point.concurrency >= 16 and not tp4_fp8 else 10)
        settings = {
            "admission": "forecast",  # --disable-radix-cache and a client that ignores EOS
            "recv_interval": interval, "max_running": running, "cuda_graph_max_batch": running,
            "memory_fraction": fraction, "token_budget": budget,
        }  # fmt: skip
        drafts = inferencex_draft_tokens(point.engine, point.attention_dp) if mtp else 0
        return Launch(settings, inferencex_kv_cache(point.engine, point.gpu), drafts)
    # trtllm-serve's max_batch_size and max_num_tokens hold per attention-DP rank; with
    # attention DP the scripts balance the ranks (enable_balance, timeout_iters 60).
    ranks = point.tp if point.attention_dp else 1
    drafts = inferencex_draft_tokens(point.engine, point.attention_dp) if mtp else 0
    if mtp:
        tokens = (drafts + 1) * (point.concurrency // ranks) + point.prompt_tokens + 64
        settings = {"max_running": max(point.concurrency // ranks, 1),
                    "cuda_graph_max_batch": 256, "memory_fraction": 0.8}  # fmt: skip
    else:
        source = published_sources().get(point.source_id)
        date = source.source_date if source else "9999"  # not in the table: the latest
        # max_num_tokens has a floor of 8192 from 2026-01-21 (64af5a77). CUDA graphs: 512 in
        # dsr1_fp4_b200_trt.sh, from 6eecc0e6 (2026-02-03) one per client (a quarter with
        # attention DP); 256 with 0.8 of the memory in dsr1_fp8_b200_trt.sh, from ec7bafaa
        # (2026-01-29) one per client, an eighth with 0.7 at 1k/8k from 256, 0.75 at 8k/1k on TP 4.
        floor = 8192 if date >= "2026-01-21" else 0
        tokens = max(floor, point.concurrency + point.prompt_tokens + 64)
        clients, graphs, fraction = point.concurrency, *((512, 0.8) if fp4 else (128, 0.75))
        if blackwell and fp4 and date >= "2026-02-03":
            graphs = clients // 4 if point.attention_dp and clients >= 4 else clients
        elif blackwell and not fp4:
            graphs, fraction = (256, 0.8) if date < "2026-01-29" else (clients, 0.8)
            late = date >= "2026-01-29"
            if late and point.output_tokens > 4 * point.prompt_tokens and clients >= 256:
                graphs, fraction = clients // 8, 0.7
            elif late and point.prompt_tokens > 4 * point.output_tokens and point.tp == 4:
                fraction = 0.75
        settings = {"cuda_graph_max_batch": graphs, "memory_fraction": fraction}
    settings["token_budget"] = -(-tokens // 64) * 64  # per rank, as the engine counts it
    if point.attention_dp:  # attention_dp_config: enable_balance, timeout_iters 60
        settings["balance_timeout_steps"] = 60
    return Launch(settings, inferencex_kv_cache(point.engine, point.gpu), drafts)


# InferenceX's gpt-oss-120b scripts of the runs in the table (SemiAnalysisAI/InferenceX,
# benchmarks/gptoss_fp4_{b200,h200,h100}_slurm.sh at 4e52ed4c (vLLM 0.13.0, 2026-01-02), and
# gptoss_fp4_b200_trt_docker.sh at 156fef3f / gptoss_fp4_b200_trt_slurm.sh at 06667a51 and
# 645b97aa, TensorRT-LLM 1.2.0rc2, 2025-12-17 to 2026-01-07, the same flags in each).
GPTOSS_SCRIPTS = "SemiAnalysisAI/InferenceX benchmarks/gptoss_fp4_*.sh"
# TensorRT-LLM's attention-DP balance without timeout_iters: AttentionDpConfig's default.
TRTLLM_BALANCE_TIMEOUT_STEPS = 50


def gptoss_launch(point: Point) -> Launch:
    """How InferenceX's gpt-oss-120b scripts start the engine. vLLM: --async-scheduling (the
    next step is scheduled while one runs), 8192 batched tokens, graphs up to 2048 sequences,
    0.9 of the memory, --max-num-seqs 512 with an fp8 KV cache and MXFP8 activations into the
    MXFP4 experts on B200 (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8), one sequence per client with
    the model's bf16 cache on Hopper (Marlin's MXFP4 experts, VLLM_MXFP4_USE_MARLIN: the
    stack's fit takes the faster of Marlin and triton_kernels at each shape). TensorRT-LLM:
    max_batch_size 512 and max_num_tokens 20000 (per attention-DP rank), CUDA graphs padded up
    to one per client, an fp8 KV cache in 0.85 of the free memory, the TRTLLM MoE backend, the
    attention-DP balance on where DP is."""
    if point.engine == "vllm":
        blackwell = is_blackwell(point.gpu)
        running = 512 if blackwell else point.concurrency
        settings = {"max_running": running, "cuda_graph_max_batch": min(2048, running),
                    "token_budget": 8192, "memory_fraction": 0.9,
                    "schedule_ahead_steps": 1}  # fmt: skip
        return Launch(
            settings,
            inferencex_kv_cache(point.engine, point.gpu),
            activations=inferencex_activations(point.engine, point.gpu, point.weights),
        )
    settings = {"max_running": 512, "token_budget": 20000,
                "cuda_graph_max_batch": point.concurrency, "memory_fraction": 0.85}  # fmt: skip
    if point.attention_dp:
        settings["balance_timeout_steps"] = TRTLLM_BALANCE_TIMEOUT_STEPS
    return Launch(settings, inferencex_kv_cache(point.engine, point.gpu))


# Offline ``vllm bench throughput`` runs: torchao's checkpoints served by vLLM 0.13.
VLLM_BENCH_SOURCES = ("torchao-quant-readme-2026-01",)
# TensorRT-LLM's perf overviews run ``trtllm-bench throughput`` (0.17: TensorRT engines it
# builds; 0.19 and 1.0: the PyTorch backend) on NVIDIA's ModelOpt FP8 and FP4 checkpoints.
TRTLLM_BENCH_SOURCES = ("trtllm-perf-overview-",)
TRTLLM_BENCH_BYTES = {"fp8": 1.0, "nvfp4": 0.5}  # per weight or KV value; 2 otherwise


def trtllm_bench_launch(point: Point) -> Launch:
    """How ``trtllm-bench throughput`` runs ``point``: it sizes the engine itself from the
    memory left for the KV cache and the dataset's lengths (max batch size and max tokens per
    step: ``calc_engine_setting`` and ``finetune_setting`` in tensorrt_llm/bench/build/
    tuning.py), and chunks prompts (``--enable_chunked_context``, on by default), so a
    20000-token prompt runs in chunks beside the decoding sequences. The KV cache is fp8: 0.17's
    page states it, and 0.19's and 1.0's throughputs of the same models on the same GPUs are
    within a few percent of 0.17's (a 16-bit cache holds half the sequences: 70B on one H200 at
    128/2048 tokens would need a decode step at the roofline's own 22 ms to reach 1.0's 4,336
    tokens/s). The pages run most tables with 0.95 of the free memory for the KV cache."""
    fraction = 0.95
    deployment = deployment_of(point, Launch({}, "fp8"))
    architecture = deployment.architecture
    weight_bytes = TRTLLM_BENCH_BYTES.get(point.weights, 2.0)
    # The tool counts the KV heads of the whole model, at least one per tensor-parallel rank.
    kv_heads = max(point.tp, architecture.kv_heads)
    per_token = (
        2 * architecture.num_layers * kv_heads * architecture.dim_per_head
        * deployment.precision.kv_bytes_per_element
    )  # fmt: skip
    gib = 2**30
    memory = deployment.hardware.device_memory_bytes / gib * point.tp
    cache = (memory - architecture.num_parameters() * weight_bytes / gib) * fraction
    max_requests = cache * gib / (per_token * (point.prompt_tokens + point.output_tokens))
    batch = min(max_requests, 4096)
    tokens = min(batch * (1 + point.prompt_tokens / point.output_tokens), 32768)
    rounding = 32 if batch < 256 else 128 if batch < 1024 else 256
    max_batch = max(64, rounding * math.ceil(batch / rounding))
    rounding = 256 if tokens < 4096 else 512 if tokens < 8192 else 1024
    budget = max(2048, rounding * math.ceil(tokens / rounding))
    settings = {"max_running": max_batch, "token_budget": budget, "chunked_prefill": True,
                "memory_fraction": fraction}  # fmt: skip
    return Launch(settings, "fp8", 3 if point.speculative == "mtp" else 0)


def deployment_of(point: Point, launch: Launch) -> Deployment:
    architecture = get_architecture(point.model)
    speculative = None
    if launch.draft_tokens:
        rate = published_acceptance(point.model, launch.draft_tokens)
        if rate is None:
            raise InputError(f"no published MTP acceptance for {point.model}")
        speculative = SpeculativeDecoding(draft_tokens=launch.draft_tokens, acceptance_rate=rate)
    return Deployment(
        architecture=architecture,
        hardware=get_hardware(point.gpu),
        tp=point.tp,
        ep=point.ep,
        attention_dp=point.tp if point.attention_dp else 1,
        precision=parse_precision(
            point.weights, launch.kv_cache, launch.activations, default=architecture.precision
        ),
        speculative=speculative,
    )


# The engine's request path switched off (``--no-request-path``): the ideal server's.
NO_REQUEST_PATH = {
    "request_http_s": 0.0, "tokenize_s_per_token": 0.0, "detokenize_s_per_token": 0.0,
    "stream_s": 0.0, "schedule_ahead_steps": 0,
}  # fmt: skip


def predict(
    point: Point, residual_s: float | None = None, request_path: bool = True, itl: bool = False
) -> dict[str, float]:
    """Simulated median TTFT, median TPOT and output tokens/s per GPU of ``point`` (and, with
    ``itl``, the median gap between streamed tokens over every request's gaps, as
    bench_serving takes it): the engine's request path (``request_path=False``: none), plus
    ``residual_s`` seconds per request (default: the engine stack's own,
    ``residual_overhead_s``)."""
    launch = launch_settings(point)
    settings = dict(launch.settings)
    if residual_s is not None:
        settings |= {"request_overhead_s": residual_s, "request_overhead_s_per_layer": 0.0}
    if not request_path:
        settings |= NO_REQUEST_PATH
    max_batch = settings.pop("max_running", None)
    step_time, config = engine_server(
        point.engine, deployment_of(point, launch), max_batch=max_batch, settings=settings
    )
    if point.concurrency == OFFLINE:
        return {"output_throughput_tokens_per_s_per_gpu": offline_throughput(
            point, step_time, config) / point.tp}  # fmt: skip
    rng = np.random.default_rng(0)
    count = launch.requests or REQUESTS_PER_CLIENT * point.concurrency

    def lengths(stated: int) -> np.ndarray:
        return rng.integers(max(int(stated * launch.length_range), 1), stated + 1, size=count)

    shapes = [
        RequestShape(int(p), int(o))
        for p, o in zip(lengths(point.prompt_tokens), lengths(point.output_tokens), strict=True)
    ]
    rows = simulate(shapes, step_time, config, concurrency=point.concurrency, latencies=itl)
    ok = [r for r in rows if r["ok"]]
    if len(ok) < len(rows):
        raise InputError(f"{len(rows) - len(ok)} requests never fit the KV cache")
    ttft = np.median([r["ttft_s"] for r in ok])
    tpot = np.median([
        (r["runtime_s"] - r["ttft_s"]) / max(r["num_output_tokens"] - 1, 1) for r in ok
    ])  # fmt: skip
    span = max(r["finished_at_s"] for r in ok) - min(r["started_at_s"] for r in ok)
    output = sum(r["num_output_tokens"] for r in ok) / span / point.tp
    figures = {"ttft_s": float(ttft), "time_per_output_token_s": float(tpot),
               "output_throughput_tokens_per_s_per_gpu": float(output)}  # fmt: skip
    if itl:
        gaps = [np.asarray(r["inter_token_latencies_s"], dtype=np.float64) for r in ok]
        figures[ITL] = float(np.median(np.concatenate(gaps)))
    return figures


def offline_throughput(point: Point, step_time: object, config: ServerConfig) -> float:
    """Output tokens/s of an offline run as the tools count it (``trtllm-bench``'s total output
    throughput, ``vllm bench throughput``): every request queued at once with fixed lengths,
    all output tokens over the time from the start to the last request's end (ramp-up and drain
    included). A source that does not state its request count: four times the sequences the
    server holds at once."""
    requests = point.requests
    if not requests:
        held = config.max_batch
        if config.admission == "reserve" and config.kv_capacity_tokens:  # whole sequences fit
            need = point.prompt_tokens + point.output_tokens
            held = min(held, config.kv_capacity_tokens // need + 1)
        requests = 4 * held
    shapes = [RequestShape(point.prompt_tokens, point.output_tokens)] * requests
    rows = simulate(shapes, step_time, config, concurrency=requests)
    if not all(r["ok"] for r in rows):
        raise InputError("a request never fits the KV cache")
    span = max(r["finished_at_s"] for r in rows) - min(r["started_at_s"] for r in rows)
    return requests * point.output_tokens / span


# What the request path and the kernels leave of an engine's TTFT (``request_overhead_s``) is
# fitted on its points at low concurrency, where TTFT is one prompt step and the path: per
# layer of the model (``request_overhead_s_per_layer``), as the residuals of the two models
# with figures on one engine scale (SGLang: DeepSeek-R1's 61 layers and Qwen3-235B-A22B's 94
# leave 0.8 and 0.7 ms per layer where their medians differ by 1.4x).
RESIDUAL_FIT_CONCURRENCY = 8


@dataclass(frozen=True)
class Residual:
    """Published minus simulated median TTFT of one point at low concurrency, the simulation
    with the engine's request path and no residual overhead."""

    engine: str
    model: str
    source: str  # the source family (``family``)
    seconds: float
    layers: int  # the model's

    @property
    def per_layer(self) -> float:
        return self.seconds / self.layers


@dataclass(frozen=True)
class HeldOut:
    """The residual overhead a point is predicted with and where it came from: ``fitted`` on
    ``points`` points of ``models`` other models and other sources, else the engine stack's
    own (``prior``: no other model's points to fit on)."""

    seconds: float
    fitted: bool
    points: int = 0
    models: int = 0


def residuals_of(
    points: list[Point], measured: dict[Point, dict[str, float]],
    bare: dict[Point, dict[str, float]],
) -> list[Residual]:  # fmt: skip
    """The residuals of the points at concurrency <= ``RESIDUAL_FIT_CONCURRENCY`` with a
    published TTFT, from their predictions without residual overhead (``bare``)."""
    fit = [
        p for p in points
        if p.concurrency <= RESIDUAL_FIT_CONCURRENCY and "ttft_s" in measured[p]
        and "ttft_s" in bare.get(p, {})
    ]  # fmt: skip
    return [
        Residual(p.engine, p.model, family(p.source_id), measured[p]["ttft_s"] - bare[p]["ttft_s"],
                 get_architecture(p.model).num_layers)
        for p in fit
    ]  # fmt: skip


def held_out_residuals(points: list[Point], residuals: list[Residual]) -> dict[Point, HeldOut]:
    """Each point's residual overhead, fitted without its model AND its source: the median
    of its engine's residuals per layer of other models from other sources (at least 0 s),
    times the point's model's layers. Where none
    is left (the engine's figures hold one model, or every other model's come from the
    point's source), the engine stack's own ``request_overhead_s``, which is fitted across
    models only (0 until two models have figures)."""
    found = {}
    for point in points:
        mine = [r for r in residuals if r.engine == point.engine]
        source = family(point.source_id)
        fitted = held_out_median(((r.model, r.source, r.per_layer) for r in mine), point.model,
                                 source)  # fmt: skip
        layers = get_architecture(point.model).num_layers
        if fitted is None:
            prior = get_engine(point.engine).scheduler.residual_overhead_s(layers)
            found[point] = HeldOut(prior, False)
            continue
        used = [r for r in mine if r.model != point.model and r.source != source]
        found[point] = HeldOut(
            max(fitted, 0.0) * layers, True, len(used), len({r.model for r in used})
        )
    return found


def fitted_across_models(residuals: list[Residual]) -> dict[str, str]:
    """Per engine, what its residual overhead fitted on every model would be (what
    ``data/engines/<engine>.json`` would ship), or why none is fitted."""
    said = {}
    for engine in sorted({r.engine for r in residuals}):
        mine = [r for r in residuals if r.engine == engine]
        models = sorted({r.model for r in mine})
        if len(models) < 2:
            said[engine] = (f"not fitted: {len(mine)} points of one model ({models[0]}); a "
                            "residual of one model is no property of the engine")  # fmt: skip
            continue
        # Each model weighs the same, however many points it has.
        medians = {m: float(np.median([r.per_layer for r in mine if r.model == m]))
                   for m in models}  # fmt: skip
        value = max(float(np.mean(list(medians.values()))), 0.0)
        each = ", ".join(f"{m} {v * 1e3:.2f}" for m, v in medians.items())
        said[engine] = (f"{value * 1e3:.2f} ms per layer fitted on {len(mine)} points of "
                        f"{len(models)} models (the mean of their medians: {each})")  # fmt: skip
    return said


# point, residual overhead, with the request path, with the median gap between tokens
Job = tuple[Point, float | None, bool, bool]


def _predict_or_refuse(job: Job) -> dict[str, float] | str:
    """``predict`` in a worker process: the figures, or the one-line reason it refuses."""
    try:
        return predict(*job)
    except InputError as error:
        return str(error)


def predict_all(jobs: list[Job], workers: int) -> dict[Point, dict[str, float] | str]:
    """``predict`` of every (point, residual overhead), on ``workers`` processes (the largest
    loads first); prints progress."""

    def load(job: Job) -> int:
        return -job[0].concurrency * (job[0].prompt_tokens + job[0].output_tokens)

    order = sorted(jobs, key=load)
    found: dict[Point, dict[str, float] | str] = {}
    if workers <= 1:
        results = map(_predict_or_refuse, order)
    else:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        results = pool.map(_predict_or_refuse, order)
    for done, ((point, *_), result) in enumerate(zip(order, results, strict=True), 1):
        found[point] = result
        print(f"\r  simulated {done}/{len(order)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    if workers > 1:
        pool.shutdown()
    return found


def aiconfigurator(points: list[Point], python: str, cache: str | None = None) -> list[dict]:
    """AIConfigurator's predictions of ``points``, run in its own interpreter.

    With ``cache`` (a JSON file), the predictions of requests already in it are read back and
    only the others run; the file then holds all of them. The key is the whole request sent to
    AIConfigurator, so a point whose launch settings changed is predicted again."""
    requests = []
    for p in points:
        fmt = AIC_FORMATS.get(p.weights)
        launch = launch_settings(p)
        gemm, moe = fmt, fmt if get_architecture(p.model).num_experts > 1 else None
        if p.weights == "mxfp4":  # gpt-oss: 16-bit linear layers, MXFP4 experts
            # The experts in the format the engine serves them (W4A8 on Blackwell where the
            # engine's default or the source's activations make it so).
            precision = deployment_of(p, launch).precision
            served = get_engine(p.engine).gpus[p.gpu].moe_served
            experts = kernel_format(precision, experts=True)
            gemm = AIC_FORMATS[kernel_format(precision)]
            moe = AIC_MOE_FORMATS[served.get(experts, experts)]
        accepted = None  # average accepted drafts per step: the same published acceptance
        if launch.draft_tokens:
            spec = deployment_of(p, launch).speculative
            accepted = spec.tokens_per_step - 1.0 if spec is not None else None
        requests.append({
            "model_path": AIC_MODELS.get(p.model, p.model), "system": AIC_SYSTEMS.get(p.gpu, p.gpu),
            "backend": AIC_BACKENDS[p.engine], "isl": p.prompt_tokens, "osl": p.output_tokens,
            "concurrency": p.concurrency, "tp": p.tp, "ep": p.ep,
            "attention_dp": p.tp if p.attention_dp else 1, "gemm": gemm, "moe": moe,
            "kv": launch.kv_cache, "nextn": launch.draft_tokens, "nextn_accepted": accepted,
        })  # fmt: skip
    found = aiconfigurator_requests(requests, python, cache)
    # Where its database lacks the served MXFP4 x MXFP8 experts' layout (TensorRT-LLM on B200
    # measured them at MoE TP 1 only), its MXFP4 x BF16 experts, the checkpoint's own format.
    retry = {
        i: {**r, "moe": "w4a16_mxfp4"} for i, (r, f) in enumerate(zip(requests, found, strict=True))
        if r["moe"] == "w4a8_mxfp4_mxfp8" and "MoE data missing" in f.get("error", "")
    }  # fmt: skip
    if retry:
        again = aiconfigurator_requests(list(retry.values()), python, cache)
        for i, result in zip(retry, again, strict=True):
            found[i] = result
    return found


def aiconfigurator_requests(requests: list[dict], python: str, cache: str | None) -> list[dict]:
    """AIConfigurator's results of ``requests`` (``aiconfigurator_points.py`` in its own
    interpreter), those in ``cache`` read back."""
    keys = [json.dumps(r, sort_keys=True) for r in requests]
    known: dict[str, dict] = {}
    if cache and Path(cache).exists():
        known = json.loads(Path(cache).read_text())
    missing = [r for r, key in zip(requests, keys, strict=True) if key not in known]
    if missing:
        print(f"AIConfigurator: predicting {len(missing)} points ({len(requests) - len(missing)} "
              "from the cache)", file=sys.stderr, flush=True)  # fmt: skip
        helper = Path(__file__).with_name("aiconfigurator_points.py")
        done = subprocess.run(
            [python, str(helper)], input=json.dumps(missing), capture_output=True, text=True,
            check=True,
        )  # fmt: skip
        for request, result in zip(missing, json.loads(done.stdout), strict=True):
            known[json.dumps(request, sort_keys=True)] = result
        if cache:
            Path(cache).write_text(json.dumps(known, indent=1, sort_keys=True))
    return [known[key] for key in keys]


def _stats(errors: list[float]) -> str:
    if not errors:
        return f"{'-':>6} {'-':>6} {'-':>7} {0:>3}"
    a = np.asarray(errors)
    return (f"{np.median(np.abs(a)):>6.1%} {np.percentile(np.abs(a), 90):>6.1%} "
            f"{np.median(a):>+7.1%} {a.size:>3}")  # fmt: skip


def _label(point: Point) -> str:
    """What ``--only`` matches: engine, GPU, model, weights, source, lengths, clients."""
    return (f"{point.engine} {point.gpu} {point.model} {point.weights} {point.source_id} "
            f"{point.prompt_tokens}/{point.output_tokens} c{point.concurrency}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", help="python of a venv with aiconfigurator 0.12")
    parser.add_argument(
        "--aiconfigurator-cache", metavar="FILE",
        help="keep AIConfigurator's predictions in FILE and reuse them (it takes minutes)",
    )  # fmt: skip
    parser.add_argument("--min-concurrency", type=int, default=8)
    parser.add_argument("--json", help="write every point's published and predicted figures")
    parser.add_argument(
        "--reuse", help="our predictions from an earlier --json of this script (not simulated)"
    )
    parser.add_argument(
        "--offline", action="store_true", help="also the offline max-throughput tables (slow)"
    )
    parser.add_argument(
        "--only-offline", action="store_true", help="only the offline max-throughput tables"
    )
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT",
        help="only points whose 'engine gpu model weights source prompt/output cC' contains "
        "TEXT (repeatable: all must match), e.g. --only tensorrt-llm --only ' c8'",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=max((os.cpu_count() or 1) - 1, 1),
        help="simulate on this many processes (default: the CPUs less one)",
    )  # fmt: skip
    parser.add_argument(
        "--no-request-path", action="store_true",
        help="simulate without the engines' request path (the ideal server's: an ablation)",
    )  # fmt: skip
    args = parser.parse_args()
    published = load_published()
    versions = engine_versions(published)
    measured = {
        point: figures
        for point, figures in points_of(published).items()
        if (point.concurrency == OFFLINE)
        in ((True,) if args.only_offline else (False, args.offline))
        and all(text in _label(point) for text in args.only)
    }
    points = sorted(
        measured, key=lambda p: (p.engine, p.gpu, p.weights, p.concurrency, p.source_id)
    )
    refused: dict[str, int] = defaultdict(int)
    ours: dict[Point, dict[str, float]] = {}
    held: dict[Point, HeldOut] = {}
    if args.reuse:
        earlier = json.loads(Path(args.reuse).read_text())
        held = {Point(**e["point"]): HeldOut(**e["residual"]) for e in earlier if e["residual"]}
        ours = {Point(**e["point"]): e["predicted"] for e in earlier if e["predicted"]}
        ours = {p: v for p, v in ours.items() if p in measured}
    else:
        # Every point with the request path and no residual overhead; the residuals of the
        # points at low load; each point's residual fitted without its model and source, and
        # the points whose residual is not 0 simulated again with it.
        path = not args.no_request_path
        gaps = {p: ITL in measured[p] for p in points}
        bare = predict_all([(p, 0.0, path, gaps[p]) for p in points], args.jobs)
        residuals = residuals_of(points, measured, {
            p: v for p, v in bare.items() if not isinstance(v, str)})  # fmt: skip
        for engine, said in fitted_across_models(residuals).items():
            print(f"residual request overhead of {engine} across models: {said}")
        held = held_out_residuals(points, residuals)
        again = predict_all(
            [(p, held[p].seconds, path, gaps[p]) for p in points if held[p].seconds], args.jobs
        )
        for point in points:
            result = again.get(point, bare[point])
            if isinstance(result, str):
                refused[result] += 1
            else:
                ours[point] = result
        prior = sum(1 for p in points if not held[p].fitted)
        print(f"residual overhead per point: fitted without the point's model and source on "
              f"{len(points) - prior} points; the engine stack's own (no other model's points "
              f"to fit on) on {prior}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps([
            {"point": p.__dict__, "published": measured[p], "predicted": ours.get(p),
             "residual": held[p].__dict__ if p in held else None} for p in points
        ], indent=1))  # fmt: skip
    theirs: dict[Point, dict[str, float]] = {}
    if args.aiconfigurator:
        served_points = [p for p in points if p.concurrency != OFFLINE]
        predicted = aiconfigurator(served_points, args.aiconfigurator, args.aiconfigurator_cache)
        for point, result in zip(served_points, predicted, strict=True):
            if "error" in result:
                refused[f"AIConfigurator: {result['error']}"] += 1
                continue
            theirs[point] = {
                "ttft_s": result["ttft_s"], "time_per_output_token_s": result["tpot_s"],
                "output_throughput_tokens_per_s_per_gpu": result["output_tokens_per_s_per_gpu"],
            }  # fmt: skip
    print(f"{len(points)} measured serving points, {len(ours)} simulated, "
          f"{len(theirs)} predicted by AIConfigurator" if args.aiconfigurator else
          f"{len(points)} measured serving points, {len(ours)} simulated")  # fmt: skip
    for reason, count in sorted(refused.items()):
        print(f"  not predicted ({count}): {reason}")
    for reason, count in sorted(unsimulated(published).items()):
        print(f"  not simulated ({count} figure{'s' if count > 1 else ''}): {reason}")
    served = [p for p in points if p.concurrency != OFFLINE]
    sections = (
        (f"serving, concurrency >= {args.min_concurrency}",
         [p for p in served if p.concurrency >= args.min_concurrency]),
        ("serving, all concurrencies", served),
        ("offline max throughput (all requests queued at once)",
         [p for p in points if p.concurrency == OFFLINE]),
    )  # fmt: skip
    for label, members in sections:
        if not members:
            continue
        print()
        print(f"{label}: |predicted / published - 1| median, p90, signed median, n; held out by "
              "source AND by model (each point's residual request overhead fitted on other "
              "models' points from other sources, else the engine stack's own)")  # fmt: skip
        _table(members, measured, ours, theirs, bool(args.aiconfigurator), versions)
    if args.aiconfigurator:
        print("* on the points both predict")
    print()
    print("Targets (concurrency >= 8, held out by model and source): TTFT median <= 25% "
          "(p90 <= 100%), TPOT median <= 10%, on every engine.")  # fmt: skip


def family(source_id: str) -> str:
    """The source family: InferenceX's runs together, else the source itself (each release of
    TensorRT-LLM's perf overview, torchao's README, ...)."""
    return source_id.split("-run-")[0] if "-run-" in source_id else source_id


# The groupings of the tables: each point counts in one row of each (and in one row of the
# engine releases the sources state: the stacks' kernels are of one release per engine).
GROUPINGS = (
    ("engine, gpu", lambda p: (p.engine, p.gpu)),
    ("engine, model", lambda p: (p.engine, p.model)),
    ("engine, prompt tokens", lambda p: (p.engine, f"{p.prompt_tokens} prompt")),
    ("source", lambda p: ("all", family(p.source_id))),
    ("engine", lambda p: (p.engine, "")),
    ("all", lambda p: ("all", "")),
)  # fmt: skip


def _table(
    members: list[Point],
    measured: dict[Point, dict[str, float]],
    ours: dict[Point, dict[str, float]],
    theirs: dict[Point, dict[str, float]],
    with_aic: bool,
    versions: dict[Point, str],
) -> None:
    head = " | ".join(f"{name:^25}" for name in METRICS.values())
    by_release = ("engine, release", lambda p: (p.engine, versions.get(p, "not stated")))
    for title, key_of in (*GROUPINGS[:3], by_release, *GROUPINGS[3:]):
        groups: dict[tuple, list[Point]] = defaultdict(list)
        for p in members:
            groups[key_of(p)].append(p)
        print(f"-- by {title}")
        print(f"{'':<13} {'':<28} {'who':<6} | {head}")
        for key, chosen_from in sorted(groups.items()):
            for who, predictions in (("ours", ours), ("aic", theirs), ("ours*", ours),
                                     ("aic*", theirs)):  # fmt: skip
                if (who.startswith("aic") or who.endswith("*")) and not with_aic:
                    continue
                both = [p for p in chosen_from if p in ours and p in theirs]
                chosen = both if who.endswith("*") else [p for p in chosen_from if p in predictions]
                cells = []
                for metric in METRICS:
                    errors = [
                        predictions[p][metric] / measured[p][metric] - 1.0
                        for p in chosen if metric in measured[p] and metric in predictions[p]
                    ]  # fmt: skip
                    cells.append(_stats(errors))
                print(f"{key[0]:<13} {key[1][:28]:<28} {who:<6} | " + " | ".join(cells))


if __name__ == "__main__":
    sys.exit(main())
