"""The byte-level tokenizer shared by the local OpenAI-compatible server (``serve-model``) and the
timing client's prompt builder: one token per UTF-8 byte, so both sides count alike."""

from __future__ import annotations


class ByteTokenizer:
    """One token per UTF-8 byte (the tokenizer built into ``serve-model``): id = byte."""

    name = "bytes"

    def encode(self, text: str, vocab_size: int = 256) -> list[int]:
        return [byte % vocab_size for byte in text.encode("utf-8")]

    def decode_token(self, token_id: int) -> str:
        # Printable ASCII so that every generated token is visible text in a stream.
        return chr(33 + token_id % 94)

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))

    def special_tokens(self) -> int:
        return 0
