"""What refusing costs the running service (SQLite, one worker), measured: the server's peak
resident memory (/proc VmHWM) and its temporary files while it answers bodies of hundreds of
MB, generated on the fly by the test. Bounds are far below what holding the bodies would take;
each test prints its figures."""

from __future__ import annotations

import gzip
import io
import socket
import struct
import tarfile
import time
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.api.live import (
    MIB,
    LiveServer,
    MemoryUse,
    generated,
    live_server,
    peak_disk,
    peak_memory,
)

HEADER = b"model,num_prompt_tokens,num_output_tokens,runtime_s\n"


def _row(i: int) -> bytes:
    return b"model-%d,%d,%d,0.%d5\n" % (i % 7, 1 + i % 4000, i % 300, 1 + i % 9)


# 10,000 rows made once; bodies repeat them (the client would otherwise spend seconds making
# millions of rows).
BLOCK_ROWS = 10_000
BLOCK = b"".join(_row(i) for i in range(BLOCK_ROWS))


def csv_body(rows: int) -> Iterator[bytes]:
    yield HEADER
    for _ in range(rows // BLOCK_ROWS):
        yield BLOCK


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The service as shipped: 64 MiB bodies, 500,000 rows per upload."""
    with live_server(tmp_path_factory.mktemp("defaults")) as server:
        yield server


@pytest.fixture(scope="module")
def open_bodies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Bodies up to 4 GiB: the row limit, not the body limit, has to stop a huge CSV."""
    with live_server(
        tmp_path_factory.mktemp("open"), IDEALIZED_RUNTIME_MAX_BODY_BYTES=str(4 << 30)
    ) as server:
        yield server


def _upload(
    server: LiveServer, path: str, body: Iterable[bytes], media: str
) -> tuple[httpx.Response, MemoryUse]:
    """POST ``body`` (streamed) to ``path`` with the server's key, watching its peak memory."""
    with peak_memory(server.pid) as memory, server.client() as client:
        response = client.post(path, content=body, headers={**server.auth, "content-type": media})
    return response, memory


def _assert_refused_past_the_row_limit(response: httpx.Response) -> None:
    assert response.status_code == 422, response.text
    assert "more than 500000 measurements" in response.json()["detail"]


def test_anonymous_large_posts_cost_no_memory(defaults: LiveServer) -> None:
    """Eight concurrent anonymous 50 MB JSON uploads: 401 from the headers, bodies unread."""
    size = 50 * MIB

    def post(_: int) -> httpx.Response:
        with defaults.client() as client:
            body = generated(size, b'{"measurements": [', b'{"model": "m"},')
            headers = {"content-type": "application/json", "content-length": str(size)}
            return client.post("/v1/measurement-sets", content=body, headers=headers)

    with peak_memory(defaults.pid) as memory, ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(post, range(8)))
    print(f"8 x 50 MB anonymous: {memory.before_mib:.0f} -> peak {memory.peak_mib:.0f} MiB")
    assert [r.status_code for r in responses] == [401] * 8
    assert all("API key" in r.json()["detail"] for r in responses)
    assert memory.growth_mib < 30


def test_a_huge_csv_stops_at_the_row_limit(open_bodies: LiveServer) -> None:
    """10^7 rows (about 230 MB), streamed: refused at row 500,001 while it arrives; memory
    holds the 500,000 rows read (compact columns), not the body."""
    body = csv_body(10_000_000)
    response, memory = _upload(open_bodies, "/v1/measurement-sets/csv", body, "text/csv")
    print(f"10^7-row CSV: {memory.before_mib:.0f} -> peak {memory.peak_mib:.0f} MiB")
    _assert_refused_past_the_row_limit(response)
    assert memory.growth_mib < 120


def test_a_large_csv_is_stored_within_bounded_memory(open_bodies: LiveServer) -> None:
    rows = 100_000
    response, memory = _upload(open_bodies, "/v1/measurement-sets/csv", csv_body(rows), "text/csv")
    print(f"{rows}-row CSV stored: {memory.before_mib:.0f} -> peak {memory.peak_mib:.0f} MiB")
    assert response.status_code == 201, response.text
    assert response.json()["row_count"] == rows
    assert memory.growth_mib < 80


def test_a_large_json_upload_is_read_measurement_by_measurement(defaults: LiveServer) -> None:
    """600,000 measurements as one JSON body (49 MB): refused at the 500,001st, holding the
    rows read (compact columns), not the document parsed whole."""
    item = b'{"model": "m", "num_prompt_tokens": 512, "num_output_tokens": 32, "runtime_s": 0.25}'
    rows = 600_000

    def body() -> Iterator[bytes]:
        yield b'{"name": "big", "measurements": [' + item
        for _ in range(1, rows, 10_000):
            yield (b"," + item) * 10_000
        yield b"]}"

    response, memory = _upload(defaults, "/v1/measurement-sets", body(), "application/json")
    print(f"600k-row JSON: {memory.before_mib:.0f} -> peak {memory.peak_mib:.0f} MiB")
    _assert_refused_past_the_row_limit(response)
    assert memory.growth_mib < 80


def test_a_long_string_is_refused_where_it_passes_the_string_limit(defaults: LiveServer) -> None:
    """A measurement set whose model name is one 60 MiB string (under the body limit): refused
    once the string passes the 1 MiB string limit, holding at most that string's start (the
    hand-written scanner it replaced took 70 s and +368 MiB)."""
    body = generated(60 * MIB, b'{"measurements": [{"model": "', b"m")
    response, memory = _upload(defaults, "/v1/measurement-sets", body, "application/json")
    print(f"60 MiB string: {memory.before_mib:.0f} -> peak {memory.peak_mib:.0f} MiB")
    assert response.status_code == 422, response.text
    assert "longer than 1048576 bytes" in response.text
    assert memory.growth_mib < 50


def test_a_body_beyond_the_limit_is_cut_off_while_streaming(defaults: LiveServer) -> None:
    """300 MB without Content-Length (chunked), rows long enough that the 64 MiB body limit
    comes before the row limit: 413 with a JSON detail once 64 MiB have arrived."""
    header = b"model,num_prompt_tokens,num_output_tokens,runtime_s,notes\n"
    row = b"m,1,1,0.5," + b"n" * 4000 + b"\n"
    body = generated(300 * MIB, header, row)
    response, memory = _upload(defaults, "/v1/measurement-sets/csv", body, "text/csv")
    print(f"300 MB over the limit: {memory.before_mib:.0f} -> peak {memory.peak_mib:.0f} MiB")
    assert response.status_code == 413
    assert "larger than 67108864 bytes" in response.json()["detail"]
    assert memory.growth_mib < 30


def _raw_request(server: LiveServer, head: str) -> tuple[str, float]:
    """Send only the head of a request (its headers announce a body never sent); the status
    line of the answer and how long it took."""
    host, port = server.base_url.removeprefix("http://").split(":")
    start = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(head.encode())
        status = connection.makefile("rb").readline().decode()
    return status, time.perf_counter() - start


def test_a_declared_length_past_the_limit_is_refused_before_any_body(
    defaults: LiveServer,
) -> None:
    """Content-Length of 10 GB and no body at all, on every write: 401 without a key (the key
    comes first), 413 with one; answered at once, nothing waited for."""
    with defaults.client() as client:
        document = client.get("/v1/openapi.json").json()
    writes = [
        (method.upper(), path.replace("{set_id}", "1"))
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if {} not in operation.get("security", [{}])
    ]
    assert len(writes) >= 10
    for method, path in writes:
        for auth, status in [("", "401 Unauthorized"),
                             (f"Authorization: Bearer {defaults.key}\r\n",
                              "413 Request Entity Too Large")]:  # fmt: skip
            answer, took = _raw_request(
                defaults,
                f"{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: text/csv\r\n"
                f"{auth}Content-Length: 10000000000\r\n\r\n",
            )
            assert answer.startswith(f"HTTP/1.1 {status}"), (method, path, answer)
            assert took < 5


# --- archives -----------------------------------------------------------------------------------

ZEROS = 255 * MIB
RUN_SPEC = b'{"name": "run", "adapter_spec": {"model": "m"}}'


@pytest.fixture(scope="module")
def deflated_zeros() -> tuple[bytes, int]:
    """255 MiB of zeros deflated (about 250 kB) and their CRC-32: compressed once, reused."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    block, crc = b"\0" * MIB, 0
    pieces = []
    for _ in range(ZEROS // MIB):
        pieces.append(packer.compress(block))
        crc = zlib.crc32(block, crc)
    pieces.append(packer.flush())
    return b"".join(pieces), crc


def _zip_of_zeros(names: list[str], deflated: bytes, crc: int) -> bytes:
    """A .zip holding, per name, a run_spec.json beside ``name`` of 255 MiB of zeros; written
    by hand to reuse the one deflated stream."""
    body, directory = io.BytesIO(), io.BytesIO()
    entries = []
    for name in names:
        spec = str(Path(name).with_name("run_spec.json"))
        entries.append((spec, 0, RUN_SPEC, zlib.crc32(RUN_SPEC), len(RUN_SPEC)))
        entries.append((name, 8, deflated, crc, ZEROS))
    for name, method, data, checksum, size in entries:
        offset = body.tell()
        encoded = name.encode()
        body.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, method, 0, 0, checksum,
                               len(data), size, len(encoded), 0) + encoded + data)  # fmt: skip
        directory.write(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, method, 0, 0,
                                    checksum, len(data), size, len(encoded), 0, 0, 0, 0, 0,
                                    offset) + encoded)  # fmt: skip
    start, listing = body.tell(), directory.getvalue()
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(entries), len(entries),
                      len(listing), start, 0)  # fmt: skip
    return body.getvalue() + listing + end


def _tar_gz_of_zeros(names: list[str]) -> bytes:
    """A .tar.gz as concatenated gzip members (one stream to a reader): the 255 MiB of zeros of
    every file compressed once."""
    zeros = gzip.compress(b"\0" * MIB, compresslevel=9)  # 1 MiB; the member repeats it
    parts = []
    for name in names:
        spec = tarfile.TarInfo(str(Path(name).with_name("run_spec.json")))
        spec.size = len(RUN_SPEC)
        padding = b"\0" * (-len(RUN_SPEC) % 512)
        parts.append(gzip.compress(spec.tobuf() + RUN_SPEC + padding))
        info = tarfile.TarInfo(name)
        info.size = ZEROS
        parts.append(gzip.compress(info.tobuf()))
        parts.extend([zeros] * (ZEROS // MIB))
    parts.append(gzip.compress(b"\0" * 1024))  # the end of the archive
    return b"".join(parts)


@pytest.fixture(scope="module")
def bombs(deflated_zeros: tuple[bytes, int]) -> dict[str, bytes]:
    """About 1 MB archives of 4 x 255 MiB of zeros: as HELM's run files (beside a run_spec.json),
    or as files an import passes over."""
    stats = [f"runs/v1/run{i}/per_instance_stats.json" for i in range(4)]
    other = [f"runs/v1/run{i}/scenario_state.json" for i in range(4)]
    return {
        "zip-run-files": _zip_of_zeros(stats, *deflated_zeros),
        "zip-other-files": _zip_of_zeros(other, *deflated_zeros),
        "tar.gz-run-files": _tar_gz_of_zeros(stats),
        "tar.gz-other-files": _tar_gz_of_zeros(other),
    }


@pytest.mark.parametrize(
    ("kind", "refusal"),
    [
        ("zip-run-files", "a run file may have at most 67108864"),
        ("zip-other-files", "no per_instance_stats.json beside"),  # never decompressed
        ("tar.gz-run-files", "a run file may have at most 67108864"),
        ("tar.gz-other-files", "more than 268435456 bytes uncompressed"),
    ],
)
def test_archive_bombs_cost_neither_memory_nor_disk(
    defaults: LiveServer, bombs: dict[str, bytes], kind: str, refusal: str
) -> None:
    body = bombs[kind]
    media = "application/zip" if kind.startswith("zip") else "application/gzip"
    with (
        peak_memory(defaults.pid) as memory,
        peak_disk(defaults.tmp) as disk,
        defaults.client() as client,
    ):
        response = client.post(
            "/v1/measurement-sets/helm",
            content=body,
            headers={**defaults.auth, "content-type": media},
        )
    print(
        f"{kind} ({len(body) / MIB:.1f} MB): {memory.before_mib:.0f} -> peak "
        f"{memory.peak_mib:.0f} MiB, temporary files at most {disk[0] / MIB:.1f} MiB"
    )
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert refusal in detail
    assert str(defaults.home) not in detail and "/tmp" not in detail
    assert memory.growth_mib < 30
    assert disk[0] < 2 * MIB


def test_an_archive_of_many_entries_is_refused_before_they_are_read(
    defaults: LiveServer, tmp_path: Path
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for i in range(10_001):
            archive.writestr(f"e/{i}", b"")
    with defaults.client() as client:
        response = client.post(
            "/v1/measurement-sets/helm",
            content=buffer.getvalue(),
            headers={**defaults.auth, "content-type": "application/zip"},
        )
    assert response.status_code == 422, response.text
    assert "more than 10000 entries" in response.json()["detail"]
