"""Our runner vs HF transformers ``generate``, and vs the device's measured ceilings.

Same architecture, device, dtype and random-weight model size, in one run:
  * decode ms/token (batch 1, after a prompt of --context tokens), as the slope of
    runtime(o) between o = 1 and o = 1 + --decode-tokens, so prefill cancels out;
  * prefill time for --prefill-tokens (time to first token);
  * MBU = bytes a decode step must read (weights + KV cache) / time / measured copy bandwidth;
  * MFU = prefill FLOPs / time / measured matmul FLOP/s.

    python benchmarks/runner_vs_hf.py                       # CPU, small-llama-100m, fp32
    python benchmarks/runner_vs_hf.py --device cuda --arch llama-3.1-8b
    python benchmarks/runner_vs_hf.py --device cuda --arch megatron-openai-ada

HF gets its best generate settings we know of: on CUDA a static cache (which transformers
compiles), on CPU the default dynamic cache (a static cache is slower there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.types import DTYPE_BYTES, Architecture
from idealized_runtime.local_runner.generate import Generator
from idealized_runtime.local_runner.model import TORCH_DTYPES


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``fn`` over ``repeats`` runs, device work included."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# --- ceilings --------------------------------------------------------------------------------


def copy_bandwidth(device: torch.device, repeats: int) -> float:
    """Bytes/s of a large device-to-device copy (read + write counted)."""
    nbytes = (2 << 30) if device.type == "cuda" else (256 << 20)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    seconds = timed(lambda: dst.copy_(src), device, repeats, warmup=2)
    return 2 * nbytes / seconds


def matmul_flops(device: torch.device, dtype: torch.dtype, repeats: int) -> float:
    n = 8192 if device.type == "cuda" else 2048
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = timed(lambda: a @ b, device, repeats, warmup=2)
    return 2 * n**3 / seconds


# --- work per step ---------------------------------------------------------------------------


def decode_bytes(arch: Architecture, dtype: str, context: int) -> float:
    """Bytes one batch-1 decode step must read: every weight matrix once (the input embedding
    only one row, unless tied to the head) plus the KV cache of ``context`` tokens."""
    params = arch.num_parameters()
    if arch.position == "learned":
        params -= arch.max_context * arch.hidden_size
    if not arch.tie_embeddings:
        params -= arch.vocab_size * arch.hidden_size
    return params * DTYPE_BYTES[dtype] + arch.kv_cache_bytes_per_token(dtype) * context


def prefill_flops(arch: Architecture, tokens: int) -> float:
    """Matmul FLOPs of a prefill that computes logits for the last token only."""
    per_token = 2 * arch.num_layers * arch.layer_parameters(active_only=True)
    attention = 2 * 2 * arch.num_layers * arch.num_heads * arch.dim_per_head * tokens * tokens / 2
    head = 2 * arch.vocab_size * arch.hidden_size
    return per_token * tokens + attention + head


# --- runners ---------------------------------------------------------------------------------


def ours(args, arch: Architecture, device: torch.device) -> dict[str, float]:
    generator = Generator(
        arch,
        device=str(device),
        dtype=args.dtype,
        max_seq_len=max(args.context + args.decode_tokens + 1, args.prefill_tokens),
        compile=args.compile,
    )
    prompt = torch.randint(0, arch.vocab_size, (1, args.context), device=device)
    long_prompt = torch.randint(0, arch.vocab_size, (1, args.prefill_tokens), device=device)
    n = args.decode_tokens
    t_one = timed(lambda: generator.generate(prompt, 1), device, args.repeats)
    t_many = timed(lambda: generator.generate(prompt, 1 + n), device, args.repeats)
    prefill = timed(lambda: generator.prefill(long_prompt), device, args.repeats)
    return {"decode_s": (t_many - t_one) / n, "prefill_s": prefill}


def hf_config(arch: Architecture):
    import transformers

    if arch.family in ("llama", "mistral") and arch.num_experts == 1:
        return transformers.LlamaConfig(
            hidden_size=arch.hidden_size,
            intermediate_size=arch.ffn_hidden_size,
            num_hidden_layers=arch.num_layers,
            num_attention_heads=arch.num_heads,
            num_key_value_heads=arch.kv_heads,
            vocab_size=arch.vocab_size,
            max_position_embeddings=arch.max_context,
            rope_theta=arch.rope_theta,
            rms_norm_eps=arch.norm_eps,
            tie_word_embeddings=arch.tie_embeddings,
        )
    if arch.position == "learned" and arch.norm == "layernorm" and not arch.gated_mlp:
        return transformers.GPT2Config(
            n_embd=arch.hidden_size,
            n_layer=arch.num_layers,
            n_head=arch.num_heads,
            n_inner=arch.ffn_hidden_size,
            vocab_size=arch.vocab_size,
            n_positions=arch.max_context,
            activation_function=arch.activation,
            tie_word_embeddings=arch.tie_embeddings,
        )
    raise SystemExit(f"no HF equivalent wired for {arch.name}; use --skip-hf")


def huggingface(args, arch: Architecture, device: torch.device) -> dict[str, float]:
    import transformers

    config = hf_config(arch)
    with device:
        model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=TORCH_DTYPES[args.dtype]
        ).eval()
    prompt = torch.randint(0, arch.vocab_size, (1, args.context), device=device)
    long_prompt = torch.randint(0, arch.vocab_size, (1, args.prefill_tokens), device=device)
    extra = {"cache_implementation": "static"} if device.type == "cuda" else {}

    def generate(ids: torch.Tensor, new_tokens: int) -> None:
        with torch.inference_mode():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
                **extra,
            )

    n = args.decode_tokens
    t_one = timed(lambda: generate(prompt, 1), device, args.repeats, warmup=2)
    t_many = timed(lambda: generate(prompt, 1 + n), device, args.repeats, warmup=2)
    prefill = timed(lambda: generate(long_prompt, 1), device, args.repeats)
    return {"decode_s": (t_many - t_one) / n, "prefill_s": prefill}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="small-llama-100m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--context", type=int, default=128, help="prompt before decoding")
    parser.add_argument("--decode-tokens", type=int, default=None)
    parser.add_argument("--prefill-tokens", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="torch.compile our decode step")
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: on a shared machine, multi-threaded elementwise ops stall "
        "for a scheduler time slice each; both runners get the same setting)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    args.decode_tokens = args.decode_tokens or (256 if cuda else 32)
    args.prefill_tokens = args.prefill_tokens or (2048 if cuda else 512)
    arch = get_architecture(args.arch)
    torch.manual_seed(0)

    bandwidth = copy_bandwidth(device, args.repeats)
    flops = matmul_flops(device, TORCH_DTYPES[args.dtype], args.repeats)
    ours_result = ours(args, arch, device)
    if cuda:
        torch.cuda.empty_cache()
    hf_result = None if args.skip_hf else huggingface(args, arch, device)

    floor_s = decode_bytes(arch, args.dtype, args.context) / bandwidth
    work = prefill_flops(arch, args.prefill_tokens)
    name = torch.cuda.get_device_name(device) if cuda else f"CPU ({torch.get_num_threads()} thr)"
    print(
        f"\n{arch.name} ({arch.num_parameters() / 1e6:.0f}M params), {args.dtype}, batch 1, "
        f"{name}, torch {torch.__version__}"
    )
    print(
        f"measured ceilings: copy {bandwidth / 1e9:.1f} GB/s, matmul {flops / 1e12:.2f} TFLOP/s; "
        f"decode floor {floor_s * 1e3:.2f} ms/token\n"
    )
    header = f"{'metric':<34}{'ours':>10}{'HF':>10}{'HF/ours':>9}{'ours util':>11}{'HF util':>9}"
    print(header)
    print("-" * len(header))

    def row(label: str, key: str, util: Callable[[float], float], kind: str) -> None:
        mine = ours_result[key]
        theirs = hf_result[key] if hf_result else float("nan")
        print(
            f"{label:<34}{mine * 1e3:>10.2f}{theirs * 1e3:>10.2f}{theirs / mine:>9.2f}"
            f"{util(mine):>10.0%}{kind}{util(theirs):>8.0%}{kind}"
        )

    row(
        f"decode ms/token (ctx {args.context})",
        "decode_s",
        lambda s: floor_s / s,
        "B",
    )
    row(
        f"prefill ms ({args.prefill_tokens} tokens)",
        "prefill_s",
        lambda s: work / s / flops,
        "F",
    )
    print("\nB = MBU (share of measured copy bandwidth), F = MFU (share of measured matmul rate)")


if __name__ == "__main__":
    main()
