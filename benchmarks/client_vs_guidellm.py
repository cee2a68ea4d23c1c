"""Our `measure` against guidellm, on the same `serve-model` server at the same concurrencies.

One local server (the runner's tiny-llama with random weights, a BPE tokenizer trained here and
saved with save_pretrained, so both clients count the same tokens) is measured at each
concurrency level by `idealized-runtime measure` (chat endpoint, streaming) and by
`guidellm run --profile kind=concurrent`, one after the other, same prompt and output lengths.
Printed per level: p50 TTFT and p50 ITL of both with their ratio (target: within 5%; ITL as
guidellm defines it, per request (latency - TTFT) / (output tokens - 1), i.e. our TPOT), and each
client's CPU seconds per request (user + system of the client process and its children; target:
ours no higher).

guidellm lives in its own virtual environment (it brings its own dependencies); pin torch to the
CPU build already installed so that pip does not fetch another one:
    python -m venv /tmp/guidellm-venv
    echo torch==2.13.0 > /tmp/torch-pin.txt
    /tmp/guidellm-venv/bin/pip install -c /tmp/torch-pin.txt guidellm==0.8.1
and is found through GUIDELLM (the executable), else `guidellm` on PATH.

Usage: python benchmarks/client_vs_guidellm.py [--levels 1,4] [--requests 40]
                                               [--prompt-tokens 64] [--output-tokens 32]

``compare(base_url, tokenizer_dir, levels, ...)`` is the core, for other benchmarks that
already run a server (it returns one dict per level).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from idealized_runtime.processes import free_port, running_server
from idealized_runtime.timing.summary import read_raw_rows, summarize

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def make_tokenizer(folder: Path, vocab_size: int = 2000) -> Path:
    """A byte-level BPE trained on generated text, saved with save_pretrained (no hub)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = [f"{a}{b}" for a in "bcdfghjklmnpr" for b in ("an", "el", "it", "or", "us", "ed")]
    text = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(400)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<unk>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['content'] if m['content'] is string else "
        "m['content'][0]['text'] }}{% endfor %}"
    )
    fast.save_pretrained(folder)
    return folder


def _cpu_of(command: Sequence[str], env: dict[str, str], log: Path) -> float:
    """Run to completion; user + system CPU seconds of the process and its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("wb") as handle:
        result = subprocess.run(
            list(command), env={**os.environ, **env}, stdout=handle, stderr=subprocess.STDOUT
        )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"{command[0]} failed ({result.returncode}): {' | '.join(tail)}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _find_median(data: Any, names: Iterable[str]) -> float | None:
    """The successful requests' median of the first metric named in ``names`` (guidellm's JSON
    nests metrics as {name: {"successful": {"median": ...}}}), in seconds."""
    wanted = tuple(names)
    if isinstance(data, dict):
        for key, value in data.items():
            if key in wanted and isinstance(value, dict):
                stats = value.get("successful", value)
                median = stats.get("median") if isinstance(stats, dict) else None
                if isinstance(median, (int, float)):
                    return float(median) / (1000.0 if key.endswith("_ms") else 1.0)
        for value in data.values():
            found = _find_median(value, wanted)
            if found is not None:
                return found
    elif isinstance(data, list):
        for value in data:
            found = _find_median(value, wanted)
            if found is not None:
                return found
    return None


def guidellm_level(
    guidellm: str, base_url: str, tokenizer_dir: Path, concurrency: int, requests: int,
    prompt_tokens: int, output_tokens: int, work: Path,
) -> dict[str, float | None]:  # fmt: skip
    out = work / f"guidellm-c{concurrency}.json"
    command = [
        guidellm, "run",
        "--backend", f"kind=openai_http,target={base_url}",
        "--profile", f"kind=concurrent,streams={concurrency}",
        "--constraint", f"kind=max_requests,count={requests}",
        "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},"
        f"output_tokens={output_tokens}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer_dir}",
        "--output", f"kind=json,path={out}",
        "--disable-console-interactive",
    ]  # fmt: skip
    cpu = _cpu_of(command, OFFLINE, work / f"guidellm-c{concurrency}.log")
    data = json.loads(out.read_text())
    return {
        "ttft_s": _find_median(data, ("time_to_first_token_ms", "time_to_first_token")),
        "itl_s": _find_median(data, ("inter_token_latency_ms", "inter_token_latency")),
        "cpu_s_per_request": cpu / requests,
    }


def ours_level(
    base_url: str, tokenizer_dir: Path, concurrency: int, requests: int, prompt_tokens: int,
    output_tokens: int, work: Path,
) -> dict[str, float | None]:  # fmt: skip
    grid = work / "grid.csv"
    grid.write_text(f"num_prompt_tokens,num_output_tokens\n{prompt_tokens},{output_tokens}\n")
    out = work / f"ours-c{concurrency}.jsonl"
    command = [
        sys.executable, "-m", "idealized_runtime", "measure", "--base-url", f"{base_url}/v1",
        "--model", "tiny-llama", "--endpoint", "chat", "--grid", str(grid),
        "--repeats", str(requests), "--concurrency", str(concurrency),
        "--tokenizer", str(tokenizer_dir / "tokenizer.json"), "--no-progress",
    ]  # fmt: skip
    cpu = _cpu_of([*command, "-o", str(out)], OFFLINE, work / f"ours-c{concurrency}.log")
    (summary,) = summarize(read_raw_rows([out]))
    return {
        "ttft_s": summary.ttft_s.p50,
        # guidellm's ITL is per request, (latency - TTFT) / (tokens - 1), which is our TPOT;
        # our ITL pools the gaps between streamed chunks (kept as chunk_gap_s).
        "itl_s": summary.tpot_s.p50,
        "chunk_gap_s": summary.itl_s.p50,
        "cpu_s_per_request": cpu / requests,
    }


def compare(
    base_url: str, tokenizer_dir: Path, levels: Sequence[int], *, requests: int = 40,
    prompt_tokens: int = 64, output_tokens: int = 32, guidellm: str | None = None,
    work: Path | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """Per concurrency level: {"concurrency", "ours": {...}, "guidellm": {...}} with p50 TTFT,
    p50 ITL (seconds) and client CPU seconds per request. ``base_url`` without /v1."""
    guidellm = guidellm or os.environ.get("GUIDELLM") or shutil.which("guidellm")
    if not guidellm:
        raise SystemExit("guidellm not found: set GUIDELLM to its executable (see the docstring)")
    work = work or Path(tempfile.mkdtemp(prefix="client-vs-guidellm-"))
    results = []
    for level in levels:
        shape = (requests, prompt_tokens, output_tokens, work)
        results.append({
            "concurrency": level,
            "ours": ours_level(base_url, tokenizer_dir, level, *shape),
            "guidellm": guidellm_level(guidellm, base_url, tokenizer_dir, level, *shape),
        })  # fmt: skip
    return results


def _ratio(ours: float | None, theirs: float | None) -> str:
    return "-" if not ours or not theirs else f"{ours / theirs:.3f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def print_table(results: Sequence[dict[str, Any]]) -> None:
    header = (
        "concurrency",
        "TTFT ours ms",
        "TTFT guidellm ms",
        "ratio",
        "ITL ours ms",
        "ITL guidellm ms",
        "ratio",
        "CPU s/req ours",
        "CPU s/req guidellm",
        "ratio",
    )
    print(" | ".join(header))
    for row in results:
        ours, theirs = row["ours"], row["guidellm"]
        print(" | ".join((
            str(row["concurrency"]), _ms(ours["ttft_s"]), _ms(theirs["ttft_s"]),
            _ratio(ours["ttft_s"], theirs["ttft_s"]), _ms(ours["itl_s"]), _ms(theirs["itl_s"]),
            _ratio(ours["itl_s"], theirs["itl_s"]), f"{ours['cpu_s_per_request']:.4f}",
            f"{theirs['cpu_s_per_request']:.4f}",
            _ratio(ours["cpu_s_per_request"], theirs["cpu_s_per_request"]),
        )))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--max-batch", type=int, default=None, help="serve-model batching")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    work = Path(tempfile.mkdtemp(prefix="client-vs-guidellm-"))
    tokenizer_dir = make_tokenizer(work / "tokenizer")
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "idealized_runtime",
        "serve-model",
        "--arch",
        "tiny-llama",
        "--port",
        str(port),
        "--tokenizer",
        str(tokenizer_dir / "tokenizer.json"),
    ]
    if args.max_batch:
        command += ["--max-batch", str(args.max_batch)]
    base_url = f"http://127.0.0.1:{port}"
    with running_server(command, f"{base_url}/health", timeout_s=120, log_path=work / "server.log"):
        results = compare(
            base_url, tokenizer_dir, levels, requests=args.requests,
            prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens, work=work,
        )  # fmt: skip
    print(
        f"serve-model tiny-llama, {args.requests} requests per level, "
        f"{args.prompt_tokens} prompt / {args.output_tokens} output tokens, chat, streaming"
    )
    print_table(results)


if __name__ == "__main__":
    main()
