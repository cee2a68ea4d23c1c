"""Regenerate ``data/stacks/*.json`` from the published table and HELM's calibration:

python -m idealized_runtime.cost_model.hardware.stacks [--out FOLDER]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from idealized_runtime.cost_model.hardware.stacks.calibrate import calibrate_published, helm_stack
from idealized_runtime.cost_model.hardware.stacks.catalog import save_stack, stacks_dir


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Calibrate the reference stacks")
    parser.add_argument("--out", default=str(stacks_dir()), help="folder to write the stacks to")
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for stack in [*calibrate_published(), helm_stack()]:
        path = save_stack(stack, args.out)
        print(f"wrote {path}: {len(stack.rows)} rows, errors {stack.errors}")


if __name__ == "__main__":
    main()
