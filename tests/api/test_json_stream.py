"""A JSON measurement set read as it streams in (api.uploads.json_measurement_set) decides as
validating the whole body at once would, whatever the chunks, whitespace and member order:
the same measurements and members when valid, a refusal when not. In-process, no server."""

from __future__ import annotations

import json
import random

import pytest
from fastapi.exceptions import RequestValidationError
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from idealized_runtime.api.schemas import MeasurementSetCreate
from idealized_runtime.api.uploads import json_measurement_set
from idealized_runtime.core.errors import InputError

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1,
                max_size=12)  # fmt: skip
measurements = st.fixed_dictionaries(
    {
        "model": names,
        "num_prompt_tokens": st.integers(1, 5000),
        "num_output_tokens": st.integers(0, 300),
        "runtime_s": st.floats(1e-3, 100),
    },
    optional={"ttft_s": st.floats(1e-4, 1e-3), "batch_size": st.integers(1, 8)},
)
bodies = st.fixed_dictionaries(
    {"measurements": st.lists(measurements, min_size=1, max_size=12)},
    optional={
        "name": names,
        "source": st.sampled_from(["import", "api_timing"]),
        # Integers within 64 bits: the streaming parser's range (beyond: refused, see below).
        "metadata": st.dictionaries(
            names, st.one_of(st.integers(-(2**63), 2**63 - 1), names, st.lists(st.none()))
        ),
        "stack": st.fixed_dictionaries(
            {}, optional={"runner": names, "num_devices": st.integers(1, 8)}
        ),
    },
)


def _text(body: dict, rng: random.Random) -> bytes:
    items = list(body.items())
    rng.shuffle(items)
    separators = rng.choice([(",", ":"), (", ", ": "), (" ,\n", " :\t")])
    return json.dumps(dict(items), separators=separators, ensure_ascii=rng.random() < 0.5,
                      indent=rng.choice([None, 2])).encode()  # fmt: skip


def _chunks(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 8))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def _streamed(data: bytes, rng: random.Random) -> tuple[object, list[dict]] | None:
    try:
        envelope, columns = json_measurement_set(_chunks(data, rng), max_rows=10**6)
    except (RequestValidationError, InputError):
        return None
    return envelope.model_dump(exclude={"measurements"}), list(columns.records())


def _no_repeated_key(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a repeated key")
    return dict(pairs)


def _int64(text: str) -> int:
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError("an integer beyond 64 bits")
    return value


def _whole(data: bytes) -> tuple[object, list[dict]] | None:
    """The body validated at once; a key repeated inside an object refuses it (pydantic alone
    would take the last), and so does an integer beyond 64 bits (the parser's range)."""
    try:
        json.loads(data, object_pairs_hook=_no_repeated_key, parse_int=_int64)
    except ValueError as error:
        if "a repeated key" in str(error) or "beyond 64 bits" in str(error):
            return None
    try:
        body = MeasurementSetCreate.model_validate_json(data, strict=True)
    except ValidationError:
        return None
    rows = [m.model_dump() for m in body.measurements]
    return body.model_dump(exclude={"measurements"}), rows


@settings(max_examples=150, deadline=None)
@given(body=bodies, seed=st.integers(0, 2**32))
def test_a_valid_body_gives_what_the_whole_body_gives(body: dict, seed: int) -> None:
    data = _text(body, random.Random(seed))
    whole = _whole(data)
    assert whole is not None
    assert _streamed(data, random.Random(seed)) == whole


@settings(max_examples=400, deadline=None)
@given(body=bodies, seed=st.integers(0, 2**32), edits=st.integers(1, 3))
def test_a_damaged_body_is_refused_as_the_whole_body_is(body: dict, seed: int, edits: int) -> None:
    rng = random.Random(seed)
    data = bytearray(_text(body, rng))
    for _ in range(edits):
        at = rng.randrange(len(data))
        if rng.random() < 0.5:
            del data[at]
        else:
            data.insert(at, rng.choice(b'{}[],:" \\0aeE-.n\x00\xff'))
    whole = _whole(bytes(data))
    streamed = _streamed(bytes(data), rng)
    assert (streamed is None) == (whole is None), bytes(data)
    if whole is not None:
        assert streamed == whole


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'{"measurements": [{"model": "m", "num_prompt_tokens": 1, "num_output_tokens": 1, '
         b'"runtime_s": 1},]}', "unallowed token"),
        (b'{"measurements": [], "name": "x"}', "at least 1 item"),
        (b'{"name": "x"}', "Field required"),
        (b'{"measurements": 3}', "valid array"),
        (b'{"measurements": [{"model": "m"}], "measurements": []}', "given twice"),
        (b'{"measurements": [NaN]}', "NaN is not JSON"),
        (b'{"measurements": [], "metadata": {"n": 9223372036854775808}}', "integer overflow"),
        (b'{"measurements": [{"model": "m", "model": "n"}]}', "'model' is given twice"),
        (b'{"name": "a", "measurements": [], "name": "b"}', "'name' is given twice"),
        (b'{"measurements": [], "metadata": {"a": {"k": 1, "k": 2}}}', "'k' is given twice"),
        (b'{"measurements": [{"model": "\\ud800"}]}', "lone surrogate"),
        (b'[1]', "a JSON object"),
        (b'{"measurements": [1]} x', "trailing garbage"),
        (b'{"measurements": [', "the body ends inside the JSON value (at or before byte 18)"),
    ],
)  # fmt: skip
def test_refusals_say_where(text: bytes, message: str) -> None:
    with pytest.raises(RequestValidationError) as refused:
        json_measurement_set([text], max_rows=10)
    assert message in json.dumps(refused.value.errors())


def test_the_row_limit_stops_the_reading() -> None:
    item = b'{"model": "m", "num_prompt_tokens": 1, "num_output_tokens": 1, "runtime_s": 1}'
    read = []

    def chunks():
        yield b'{"measurements": [' + item
        for i in range(10**6):
            read.append(i)
            yield b"," + item
        yield b"]}"

    with pytest.raises(InputError, match="more than 1000 measurements"):
        json_measurement_set(chunks(), max_rows=1000)
    assert len(read) < 1100  # stopped where the limit was passed, not at the end


def test_errors_name_the_row_among_thousands() -> None:
    good = {"model": "m", "num_prompt_tokens": 1, "num_output_tokens": 1, "runtime_s": 1}
    rows = [json.dumps(good).encode()] * 2500
    rows[1700] = json.dumps({**good, "runtime_s": -1}).encode()
    rows[2100] = b'{"model": "m", "runtime_s": .5}'  # not JSON
    body = b'{"measurements": [' + b",".join(rows) + b"]}"
    with pytest.raises(RequestValidationError) as refused:
        json_measurement_set([body[i : i + 999] for i in range(0, len(body), 999)], 10**4)
    locations = [error["loc"][:3] for error in refused.value.errors()]
    assert locations == [("body", "measurements", 1700), ("body", "measurements", 2100)]


def test_a_long_string_is_refused_where_it_passes_the_limit() -> None:
    """A 60 MiB model name (under the body limit) is refused once the string passes the
    string limit: the rest is not read."""
    read = []

    def chunks():
        yield b'{"measurements": [{"model": "'
        for i in range(60 * 16):  # 60 MiB in 64 KiB chunks
            read.append(i)
            yield b"m" * (1 << 16)
        yield b'", "num_prompt_tokens": 1, "num_output_tokens": 1, "runtime_s": 1}]}'

    with pytest.raises(RequestValidationError) as refused:
        json_measurement_set(chunks(), max_rows=10, max_string_bytes=1 << 20)
    assert "longer than 1048576 bytes" in json.dumps(refused.value.errors())
    assert len(read) <= 18  # 1 MiB and a slice, not 60 MiB


def test_a_string_at_the_limit_is_taken() -> None:
    name = "m" * 200
    row = {"model": name, "num_prompt_tokens": 1, "num_output_tokens": 1, "runtime_s": 1}
    data = json.dumps({"measurements": [row], "metadata": {"note": "n" * 5000}}).encode()
    envelope, columns = json_measurement_set(
        [data[i : i + 7] for i in range(0, len(data), 7)], max_rows=10, max_string_bytes=5002
    )
    assert envelope.metadata["note"] == "n" * 5000
    assert next(columns.records())["model"] == name


def test_json_bodies_refuse_repeated_keys_and_long_strings() -> None:
    from idealized_runtime.api.json_stream import JsonSyntaxError, check_json

    assert check_json([b'{"a": {"b": 1}, "c": [{"b": 2}, {"b": 3}]}'], 100)
    with pytest.raises(JsonSyntaxError, match="'runtime_s' is given twice"):
        check_json([b'{"x": [{"runtime_s": 1.2, "runtime_s": 2.5}]}'], 100)
    with pytest.raises(JsonSyntaxError, match="longer than 1000 bytes"):
        check_json([b'{"a": "', b"x" * 100_000, b'"}'], 1000)


def test_integers_beyond_64_bits_are_read_by_the_fallback_with_the_same_rules() -> None:
    from idealized_runtime.api.json_stream import JsonSyntaxError, check_json

    big = b'{"config": {"hidden_size": 188049581942790081179702788096}, "b": [1, "x"]}'
    assert check_json([big[:20], big[20:]], 100) == big
    with pytest.raises(JsonSyntaxError, match="'a' is given twice"):
        check_json([b'{"a": 123456789012345678901234567890, "a": 1}'], 100)
    with pytest.raises(JsonSyntaxError, match="longer than 100 bytes"):
        check_json([b'{"a": 123456789012345678901234567890, "b": "' + b"x" * 101 + b'"}'], 100)
    with pytest.raises(JsonSyntaxError, match="NaN is not JSON"):
        check_json([b'{"a": 123456789012345678901234567890, "b": NaN}'], 100)


def test_without_yajl2_c_another_backend_reads_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import ijson

    from idealized_runtime.api import json_stream

    assert json_stream.BACKEND_NAME == "yajl2_c"  # what ijson's wheels carry

    real_get_backend = ijson.get_backend

    def no_c_backend(name: str) -> object:
        if name.startswith("yajl2"):
            raise ImportError(name)
        return real_get_backend(name)

    monkeypatch.setattr(ijson, "get_backend", no_c_backend)
    backend, name = json_stream._load_backend()
    assert name == "python"
    monkeypatch.setattr(json_stream, "BACKEND", backend)
    monkeypatch.setattr(json_stream, "BACKEND_NAME", name)
    with caplog.at_level("WARNING", logger="uvicorn.error"):
        json_stream.log_backend()
    assert f"parsed by its {name} backend" in caplog.text
    body = b'{"a": [1, {"b": "c"}], "d": "' + b"x" * 10 + b'"}'
    assert json_stream.check_json([body[:7], body[7:]], 100) == body
    with pytest.raises(json_stream.JsonSyntaxError, match="'b' is given twice"):
        json_stream.check_json([b'{"b": 1, "b": 2}'], 100)
