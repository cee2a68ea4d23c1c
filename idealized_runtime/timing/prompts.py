"""Prompts that a server counts as exactly ``n`` tokens.

Two ways to know how a server counts:

* a tokenizer the user names (``tokenizer.json`` for the ``tokenizers`` package, a folder holding
  one, ``tiktoken:ENCODING`` when ``tiktoken`` is installed, or ``bytes`` for the byte-level
  tokenizer of ``serve-model``): prompts are random one-token words, checked and adjusted with
  the tokenizer until they have the right count. One probe request learns the tokens the server
  adds itself (BOS, chat template) so that they are part of the count.
* no tokenizer: calibrate against the server's ``usage.prompt_tokens``. A candidate unit (" the",
  "a", ...) is sent repeated 8, 24 and 64 times; a unit is accepted when the server's count is
  ``k + offset`` for all three (so each repetition is one token). Prompts are the unit repeated.

Prompts vary with the repeat index, so that a provider's prefix cache does not turn repeats into
cache hits (calibrated prompts cycle over the accepted units).

What was learned is cached beside a run's output (``raw.jsonl.calibration.json``) and reused by
a run of the same command (``prepare_prompts``).
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from idealized_runtime.core.byte_tokenizer import ByteTokenizer
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.timing.config import MeasureConfig

# Common English words; most BPE vocabularies have each of them (with its leading space) as one
# token. Which ones really are is checked against the tokenizer at hand.
_WORD_TEXT = """
the of and to in is it on at as be by we he or an do go up so no if my me us am one two six ten
red big old new day way man car cat dog sun sea sky end top far run see say get set let put ask
try use own few low out all any can may not now
"""
WORDS = tuple(" " + word for word in _WORD_TEXT.split())
LETTERS = tuple("abcdefghijklmnopqrstuvwxyz")
# Tried in this order when calibrating: word units suit BPE servers, letters byte-level ones.
CALIBRATION_UNITS = (" the", "a", " of", "b", " and", "c", " to", "d", " in", "e", " is", "f")
CALIBRATION_REPEATS = (8, 24, 64)
OFFSET_PROBE_TOKENS = 16


class LocalTokenizer(Protocol):
    name: str

    def count(self, text: str) -> int:
        """Tokens of ``text`` without special tokens."""

    def special_tokens(self) -> int:
        """Tokens the tokenizer itself adds to every text (BOS/EOS of its post-processor)."""


class HuggingFaceTokenizer:
    """A ``tokenizer.json`` read with the ``tokenizers`` package."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.name = str(path)
        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # the package raises plain Exceptions on bad files
            raise InputError(f"cannot read tokenizer: {error}", path=str(path)) from None

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def special_tokens(self) -> int:
        return len(self._tokenizer.encode("", add_special_tokens=True).ids)


class TiktokenTokenizer:
    def __init__(self, encoding: str) -> None:
        try:
            import tiktoken
        except ImportError:
            raise InputError("tiktoken is not installed: pip install tiktoken") from None
        self.name = f"tiktoken:{encoding}"
        try:
            self._encoding = tiktoken.get_encoding(encoding)
        except Exception as error:
            raise InputError(f"unknown tiktoken encoding {encoding!r}: {error}") from None

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))

    def special_tokens(self) -> int:
        return 0


def load_tokenizer(spec: str) -> LocalTokenizer:
    """``bytes``, ``tiktoken:ENCODING``, a ``tokenizer.json`` or a folder that holds one."""
    if spec == "bytes":
        return ByteTokenizer()
    if spec.startswith("tiktoken:"):
        return TiktokenTokenizer(spec.removeprefix("tiktoken:"))
    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise InputError(
            "tokenizer must be 'bytes', 'tiktoken:ENCODING', a tokenizer.json or a folder with one",
            path=spec,
        )
    return HuggingFaceTokenizer(path)


def one_token_pieces(tokenizer: LocalTokenizer) -> list[str]:
    """Words (else letters) that add exactly one token each when repeated."""
    for candidates in (WORDS, LETTERS):
        # Measured on a repetition, so that a start-of-text effect (SentencePiece's extra "▁")
        # does not disqualify a word.
        pool = [
            word for word in candidates if tokenizer.count(word * 3) - tokenizer.count(word) == 2
        ]
        if len(pool) >= 2:
            return pool
    raise InputError(f"tokenizer {tokenizer.name}: found no one-token words to build prompts from")


def exact_text(tokenizer: LocalTokenizer, pool: list[str], num_tokens: int, variant: int) -> str:
    """Random words from ``pool`` that ``tokenizer`` counts as exactly ``num_tokens``."""
    rng = random.Random(f"{num_tokens}:{variant}")
    pieces = [rng.choice(pool) for _ in range(num_tokens)]
    # Bounded: each round moves the count by the whole difference, merges are rare.
    for _ in range(64):
        count = tokenizer.count("".join(pieces))
        if count == num_tokens:
            return "".join(pieces)
        if count > num_tokens:
            if len(pieces) == 1:
                pieces = [pieces[0].lstrip()]  # a leading space can cost its own token
                if tokenizer.count(pieces[0]) == num_tokens:
                    return pieces[0]
                break
            del pieces[max(1, len(pieces) - (count - num_tokens)) :]
        else:
            pieces.extend(rng.choice(pool) for _ in range(num_tokens - count))
    raise InputError(f"tokenizer {tokenizer.name}: cannot write a prompt of {num_tokens} tokens")


@dataclass
class PromptRecipe:
    """How to write a prompt the server counts as ``n`` tokens; saved to resume without probes.

    ``offset``: tokens the server adds to every prompt (BOS, chat template), as measured.
    ``units``: calibrated one-token units (empty when a tokenizer writes the prompts).
    """

    source: Literal["tokenizer", "calibrated"]
    offset: int
    units: list[str] = field(default_factory=list)
    server_counts: bool = True  # False: the server reported no usage, the offset is a guess

    def to_json(self) -> dict:
        return asdict(self)


class PromptBuilder:
    def __init__(self, recipe: PromptRecipe, tokenizer: LocalTokenizer | None = None) -> None:
        if recipe.source == "tokenizer" and tokenizer is None:
            raise ValueError("a tokenizer recipe needs its tokenizer")
        self.recipe, self.tokenizer = recipe, tokenizer
        self._pool = one_token_pieces(tokenizer) if tokenizer is not None else []

    def body_tokens(self, num_tokens: int) -> int:
        """Tokens we write so that, with the server's own, the count is ``num_tokens``; at
        least 1 (then a request for fewer tokens than the server adds is flagged later)."""
        return max(num_tokens - self.recipe.offset, 1)

    def text(self, num_tokens: int, variant: int = 0) -> str:
        """A prompt the server counts as ``num_tokens``, its own tokens included."""
        return self.piece(self.body_tokens(num_tokens), variant)

    def piece(self, num_tokens: int, variant: int = 0) -> str:
        """Text of ``num_tokens`` tokens of ours alone: a later part of a prompt (a
        conversation's next message), to which the server adds nothing more."""
        if self.recipe.source == "tokenizer":
            assert self.tokenizer is not None
            return exact_text(self.tokenizer, self._pool, num_tokens, variant)
        units = self.recipe.units
        return units[variant % len(units)] * num_tokens


# A probe sends one prompt (with max_tokens=1) and answers the server's usage.prompt_tokens, or
# None when the server does not report usage.
Probe = Callable[[str], Awaitable[int | None]]


async def calibrate(
    probe: Probe, tokenizer: LocalTokenizer | None, *, wanted_units: int = 3, chat: bool = False
) -> PromptRecipe:
    """Learn how the server counts prompts, with a bounded number of probe requests (at most
    3 per candidate unit, 36 in all)."""
    if tokenizer is not None:
        pool = one_token_pieces(tokenizer)
        counted = await probe(exact_text(tokenizer, pool, OFFSET_PROBE_TOKENS, variant=-1))
        if counted is None:
            # No usage from the server: assume it adds what the tokenizer's post-processor adds.
            guess = 0 if chat else tokenizer.special_tokens()
            return PromptRecipe("tokenizer", guess, server_counts=False)
        return PromptRecipe("tokenizer", counted - OFFSET_PROBE_TOKENS)

    units: list[str] = []
    offset: int | None = None
    for unit in CALIBRATION_UNITS:
        counts = []
        for repeats in CALIBRATION_REPEATS:
            counted = await probe(unit * repeats)
            if counted is None:
                raise InputError(
                    "the server reports no usage.prompt_tokens, so prompt sizes cannot be "
                    "calibrated: pass --tokenizer"
                )
            counts.append(counted - repeats)
            if counts[-1] != counts[0]:
                break  # not one token per repetition
        linear = len(counts) == len(CALIBRATION_REPEATS) and counts[0] == counts[-1]
        if linear and (offset is None or counts[0] == offset):
            offset = counts[0]
            units.append(unit)
        if len(units) >= wanted_units:
            break
    if not units or offset is None:
        raise InputError(
            "could not find a prompt unit the server counts as one token: pass --tokenizer"
        )
    return PromptRecipe("calibrated", offset, units)


def calibration_cache_path(output: Path) -> Path:
    return output.with_name(output.name + ".calibration.json")


async def prepare_prompts(config: MeasureConfig, probe: Probe, cache: Path) -> PromptBuilder:
    """The prompt builder of a run: from ``cache`` when it was made for the same server, model,
    endpoint, tokenizer and number of units, else learned with ``probe`` and cached."""
    tokenizer: LocalTokenizer | None = (
        load_tokenizer(config.tokenizer) if config.tokenizer else None
    )
    identity = {
        "url": config.url,
        "model": config.model,
        "endpoint": config.endpoint,
        "tokenizer": config.tokenizer,
        # Calibrated prompts cycle over this many units (one per repeat, up to 3): a resume
        # with more repeats must not reuse a recipe of fewer units (identical prompts would
        # be prefix-cache hits on a provider).
        "units": min(config.repeats, 3),
    }
    recipe = None
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        saved = json.loads(cache.read_text(encoding="utf-8"))
        if saved["server"] == identity:
            recipe = PromptRecipe(**saved["recipe"])
    if recipe is None:
        recipe = await calibrate(
            probe,
            tokenizer,
            wanted_units=min(config.repeats, 3),
            chat=config.endpoint == "chat",
        )
        with atomic_writer(cache) as handle:
            json.dump({"server": identity, "recipe": recipe.to_json()}, handle, indent=1)
    return PromptBuilder(recipe, tokenizer)
