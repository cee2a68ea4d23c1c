"""profile: grids, layer-sampling arithmetic, resumability after SIGKILL, CLI errors, and the CSV
is readable by the cost model's reader."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.architectures import architecture_from_hf_config
from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.errors import InputError
from idealized_runtime.local_runner.grids import GridPoint, make_grid
from idealized_runtime.local_runner.layer_sampling import extrapolate_layers, representative_sample
from idealized_runtime.local_runner.profile import check_profile, profile_grid
from idealized_runtime.local_runner.profile_files import CSV_COLUMNS
from idealized_runtime.local_runner.settings import ProfileSettings
from idealized_runtime.local_runner.timer import Timing
from tests.servers import cli_command
from tests.test_architectures import TINY


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_helm_grid_has_papers_prompt_sizes_and_long_context() -> None:
    llama = get_architecture("llama-3.1-8b")
    points = make_grid("helm", llama, max_prompt_tokens=16384)
    prompts = sorted({p.num_prompt_tokens for p in points})
    assert prompts[:3] == [1, 16, 32] and 1920 in prompts and 2048 in prompts
    assert prompts[-3:] == [4096, 8192, 16384]
    assert len([p for p in points if p.num_prompt_tokens == 512]) == 10
    gpt2 = make_grid("helm", get_architecture("gpt2-124m"))  # 1024 context
    assert max(p.num_prompt_tokens + p.num_output_tokens - 1 for p in gpt2) <= 1024


def test_grid_beyond_context_is_an_input_error() -> None:
    with pytest.raises(InputError, match="exceeds the context length"):
        make_grid("helm", get_architecture("tiny-gpt2"), max_prompt_tokens=4096)
    with pytest.raises(InputError, match="unknown grid"):
        make_grid("huge", get_architecture("tiny-gpt2"))


def test_two_depth_extrapolation_is_exact_for_linear_costs() -> None:
    # t(k) = 0.5 (embedding/head) + 0.1 k: depths 2 and 4 must give exactly t(32) = 3.7.
    shallow, deep = Timing(0.7, 0.0, 0.07, 3), Timing(0.9, 0.0, 0.09, 3)
    result = extrapolate_layers(shallow, deep, 2, 4, 32)
    assert result.runtime_s == pytest.approx(3.7)
    assert result.ttft_s == pytest.approx(0.37)
    # HELM's proportional rule would have said 0.9 * 8 = 7.2.
    assert extrapolate_layers(deep, deep, 4, 4, 32).runtime_s == pytest.approx(7.2)


def _layer_timer(per_layer_s: dict[int, float], fixed_s: float = 0.01):
    """A timing function for ``profile_grid(timer=...)``: runtime = fixed + per-layer cost of
    the active layers (per depth: injected noise), TTFT a tenth of it; no clock involved."""
    calls: list[tuple[int, GridPoint]] = []

    def timer(generator, point: GridPoint, *, repeats: int, warmup: int) -> Timing:
        depth = generator.model.active_layers
        calls.append((depth, point))
        runtime = fixed_s + per_layer_s[depth] * depth * point.num_output_tokens
        return Timing(runtime, 0.0, runtime / 10, repeats)

    timer.calls = calls  # type: ignore[attr-defined]
    return timer


def test_profile_writes_csv_meta_and_sampled_layers(tmp_path: Path) -> None:
    arch = get_architecture("tiny-llama").model_copy(update={"num_layers": 6})
    out = tmp_path / "m.csv"
    points = [GridPoint(8, 2), GridPoint(1, 1), GridPoint(8, 2)]
    timer = _layer_timer({2: 0.001, 4: 0.001})  # exactly linear in the layer count
    settings = ProfileSettings(layers=4, repeats=1, warmup=0)
    profile_grid(arch, points, out, settings, progress=False, timer=timer)
    rows = _rows(out)
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(r["num_prompt_tokens"], r["num_output_tokens"]) for r in rows] == [
        ("1", "1"),
        ("8", "2"),
    ]
    assert [depth for depth, _ in timer.calls] == [4, 2, 4, 2]  # deep, then shallow, per point
    # t(6) = 0.01 + 0.001 * 6 * o, recovered exactly by the two-depth rule.
    assert [float(r["runtime_s"]) for r in rows] == pytest.approx([0.016, 0.022])
    assert {r["extrapolation"] for r in rows} == {"two_depth"}
    meta = json.loads((tmp_path / "m.csv.meta.json").read_text())
    assert meta["stack"]["dtype"] == "float32" and meta["stack"]["hardware"] == "cpu"
    assert meta["layer_sampling"]["profiled_layers"] == [2, 4]
    # Readable by the cost model's measurement reader (what `idealized-runtime fit` uses).
    reader = pytest.importorskip("idealized_runtime.cost_model.fitting.measurements_io")
    measurements = reader.read_measurements(out)
    assert len(measurements) == 2 and all(m.runtime_s > 0 for m in measurements)


def test_noisy_shallow_timing_falls_back_to_proportional_and_stays_positive(
    tmp_path: Path,
) -> None:
    # The failure seen on a loaded CPU: the 2-layer run took longer than the 4-layer run, so
    # the two-depth line had a negative slope and extrapolated to -0.00146 s.
    arch = get_architecture("tiny-llama").model_copy(update={"num_layers": 32})
    out = tmp_path / "m.csv"
    timer = _layer_timer({2: 0.004, 4: 0.0005}, fixed_s=0.0)
    settings = ProfileSettings(layers=4, repeats=1, warmup=0)
    profile_grid(arch, [GridPoint(1, 1)], out, settings, progress=False, timer=timer)
    (row,) = _rows(out)
    assert row["extrapolation"] == "proportional"
    assert float(row["runtime_s"]) == pytest.approx(0.0005 * 4 * 32 / 4)
    assert float(row["ttft_s"]) > 0


def test_unsampled_rows_say_none_and_a_non_positive_timing_is_never_written(
    tmp_path: Path,
) -> None:
    arch = get_architecture("tiny-llama")
    out = tmp_path / "m.csv"

    def steady(_generator, _point, *, repeats: int, warmup: int) -> Timing:
        return Timing(0.002, 0.0, 0.001, repeats)

    def broken_clock(_generator, _point, *, repeats: int, warmup: int) -> Timing:
        return Timing(0.0, 0.0, 0.0, repeats)

    settings = ProfileSettings(repeats=1, warmup=0)
    profile_grid(arch, [GridPoint(1, 1)], out, settings, progress=False, timer=steady)
    assert _rows(out)[0]["extrapolation"] == "none"
    broken = tmp_path / "broken.csv"
    with pytest.raises(RuntimeError, match="non-positive timing"):
        profile_grid(arch, [GridPoint(1, 1)], broken, settings, progress=False, timer=broken_clock)
    assert _rows(broken) == []  # header only


_seconds = st.floats(min_value=1e-7, max_value=10.0, allow_nan=False)


@given(
    shallow=st.tuples(_seconds, _seconds),
    deep=st.tuples(_seconds, _seconds),
    k2=st.integers(2, 64),
    extra=st.integers(0, 200),
)
def test_extrapolation_of_positive_timings_is_positive_and_not_below_the_deep_timing(
    shallow: tuple[float, float], deep: tuple[float, float], k2: int, extra: int
) -> None:
    k1 = max(1, k2 // 2)
    low = Timing(shallow[0], 0.0, shallow[1], 3)
    high = Timing(deep[0], 0.0, deep[1], 3)
    result = extrapolate_layers(low, high, k1, k2, k2 + extra)
    assert result.runtime_s > 0 and result.ttft_s > 0
    assert result.runtime_s >= high.runtime_s * (1 - 1e-12)
    assert result.extrapolation in ("two_depth", "proportional")
    if high.runtime_s < low.runtime_s:
        assert result.extrapolation == "proportional"


def test_killed_profile_resumes_without_duplicates(tmp_path: Path) -> None:
    out = tmp_path / "m.csv"
    args = cli_command(
        "profile", "--arch", "tiny-llama", "--grid", "quick", "--repeats", "4",
        "--warmup", "1", "--no-progress", "-o", str(out),
    )  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if out.exists() and out.read_text().count("\n") >= 4:  # header + 3 points
                break
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    first_run = _rows(out)
    assert len(first_run) >= 3
    with out.open("a") as handle:  # as if killed in the middle of writing a row
        handle.write("tiny-llama,128,16,1,0.0")
    rerun = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert rerun.returncode == 0, rerun.stderr
    rows = _rows(out)
    keys = [(r["num_prompt_tokens"], r["num_output_tokens"], r["batch_size"]) for r in rows]
    assert len(keys) == len(set(keys)) == 12
    assert rows[: len(first_run)] == first_run  # finished rows untouched
    assert all(float(r["runtime_s"]) > 0 for r in rows)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arch", "no-such-model"], "unknown architecture 'no-such-model'"),
        (["--arch", "tiny-llama", "--tp", "3"], "does not divide num_heads=4"),
        (["--arch", "tiny-gpt2", "--max-prompt-tokens", "9000"], "exceeds the context length"),
        (["--arch", "tiny-gpt2", "--layers", "5"], "--layers must be in [1, 2]"),
        (["--arch", "tiny-gpt2", "--grid", "enormous"], "unknown grid"),
        (["--arch", "tiny-gpt2", "--dtype", "int8"], "--dtype must be"),
        (["--arch", "tiny-gpt2", "--max-prompt-tokens", "0"], "--max-prompt-tokens must be >= 1"),
    ],
)
def test_cli_errors_are_one_line_exit_2_nothing_written(
    tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "m.csv"
    result = subprocess.run(
        cli_command("profile", *args, "-o", str(out)), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_cli_unmappable_hf_config(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    result = subprocess.run(
        cli_command("profile", "--arch", str(config), "-o", str(tmp_path / "m.csv")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "config.json" in result.stderr and "unsupported model_type 't5'" in result.stderr
    assert not (tmp_path / "m.csv").exists()


def test_cli_refuses_to_resume_with_other_settings(tmp_path: Path) -> None:
    out = tmp_path / "m.csv"
    base = ["profile", "--arch", "tiny-gpt2", "--max-prompt-tokens", "16", "--repeats", "1"]
    first = subprocess.run(cli_command(*base, "--no-progress", "-o", str(out)), capture_output=True)
    assert first.returncode == 0
    before = out.read_text()
    second = subprocess.run(
        cli_command(*base, "--dtype", "bfloat16", "-o", str(out)), capture_output=True, text=True
    )
    assert second.returncode == 2 and "different settings (dtype)" in second.stderr
    assert out.read_text() == before


def test_output_paths_that_cannot_be_written_are_input_errors(tmp_path: Path) -> None:
    arch = get_architecture("tiny-gpt2")
    points = [GridPoint(1, 1)]
    (tmp_path / "a_file").write_text("x")
    for output, message in (
        (tmp_path, "is a folder"),
        (tmp_path / "a_file" / "m.csv", "a_file is a file"),
        (tmp_path / "a_file" / "deeper" / "m.csv", "a_file is a file"),
    ):
        with pytest.raises(InputError, match=message):
            profile_grid(arch, points, output, ProfileSettings(repeats=1, warmup=0), progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]
    # A folder that does not exist yet is created (as every output of the CLI).
    check_profile(arch, points, tmp_path / "new" / "m.csv", ProfileSettings(repeats=1, warmup=0))


def _settings_as_written_before_profile_settings(arch, **changes) -> dict:
    """The ``settings`` of a .meta.json as profile wrote them when its settings travelled as
    loose arguments: keys and order spelled out here, not derived from ``ProfileSettings``."""
    settings = {
        "architecture": arch.model_dump(mode="json"),
        "device": "cpu",
        "dtype": "float32",
        "tensor_parallel_size": 1,
        "layers": None,
        "repeats": 1,
        "warmup": 0,
        "grid": [
            {"num_prompt_tokens": 1, "num_output_tokens": 1, "batch_size": 1},
            {"num_prompt_tokens": 8, "num_output_tokens": 2, "batch_size": 1},
        ],
    }
    return {**settings, **changes}


@pytest.mark.parametrize(
    ("old", "settings"),
    [
        ({"layers": 4}, ProfileSettings(layers=4, repeats=1, warmup=0)),
        # Only quantized runs recorded their precision, after the grid.
        (
            {"dtype": "bfloat16", "weights": "int8", "kv_cache": "fp8"},
            ProfileSettings(dtype="bfloat16", weights="int8", kv_cache="fp8", repeats=1, warmup=0),
        ),
    ],
)
def test_metadata_written_before_profile_settings_still_resumes(
    tmp_path: Path, old: dict, settings: ProfileSettings
) -> None:
    arch = get_architecture("tiny-llama").model_copy(update={"num_layers": 6})
    out = tmp_path / "m.csv"
    done_row = f"{arch.name},1,1,1,0.002,0.0,0.001,1,none"
    out.write_text(",".join(CSV_COLUMNS) + "\n" + done_row + "\n")
    recorded = _settings_as_written_before_profile_settings(arch, **old)
    meta_file = tmp_path / "m.csv.meta.json"
    started = "2026-01-01T00:00:00+00:00"
    meta_file.write_text(json.dumps({"settings": recorded, "started_at": started}))

    def steady(_generator, _point, *, repeats: int, warmup: int) -> Timing:
        return Timing(0.002, 0.0, 0.001, repeats)

    points = [GridPoint(8, 2), GridPoint(1, 1)]
    profile_grid(arch, points, out, settings, progress=False, timer=steady)
    lines = out.read_text().splitlines()
    assert lines[1] == done_row and [line.split(",")[1:3] for line in lines[2:]] == [["8", "2"]]
    meta = json.loads(meta_file.read_text())
    assert meta["settings"] == recorded and list(meta["settings"]) == list(recorded)
    assert meta["started_at"] == started and len(meta["resumed_at"]) == 1
    # The comparison still bites: other settings against the same file are refused.
    with pytest.raises(InputError, match=r"different settings \(repeats\)"):
        check_profile(arch, points, out, replace(settings, repeats=2))


def test_stale_metadata_without_its_csv_is_replaced(tmp_path: Path) -> None:
    out = tmp_path / "m.csv"
    (tmp_path / "m.csv.meta.json").write_text("{not json")  # left by an earlier, other run
    arch = get_architecture("tiny-gpt2")
    profile_grid(arch, [GridPoint(1, 1)], out, ProfileSettings(repeats=1), progress=False)
    meta = json.loads((tmp_path / "m.csv.meta.json").read_text())
    assert meta["resumed_at"] == [] and len(_rows(out)) == 1


def test_cli_tp_resume_mismatch_is_refused_before_torchrun(tmp_path: Path) -> None:
    out = tmp_path / "m.csv"
    base = ["profile", "--arch", "tiny-gpt2", "--max-prompt-tokens", "1", "--repeats", "1"]
    first = subprocess.run(cli_command(*base, "--no-progress", "-o", str(out)), capture_output=True)
    assert first.returncode == 0
    second = subprocess.run(
        cli_command(*base, "--tp", "2", "-o", str(out)), capture_output=True, text=True
    )
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "different settings (tensor_parallel_size)" in lines[0]


def test_layer_sampling_must_cover_typical_layers(tmp_path: Path) -> None:
    deepseek = architecture_from_hf_config(TINY["deepseek_v3"], name="ds")  # 1 dense + 2 MoE
    gemma3 = architecture_from_hf_config(TINY["gemma3_text"], name="g3")  # 2 sliding + 1 full
    assert [k for k in range(1, 3) if representative_sample(deepseek, k)] == [2]
    assert [k for k in range(1, 7) if representative_sample(gemma3, k)] == [5, 6]
    points = [GridPoint(4, 2)]
    check_profile(deepseek, points, tmp_path / "ds.csv", ProfileSettings(layers=2))
    with pytest.raises(InputError, match=r"--layers 4 does not sample .g3. evenly.*one of 5, 6"):
        check_profile(gemma3, points, tmp_path / "g3.csv", ProfileSettings(layers=4))
    assert list(tmp_path.iterdir()) == []


def test_new_family_profiles_from_a_config_json_with_layer_sampling(tmp_path: Path) -> None:
    config = tmp_path / "gpt-oss-tiny" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(TINY["gpt_oss"]))
    out = tmp_path / "m.csv"
    args = ["profile", "--arch", str(config), "--layers", "3", "--max-prompt-tokens", "16"]
    result = subprocess.run(
        cli_command(*args, "--repeats", "1", "--no-progress", "-o", str(out)),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    rows = _rows(out)
    assert rows and {row["model"] for row in rows} == {"gpt-oss-tiny"}
    sampling = json.loads(out.with_name("m.csv.meta.json").read_text())["layer_sampling"]
    assert sampling["total_layers"] == 4 and sampling["profiled_layers"] == [1, 3]
