"""`measure` against a third-party OpenAI-compatible server: `transformers serve` (transformers >=
5, extra `serving`) serving a tiny random Llama with a tokenizer trained here, offline.

What this server does differently from ours, and what the client must cope with: it rejects
`ignore_eos`/`min_tokens` with 400 (dropped once per run; the length is pinned by its own
`generation_config` field instead), it adds a BOS token (and a chat template), it reports usage in
the last stream chunk and closes streams without `data: [DONE]`, and chat streams open with a
role-only chunk.
"""

from __future__ import annotations

import random
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.client_vs_guidellm import train_byte_level_bpe
from idealized_runtime.timing.prompts import WORDS
from tests.servers import free_port, running_server
from tests.timing_client.conftest import ENV, read_rows, run_cli


def _serve_command() -> str | None:
    try:
        from transformers.utils.import_utils import is_serve_available
    except ImportError:
        return None
    if not is_serve_available():
        return None
    beside = Path(sys.executable).with_name("transformers")
    return str(beside) if beside.exists() else shutil.which("transformers")


SERVE = _serve_command()
pytestmark = pytest.mark.skipif(
    SERVE is None,
    reason="transformers serve is not installed (pip install 'transformers[serving]')",
)


def build_tiny_llama(folder: Path) -> None:
    """A random 2-layer Llama and a BPE tokenizer trained on generated text, saved with
    save_pretrained: no hub access."""
    from tokenizers import processors
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(0)
    corpus = ["".join(rng.choice(WORDS[:30]) for _ in range(30)) for _ in range(300)]
    tokenizer = train_byte_level_bpe(corpus, vocab_size=300)
    bos, eos = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    )
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=bos,
        eos_token_id=eos,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("transformers-serve")
    model, hub = root / "model", root / "hub"
    hub.mkdir()  # without an existing HF_HUB_CACHE, /v1/models answers 500
    build_tiny_llama(model)
    port = free_port()
    command = [SERVE, "serve", str(model), "--host", "127.0.0.1", "--port", str(port)]
    with running_server(
        [*command, "--device", "cpu"],
        f"http://127.0.0.1:{port}/health",
        env={**ENV, "HF_HUB_CACHE": str(hub)},
        timeout_s=120,
        log_path=root / "serve.log",
    ):
        yield f"http://127.0.0.1:{port}/v1", model


@pytest.mark.parametrize(
    ("endpoint", "tokenizer"), [("completions", "model-folder"), ("chat", None)]
)
def test_measure_transformers_serve(
    served: tuple[str, Path], tmp_path: Path, endpoint: str, tokenizer: str | None
) -> None:
    url, model = served
    out = tmp_path / "raw.jsonl"
    args = [
        sys.executable, "-m", "idealized_runtime", "measure", "--base-url", url,
        "--model", str(model), "--label", "tiny-hf-llama", "--endpoint", endpoint,
        "--grid", "quick", "--repeats", "1", "-o", str(out), "--no-progress",
    ]  # fmt: skip
    if tokenizer:
        args += ["--tokenizer", str(model)]
    result = run_cli(args, timeout=240)
    assert result.returncode == 0, result.stderr
    assert "rejected ignore_eos, min_tokens" in result.stderr
    rows = read_rows(out)
    assert len(rows) == 9 and all(row["ok"] for row in rows)
    for row in rows:
        assert row["model"] == "tiny-hf-llama" and row["usage_reported"]
        assert row["dropped_fields"] == ["ignore_eos", "min_tokens"]
        # Output length pinned through the server's generation_config field: never cut short
        # by an EOS.
        assert row["num_output_tokens"] == row["requested_output_tokens"]
        assert row["ttft_s"] is not None and 0 < row["ttft_s"] <= row["runtime_s"]
        if row["requested_prompt_tokens"] > 1:
            # The BOS (and chat template) are counted: prompts come out exactly as asked.
            assert row["num_prompt_tokens"] == row["requested_prompt_tokens"]
            assert not row["usage_mismatch"]
        else:
            # One token is less than what the server adds to any prompt: flagged, actual kept.
            assert row["usage_mismatch"] and row["num_prompt_tokens"] > 1
    assert {row["prompt_source"] for row in rows} == {"tokenizer" if tokenizer else "calibrated"}
