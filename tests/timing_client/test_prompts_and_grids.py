"""Exact-token prompts, calibration, grids, retry arithmetic and resume reading, in process."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.errors import InputError
from idealized_runtime.timing.grids import (
    HELM_OUTPUT_LENGTHS,
    HELM_PROMPT_SIZES,
    GridPoint,
    load_grid,
)
from idealized_runtime.timing.prompts import (
    WORDS,
    ByteTokenizer,
    PromptBuilder,
    PromptRecipe,
    calibrate,
    load_tokenizer,
)
from idealized_runtime.timing.rows import read_done_keys
from idealized_runtime.timing.transport import backoff_delay, retry_after_seconds


def _train(kind: str, path: Path) -> Path:
    """A small tokenizer trained here (BPE with byte-level pre-tokenizer and a BOS, or a
    SentencePiece-like Metaspace one), saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    rng = random.Random(1)
    corpus = ["".join(rng.choice(WORDS) for _ in range(40)) for _ in range(200)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    if kind == "bytelevel":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        alphabet = []
    tokenizer.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<unk>", "<s>"], initial_alphabet=alphabet
        ),
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))]
    )
    tokenizer.save(str(path))
    return path


@pytest.fixture(scope="module", params=["bytelevel", "metaspace"])
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(request.param, tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.mark.parametrize("size", [1, 2, 7, 256, 1536])
def test_tokenizer_prompts_have_exact_counts_and_vary(trained: Path, size: int) -> None:
    tokenizer = load_tokenizer(str(trained))
    builder = PromptBuilder(PromptRecipe("tokenizer", offset=0), tokenizer)
    texts = {builder.text(size, repeat) for repeat in range(3)}
    assert all(tokenizer.count(text) == size for text in texts)
    if size >= 3:
        assert len(texts) == 3  # repeats differ, so that no prefix cache serves them
    assert tokenizer.special_tokens() == 1  # the BOS of the post-processor


def test_offset_is_subtracted_and_never_below_one_token() -> None:
    builder = PromptBuilder(PromptRecipe("tokenizer", offset=3), ByteTokenizer())
    assert len(builder.text(10).encode()) == 7
    assert len(builder.text(2).encode()) == 1  # cannot be shorter: the row will be flagged


@given(st.integers(min_value=1, max_value=3000), st.integers(min_value=0, max_value=5))
@settings(max_examples=40, deadline=None)
def test_byte_prompts_are_exact(size: int, repeat: int) -> None:
    tokenizer = ByteTokenizer()
    text = PromptBuilder(PromptRecipe("tokenizer", offset=0), tokenizer).text(size, repeat)
    assert tokenizer.count(text) == size


def _server(count, offset: int, calls: list[str]):
    async def probe(text: str) -> int | None:
        calls.append(text)
        return None if count is None else count(text) + offset

    return probe


def test_calibration_against_a_byte_counting_server() -> None:
    calls: list[str] = []
    probe = _server(lambda text: len(text.encode()), 1, calls)
    recipe = asyncio.run(calibrate(probe, None, wanted_units=2))
    assert recipe.source == "calibrated" and recipe.offset == 1
    assert recipe.units == ["a", "b"]  # " the" is 4 bytes: rejected after two probes
    assert len(calls) <= 12
    builder = PromptBuilder(recipe)
    assert len(builder.text(100, 0).encode()) + 1 == 100
    assert builder.text(5, 0) != builder.text(5, 1)


def test_calibration_against_a_word_counting_server_and_failures() -> None:
    words = _server(lambda text: len(text.split()), 5, [])
    recipe = asyncio.run(calibrate(words, None, wanted_units=3))
    assert recipe.units == [" the", " of", " and"] and recipe.offset == 5

    with pytest.raises(InputError, match="no usage"):
        asyncio.run(calibrate(_server(None, 0, []), None))
    with pytest.raises(InputError, match="--tokenizer"):  # every text costs 3 tokens: no unit
        asyncio.run(calibrate(_server(lambda text: 3, 0, []), None))

    # With a tokenizer: one probe learns what the server adds; no usage -> the tokenizer's guess.
    calls: list[str] = []
    recipe = asyncio.run(calibrate(_server(len, 2, calls), ByteTokenizer()))
    assert (recipe.source, recipe.offset, len(calls)) == ("tokenizer", 2, 1)
    recipe = asyncio.run(calibrate(_server(None, 0, []), ByteTokenizer()))
    assert recipe.offset == 0 and not recipe.server_counts


def test_grids(tmp_path: Path) -> None:
    helm = load_grid("helm-synthetic")
    assert len(helm) == len(HELM_PROMPT_SIZES) * len(HELM_OUTPUT_LENGTHS) == 35
    assert GridPoint(1536, 64) in helm and GridPoint(1, 1) in helm
    assert len(load_grid("quick")) == 9
    csv_grid = tmp_path / "g.csv"
    csv_grid.write_text("num_output_tokens,num_prompt_tokens\n4,10\n4,10\n8,20\n")
    assert load_grid(str(csv_grid)) == [GridPoint(10, 4), GridPoint(20, 8)]
    json_grid = tmp_path / "g.json"
    json_grid.write_text(
        json.dumps({"points": [[3, 1], {"num_prompt_tokens": 5, "num_output_tokens": 2}]})
    )
    assert load_grid(str(json_grid)) == [GridPoint(3, 1), GridPoint(5, 2)]
    json_grid.write_text("[[3, 0]]")
    with pytest.raises(InputError, match="row 1"):
        load_grid(str(json_grid))


def test_retry_after_and_backoff() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("0.25") == 0.25
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None
    rng = random.Random(0)
    delays = [backoff_delay(attempt, 0.5, 4.0, rng) for attempt in (1, 2, 3, 10) for _ in range(50)]
    assert all(0 <= d < 4.0 for d in delays)
    assert max(delays[:50]) < 0.5 and max(delays[150:]) > 2.0  # grows, capped, jittered


def test_read_done_keys_cuts_a_partial_last_line(tmp_path: Path) -> None:
    path = tmp_path / "raw.jsonl"
    row = {"model": "m", "endpoint": "chat", "num_prompt_tokens": 9, "num_output_tokens": 2,
           "requested_prompt_tokens": 8, "requested_output_tokens": 2, "repeat": 1}  # fmt: skip
    path.write_text(json.dumps(row) + "\nnot json\n" + '{"model": "m", "endp')
    assert read_done_keys(path) == {("m", "chat", 8, 2, 1, "unlabelled")}  # no load level
    assert path.read_text().endswith("not json\n")
    assert read_done_keys(tmp_path / "missing.jsonl") == set()
