"""JSON request bodies read as they stream in, by ijson (yajl's C parser): in time linear in
the body, each string (any token) bounded where it is read, a key repeated inside an object
refused naming it.

* ``check_json`` reads a body for ``api.bodies``: the bytes, for pydantic to validate strictly,
  once the parser has accepted them.
* ``StreamedObject`` reads a JSON object one of whose members is an array read item by item: a
  measurement-set upload of 10^6 rows is validated row by row, holding one row at a time.

yajl holds an unfinished token in its buffer until it ends; bytes are fed in slices, and when
more than ``max_token_bytes`` have gone in since the parser last completed a token, the token
being read is longer than that and the body is refused there (memory: the limit plus a slice).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from typing import Any

import ijson

from idealized_runtime.core.json_members import RepeatedKey, unique_members

# uvicorn's logger: configured (INFO, to stderr) wherever the service runs.
logger = logging.getLogger("uvicorn.error")

# Bytes handed to the parser at once: the granularity of the token-length check.
SLICE_BYTES = 1 << 16


def _load_backend() -> tuple[Any, str]:
    """yajl2_c (comes in ijson's wheels); another ijson backend only where it is missing, the
    pure-Python one at worst."""
    for name in ("yajl2_c", "yajl2_cffi", "yajl2"):
        try:
            return ijson.get_backend(name), name
        except ImportError:
            continue
    return ijson.get_backend("python"), "python"


BACKEND, BACKEND_NAME = _load_backend()


def log_backend() -> None:
    if BACKEND_NAME == "yajl2_c":
        logger.info("JSON bodies are parsed by ijson's yajl2_c backend (C)")
    else:
        logger.warning(
            "ijson's yajl2_c backend is unavailable: JSON bodies are parsed by its %s backend "
            "(slower)",
            BACKEND_NAME,
        )


class JsonSyntaxError(ValueError):
    # The item of the streamed array being read where the error was found (StreamedObject).
    item: int | None = None

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} (at or before byte {offset})")
        self.offset = offset


class TokenTooLong(JsonSyntaxError):
    def __init__(self, max_bytes: int, offset: int) -> None:
        ValueError.__init__(
            self,
            f"a string (or other token) longer than {max_bytes} bytes, the server's limit "
            f"(IDEALIZED_RUNTIME_MAX_STRING_BYTES), by byte {offset}",
        )
        self.offset = offset


_NOT_JSON_NUMBER = re.compile(r"-?(?:NaN|Infinity)")


def _one_line(error: Exception) -> str:
    """yajl's message ("parse error: ...", then the text around the error and a caret line) as
    one line: the message and the text near the error."""
    text = str(error)
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if text.startswith(("b'", 'b"')):  # yajl's message about bytes that are not UTF-8
        text = text[2:-1].replace("\\n", "\n")
    lines = [line.strip() for line in text.splitlines()]
    message = lines[0].rstrip(".") if lines else "not JSON"
    near = lines[1] if len(lines) > 2 and lines[1] else ""
    not_a_number = _NOT_JSON_NUMBER.search(near)
    if message.startswith("lexical error") and not_a_number:
        message = f"{not_a_number.group()} is not JSON (NaN and Infinity are no JSON numbers)"
    return f"{message}, near {near!r}" if near else message


_SURROGATE_ESCAPE = re.compile(rb"(\\+)u[dD]([89abAB]|[c-fC-F])[0-9a-fA-F]{2}")
_LOW_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
# Bytes of the previous slice looked at again with the next: an escape cut between slices.
_OVERLAP = 64


class _Surrogates:
    """Refuses a \\uD800-\\uDFFF escape that is not half of a pair (not text: yajl would
    turn it into "?"). Looked for only in slices that hold a \\u escape."""

    def __init__(self) -> None:
        self._tail = b""
        self._judged_to = 0  # body offset up to which escapes were judged

    def check(self, piece: bytes, offset: int, final: bool = False) -> None:
        window, start = self._tail + piece, offset - len(self._tail)
        keep_from = max(0, len(window) - _OVERLAP)
        if b"\\u" in window:
            for found in _SURROGATE_ESCAPE.finditer(window):
                if start + found.start() < self._judged_to or len(found.group(1)) % 2 == 0:
                    continue  # judged already, or an escaped backslash and text
                end = found.end()
                if found.group(2).lower() in b"89ab":  # a high surrogate: a low one must follow
                    if end + 6 > len(window) and not final:
                        keep_from = min(keep_from, found.start())
                        break  # the next slice decides
                    if _LOW_SURROGATE_ESCAPE.match(window, end):
                        self._judged_to = start + end + 6
                        continue
                raise JsonSyntaxError(
                    "a lone surrogate escape " + found.group()[-6:].decode(), start + end
                )
        self._tail = window[keep_from:]


class _Events:
    """The parser's events for bytes fed to it, the length of each token checked as it is
    read."""

    def __init__(self, max_token_bytes: int) -> None:
        self.max_token_bytes = max_token_bytes
        self._sink: list[tuple[str, Any]] = ijson.sendable_list()
        self._parser = BACKEND.basic_parse_coro(self._sink, use_float=True)
        self.offset = 0  # bytes fed
        self._since_token = 0  # bytes fed since a slice that completed a token
        self._surrogates = _Surrogates()
        # An error is raised once the events before it are handed over (which item it is in).
        self._error: JsonSyntaxError | None = None

    def feed(self, chunk: bytes) -> list[tuple[str, Any]]:
        if self._error is not None:
            raise self._error
        events: list[tuple[str, Any]] = []
        for start in range(0, len(chunk), SLICE_BYTES):
            piece = chunk[start : start + SLICE_BYTES]
            try:
                self._surrogates.check(piece, self.offset)
                self._parser.send(piece)
            except JsonSyntaxError as error:
                self._error = error
            except (ijson.JSONError, ValueError) as error:  # ValueError: bytes not UTF-8
                self._error = JsonSyntaxError(_one_line(error), self.offset + len(piece))
            if self._error is not None:
                return events + self._sink
            self.offset += len(piece)
            if self._sink:
                events += self._sink
                del self._sink[:]
                self._since_token = 0
            else:
                self._since_token += len(piece)
                if self._since_token > self.max_token_bytes:
                    raise TokenTooLong(self.max_token_bytes, self.offset)
        return events

    def close(self) -> list[tuple[str, Any]]:
        if self._error is not None:
            raise self._error
        self._surrogates.check(b"", self.offset, final=True)
        try:
            self._parser.close()
        except (ijson.JSONError, ValueError) as error:
            message = _one_line(error)
            if message.startswith("parse error: premature EOF"):
                message = "the body ends inside the JSON value"
            raise JsonSyntaxError(message, self.offset) from None
        events = list(self._sink)
        del self._sink[:]
        return events


class DuplicateKey(JsonSyntaxError):
    def __init__(self, key: str, offset: int) -> None:
        ValueError.__init__(
            self, f"the key {key!r} is given twice in one object (at or before byte {offset})"
        )
        self.key, self.offset = key, offset


class _KeyCheck:
    """Refuses a key repeated inside one object, following the events."""

    def __init__(self) -> None:
        self._open: list[set[str] | None] = []  # a set per open object, None per open array

    def follow(self, events: list[tuple[str, Any]], offset: int) -> None:
        open_ = self._open
        for event, value in events:
            if event == "map_key":
                keys = open_[-1]
                if value in keys:  # type: ignore[operator]
                    raise DuplicateKey(value, offset)
                keys.add(value)  # type: ignore[union-attr]
            elif event == "start_map":
                open_.append(set())
            elif event == "start_array":
                open_.append(None)
            elif event in ("end_map", "end_array"):
                open_.pop()


def refusal_reason(error: JsonSyntaxError) -> str:
    """The refusal's reason in the service's metrics."""
    if isinstance(error, TokenTooLong):
        return "json_string_too_long"
    if isinstance(error, DuplicateKey):
        return "json_repeated_key"
    return "json_invalid"


def yajl_cannot_read(error: JsonSyntaxError) -> bool:
    """yajl holds integers in 64 bits; JSON's integers have no bound."""
    return "integer overflow" in str(error)


def check_whole_json(body: bytes, max_token_bytes: int) -> None:
    """``check_json`` by Python's parser, for a body held whole that yajl cannot read (an
    integer beyond 64 bits): the same rules, no repeated key and no token over the limit."""

    def not_json(name: str) -> Any:
        raise JsonSyntaxError(f"{name} is not JSON (NaN and Infinity are no JSON numbers)", 0)

    try:
        value = json.loads(body, object_pairs_hook=unique_members, parse_constant=not_json)
    except RepeatedKey as repeated:
        raise DuplicateKey(repeated.key, len(body)) from None
    except JsonSyntaxError:
        raise
    except ValueError as error:  # not JSON, or an integer of more than 4300 digits
        raise JsonSyntaxError(str(error).split(":")[0], getattr(error, "pos", 0)) from None
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending += item.keys()
            pending += item.values()
        elif isinstance(item, list):
            pending += item
        elif isinstance(item, (str, int)) and not isinstance(item, bool):
            size = len(item.encode()) if isinstance(item, str) else len(str(item))
            if size > max_token_bytes:
                raise TokenTooLong(max_token_bytes, len(body))


def check_json(chunks: Iterable[bytes], max_token_bytes: int) -> bytes:
    """The body in ``chunks``, once read by the parser as one JSON value with no repeated key
    and no token longer than ``max_token_bytes``; JsonSyntaxError otherwise, where it is
    found."""
    events, keys = _Events(max_token_bytes), _KeyCheck()
    parts = []
    chunks = iter(chunks)
    try:
        for chunk in chunks:
            parts.append(chunk)
            keys.follow(events.feed(chunk), events.offset)
        keys.follow(events.close(), events.offset)
    except JsonSyntaxError as error:
        if not yajl_cannot_read(error):
            raise
        parts += chunks
        check_whole_json(b"".join(parts), max_token_bytes)
    return b"".join(parts)


class JsonChecker:
    """``check_json`` for a body fed chunk by chunk (by an async route's dependency)."""

    def __init__(self, max_token_bytes: int) -> None:
        self._events, self._keys = _Events(max_token_bytes), _KeyCheck()

    @property
    def offset(self) -> int:
        return self._events.offset

    def feed(self, chunk: bytes) -> None:
        self._keys.follow(self._events.feed(chunk), self._events.offset)

    def close(self) -> None:
        self._keys.follow(self._events.close(), self._events.offset)


_SCALARS = frozenset(("string", "number", "boolean", "null"))


class StreamedObject:
    """The JSON object in ``chunks``; ``items()`` yields the items of its ``array_key`` member
    (Python values: dicts, lists, str, int, float, bool, None, with their index) as they
    arrive; afterwards ``others`` holds the other members and ``array_given`` whether the
    array was there."""

    def __init__(self, chunks: Iterable[bytes], array_key: str, max_token_bytes: int) -> None:
        self._chunks = iter(chunks)
        self._key = array_key
        self._parser = _Events(max_token_bytes)
        self.others: dict[str, Any] = {}
        self.array_given = False
        self._index = 0  # of the item being read

    def _events(self) -> Iterator[tuple[str, Any]]:
        for chunk in self._chunks:
            yield from self._parser.feed(chunk)
        yield from self._parser.close()

    def _refuse(self, message: str) -> JsonSyntaxError:
        return JsonSyntaxError(message, self._parser.offset)

    def items(self) -> Iterator[tuple[int, Any]]:
        events = self._events()
        first = next(events, None)
        if first is None or first[0] != "start_map":
            raise self._refuse("expected a JSON object")
        for event, key in events:
            if event == "end_map":
                break
            # event is a map_key: yajl orders the events of valid JSON
            if key in self.others or (key == self._key and self.array_given):
                raise DuplicateKey(key, self._parser.offset)
            event, value = next(events)
            if key == self._key and event == "start_array":
                self.array_given = True
                yield from self._array(events)
            else:
                self.others[key] = self._value(event, value, events)
        for _ in events:  # nothing follows the object (yajl refuses what would)
            pass

    def _array(self, events: Iterator[tuple[str, Any]]) -> Iterator[tuple[int, Any]]:
        try:
            yield from self._items(events)
        except JsonSyntaxError as error:
            error.item = self._index
            raise

    def _items(self, events: Iterator[tuple[str, Any]]) -> Iterator[tuple[int, Any]]:
        index = self._index = 0
        for event, value in events:
            if event == "end_array":
                return
            if event == "start_map":  # the common case, a flat object, without recursion
                item: dict[str, Any] = {}
                for event, key in events:
                    if event == "end_map":
                        break
                    if key in item:
                        raise DuplicateKey(key, self._parser.offset)
                    event, value = next(events)
                    item[key] = value if event in _SCALARS else self._value(event, value, events)
                yield index, item
            else:
                yield index, self._value(event, value, events)
            index = self._index = index + 1

    def _value(self, event: str, value: Any, events: Iterator[tuple[str, Any]]) -> Any:
        if event in _SCALARS:
            return value
        if event == "start_array":
            items = []
            for event, value in events:
                if event == "end_array":
                    return items
                items.append(self._value(event, value, events))
        members: dict[str, Any] = {}  # start_map
        for event, key in events:
            if event == "end_map":
                break
            if key in members:
                raise DuplicateKey(key, self._parser.offset)
            event, value = next(events)
            members[key] = self._value(event, value, events)
        return members
