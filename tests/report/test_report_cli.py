"""``report`` and ``bench`` commands: outputs, and one clear line for bad inputs."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from tests.servers import assert_refused_in_one_line, run_cli


def test_report_from_bundled_data_writes_html_markdown_csv(tmp_path: Path) -> None:
    result = run_cli("report", "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    html = (out / "index.html").read_text(encoding="utf-8")
    # Self-contained: no external scripts, styles or images.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<svg" in html and 'id="leaderboard-table"' in html
    assert "Methodology" in html and "a100-80gb" in html
    with (out / "models.csv").open(encoding="utf-8") as handle:
        models = {row["model"]: row for row in csv.DictReader(handle)}
    assert float(models["openai/davinci"]["idealized_runtime_s"]) > 0
    assert float(models["openai/davinci"]["accuracy"]) > 0
    assert "## Pareto frontier per scenario" in (out / "report.md").read_text(encoding="utf-8")


def test_report_from_empty_database_is_one_line_error(tmp_path: Path) -> None:
    from idealized_runtime.api.db import make_engine
    from idealized_runtime.api.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    result = run_cli("report", "--from", url, "-o", str(tmp_path / "out"))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("error:") and "nothing to report" in result.stderr
    assert not (tmp_path / "out" / "index.html").exists()


@pytest.mark.parametrize("source", ["sqlite:///{tmp}/missing.sqlite3", "{tmp}/not-a-folder-or-url"])
def test_report_from_missing_source_is_one_line_error(tmp_path: Path, source: str) -> None:
    result = run_cli("report", "--from", source.format(tmp=tmp_path), "-o", str(tmp_path / "o"))
    assert result.returncode == 2
    assert result.stderr.startswith("error:") and result.stderr.strip().count("\n") == 0


BAD_CONFIGS = {
    "malformed": ("models: [unclosed\n", "not valid YAML"),
    "no-models": ("hardware: cpu\n", "models"),
    "unknown-arch": ("models:\n  - architecture: no-such-model\n", "unknown architecture"),
    "unknown-field": ("models:\n  - architecture: tiny-llama\n    colour: red\n", "colour"),
    "bad-url": ("models:\n  - base_url: ftp://x\n    model: m\n", "http"),
    "bad-hardware": ("hardware: abacus\nmodels:\n  - architecture: tiny-llama\n", "abacus"),
    # Checked before anything runs (they used to fail the item later, or crash the run):
    "api-grid": (
        "models:\n  - base_url: http://127.0.0.1:9/v1\n    model: m\n    grid: helm\n",
        "models.0.grid",
    ),
    "device": ("device: gpu0\nmodels:\n  - architecture: tiny-llama\n", "device"),
    "layers": ("models:\n  - architecture: tiny-llama\n    layers: 99\n", "layers must be"),
    "float16-cpu": ("models:\n  - architecture: tiny-llama\n    dtype: float16\n", "float16"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bench_rejects_bad_config_with_one_line(tmp_path: Path, case: str) -> None:
    text, expected = BAD_CONFIGS[case]
    config = tmp_path / f"{case}.yaml"
    config.write_text(text, encoding="utf-8")
    assert_refused_in_one_line(
        run_cli("bench", str(config), "-o", str(tmp_path / "results")), expected
    )
    assert not (tmp_path / "results").exists()


def test_bench_missing_config(tmp_path: Path) -> None:
    result = run_cli("bench", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "no such benchmark file" in result.stderr


def test_bench_unreachable_endpoint_keeps_partial_results_and_resumes(tmp_path: Path) -> None:
    from tests.servers import free_port

    config = tmp_path / "bench.yaml"
    config.write_text(
        "grid: quick\nrepeats: 1\nwarmup: 0\nmodels:\n"
        "  - architecture: tiny-llama\n"
        f"  - base_url: http://127.0.0.1:{free_port()}/v1\n    model: tiny-llama\n"
        "    name: gone\n",
        encoding="utf-8",
    )
    results = tmp_path / "results"
    first = run_cli("bench", str(config), "-o", str(results), "--no-progress")
    assert first.returncode == 1
    last_line = first.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error:") and "unreachable" in last_line
    manifest = json.loads((results / "manifest.json").read_text(encoding="utf-8"))
    status = {item["name"]: item["status"] for item in manifest["items"]}
    assert status == {"local-tiny-llama": "done", "api-gone": "failed"}
    assert manifest["versions"]["idealized-runtime"] and manifest["host"]["cpu_count"]
    assert (results / "items/local-tiny-llama/fits-default.json").is_file()

    second = run_cli("bench", str(config), "-o", str(results), "--no-progress")
    assert second.returncode == 1
    assert "done (earlier run)" in second.stdout
    manifest = json.loads((results / "manifest.json").read_text(encoding="utf-8"))
    assert len(manifest["runs"]) == 2

    # The results folder feeds the report (beside the HELM reference data).
    report = run_cli("report", "--from", str(results), "-o", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    models = (tmp_path / "report" / "models.csv").read_text(encoding="utf-8")
    assert "tiny-llama" in models and "openai/davinci" in models


def test_example_bench_config_validates() -> None:
    from idealized_runtime.bench.config import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "examples" / "bench.yaml")
    assert {spec.kind for spec in config.models} == {"local", "api"}


def test_report_from_unreachable_database_is_one_line_error(tmp_path: Path) -> None:
    for url in ("postgresql+psycopg://u:secret@127.0.0.1:1/x", "nosuchdialect://host/db"):
        result = run_cli("report", "--from", url, "-o", str(tmp_path / "out"))
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error:") and "Traceback" not in result.stderr
        assert "secret" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_demo_fails_fast_on_an_unusable_database(tmp_path: Path) -> None:
    from idealized_runtime.core.errors import InputError
    from idealized_runtime.demo import run_demo

    with pytest.raises(InputError, match="cannot use the database"):
        run_demo(tmp_path, "postgresql+psycopg://u:secret@127.0.0.1:1/x", progress=False)
    assert not (tmp_path / "bench").exists()  # nothing profiled before the database failed


def test_bench_marks_a_killed_run_on_resume(tmp_path: Path) -> None:
    from idealized_runtime.bench.config import load_config
    from idealized_runtime.bench.manifest import MANIFEST_NAME, Manifest

    config = load_config(Path(__file__).parents[2] / "examples" / "bench.yaml")
    stale = {"format": "idealized-runtime/bench", "runs": [{"status": "running"}], "items": []}
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(stale), encoding="utf-8")
    manifest = Manifest.open(tmp_path, config, Path("bench.yaml"))
    assert [run["status"] for run in manifest.data["runs"]] == ["killed"]


def test_bench_refuses_cuda_without_a_gpu(tmp_path: Path) -> None:
    import torch

    from idealized_runtime.bench.config import load_config
    from idealized_runtime.core.errors import InputError

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    config = tmp_path / "cuda.yaml"
    config.write_text("device: cuda\nmodels:\n  - architecture: tiny-llama\n", encoding="utf-8")
    with pytest.raises(InputError, match="no CUDA device"):
        load_config(config)


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (("report", "-o", "{file}"), "-o names the folder to write the report in"),
        (("bench", "{config}", "-o", "{file}", "--no-progress"), "-o names the folder"),
        (("demo", "--workdir", "{file}", "--no-progress"), "--workdir names the folder"),
        (
            ("plan", "--arch", "tiny-llama", "--hardware", "h100-sxm", "--prompt-tokens", "64",
             "--output-tokens", "8", "--no-verify", "--report", "{file}"),
            "--report names the folder to write plan.html in",
        ),
    ],
)  # fmt: skip
def test_a_file_where_a_folder_is_written_is_one_line(
    tmp_path: Path, command: tuple[str, ...], option: str
) -> None:
    """A file where the command writes its folder: one line before any work (the commands
    ended in a FileExistsError traceback, bench and demo after their first steps)."""
    taken = tmp_path / "taken"
    taken.write_text("mine\n")
    config = tmp_path / "bench.yaml"
    config.write_text(
        "name: t\nhardware: cpu\ndevice: cpu\nmodels:\n  - architecture: tiny-llama\n"
    )
    args = [part.format(file=taken, config=config) for part in command]
    assert_refused_in_one_line(run_cli(*args), f"{taken}: is a file; {option}")
    assert taken.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.yaml", "taken"]
