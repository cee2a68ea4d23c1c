"""Writes tests/cost_model/simulator_golden.json from the simulator as it is (run once, from
the commit whose results are the reference): python -m tests.cost_model.make_simulator_golden"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cost_model.simulator_golden_cases import CASES, figures

GOLDEN = Path(__file__).with_name("simulator_golden.json")

if __name__ == "__main__":
    golden = {name: figures(run()) for name, run in CASES.items()}
    GOLDEN.write_text(json.dumps(golden, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{len(golden)} cases, {GOLDEN.stat().st_size} bytes")
