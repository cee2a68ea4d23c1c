"""`idealized-runtime fit` and `convert` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from idealized_runtime.core import catalog
from tests.servers import run_cli

HEADER = "model,num_prompt_tokens,num_output_tokens,runtime_s\n"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli")
    shutil.copy(catalog.data_path("reference", "megatron_a100_runtimes.csv"), path / "grid.csv")
    return path


def assert_input_error(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for part in parts:
        assert part in lines[0], lines[0]


def test_fit_and_convert_csv_and_jsonl(workdir: Path) -> None:
    fitted = run_cli("fit", "grid.csv", "-o", "fit.json", cwd=workdir)
    assert fitted.returncode == 0, fitted.stderr
    assert "gptj_6b" in fitted.stdout and "default" in fitted.stdout
    fits = json.loads((workdir / "fit.json").read_text())
    assert fits["format"] == "idealized-runtime/fit" and len(fits["fits"]) == 13

    helm = run_cli(
        "fit", "grid.csv", "-o", "helm.json", "--method", "helm", "--format", "helm", cwd=workdir
    )
    assert helm.returncode == 0, helm.stderr
    assert json.loads((workdir / "helm.json").read_text())["gptj_6b"]["runtime_per_output_token"]

    (workdir / "req.csv").write_text(HEADER + "gptj_6b,100,10,0.5\nbloom,2000,3,\n")
    converted = run_cli("convert", "req.csv", "--fit", "fit.json", "-o", "out.csv", cwd=workdir)
    assert converted.returncode == 0, converted.stderr
    lines = (workdir / "out.csv").read_text().splitlines()
    assert lines[0].endswith("runtime_s,idealized_runtime_s,runtime_discrepancy_s")
    assert len(lines) == 3

    requests = [
        {"model": "gptj_6b", "num_prompt_tokens": 100, "num_output_tokens": 10, "id": 1},
        {"model": "bloom", "ok": False},
        {"model": "openai/davinci", "num_prompt_tokens": 50, "num_output_tokens": 2, "id": 3},
    ]
    (workdir / "req.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    denoised = str(catalog.data_path("reference", "inference_denoised_runtimes.json"))
    converted = run_cli(
        "convert",
        "req.jsonl",
        "--fit",
        "fit.json",
        "--fit",
        denoised,
        "-o",
        "out.jsonl",
        cwd=workdir,
    )
    assert converted.returncode == 0, converted.stderr
    assert "skipped 1 failed" in converted.stderr
    out = [json.loads(line) for line in (workdir / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in out] == [1, 3]
    assert out[0]["idealized_runtime_s"] > 0 and out[0]["denoised_runtime_s"] is None
    assert out[1]["denoised_runtime_s"] > 0 and out[1]["idealized_runtime_s"] is None


def test_fit_with_helm_rounding_writes_helms_table(workdir: Path) -> None:
    fitted = run_cli(
        "fit", "grid.csv", "-o", "rounded.json", "--method", "helm", "--helm-rounding",
        "--format", "helm", cwd=workdir,
    )  # fmt: skip
    assert fitted.returncode == 0, fitted.stderr
    written = json.loads((workdir / "rounded.json").read_text())
    shipped = catalog.helm_table("idealized")
    profile_of = catalog.helm_model_shapes()
    compared = set()
    for helm_name, entry in shipped.items():
        grid_name = profile_of[helm_name].removeprefix("megatron-").replace("-", "_")
        if grid_name != "mt_nlg":  # the file holds its 35 profiled layers (HELM: x3)
            assert written[grid_name] == entry, helm_name
            compared.add(grid_name)
    assert len(compared) == 8
    assert_input_error(
        run_cli("fit", "grid.csv", "-o", "x.json", "--helm-rounding", cwd=workdir),
        "--helm-rounding",
        "'default'",
    )


def test_convert_reads_helms_older_table_form(workdir: Path) -> None:
    entry = catalog.helm_table("idealized")["openai/davinci"]
    older = {
        "openai/davinci": {
            "runtime_per_output_token": entry["runtime_per_output_token"],
            "runtime_for_input_tokens": entry["runtime_for_prompt_tokens"],
        }
    }
    (workdir / "inference_efficiency.json").write_text(json.dumps(older))
    (workdir / "old_req.csv").write_text(
        HEADER + "openai/davinci,100,0,\nopenai/davinci,100,5,\nopenai/davinci,4000,1,\n"
    )
    converted = run_cli(
        "convert", "old_req.csv", "--fit", "inference_efficiency.json", "-o", "old_out.csv",
        cwd=workdir,
    )  # fmt: skip
    assert converted.returncode == 0, converted.stderr
    lines = (workdir / "old_out.csv").read_text().splitlines()[1:]
    idealized = [float(line.split(",")[4]) for line in lines]
    alphas, beta = entry["runtime_for_prompt_tokens"], entry["runtime_per_output_token"]
    # Unscaled inside the grid (p = 100 costs what 128 costs); past 1920, scaled.
    assert idealized == pytest.approx(
        [alphas["128"], alphas["128"] + 4 * beta, alphas["1920"] * 4000 / 1920]
    )


@pytest.mark.parametrize(
    "body, parts",
    [
        ("a,1,1\n", ["bad.csv", "column 'runtime_s'", "missing required column"]),
        (HEADER, ["bad.csv", "no data rows"]),
        ("", ["bad.csv", "empty file"]),
        (HEADER + "a,1,1,0.1\na,x,2,0.2\n", ["bad.csv", "row 2", "'num_prompt_tokens'"]),
        (HEADER + "a,1,1.5,0.1\n", ["bad.csv", "row 1", "'num_output_tokens'"]),
        (HEADER + "a,-4,1,0.1\n", ["bad.csv", "row 1", "'num_prompt_tokens'"]),
        (HEADER + "a,1,1,NaN\n", ["bad.csv", "row 1", "'runtime_s'"]),
        (HEADER + "a,1,1,-0.1\n", ["bad.csv", "row 1", "'runtime_s'"]),
        (HEADER + "a,1,1,0.1\na,1,2,1e-300\n", ["bad.csv", "row 2", "'runtime_s'", "between"]),
        (HEADER + "a,1,1,1e300\n", ["bad.csv", "row 1", "'runtime_s'", "between"]),
    ],
)
def test_fit_bad_input_exits_2_without_output(workdir: Path, body: str, parts) -> None:
    text = (
        body
        if body.startswith(HEADER) or not body
        else "model,num_prompt_tokens,num_output_tokens\n" + body
    )
    (workdir / "bad.csv").write_text(text)
    out = workdir / "never.json"
    assert_input_error(run_cli("fit", "bad.csv", "-o", str(out), cwd=workdir), *parts)
    assert not out.exists()


def test_fit_bad_method_and_model_data(workdir: Path) -> None:
    out = workdir / "never.json"
    assert_input_error(
        run_cli("fit", "grid.csv", "-o", str(out), "--method", "magic", cwd=workdir),
        "unknown method 'magic'",
    )
    (workdir / "one.jsonl").write_text(
        json.dumps({"model": "m", "num_prompt_tokens": 4, "num_output_tokens": 3, "runtime_s": 1})
        + "\n"
    )
    assert_input_error(
        run_cli("fit", "one.jsonl", "-o", str(out), "--method", "helm", cwd=workdir),
        "one.jsonl",
        "num_output_tokens = 1",
    )
    assert not out.exists()


def test_convert_errors_exit_2_without_output(workdir: Path) -> None:
    run_cli("fit", "grid.csv", "-o", "fit.json", cwd=workdir)
    out = workdir / "never.csv"
    (workdir / "unknown.csv").write_text(HEADER + "gptj_6b,1,1,\nmystery,1,1,\n")
    assert_input_error(
        run_cli("convert", "unknown.csv", "--fit", "fit.json", "-o", str(out), cwd=workdir),
        "unknown.csv",
        "mystery",
        "column 'model'",
    )
    (workdir / "zero.jsonl").write_text(
        json.dumps({"model": "gptj_6b", "num_prompt_tokens": 0, "num_output_tokens": 1}) + "\n"
    )
    assert_input_error(
        run_cli("convert", "zero.jsonl", "--fit", "fit.json", "-o", str(out), cwd=workdir),
        "zero.jsonl",
        "row 1",
        "num_prompt_tokens",
    )
    (workdir / "notfit.json").write_text('{"hello": 1}')
    assert_input_error(
        run_cli("convert", "unknown.csv", "--fit", "notfit.json", "-o", str(out), cwd=workdir),
        "notfit.json",
        "not a fit file",
    )
    assert not out.exists()
    skipped = run_cli(
        "convert", "unknown.csv", "--fit", "fit.json", "-o", str(out), "--skip-unknown", cwd=workdir
    )
    assert skipped.returncode == 0, skipped.stderr
    assert "dropped 1 rows" in skipped.stderr
    assert len(out.read_text().splitlines()) == 2


def test_unwritable_outputs_are_one_line_errors(workdir: Path) -> None:
    (workdir / "a_folder.json").mkdir(exist_ok=True)
    (workdir / "a_folder.csv").mkdir(exist_ok=True)
    (workdir / "small.csv").write_text(HEADER + "m,1,1,0.1\nm,1,4,0.4\nm,8,1,0.2\nm,8,4,0.5\n")
    assert_input_error(
        run_cli("fit", "small.csv", "-o", "a_folder.json", cwd=workdir),
        "a_folder.json: cannot write (it is a folder)",
    )
    run_cli("fit", "small.csv", "-o", "small_fit.json", cwd=workdir)
    (workdir / "small_req.csv").write_text(HEADER + "m,3,3,\n")
    assert_input_error(
        run_cli("convert", "small_req.csv", "--fit", "small_fit.json", "-o", "a_folder.csv",
            cwd=workdir),
        "a_folder.csv: cannot write (it is a folder)",
    )  # fmt: skip
    assert sorted(p.name for p in workdir.iterdir() if p.name.startswith(".")) == []


def test_estimate_from_a_fit_bounds_token_counts(workdir: Path) -> None:
    (workdir / "small.csv").write_text(HEADER + "m,1,1,0.1\nm,1,4,0.4\nm,8,1,0.2\nm,8,4,0.5\n")
    assert run_cli("fit", "small.csv", "-o", "small_fit.json", cwd=workdir).returncode == 0
    ok = run_cli("estimate", "--fit", "small_fit.json", "--model", "m", "-p", "5", "-o", "3",
             cwd=workdir)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "extrapolated" not in ok.stdout
    # Past the largest profiled prompt the figures are extrapolated, and the answer says so.
    far = run_cli("estimate", "--fit", "small_fit.json", "--model", "m", "-p", "5000", "-o", "3",
                  "--json", cwd=workdir)  # fmt: skip
    assert far.returncode == 0, far.stderr
    assert json.loads(far.stdout)["notes"][0] == (
        "prompt beyond the fit's profiled sizes (up to 8 tokens): its runtime is extrapolated"
    )
    for p, o, message in (
        ("100000000", "3", "--prompt-tokens must be from 1 to 10000000, got 100000000"),
        ("5", "10000001", "--output-tokens must be from 0 to 10000000, got 10000001"),
        ("0", "3", "--prompt-tokens must be from 1 to 10000000, got 0"),
        ("5", "-1", "--output-tokens must be from 0 to 10000000, got -1"),
    ):
        assert_input_error(
            run_cli("estimate", "--fit", "small_fit.json", "--model", "m", "-p", p, "-o", o,
                cwd=workdir),
            message,
        )  # fmt: skip
    # 0 output tokens: a prompt-only request costs alpha(p) alone, as in HELM.
    zero = run_cli("estimate", "--fit", "small_fit.json", "--model", "m", "-p", "5", "-o", "0",
               "--json", cwd=workdir)  # fmt: skip
    assert zero.returncode == 0, zero.stderr
    result = json.loads(zero.stdout)
    assert result["runtime_s"] == pytest.approx(result["alpha_s"])
