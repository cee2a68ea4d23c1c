"""HELM runs uploaded as an archive to the real service, fitted (denoised) and queried."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.api.conftest import Service
from tests.importers.test_helm_import import MODEL, instance, write_run


def helm_runs(root: Path) -> Path:
    suite = root / "benchmark_output" / "runs" / "v1"
    rng = np.random.default_rng(5)
    timed = []
    for k in range(60):
        p, o = int(rng.choice([64, 256, 1024])), int(rng.choice([0, 1, 8, 32, 64]))
        runtime = 0.05 + 0.0004 * p + 0.02 * max(o - 1, 0) + float(rng.exponential(0.01))
        timed.append(instance(f"s{k}", p, o, runtime))
    write_run(suite, "synthetic_efficiency:model=x",
              "helm.benchmark.scenarios.synthetic_efficiency_scenario.SyntheticEfficiencyScenario",
              timed)  # fmt: skip
    write_run(suite, "wikitext_103:model=x", "helm.benchmark.scenarios.wikitext_103.Wiki",
              [instance("w1", 900, 0, 0.45)])  # fmt: skip
    return root / "benchmark_output"


def tar_gz(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    return buffer.getvalue()


def zipped(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in folder.rglob("*"):
            archive.write(path, path.relative_to(folder.parent).as_posix())
    return buffer.getvalue()


@pytest.mark.parametrize(
    "pack, content_type", [(tar_gz, "application/gzip"), (zipped, "application/zip")]
)
def test_helm_archive_round_trip(
    client: httpx.Client, service: Service, tmp_path: Path, pack, content_type: str
) -> None:
    body = pack(helm_runs(tmp_path))
    headers = {**service.auth, "content-type": content_type}
    response = client.post("/v1/measurement-sets/helm", content=body, headers=headers)
    assert response.status_code == 201, response.text
    stored = response.json()
    assert stored["row_count"] == 61 and stored["models"] == [MODEL]
    assert stored["metadata"] == {"format": "helm", "runs": 2}
    response = client.post(
        "/v1/fits",
        json={"measurement_set_id": stored["id"], "method": "denoised", "models": [MODEL]},
        headers=service.auth,
    )
    assert response.status_code == 201, response.text
    fit_id = response.json()["fits"][0]["id"]
    prompt_only = client.get(
        "/v1/estimate",
        params={"model": MODEL, "prompt_tokens": 256, "output_tokens": 0, "fit_id": fit_id},
    )
    assert prompt_only.status_code == 200, prompt_only.text
    longer = client.get(
        "/v1/estimate",
        params={"model": MODEL, "prompt_tokens": 256, "output_tokens": 20, "fit_id": fit_id},
    )
    assert prompt_only.json()["runtime_s"] == pytest.approx(0.05 + 0.0004 * 256, rel=0.2)
    assert longer.json()["runtime_s"] - prompt_only.json()["runtime_s"] == pytest.approx(
        19 * 0.02, rel=0.2
    )


def test_bad_archives_are_4xx(client: httpx.Client, service: Service) -> None:
    headers = {**service.auth, "content-type": "application/gzip"}
    response = client.post("/v1/measurement-sets/helm", content=b"not an archive", headers=headers)
    assert response.status_code == 422 and "archive" in response.text
    empty = io.BytesIO()
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("notes.txt", "hello")
    response = client.post("/v1/measurement-sets/helm", content=empty.getvalue(),
                           headers={**service.auth, "content-type": "application/zip"})  # fmt: skip
    assert response.status_code == 422 and "no HELM run" in response.text
    response = client.post(
        "/v1/measurement-sets/helm",
        content=b"x",
        headers={**service.auth, "content-type": "text/csv"},
    )
    assert response.status_code == 415
