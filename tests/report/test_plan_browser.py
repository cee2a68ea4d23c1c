"""The plan's page in headless Chromium: one chart per GPU with every engine's frontier, the
SLO's region shaded, the chosen configuration ringed once, the tables filled, no errors."""

from __future__ import annotations

from pathlib import Path

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.types import Slo
from idealized_runtime.cost_model.planning.request import PlanRequest, PlanWorkload
from idealized_runtime.cost_model.planning.search import plan
from idealized_runtime.report.plan import write_plan_report
from tests.report.browser import browser_marks, headless_chromium

pytestmark = browser_marks()

CHARTS_JS = """
return Array.from(document.querySelectorAll('svg.chart')).map(function (svg) {
  return [svg.id, svg.querySelectorAll('.frontier-line').length,
          svg.querySelectorAll('.point').length, svg.querySelectorAll('.slo-region').length,
          svg.querySelectorAll('.chosen').length, svg.querySelectorAll('text.label').length];
});
"""


def test_plan_page_renders_in_chromium(tmp_path: Path) -> None:
    result = plan(
        PlanRequest(
            architecture=get_architecture("llama-3.1-8b"),
            hardware=[get_hardware("h100-sxm"), get_hardware("b200")],
            stacks=["vllm", "sglang", "ideal"],
            workload=PlanWorkload(prompt_tokens=1024, output_tokens=128),
            slo=Slo(ttft_s=0.5, tpot_s=0.02),
            max_gpus=2,
            concurrency=[1, 8, 64],
            verify=False,
        )
    )
    page = write_plan_report(result, tmp_path / "plan")
    assert result.best is not None
    with headless_chromium() as driver:
        driver.get(page.resolve().as_uri())
        assert driver.title == "Deployment plan"
        errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == [], errors
        charts = {row[0]: row[1:] for row in driver.execute_script(CHARTS_JS)}
        assert set(charts) == {"plan-h100-sxm", "plan-b200"}
        for chart_id, (lines, points, slo, chosen, labels) in charts.items():
            assert lines == 3 and points >= 3 and slo == 1 and labels == 2, chart_id
            assert chosen == (1 if chart_id == f"plan-{result.best.hardware}" else 0)
        best_rows = driver.execute_script(
            "return document.querySelectorAll('#plan-best-table tbody tr').length"
        )
        assert best_rows == len(result.best_per_hardware) == 2
        frontier_rows = driver.execute_script(
            "return document.querySelectorAll('#plan-frontier-table tbody tr').length"
        )
        assert frontier_rows == sum(len(f.points) for f in result.frontiers)
        text = driver.execute_script("return document.getElementById('plan-best').textContent")
        assert "Best under the SLO" in text and result.best.hardware in text
