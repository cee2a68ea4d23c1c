"""serve-model's text tokenizer: ids the model can produce past the tokenizer's vocabulary
still stream as text."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

from idealized_runtime.local_runner.openai_server import TextTokenizer


def test_ids_past_the_tokenizer_vocabulary_wrap_around(tmp_path: Path) -> None:
    vocab = {"<unk>": 0, "an": 1, "el": 2, "or": 3}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    text = TextTokenizer(vocab_size=10, tokenizer_json=str(path))  # the model's vocabulary: 10
    assert [text.decode_token(i) for i in (1, 2, 3)] == ["an", "el", "or"]
    assert [text.decode_token(i) for i in (5, 6, 7, 9)] == ["an", "el", "or", "an"]
    assert text.encode("el or") == [2, 3]
