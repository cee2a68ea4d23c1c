"""guidellm and aiperf run for real against `serve-model` (tiny-llama, random weights, a BPE
tokenizer trained here), their result files imported with `import-results` and fitted with
`fit --method denoised`.

Both tools live in their own virtual environments (they bring their own dependencies): the tests
find them through IR_GUIDELLM and IR_AIPERF (the executables; `.ci/run` installs both) and skip
otherwise. Everything stays on 127.0.0.1 and nothing is downloaded: guidellm runs with
HF_HUB_OFFLINE=1; aiperf 0.13 looks a tokenizer up only in the hub cache when HF_HUB_OFFLINE is
set, so it runs without it, with the tokenizer given as a local folder.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.client_vs_guidellm import make_tokenizer
from tests.servers import cli_command, free_port, running_server

pytestmark = pytest.mark.peers

REQUESTS = 16
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def tool(variable: str) -> str:
    executable = os.environ.get(variable)
    if not executable:
        pytest.skip(f"{variable} is not set (the executable of the tool; see .ci/run)")
    if not Path(executable).is_file():
        pytest.skip(f"{variable}={executable} does not exist")
    return executable


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    if not (os.environ.get("IR_GUIDELLM") or os.environ.get("IR_AIPERF")):
        pytest.skip("neither IR_GUIDELLM nor IR_AIPERF is set (see .ci/run)")
    root = tmp_path_factory.mktemp("peers")
    tokenizer = make_tokenizer(root / "tokenizer", vocab_size=400)
    port = free_port()
    command = cli_command(
        "serve-model", "--arch", "tiny-llama", "--port", str(port),
        "--tokenizer", str(tokenizer / "tokenizer.json"),
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    with running_server(command, f"{base_url}/health", timeout_s=120, log_path=root / "server.log"):
        yield base_url, tokenizer


def run_tool(command: list[str], env: dict[str, str], log: Path, timeout: int) -> None:
    with log.open("wb") as handle:
        result = subprocess.run(
            command, env=env, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    if result.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        pytest.fail(f"{Path(command[0]).name} failed ({result.returncode}):\n" + "\n".join(tail))


def import_and_fit(result_file: Path, work: Path, source: str) -> tuple[pd.DataFrame, dict]:
    requests, fit = work / "requests.csv", work / "fit.json"
    imported = subprocess.run(
        cli_command("import-results", str(result_file), "-o", str(requests)),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert f"from {source} to" in imported.stderr
    fitted = subprocess.run(
        cli_command("fit", str(requests), "--method", "denoised", "-o", str(fit)),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert fitted.returncode == 0, fitted.stderr
    return pd.read_csv(requests), json.loads(fit.read_text())["fits"]


def check(frame: pd.DataFrame, fits: dict, source: str) -> None:
    assert len(frame) == REQUESTS
    assert frame["ok"].all() and (frame["source"] == source).all()
    assert set(frame["model"]) == {"tiny-llama"} and set(frame["load"]) == {"concurrency=2"}
    assert (frame["num_prompt_tokens"] > 1).all() and (frame["num_output_tokens"] >= 1).all()
    assert frame["num_output_tokens"].nunique() > 1  # lengths vary: beta is identifiable
    assert ((frame["ttft_s"] > 0) & (frame["ttft_s"] <= frame["runtime_s"])).all()
    (fit,) = fits.values()
    assert fit["method"] == "denoised" and fit["quality"]["n_points"] == REQUESTS
    assert fit["beta_s"] > 0


def test_guidellm_run_is_imported_and_fitted(served: tuple[str, Path], tmp_path: Path) -> None:
    guidellm = tool("IR_GUIDELLM")
    base_url, tokenizer = served
    out = tmp_path / "guidellm.json"
    command = [
        guidellm, "run",
        "--backend", f"kind=openai_http,target={base_url}",
        "--profile", "kind=concurrent,streams=2",
        "--constraint", f"kind=max_requests,count={REQUESTS}",
        "--data", "kind=synthetic_text,prompt_tokens=32,output_tokens=16,"
        "output_tokens_stdev=6,output_tokens_min=4,output_tokens_max=28",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--output", f"kind=json,path={out}",
        "--disable-console-interactive",
    ]  # fmt: skip
    run_tool(command, {**os.environ, **OFFLINE}, tmp_path / "guidellm.log", timeout=300)
    frame, fits = import_and_fit(out, tmp_path, "guidellm")
    check(frame, fits, "guidellm")


def test_aiperf_run_is_imported_and_fitted(served: tuple[str, Path], tmp_path: Path) -> None:
    aiperf = tool("IR_AIPERF")
    base_url, tokenizer = served
    out = tmp_path / "aiperf"
    command = [
        aiperf, "profile", "--model", "tiny-llama", "--url", base_url,
        "--endpoint-type", "chat", "--streaming", "--concurrency", "2",
        "--request-count", str(REQUESTS),
        "--prompt-input-tokens-mean", "32", "--prompt-input-tokens-stddev", "0",
        "--prompt-output-tokens-mean", "16", "--prompt-output-tokens-stddev", "6",
        "--tokenizer", str(tokenizer), "--use-server-token-count",
        "--extra-inputs", "ignore_eos:true",
        "--output-artifact-dir", str(out), "--ui", "none",
        "--no-server-metrics", "--no-gpu-telemetry",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE}
    run_tool(command, env, tmp_path / "aiperf.log", timeout=300)
    frame, fits = import_and_fit(out / "profile_export.jsonl", tmp_path, "aiperf")
    check(frame, fits, "aiperf")
