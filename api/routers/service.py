"""/v1/health and /v1/version."""

from __future__ import annotations

from fastapi import APIRouter, Response
from sqlalchemy import text

from idealized_runtime.api.db import get_database
from idealized_runtime.api.migrate import current_revision
from idealized_runtime.api.routers.deps import Reader, ReadSession
from idealized_runtime.api.schemas import HealthOut, VersionOut

router = APIRouter(prefix="/v1", tags=["service"])
# Where Prometheus looks by default: no version prefix.
metrics_router = APIRouter(tags=["service"])


@router.get("/health", response_model=HealthOut, summary="Liveness and database reachability")
def health(session: ReadSession) -> HealthOut:
    session.execute(text("SELECT 1"))
    return HealthOut(status="ok", database="ok")


@router.get("/version", response_model=VersionOut)
def version() -> VersionOut:
    from idealized_runtime import __version__

    database = get_database()
    return VersionOut(
        version=__version__,
        api="v1",
        database_backend=database.backend,
        schema_revision=current_revision(database.engine),
    )


@metrics_router.get(
    "/metrics",
    include_in_schema=False,  # Prometheus' text format, documented in docs/monitoring.md
)
def metrics(_: Reader) -> Response:
    """Requests, latencies, refusals, computations in flight and the monitor's latest rounds,
    in Prometheus' text format (a read: public unless reads require a key)."""
    from idealized_runtime.api.metrics import exposition

    body, content_type = exposition()
    return Response(content=body, media_type=content_type)
