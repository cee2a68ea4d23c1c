"""The hand-written JSON scanner that api/json_stream.py used before it read bodies with ijson
(yajl2_c), kept only as the reference of benchmarks/json_parse.py. Not part of the package."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

_WHITESPACE = b" \t\n\r"
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
# Bytes consumed that are kept before dropping them from the buffer.
_KEEP = 1 << 16
# Bytes first looked at to find where a value other than a flat object ends (doubled as needed).
_WINDOW = 1 << 12


class JsonSyntaxError(ValueError):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} at byte {offset}")
        self.offset = offset


def _flat_object_end(buffer: bytes, start: int) -> int | None:
    """Where the object at ``start`` ends when it is flat (a measurement: no nested object or
    array, no escape): after the first "}" with an even number of quotes before it. None when
    it is not such an object, or not complete in the buffer. (Counted in C: a regular
    expression walking each byte costs three times as much.)"""
    end = buffer.find(b"}", start)
    while end != -1:
        if (
            buffer.count(b"\\", start, end)
            or buffer.count(b"{", start + 1, end)
            or buffer.count(b"[", start, end)
        ):
            return None
        if buffer.count(b'"', start, end) % 2 == 0:
            return end + 1
        end = buffer.find(b"}", end + 1)  # that one was inside a string
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(name)


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


class StreamedObject:
    """The JSON object in ``chunks``; ``items()`` yields the items of its ``array_key`` member
    (bytes, with their index) as they arrive; afterwards ``others`` is a JSON object of the other
    members and ``array_given`` whether the array was there."""

    def __init__(self, chunks: Iterable[bytes], array_key: str) -> None:
        self._chunks = iter(chunks)
        self._key = array_key
        self._buffer = b""
        self._pos = 0  # in the buffer
        self._dropped = 0  # bytes of the body before the buffer
        self._done = False
        self._others: list[bytes] = []
        self.array_given = False

    @property
    def others(self) -> bytes:
        return b"{" + b",".join(self._others) + b"}"

    # --- reading ---------------------------------------------------------------------------

    def _offset(self) -> int:
        return self._dropped + self._pos

    def _more(self) -> bool:
        if self._done:
            return False
        chunk = next(self._chunks, None)
        if chunk is None:
            self._done = True
            return False
        if self._pos > _KEEP:
            self._dropped += self._pos
            self._buffer, self._pos = self._buffer[self._pos :], 0
        self._buffer += chunk
        return True

    def _peek(self) -> int | None:
        """The next byte that is not whitespace (None at the end of the body)."""
        while True:
            while self._pos < len(self._buffer) and self._buffer[self._pos] in _WHITESPACE:
                self._pos += 1
            if self._pos < len(self._buffer):
                return self._buffer[self._pos]
            if not self._more():
                return None

    def _expect(self, allowed: bytes, what: str) -> int:
        byte = self._peek()
        if byte is None or byte not in allowed:
            found = "the end of the body" if byte is None else repr(chr(byte))
            raise JsonSyntaxError(f"expected {what}, found {found}", self._offset())
        self._pos += 1
        return byte

    def _value(self) -> bytes:
        """The bytes of the JSON value that starts here."""
        self._peek()
        window = _WINDOW
        while True:
            if self._buffer[self._pos : self._pos + 1] == b"{":
                flat = _flat_object_end(self._buffer, self._pos)
                if flat is not None:
                    value, self._pos = self._buffer[self._pos : flat], flat
                    return value
            last = len(self._buffer) - self._pos <= window and not self._more()
            end = self._value_end(window, final=last)
            if end is not None:
                value, self._pos = self._buffer[self._pos : end], end
                return value
            if len(self._buffer) - self._pos > window:
                window *= 2  # the value is longer than the bytes looked at: look at more

    def _value_end(self, window: int, final: bool = False) -> int | None:
        """Where the value starting at the position ends, looking at ``window`` bytes; None
        when they may end inside it (more bytes decide)."""
        data = self._buffer[self._pos : self._pos + window]
        try:
            text, _ = codecs.utf_8_decode(data, "strict", final)
        except UnicodeDecodeError as error:
            raise JsonSyntaxError("not UTF-8 text", self._offset() + error.start) from None
        try:
            _, end = _DECODER.raw_decode(text)
        except json.JSONDecodeError as error:
            # Near the end of the bytes looked at, the value may just be cut off (inside a
            # \uXXXX\uXXXX escape at most 12 characters back): more bytes decide.
            cut_off = error.pos >= len(text) - 12 or error.msg.startswith("Unterminated")
            if cut_off and not final:
                return None
            at = self._offset() + len(text[: error.pos].encode())
            raise JsonSyntaxError(error.msg[:1].lower() + error.msg[1:], at) from None
        except ValueError as error:  # NaN, Infinity: not JSON
            raise JsonSyntaxError(f"{error} is not JSON", self._offset()) from None
        if end == len(text) and not final:
            return None  # a number may go on in the next bytes
        return self._pos + len(text[:end].encode())

    def _key_name(self) -> tuple[bytes, str]:
        self._peek()
        while True:
            found = _STRING.match(self._buffer, self._pos)
            if found is not None:
                raw = found.group()
                try:
                    name = json.loads(raw)
                except ValueError:  # a control character or a bad escape inside
                    raise JsonSyntaxError("a malformed member name", self._offset()) from None
                self._pos = found.end()
                return raw, name
            if self._buffer[self._pos : self._pos + 1] != b'"':
                raise JsonSyntaxError("expected a member name in quotes", self._offset())
            if not self._more():
                raise JsonSyntaxError("unterminated member name", self._offset())

    # --- the object ---------------------------------------------------------------------------

    def items(self) -> Iterator[tuple[int, bytes]]:
        self._expect(b"{", "a JSON object")
        if self._peek() == ord("}"):
            self._pos += 1
        else:
            while True:
                raw_key, key = self._key_name()
                self._expect(b":", "':'")
                if key == self._key and self._peek() == ord("["):
                    if self.array_given:
                        raise JsonSyntaxError(f"{key!r} given twice", self._offset())
                    self.array_given = True
                    yield from self._array()
                else:
                    self._others.append(raw_key + b":" + self._value())
                if self._expect(b",}", "',' or '}'") == ord("}"):
                    break
        if self._peek() is not None:
            raise JsonSyntaxError("more after the JSON object", self._offset())

    def _array(self) -> Iterator[tuple[int, bytes]]:
        self._expect(b"[", "'['")
        if self._peek() == ord("]"):
            self._pos += 1
            return
        index = 0
        while True:
            yield index, self._value()
            index += 1
            if self._expect(b",]", "',' or ']'") == ord("]"):
                return
