"""HELM runs uploaded as an archive to the real service, fitted (denoised) and queried."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import Service, set_count
from tests.importers.test_helm_import import (
    MODEL,
    instance,
    write_run,
    write_synthetic_efficiency_run,
)


def helm_runs(root: Path) -> Path:
    suite = root / "benchmark_output" / "runs" / "v1"
    write_synthetic_efficiency_run(suite, "x", seed=5)
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


def _with_instances(folder: Path, *instances: dict) -> Path:
    suite = folder / "benchmark_output" / "runs" / "v1"
    write_run(suite, "bad_run:model=x", "helm.benchmark.scenarios.x.X", list(instances))
    return folder / "benchmark_output"


@pytest.mark.parametrize(
    ("bad", "column"),
    [
        (instance("id-2", 10**308, 4, 0.5), "num_prompt_tokens"),
        (instance("id-2", 100, -3, 0.5), "num_output_tokens"),
        (instance("id-2", 100, 4, 1e308), "inference_runtime"),
        (instance("id-2", 100, 4, 1e-300), "inference_runtime"),
    ],
)
@pytest.mark.parametrize("pack", [tar_gz, zipped])
def test_a_bad_value_in_an_archive_names_its_run_and_instance(
    client: httpx.Client, service: Service, tmp_path: Path, bad: dict, column: str, pack
) -> None:
    body = pack(_with_instances(tmp_path, instance("id-1", 100, 4, 0.5), bad))
    before = set_count(client)
    detail = service.refused(client, "/v1/measurement-sets/helm", body, "application/gzip")
    assert detail.startswith("upload, run 'bad_run:model=x', instance 'id-2'"), detail
    assert f"column '{column}'" in detail
    assert str(tmp_path) not in detail and "/tmp" not in detail
    assert set_count(client) == before


@pytest.mark.parametrize("pack", [tar_gz, zipped])
def test_archive_errors_name_members_never_server_paths(
    client: httpx.Client, service: Service, tmp_path: Path, pack
) -> None:
    root = _with_instances(tmp_path, instance("id-1", 100, 4, 0.5))
    run = root / "runs" / "v1" / "bad_run:model=x"
    (run / "per_instance_stats.json").write_text("[{not json")
    detail = service.refused(client, "/v1/measurement-sets/helm", pack(root), "application/gzip")
    assert detail.startswith(
        "upload: benchmark_output/runs/v1/bad_run:model=x/per_instance_stats.json: not valid JSON"
    ), detail
    (run / "per_instance_stats.json").unlink()
    assert service.refused(client, "/v1/measurement-sets/helm", pack(root), "application/gzip") == (
        "upload: benchmark_output/runs/v1/bad_run:model=x/run_spec.json: no "
        "per_instance_stats.json beside run_spec.json (was the run summarized?)"
    )


@pytest.mark.parametrize("pack", [tar_gz, zipped])
def test_a_repeated_key_in_an_archive_member_is_refused_naming_it(
    client: httpx.Client, service: Service, tmp_path: Path, pack
) -> None:
    """JSON leaves a repeated key undefined; Python's parser would keep the last one."""
    root = _with_instances(tmp_path, instance("id-1", 100, 4, 0.5))
    spec = root / "runs" / "v1" / "bad_run:model=x" / "run_spec.json"
    spec.write_text('{"name": "bad_run:model=x", "name": "other"}')
    before = set_count(client)
    detail = service.refused(client, "/v1/measurement-sets/helm", pack(root), "application/gzip")
    assert detail == (
        "upload: benchmark_output/runs/v1/bad_run:model=x/run_spec.json: not valid here: "
        "the key 'name' is given twice in one object"
    ), detail
    assert set_count(client) == before
