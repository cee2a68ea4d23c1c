"""Conversion throughput: 1,000,000 requests over several models, fits from the A100 grid.

Part 1 times the conversion compute only (the table built in memory), ours (vectorized per
model) vs a naive per-row Python loop (timed on a subsample, extrapolated).

Part 2 times the whole command, ``idealized-runtime convert requests.csv --fit ... -o out.csv``
in a subprocess (start-up, read, validate, predict, write), against a pandas + pyarrow script
doing the same (read, ``cost_model.predict_runtime`` per model, write) and, when installed, a
polars script; each in its own process, best of a few runs, with its peak RSS.

With ``--only-ours`` only our command runs (the reference scripts hold the whole file in
memory): the request CSV is written chunk by chunk, so ``--rows 50000000`` checks that memory
stays flat on files larger than memory allows (a 50M-row file is some 1.3 GB, its output 3 GB;
both are deleted afterwards).
Run: python benchmarks/convert_throughput.py [--rows N] [--repeats R] [--only-ours]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from idealized_runtime.core import catalog
from idealized_runtime.cost_model.fitting.convert import convert_requests
from idealized_runtime.cost_model.fitting.helm_format import import_helm_table
from idealized_runtime.cost_model.fitting.methods import fit_measurements
from idealized_runtime.cost_model.fitting.request_logs import RequestTable

ROWS = 1_000_000
NAIVE_SAMPLE = 20_000
REPEATS = 3


def naive_runtime(fit, p: int, o: int) -> float:
    """The per-row reference: the same formula, one request at a time in plain Python."""
    sizes, times = fit.prompt_sizes, fit.prompt_runtimes_s
    if fit.alpha_rule == "helm_scale_up":
        index = next((i for i, s in enumerate(sizes) if p <= s), len(sizes) - 1)
        alpha = times[index] * p / sizes[index]
    elif p <= sizes[0]:
        alpha = times[0]
    else:
        i = next((i for i in range(1, len(sizes)) if p <= sizes[i]), len(sizes) - 1)
        alpha = times[i - 1] + (times[i] - times[i - 1]) * (p - sizes[i - 1]) / (
            sizes[i] - sizes[i - 1]
        )
    steps = o - 1
    context = steps * p + steps * (steps - 1) / 2
    runtime = alpha + fit.beta_s * steps + fit.beta_per_context_token_s * context
    return runtime + (fit.overhead_s or 0.0)


def main() -> None:
    fits = fit_measurements(catalog.megatron_a100_measurements(), "default")
    denoised = import_helm_table(catalog.helm_table("denoised"), method="denoised")
    # Give the denoised fits the profile names so that both columns are computed for every row.
    denoised_fits = {
        model: denoised[helm].model_copy(update={"model": model})
        for model, helm in zip(fits, list(denoised) * 2, strict=False)
    }
    rng = np.random.default_rng(0)
    models = np.array(sorted(fits))
    names = models[rng.integers(0, models.size, ROWS)]
    p = rng.integers(1, 4096, ROWS)
    o = rng.integers(1, 512, ROWS)
    runtime = rng.random(ROWS) * 5 + 0.05
    table = RequestTable.from_columns(names, p, o, runtime)

    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = convert_requests(table, [fits, denoised_fits])
        best = min(best, time.perf_counter() - start)

    sample = rng.choice(ROWS, NAIVE_SAMPLE, replace=False)
    start = time.perf_counter()
    naive = [
        (
            naive_runtime(fits[str(names[i])], int(p[i]), int(o[i])),
            naive_runtime(denoised_fits[str(names[i])], int(p[i]), int(o[i])),
        )
        for i in sample
    ]
    naive_s = (time.perf_counter() - start) * ROWS / NAIVE_SAMPLE
    ours = np.column_stack(
        [
            result.columns["idealized_runtime_s"][sample],
            result.columns["denoised_runtime_s"][sample],
        ]
    )
    assert np.allclose(ours, np.array(naive), rtol=1e-9), "vectorized and naive results differ"

    print(
        f"{ROWS:,} requests, {models.size} models, 3 output columns (idealized, denoised, "
        "discrepancy)"
    )
    print(f"{'implementation':<38}{'seconds':>10}{'rows/s':>14}")
    print(f"{'ours (vectorized per model)':<38}{best:>10.3f}{ROWS / best:>14,.0f}")
    label = f"naive per-row loop (x{ROWS // NAIVE_SAMPLE} of {NAIVE_SAMPLE:,})"
    print(f"{label:<38}{naive_s:>10.3f}{ROWS / naive_s:>14,.0f}")
    print(f"speed-up: {naive_s / best:.0f}x   target < 2 s: {'met' if best < 2 else 'MISSED'}")


PANDAS_SCRIPT = """
import sys
import numpy as np, pandas as pd, pyarrow as pa, pyarrow.csv as pacsv
from idealized_runtime.cost_model import predict_runtime, read_fit_file
source, fit_path, output = sys.argv[1:4]
fits = read_fit_file(fit_path)
frame = pd.read_csv(source, engine="pyarrow")
out = np.full(len(frame), np.nan)
for model, rows in frame.groupby("model").indices.items():
    out[rows] = predict_runtime(
        fits[model], frame["num_prompt_tokens"].to_numpy()[rows],
        frame["num_output_tokens"].to_numpy()[rows])
frame["idealized_runtime_s"] = out
frame["runtime_discrepancy_s"] = frame["runtime_s"] - out
pacsv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), output)
"""

POLARS_SCRIPT = """
import sys
import numpy as np, polars as pl
from idealized_runtime.cost_model import predict_runtime, read_fit_file
source, fit_path, output = sys.argv[1:4]
fits = read_fit_file(fit_path)
frame = pl.read_csv(source)
models = frame["model"].to_numpy()
p, o = frame["num_prompt_tokens"].to_numpy(), frame["num_output_tokens"].to_numpy()
out = np.full(len(frame), np.nan)
for model in np.unique(models):
    rows = models == model
    out[rows] = predict_runtime(fits[model], p[rows], o[rows])
frame = frame.with_columns(pl.Series("idealized_runtime_s", out))
frame = frame.with_columns((pl.col("runtime_s") - pl.col("idealized_runtime_s")).alias(
    "runtime_discrepancy_s"))
frame.write_csv(output)
"""


# A small launcher runs each command: a child forked straight from this (large) process would
# count this process's pages in its peak RSS.
LAUNCHER = (
    "import resource, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "elapsed = time.perf_counter() - start\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(code, elapsed, peak)\n"
)


def timed_process(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one command in its own process."""
    result = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *command], capture_output=True, text=True, check=False
    )
    code, elapsed, peak_kb = result.stdout.split()
    if code != "0" or result.returncode:
        raise SystemExit(f"{command[:4]} failed: {result.stderr[-500:]}")
    return float(elapsed), int(peak_kb) / 1024


GENERATE_CHUNK_ROWS = 1_000_000


def write_request_csv(path: Path, models: np.ndarray, rows: int) -> None:
    """A request CSV of ``rows`` rows, written chunk by chunk (memory stays flat at any size)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(1)
    schema = pa.schema(
        [
            ("model", pa.string()),
            ("num_prompt_tokens", pa.int64()),
            ("num_output_tokens", pa.int64()),
            ("runtime_s", pa.float64()),
        ]
    )
    plain = pacsv.WriteOptions(quoting_style="none")  # as pandas and most tools write it
    with pacsv.CSVWriter(str(path), schema, write_options=plain) as writer:
        for start in range(0, rows, GENERATE_CHUNK_ROWS):
            count = min(GENERATE_CHUNK_ROWS, rows - start)
            columns = [
                models[rng.integers(0, models.size, count)],
                rng.integers(1, 4096, count),
                rng.integers(0, 512, count),
                np.round(rng.random(count) * 5 + 0.05, 4),
            ]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))


def end_to_end(rows: int, repeats: int, only_ours: bool = False) -> None:
    from idealized_runtime.cost_model.fitting.fit_files import write_fit_file

    fits = fit_measurements(catalog.megatron_a100_measurements(), "default")
    models = np.array(sorted(fits))
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        source, fit_path = work / "requests.csv", work / "fits.json"
        write_fit_file(fits, fit_path)
        write_request_csv(source, models, rows)
        size_mb = source.stat().st_size / 1e6
        scripts = {} if only_ours else {"pandas + pyarrow script": PANDAS_SCRIPT}
        try:
            import polars  # noqa: F401

            if not only_ours:
                scripts["polars script"] = POLARS_SCRIPT
        except ImportError:
            pass
        commands = {
            "idealized-runtime convert": [
                sys.executable,
                "-m",
                "idealized_runtime",
                "convert",
                str(source),
                "--fit",
                str(fit_path),
                "-o",
                str(work / "ours.csv"),
            ],
        }
        for name, script in scripts.items():
            path = work / f"reference_{name.split()[0]}.py"
            path.write_text(script)
            commands[name] = [sys.executable, str(path), str(source), str(fit_path),
                              str(work / f"{name.split()[0]}.csv")]  # fmt: skip
        results = {}
        for name, command in commands.items():
            runs = [timed_process(command) for _ in range(repeats)]
            results[name] = (min(r[0] for r in runs), max(r[1] for r in runs))
        if only_ours:
            with (work / "ours.csv").open("rb") as handle:
                written = sum(
                    chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 24), b"")
                )
            assert written == rows + 1, f"convert wrote {written - 1:,} rows of {rows:,}"
        else:
            import pandas as pd

            ours = pd.read_csv(work / "ours.csv")["idealized_runtime_s"].to_numpy()
            reference = pd.read_csv(work / "pandas.csv")["idealized_runtime_s"].to_numpy()
            assert np.allclose(ours, reference, rtol=1e-12), "ours and the pandas script differ"
    print()
    print(f"end to end: convert a {rows:,}-row CSV ({size_mb:,.0f} MB), best of {repeats}")
    if only_ours:
        seconds, rss = results["idealized-runtime convert"]
        print(f"{'command':<30}{'seconds':>10}{'rows/s':>14}{'peak RSS MB':>14}")
        print(
            f"{'idealized-runtime convert':<30}{seconds:>10.1f}{rows / seconds:>14,.0f}{rss:>14.0f}"
        )
        print(f"target: constant memory, <= 1024 MB: {'met' if rss <= 1024 else 'MISSED'}")
        return
    print(f"{'command':<30}{'seconds':>10}{'peak RSS MB':>14}{'time vs pandas':>16}")
    base = results["pandas + pyarrow script"][0]
    for name, (seconds, rss) in results.items():
        print(f"{name:<30}{seconds:>10.2f}{rss:>14.0f}{seconds / base:>15.2f}x")
    ratio = results["idealized-runtime convert"][0] / base
    rss = results["idealized-runtime convert"][1]
    verdict = "met" if ratio <= 1.2 and rss <= 350 else "MISSED"
    print(f"target: within 1.2x of pandas, <= 350 MB: {verdict} ({ratio:.2f}x, {rss:.0f} MB)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=ROWS, help="rows of the end-to-end file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-compute", action="store_true", help="end-to-end part only")
    parser.add_argument(
        "--only-ours",
        action="store_true",
        help="time our convert alone (no in-memory reference scripts): for files of any size, "
        "e.g. --rows 50000000 --repeats 1",
    )
    arguments = parser.parse_args()
    if not (arguments.skip_compute or arguments.only_ours):
        main()
    end_to_end(arguments.rows, arguments.repeats, arguments.only_ours)
