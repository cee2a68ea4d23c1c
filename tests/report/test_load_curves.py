"""Latency-throughput curves in the report: drawn per model with the SLO line, from a results
folder (raw rows and summary lists) and from the service database."""

from __future__ import annotations

import json
import re
from pathlib import Path

from idealized_runtime.api.report_database import database_curves
from idealized_runtime.core.types import Slo
from idealized_runtime.report.load import (
    curves_from,
    latency_throughput_chart,
    results_dir_curves,
)
from idealized_runtime.timing.summary import summaries_to_json, summarize
from tests.servers import cli_command
from tests.timing_client.conftest import run_cli


def raw_rows(model: str, load: str, e2e: float, count: int = 4) -> list[dict]:
    return [
        {"model": model, "load": load, "ok": True, "runtime_s": e2e, "ttft_s": e2e / 4,
         "num_output_tokens": 9, "inter_token_latencies_s": [e2e / 10], "started_at_s": i * e2e}
        for i in range(count)
    ]  # fmt: skip


ROWS = (
    raw_rows("alpha", "concurrency=1", 1.0)
    + raw_rows("alpha", "concurrency=4", 1.5)
    + raw_rows("beta", "rate=2.0", 0.5)
)


def test_chart_draws_one_curve_per_model_and_the_slo_line() -> None:
    curves = curves_from(summarize(ROWS))
    assert [(c.name, [s.load for s in c.summaries]) for c in curves] == [
        ("alpha", ["concurrency=1", "concurrency=4"]),
        ("beta", ["rate=2.0"]),
    ]
    svg = latency_throughput_chart(
        curves, metric="ttft_s", label="TTFT p50 (s)", slo_s=0.3, chart_id="c"
    )
    assert re.findall(r'class="mark load-curve" data-model="([^"]+)"', svg) == ["alpha", "beta"]
    assert svg.count('class="mark point"') == 3
    assert 'class="mark slo"' in svg and "SLO 0.3 s" in svg
    assert 'class="mark slo"' not in latency_throughput_chart(
        curves, metric="ttft_s", label="TTFT p50 (s)", slo_s=None, chart_id="c"
    )


def test_results_folder_report_writes_load_page(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    simulated = summaries_to_json(summarize(raw_rows("alpha", "concurrency=1", 0.8)))
    (results / "alpha.load_summaries.json").write_text(
        json.dumps([{**item, "source": "simulated"} for item in simulated])
    )
    curves = results_dir_curves(results)
    assert [c.name for c in curves] == ["alpha", "alpha (simulated)", "beta"]
    out = tmp_path / "report"
    result = run_cli(cli_command("report", "--from", str(results), "-o", str(out),
                                 "--slo", "ttft=0.3,e2e=1.2"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    page = (out / "load.html").read_text()
    assert page.count("<svg") == 3 and "alpha (simulated)" in page
    assert page.count('class="mark slo"') == 2  # TTFT and e2e targets; none for TPOT
    bad = run_cli(cli_command("report", "--from", str(results), "-o", str(out), "--slo", "x"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_database_curves_come_from_stored_summaries(tmp_path: Path) -> None:
    from idealized_runtime.api import crud
    from idealized_runtime.api.report_database import write_session

    url = f"sqlite:///{tmp_path / 'service.db'}"
    with write_session(url) as session:
        crud.upsert_load_summaries(session, summarize(ROWS), "measured")
        crud.upsert_load_summaries(session, summarize(raw_rows("beta", "rate=2.0", 0.4)), "sim")
    curves = database_curves(url)
    assert [(c.name, len(c.summaries)) for c in curves] == [
        ("alpha", 2), ("beta", 1), ("beta (sim)", 1),
    ]  # fmt: skip
    assert curves[2].summaries[0].e2e_s.p50 == 0.4


def test_slo_type_shows_on_the_page() -> None:
    from idealized_runtime.report.load import render_load_html

    page = render_load_html(curves_from(summarize(ROWS)), Slo(e2e_s=2.0))
    assert "e2e &le; 2 s" in page and "concurrency=4" in page
