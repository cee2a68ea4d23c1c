"""Commands that run no model start light: no torch, scikit-learn, scipy, pandas, pydantic...

Each command runs in a fresh interpreter through the console script's entry point
(``idealized_runtime.cli:main``); the probe then lists the heavy packages it loaded. What is
checked is what gets imported, never how long it takes (``benchmarks/cli_startup.py`` times it).
"""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from idealized_runtime import __version__

# The commands benchmarks/cli_startup.py times, and a few more.
BENCHMARK = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "cli_startup.py"))
LIGHT_COMMANDS = (
    *BENCHMARK["COMMANDS"], ("import-helm", "--help"), ("db", "--help"), ("plan", "--help"),
    ("monitor", "--help"),
)  # fmt: skip
HEAVY = (
    "torch",
    "sklearn",
    "scipy",
    "pandas",
    "pyarrow",
    "numpy",
    "pydantic",
    "fastapi",
    "sqlalchemy",
    "httpx",
    "markdown_it",
    "pygments",
)

PROBE = f"""
import sys
sys.argv = ["idealized-runtime", *sys.argv[1:]]
from idealized_runtime.cli import main
try:
    main()
except SystemExit as exit:
    code = exit.code
else:
    code = 0
heavy = [name for name in {HEAVY!r} if name in sys.modules]
sys.stderr.write("\\nEXIT %s HEAVY %s\\n" % (code, ",".join(heavy) or "-"))
"""


def run_probe(args: tuple[str, ...]) -> tuple[str, int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    last = done.stderr.rstrip().splitlines()[-1]
    _, code, _, heavy = last.split(" ")
    return done.stdout, int(code), [] if heavy == "-" else heavy.split(",")


@pytest.mark.parametrize("args", LIGHT_COMMANDS, ids=" ".join)
def test_command_that_runs_no_model_imports_nothing_heavy(args: tuple[str, ...]) -> None:
    stdout, code, heavy = run_probe(args)
    assert code == 0, stdout
    assert heavy == [], f"{' '.join(args)} imported {heavy}"
    if args == ("version",):
        assert stdout.strip() == __version__
    else:
        assert stdout.startswith("Usage: idealized-runtime"), stdout[:200]
        assert "--help" in stdout


def test_help_lists_every_registered_command() -> None:
    stdout, code, _ = run_probe(("--help",))
    assert code == 0
    for name in ("version", "fit", "convert", "estimate", "summarize", "serve", "db"):
        assert f"\n  {name} " in stdout, name


def test_a_command_with_arguments_still_checks_them() -> None:
    """The help flag's default does not change how real arguments are parsed and checked."""
    done = subprocess.run(
        [sys.executable, "-m", "idealized_runtime", "estimate", "-p", "x", "-o", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
