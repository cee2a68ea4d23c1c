"""The monitor as a service: SIGTERM in the middle of a round (the round recorded and stored,
exit 0), a shift said by the monitor itself (one line, the file's command and a webhook on a
loopback server called with it), the warm-up countdown before flags are possible, and a round
with most requests failed recorded as degraded, with retries kept within the round's budget.

Providers are the fake OpenAI-compatible server on 127.0.0.1 with injected latency and faults
(``tests/timing_client/fake_openai.py``); every wait is on a file or a line, never on a clock."""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

from idealized_runtime.api.report_database import database_trends
from idealized_runtime.timing.summary import read_raw_rows
from tests.monitor.conftest import fake_provider, monitoring_file
from tests.servers import cli_command, run_cli

FILE_WAIT_S = 120.0


def wait_for(condition, what: str, timeout_s: float = FILE_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def rows_in(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text("utf-8").splitlines() if line.strip())
    except OSError:
        return 0


def test_sigterm_in_a_round_records_it_and_exits_0(tmp_path: Path) -> None:
    """A round of 8 slow requests (0.4 s each, one at a time); SIGTERM once two have finished:
    the monitor records the round from the finished requests, stores it, says so and exits 0;
    a second run resumes with the next round."""
    database = f"sqlite:///{tmp_path / 'rounds.sqlite3'}"
    state = tmp_path / "state"
    with fake_provider(tmp_path, "slow", "--first-token-delay", "0.4") as url:
        config = monitoring_file(
            tmp_path / "slow.yaml",
            [{"provider": "slow", "base_url": url, "model": "m", "tokenizer": "bytes"}],
            repeats=4,
            database=database,
        )
        process = subprocess.Popen(
            cli_command("monitor", str(config), "--state", str(state), "--rounds", "5"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            rows = state / "rounds" / "000000"
            wait_for(lambda: sum(rows_in(p) for p in rows.glob("*.jsonl")) >= 2, "two requests")
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 0, stderr
        assert "Traceback" not in stderr
        assert "stopped by SIGTERM in round 0 (slow/m: recorded from the" in stderr, stderr
        assert "1 round(s) run, 1 stored" not in stderr  # the round was cut, not run whole
        assert "0 round(s) run, 1 stored" in stderr, stderr
        (record,) = rows.glob("*.round.json")
        recorded = json.loads(record.read_text("utf-8"))
        assert 2 <= recorded["requests"] < 8 and recorded["status"] == "ok"
        assert recorded["error"].startswith("stopped by SIGTERM")
        (series,) = database_trends(database)
        assert [p.round_index for p in series.points] == [0]

        # Started again, it goes on with round 1 (round 0 is done).
        again = run_cli("monitor", str(config), "--state", str(state), "--once")
        assert again.returncode == 0, again.stderr
        assert "round 1 slow/m: ok" in again.stderr and "round 0 " not in again.stderr


class _Webhook(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self.received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def webhook_server() -> Iterator[tuple[str, list[dict]]]:
    """An HTTP server on 127.0.0.1 that keeps every JSON body POSTed to it."""
    handler = type("Webhook", (_Webhook,), {"received": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler.received
    finally:
        server.shutdown()
        server.server_close()


ROUNDS = 22
SHIFT_ROUND = 12
REQUESTS_PER_ROUND = 4
MIN_BASELINE = 10


def test_a_shift_is_said_once_and_calls_the_hooks(tmp_path: Path) -> None:
    """A provider whose TTFT triples at round 12, a baseline of 10 rounds: the round lines count
    down to the baseline, the flag is one line, and the webhook (a loopback server) and the
    command get the same flag as JSON; nothing is flagged before the shift."""
    shift = ("--shift-after", str(SHIFT_ROUND * REQUESTS_PER_ROUND), "--shift-factor", "3")
    latency = ("--first-token-delay", "0.08", "--token-delay", "0.004", "--jitter", "0.1")
    hook_file = tmp_path / "flags.jsonl"
    append = f"import sys; open({str(hook_file)!r}, 'a').write(sys.stdin.read() + '\\n')"
    command = [sys.executable, "-c", append]
    with (
        webhook_server() as (hook_url, received),
        fake_provider(tmp_path, "shifty", *latency, "--seed", "5", *shift) as url,
    ):
        config = monitoring_file(
            tmp_path / "shifty.yaml",
            [{"provider": "shifty", "base_url": url, "model": "m", "tokenizer": "bytes"}],
            concurrency=REQUESTS_PER_ROUND,
            changes={"min_baseline_rounds": MIN_BASELINE},
            on_flag={"webhook": hook_url, "command": command},
            database=f"sqlite:///{tmp_path / 'rounds.sqlite3'}",
        )
        ran = run_cli(
            "monitor", str(config), "--state", str(tmp_path / "state"), "--rounds", str(ROUNDS)
        )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stderr.splitlines()
    # The countdown: round n still needs MIN_BASELINE - (n + 1) rounds, then nothing is said.
    for number in range(MIN_BASELINE - 1):
        (line,) = [line for line in lines if line.startswith(f"round {number} shifty/m: ok")]
        remaining = MIN_BASELINE - number - 1
        assert line.endswith(f"; {remaining} more round(s) before shifts can be flagged")
    assert not any(
        "before shifts can be flagged" in line
        for line in lines
        if line.startswith(f"round {MIN_BASELINE - 1} ")
    )
    flags = [line for line in lines if line.startswith("flag ")]
    ttft = [line for line in flags if "TTFT p50 up" in line]
    assert len(ttft) == 1, ran.stderr
    flagged_round = int(ttft[0].rsplit("flagged round ", 1)[1])
    began = int(ttft[0].split("began round ")[1].split(",")[0])
    # Where the shift began is an estimate from timed rounds (a busy machine adds to a round's
    # TTFT): near the shift, and never after the round that flagged it.
    assert SHIFT_ROUND <= flagged_round < ROUNDS, ttft[0]
    assert SHIFT_ROUND - 3 <= began <= flagged_round, ttft[0]
    assert " -> " in ttft[0] and "shifty/m" in ttft[0]
    # Printed right after the round that raised it, and nothing flagged before the shift.
    before_flag = [line for line in lines[: lines.index(ttft[0])] if not line.startswith("flag ")]
    assert before_flag[-1].startswith(f"round {flagged_round} shifty/m")
    assert all(int(line.rsplit("flagged round ", 1)[1]) >= SHIFT_ROUND for line in flags)
    assert f"{len(flags)} shift(s) flagged" in ran.stderr

    # The hooks got every flag, once, the same JSON.
    assert len(received) == len(flags)
    (hooked,) = [flag for flag in received if flag["statistic"] == "ttft_s"]
    assert hooked["provider"] == "shifty" and hooked["model"] == "m"
    assert hooked["direction"] == "up" and hooked["round_index"] == flagged_round
    assert hooked["after"] > 2 * hooked["before"] and hooked["line"] == ttft[0]
    from_command = [json.loads(line) for line in hook_file.read_text().splitlines() if line]
    assert from_command == received

    # The report, told the same baseline, marks the same shifts on the trends page.
    report = run_cli(
        "report", "--from", f"sqlite:///{tmp_path / 'rounds.sqlite3'}", "-o",
        str(tmp_path / "report"), "--window", "all", "--min-baseline-rounds", str(MIN_BASELINE),
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "report" / "trends.html").read_text(encoding="utf-8")
    assert page.count('class="mark change"') == len(flags)


def test_a_round_with_most_requests_failed_is_degraded_within_its_retry_budget(
    tmp_path: Path,
) -> None:
    """Every request's first attempt gets a 429 (Retry-After 0.2 s); a retry budget of 0.5 s
    lets at most two of six be retried: 2/6 ok is a degraded round, not an ok one."""
    database = f"sqlite:///{tmp_path / 'rounds.sqlite3'}"
    state = tmp_path / "state"
    with fake_provider(tmp_path, "limited", "--faults", "429", "--retry-after", "0.2") as url:
        config = monitoring_file(
            tmp_path / "limited.yaml",
            [
                {"provider": "limited", "base_url": url, "model": "m", "tokenizer": "bytes"},
                {
                    "provider": "nobody",
                    "base_url": "http://127.0.0.1:9/v1",
                    "model": "m",
                    "tokenizer": "bytes",
                },
            ],
            shapes=((32, 4), (32, 8), (32, 12)),
            probe={
                "max_retries": 5,
                "retry_budget_s": 0.5,
                "backoff_base_s": 0.2,
                "backoff_max_s": 0.2,
            },
            database=database,
        )
        ran = run_cli("monitor", str(config), "--state", str(state), "--once")
    assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stderr.splitlines() if line.startswith("round 0 limited/m")]
    assert line.startswith("round 0 limited/m: degraded (") and "requests failed; first: " in line
    assert "round 0 nobody/m: failed" in ran.stderr
    assert "(1 degraded, 1 failed)" in ran.stderr
    # Retried requests got through (the budget allows at most two waits of 0.2 s); the rest
    # were not retried once the budget was spent.
    limited = read_raw_rows(list((state / "rounds" / "000000").glob("limited--*.jsonl")))
    ok = [row for row in limited if row["ok"]]
    assert len(limited) == 6 and 1 <= len(ok) <= 2 and all(row["attempts"] == 2 for row in ok)
    assert f", {len(ok)}/6 ok, TTFT" in line
    assert sum(wait for row in limited for wait in row["retry_waits_s"]) <= 0.5
    statuses = {s.provider: [p.status for p in s.points] for s in database_trends(database)}
    assert statuses == {"limited": ["degraded"], "nobody": ["failed"]}


def test_sigterm_between_rounds_stops_at_once_with_every_round_stored(tmp_path: Path) -> None:
    """SIGTERM while the monitor waits for its next round: it returns at once, nothing is cut,
    every finished round is stored. The wait is the injected ``sleep``, which sends the signal
    to this process (the monitor's handler is installed in the main thread)."""
    import os

    from idealized_runtime.monitor.config import load_config
    from idealized_runtime.monitor.run import run_monitor
    from idealized_runtime.monitor.store import DatabaseStore

    database = f"sqlite:///{tmp_path / 'rounds.sqlite3'}"
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # interrupted by the handler's exception long before

    previous = signal.getsignal(signal.SIGTERM)
    with fake_provider(tmp_path, "p") as url:
        config = monitoring_file(
            tmp_path / "p.yaml",
            [{"provider": "p", "base_url": url, "model": "m", "tokenizer": "bytes"}],
            interval_s=600,
            jitter_s=0,
        )
        lines: list[str] = []
        result = run_monitor(
            load_config(config),
            tmp_path / "state",
            DatabaseStore(database),
            max_rounds=3,
            say=lines.append,
            sleep=sleep,
        )
    assert len(waits) == 1 and waits[0] > 500  # round 1 was due in 10 minutes
    assert result.stopped == "stopped by SIGTERM between rounds" and lines[-1] == result.stopped
    assert result.rounds == 1 and result.stored == 1 and result.waiting == 0
    assert signal.getsignal(signal.SIGTERM) == previous  # the handler is the caller's again
    (series,) = database_trends(database)
    assert [p.round_index for p in series.points] == [0]
