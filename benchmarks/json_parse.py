"""JSON measurement sets read as they stream in: ijson (yajl2_c) against the hand-written
scanner it replaced (``benchmarks/legacy_json_scanner.py``), same run, same machine.

1. Valid uploads of about 1, 10 and 100 MB (flat measurements in 64 KiB chunks): parsing alone
   (items handed over) and the whole read (parsed, validated strictly by pydantic, stored in
   columns), seconds and MB/s, and the ratio old / new.
2. One long string (a model name of 8 to 60 MiB): the old scanner re-scans a doubling window;
   the new parser refuses the string once it passes the string limit (1 MiB).
3. The real server (``idealized-runtime serve``, SQLite, one process): a 60 MiB single-string
   body, alone and four at once with 32 MiB strings: seconds to the 422 and the server's peak
   resident memory over its resident memory before (/proc VmHWM, reset before each).

Run: ``python -m benchmarks.json_parse [--sizes-mb 1 10 100] [--old-long-max-mib 32]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import httpx

from benchmarks.legacy_json_scanner import StreamedObject as LegacyObject
from idealized_runtime.api.json_stream import BACKEND_NAME, JsonSyntaxError, StreamedObject
from idealized_runtime.api.uploads import (
    MEASUREMENTS,
    VALIDATION_BATCH,
    MeasurementColumns,
    json_measurement_set,
)
from idealized_runtime.processes import free_port, running_server

MIB = 1 << 20
CHUNK = 1 << 16
STRING_LIMIT = 1 << 20


def _row(i: int) -> bytes:
    return (
        b'{"model": "model-%d", "num_prompt_tokens": %d, "num_output_tokens": %d, '
        b'"runtime_s": 0.%d5, "ttft_s": 0.0%d}'
        % (i % 7, 1 + i % 4000, 1 + i % 300, 1 + i % 9, 1 + i % 9)
    )


def valid_body(megabytes: float) -> bytes:
    block = b",".join(_row(i) for i in range(10_000))
    copies = max(1, round(megabytes * 1e6 / len(block)))
    return b'{"name": "bench", "measurements": [' + b",".join([block] * copies) + b"]}"


def chunks(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), CHUNK):
        yield data[start : start + CHUNK]


def long_string(total: int) -> Iterator[bytes]:
    yield b'{"measurements": [{"model": "'
    block = b"m" * CHUNK
    for _ in range(total // CHUNK):
        yield block
    yield b'", "num_prompt_tokens": 1, "num_output_tokens": 1, "runtime_s": 1}]}'


def legacy_read(parts: Iterable[bytes], max_rows: int) -> MeasurementColumns:
    """The previous read of a valid set: scanner items validated from their bytes in batches."""
    document = LegacyObject(parts, "measurements")
    columns, batch = MeasurementColumns(max_rows), []
    for _index, item in document.items():
        batch.append(item)
        if len(batch) == VALIDATION_BATCH:
            columns.extend(MEASUREMENTS.validate_json(b"[" + b",".join(batch) + b"]", strict=True))
            batch.clear()
    if batch:
        columns.extend(MEASUREMENTS.validate_json(b"[" + b",".join(batch) + b"]", strict=True))
    return columns


def timed(work) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def best_of(repeats: int, work) -> float:  # type: ignore[no-untyped-def]
    return min(timed(work) for _ in range(repeats))


def parse_old(data: bytes) -> None:
    for _ in LegacyObject(chunks(data), "measurements").items():
        pass


def parse_new(data: bytes) -> None:
    for _ in StreamedObject(chunks(data), "measurements", STRING_LIMIT).items():
        pass


def read_old(data: bytes) -> None:
    legacy_read(chunks(data), 10**7)


def read_new(data: bytes) -> None:
    json_measurement_set(chunks(data), 10**7)


def old_long(size: int) -> None:
    list(LegacyObject(long_string(size * MIB), "measurements").items())


def new_long(size: int, outcome: list[str]) -> None:
    try:
        list(StreamedObject(long_string(size * MIB), "measurements", STRING_LIMIT).items())
    except JsonSyntaxError as error:
        outcome.append(str(error).split(",")[0][:40])


def valid_uploads(sizes_mb: list[float]) -> None:
    print(
        f"1. valid measurement sets, 64 KiB chunks (new: ijson {BACKEND_NAME}); best of 3 below "
        "100 MB, 1 run at 100 MB"
    )
    print(
        "| size (MB) | rows | parse old (s) | parse new (s) | old/new | read old (s) "
        "| read new (s) | old/new | new MB/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes_mb:
        data = valid_body(size)
        repeats = 1 if size >= 100 else 3
        rows = data.count(b'"model"')

        p_old = best_of(repeats, partial(parse_old, data))
        p_new = best_of(repeats, partial(parse_new, data))
        r_old = best_of(repeats, partial(read_old, data))
        r_new = best_of(repeats, partial(read_new, data))
        mb = len(data) / 1e6
        print(
            f"| {mb:.1f} | {rows} | {p_old:.2f} | {p_new:.2f} | {p_old / p_new:.2f} "
            f"| {r_old:.2f} | {r_new:.2f} | {r_old / r_new:.2f} | {mb / r_new:.1f} |"
        )


def long_strings(sizes_mib: list[int], old_max_mib: int) -> None:
    print("\n2. one long string (the model name), parsed in-process")
    print("| string (MiB) | old scanner (s) | new parser (s) | new: refused with |")
    print("|---|---|---|---|")
    for size in sizes_mib:
        old = "not run"
        if size <= old_max_mib:
            old = f"{timed(partial(old_long, size)):.2f}"
        outcome: list[str] = []
        new = timed(partial(new_long, size, outcome))
        print(f"| {size} | {old} | {new:.3f} | {outcome[0] if outcome else 'taken'} |")


def _status_kib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return float(line.split()[1])
    raise KeyError(field)


def server_refusals() -> None:
    print("\n3. the real server (SQLite, one process): bodies with one long string")
    print(
        "| requests at once | string (MiB) | seconds to 422 (slowest) | statuses "
        "| server RSS before (MiB) | peak growth (MiB) |"
    )
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="ir-json-") as home:
        env = {"IDEALIZED_RUNTIME_HOME": home, "DATABASE_URL": ""}
        subprocess.run(
            [sys.executable, "-m", "idealized_runtime", "db", "seed"],
            env={**os.environ, **env},
            check=True,
            capture_output=True,
        )
        key = subprocess.run(
            [sys.executable, "-m", "idealized_runtime", "apikey", "create", "--name", "bench"],
            env={**os.environ, **env},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "idealized_runtime", "serve", "--port", str(port)]
        with running_server(command, f"{url}/v1/health", env=env) as server:
            headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}

            def post(size: int) -> tuple[int, float]:
                start = time.perf_counter()
                with httpx.Client(timeout=300) as client:
                    try:
                        response = client.post(
                            f"{url}/v1/measurement-sets",
                            content=long_string(size * MIB),
                            headers=headers,
                        )
                        code = response.status_code
                    except httpx.HTTPError:
                        code = 0  # the connection closed under the rest of the body
                return code, time.perf_counter() - start

            for at_once, size in [(1, 60), (4, 32)]:
                Path(f"/proc/{server.pid}/clear_refs").write_text("5")
                before = _status_kib(server.pid, "VmRSS") / 1024
                with ThreadPoolExecutor(at_once) as pool:
                    results = list(pool.map(post, [size] * at_once))
                peak = _status_kib(server.pid, "VmHWM") / 1024
                slowest = max(seconds for _, seconds in results)
                codes = ",".join(str(code) for code, _ in results)
                print(
                    f"| {at_once} | {size} | {slowest:.2f} | {codes} | {before:.0f} "
                    f"| {peak - before:+.1f} |"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 10, 100])
    parser.add_argument("--long-mib", type=int, nargs="+", default=[8, 16, 32, 60])
    parser.add_argument(
        "--old-long-max-mib",
        type=int,
        default=32,
        help="run the old scanner on strings up to this size (60: about 70 s)",
    )
    parser.add_argument("--skip-server", action="store_true")
    args = parser.parse_args()
    valid_uploads(args.sizes_mb)
    long_strings(args.long_mib, args.old_long_max_mib)
    if not args.skip_server:
        server_refusals()


if __name__ == "__main__":
    main()
