"""CLI start-up: wall time of commands that run no model, against a bare Python start-up.

Each command runs in a fresh process, ``--repeat`` times, interleaved with the reference rows
(``python -c pass`` and ``python -c "import pandas"``) so that all rows see the same machine
load. The table shows the median and minimum wall time, the median CPU time (user + system),
the ratios of the median to both references, and how many modules the command imports
(``len(sys.modules)`` at exit, in a separate probe run) with any heavy one it loaded.

Both ways in are timed: the console script (``idealized-runtime``, next to this Python) and
``python -m idealized_runtime``.
Run: python benchmarks/cli_startup.py [--repeat N]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (
    ("version",),
    ("--help",),
    ("fit", "--help"),
    ("convert", "--help"),
    ("estimate", "--help"),
    ("summarize", "--help"),
)
HEAVY = ("torch", "sklearn", "scipy", "pandas", "pyarrow", "numpy", "pydantic", "fastapi")
TARGET_S = 0.3

# Runs the CLI as the console script does, then reports what it imported.
PROBE = """
import sys
sys.argv = ["idealized-runtime", *sys.argv[1:]]
from idealized_runtime.cli import main
try:
    main()
except SystemExit:
    pass
heavy = [name for name in {heavy!r} if name in sys.modules]
sys.stderr.write("\\nPROBE %d %s\\n" % (len(sys.modules), ",".join(heavy)))
"""


def console_script() -> str:
    beside = Path(sys.executable).with_name("idealized-runtime")
    found = str(beside) if beside.exists() else shutil.which("idealized-runtime")
    if found is None:
        sys.exit("error: the idealized-runtime console script is not installed")
    return found


def timed_run(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(argv)} exited {done.returncode}: {done.stderr[-300:]!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def imported(args: tuple[str, ...]) -> tuple[int, str]:
    """Modules loaded by one command (and the heavy ones among them)."""
    code = PROBE.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    line = next(x for x in reversed(done.stderr.splitlines()) if x.startswith("PROBE "))
    _, count, heavy = [*line.split(" "), ""][:3]
    return int(count), heavy or "-"


def reference_modules(code: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(len(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=10, help="runs per row (median shown)")
    options = parser.parse_args()

    script = console_script()
    rows: dict[str, list[str]] = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import pandas'": [sys.executable, "-c", "import pandas"],
    }
    for args in COMMANDS:
        rows[f"idealized-runtime {' '.join(args)}"] = [script, *args]
    rows["python -m idealized_runtime version"] = [
        sys.executable,
        "-m",
        "idealized_runtime",
        "version",
    ]
    for argv in rows.values():  # warm the file cache and .pyc files once, untimed
        subprocess.run(argv, capture_output=True, check=False)
    walls: dict[str, list[float]] = {name: [] for name in rows}
    cpus: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(options.repeat):
        for name, argv in rows.items():
            wall, cpu = timed_run(argv)
            walls[name].append(wall)
            cpus[name].append(cpu)

    modules = {
        "python -c pass": (reference_modules("pass"), "-"),
        "python -c 'import pandas'": (reference_modules("import pandas"), "pandas,numpy"),
    }
    for args in COMMANDS:
        modules[f"idealized-runtime {' '.join(args)}"] = imported(args)
    modules["python -m idealized_runtime version"] = modules["idealized-runtime version"]

    bare = statistics.median(walls["python -c pass"])
    pandas = statistics.median(walls["python -c 'import pandas'"])
    header = (
        f"{'command':<38} {'median s':>9} {'min s':>7} {'cpu s':>7} {'x pass':>7} "
        f"{'x pandas':>9} {'modules':>8}  heavy"
    )
    print(f"CLI start-up, {options.repeat} runs per row (target: median <= {TARGET_S} s)")
    print(header)
    print("-" * len(header))
    for name in rows:
        median = statistics.median(walls[name])
        count, heavy = modules[name]
        print(
            f"{name:<38} {median:>9.3f} {min(walls[name]):>7.3f} "
            f"{statistics.median(cpus[name]):>7.3f} {median / bare:>7.2f} "
            f"{median / pandas:>9.2f} {count:>8}  {heavy}"
        )


if __name__ == "__main__":
    main()
