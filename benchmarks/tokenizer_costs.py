"""The request path's per-token host times: a Hugging Face fast tokenizer's encode time per prompt
token and its incremental decode time per output token, as the engines' front ends call them.

All three engines tokenize a prompt in their front-end process with the model's Hugging Face
fast tokenizer (one ``encode`` per request) and detokenize each streamed token incrementally
(decoding a short window of the latest tokens). Neither needs a model's own vocabulary to be
timed: a byte-level BPE of ``--vocab`` tokens is trained here on this repository's text, and
the prompts are what the benchmark clients send with a random dataset (random token ids decoded
to text, encoded again by the server). Prints microseconds per token (median of ``--repeats``)
for prompts of 1k-8k tokens; ``data/engines/*.json`` take ``tokenize_s_per_token`` and
``detokenize_s_per_token`` from it.

Needs ``pip install tokenizers`` (not a dependency of the project).

Usage: python benchmarks/tokenizer_costs.py [--vocab 128000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=128000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--corpus", action="append", default=[],
        help="more folders of .py/.md text to train on (e.g. a site-packages folder)",
    )  # fmt: skip
    args = parser.parse_args()
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        sys.exit("needs the tokenizers package: pip install tokenizers")
    root = Path(__file__).resolve().parents[1]
    folders = [root / f for f in ("docs", "cost_model", "idealized_runtime", "local_runner")]
    corpus = [
        p.read_text(encoding="utf-8", errors="ignore")
        for folder in [*folders, *map(Path, args.corpus)]
        for p in sorted(folder.rglob("*"))
        if p.suffix in (".md", ".py") and p.is_file()
    ]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(corpus, trainer)
    vocab = tokenizer.get_vocab_size()
    rng = random.Random(0)
    print(f"byte-level BPE, {vocab} tokens (trained on {len(corpus)} files)")
    print(f"{'prompt tokens':>14} {'encode us/token':>16} {'decode us/token':>16}")
    for length in (1024, 2048, 4096, 8192):
        text = tokenizer.decode([rng.randrange(vocab) for _ in range(length)])
        ids = tokenizer.encode(text).ids
        encode, decode = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            tokenizer.encode(text)
            encode.append((time.perf_counter() - start) / len(ids))
            # Incremental detokenization: each new token decodes a window of the last few
            # (the engines keep an offset into the text decoded so far).
            start = time.perf_counter()
            for i in range(6, 6 + 256):
                tokenizer.decode(ids[i - 6 : i + 1])
            decode.append((time.perf_counter() - start) / 256)
        print(
            f"{len(ids):>14} {statistics.median(encode) * 1e6:>16.2f} "
            f"{statistics.median(decode) * 1e6:>16.2f}"
        )


if __name__ == "__main__":
    main()
