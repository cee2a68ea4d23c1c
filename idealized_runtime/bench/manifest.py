"""``manifest.json`` of a results folder: versions, hardware, command lines, timestamps and each
item's status, written atomically as the run goes.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from idealized_runtime import __version__
from idealized_runtime.bench.config import ApiModelSpec, BenchConfig, LocalModelSpec, item_key
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "idealized-runtime/bench"

ItemStatus = Literal["pending", "running", "done", "failed"]


# --- manifest ----------------------------------------------------------------------------------


def utc_timestamp() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def environment_versions() -> dict[str, str]:
    versions = {"idealized-runtime": __version__, "python": platform.python_version()}
    for module in ("torch", "numpy", "scipy"):
        try:
            versions[module] = __import__(module).__version__
        except ImportError:
            continue
    return versions


def host_description(config: BenchConfig) -> dict[str, Any]:
    host: dict[str, Any] = {
        "hardware": config.hardware,
        "device": config.device,
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "system": platform.platform(),
    }
    try:
        import torch

        if torch.cuda.is_available():
            host["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return host


@dataclass
class Manifest:
    """The results folder's manifest.json, rewritten atomically after every change."""

    path: Path
    data: dict[str, Any]

    @classmethod
    def open(cls, results_dir: Path, config: BenchConfig, config_path: Path) -> Manifest:
        path = results_dir / MANIFEST_NAME
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as error:
                raise InputError(f"unreadable manifest ({error.msg})", path=str(path)) from None
        else:
            data = {
                "format": MANIFEST_FORMAT,
                "version": 1,
                "created_at": utc_timestamp(),
                "runs": [],
            }
        data.update(
            config=config.model_dump(mode="json"),
            config_path=str(config_path),
            versions=environment_versions(),
            host=host_description(config),
        )
        data.setdefault("items", [])
        for run in data.get("runs", []):
            if run.get("status") == "running":  # that process was killed before it could say
                run["status"] = "killed"
        return cls(path, data)

    def item(self, spec: LocalModelSpec | ApiModelSpec, hardware: str) -> dict[str, Any]:
        """The item record of ``spec``, created pending if new. A done item whose settings
        changed is reset: its files were made with other settings."""
        key = item_key(spec)
        settings = spec.model_dump(mode="json")
        for record in self.data["items"]:
            if record["dir"] == f"items/{key}":
                if record.get("spec") != settings and record["status"] != "done":
                    # Not finished: resume with the new settings (the profiler refuses to mix
                    # settings in one file; the timing client's rows do not depend on the URL).
                    record["spec"] = settings
                elif record.get("spec") != settings:
                    raise InputError(
                        f"model {spec.label!r} changed since its results were written; "
                        "use a new results folder (-o)",
                        path=str(self.path),
                    )
                return record
        record = {
            "name": key,
            "kind": spec.kind,
            "model": spec.label,
            "architecture": spec.architecture if isinstance(spec, LocalModelSpec) else None,
            "hardware": hardware if isinstance(spec, LocalModelSpec) else None,
            "dir": f"items/{key}",
            "spec": settings,
            "status": "pending",
            "error": None,
            "started_at": None,
            "finished_at": None,
            "fits": {},
        }
        self.data["items"].append(record)
        return record

    def save(self) -> None:
        self.data["updated_at"] = utc_timestamp()
        with atomic_writer(self.path) as handle:
            json.dump(self.data, handle, indent=2)
            handle.write("\n")
