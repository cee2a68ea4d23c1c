"""A deployment in one call, for tests of the hardware model."""

from __future__ import annotations

from idealized_runtime.core.types import Architecture, Deployment, Hardware


def deploy(arch: Architecture, hardware: Hardware, **options: object) -> Deployment:
    """``arch`` on ``hardware``, with the tp, batch size, precision and efficiency given."""
    return Deployment(architecture=arch, hardware=hardware, **options)  # type: ignore[arg-type]
