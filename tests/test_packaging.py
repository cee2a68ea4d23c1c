"""The wheel built from a clean checkout ships every package and data file, under one name.

Built once per session from the tracked files alone (what a fresh clone holds), without build
isolation so that it runs offline; `.ci/run` also builds it the standard way and installs it
into a fresh virtual environment for a smoke run of the CLI and the service.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "idealized_runtime"
# Repository folder -> the name it installs under (setup.py).
MAPPED = {
    "idealized_runtime": NAMESPACE,
    "cost_model": f"{NAMESPACE}/cost_model",
    "local_runner": f"{NAMESPACE}/local_runner",
    "api": f"{NAMESPACE}/api",
    "data": f"{NAMESPACE}/data",
}


def _tracked_files() -> list[str]:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a copy of the tracked files (a clean checkout, uncommitted edits included)."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"
    for name in _tracked_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    command += ["-q", "-w", str(base / "dist"), str(source)]
    subprocess.run(command, check=True, timeout=300, capture_output=True)
    (built,) = (base / "dist").glob("*.whl")
    return built


def test_wheel_ships_every_tracked_package_file_under_one_name(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for name in _tracked_files():
        folder, _, rest = name.partition("/")
        if folder in MAPPED and rest:
            expected.add(f"{MAPPED[folder]}/{rest}")
    missing = sorted(expected - names)
    assert not missing, f"{len(missing)} tracked files missing from the wheel: {missing[:20]}"
    top_level = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert top_level == {NAMESPACE}
    # The data that once went missing: the importers and the reference stacks.
    assert f"{NAMESPACE}/data/stacks/pytorch-compiled.json" in names
    assert f"{NAMESPACE}/data/reference/megatron_a100_runtimes.csv" in names
    assert any(name.startswith(f"{NAMESPACE}/timing/importers/") for name in names)
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)


def test_installed_wheel_runs_from_its_own_files(wheel: Path, tmp_path: Path) -> None:
    """Installed (not editable) into a folder of its own: the package imports from there, finds
    its data and answers a command that reads a stack file."""
    site = tmp_path / "site"
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    command += ["--target", str(site), str(wheel)]
    subprocess.run(command, check=True, timeout=300, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = (
        "import idealized_runtime, idealized_runtime.data, idealized_runtime.cost_model as c;"
        "print(idealized_runtime.__file__); print(c.read_fit_file.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(str(site))
    stacks = subprocess.run(
        [sys.executable, "-m", "idealized_runtime", "stacks"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert stacks.returncode == 0, stacks.stderr
    assert "pytorch-compiled" in stacks.stdout
