"""The FastAPI application: ``create_app()`` (uvicorn factory: ``api.main:create_app``)."""

from __future__ import annotations

from fastapi import FastAPI

from idealized_runtime.api import errors, openapi
from idealized_runtime.api.compute import compute_slots
from idealized_runtime.api.json_stream import log_backend
from idealized_runtime.api.metrics import MetricsMiddleware
from idealized_runtime.api.middleware import (
    BodyLimitMiddleware,
    KeyCheckMiddleware,
    ServerTimingMiddleware,
)
from idealized_runtime.api.routers import (
    catalog,
    estimates,
    fits,
    leaderboard,
    load_summaries,
    measurements,
    monitor,
    plans,
    scores,
    service,
)
from idealized_runtime.api.settings import get_settings

DESCRIPTION = """
Store timings, fit the **idealized** (uniform, well-optimized stack, no contention) and
**denoised** (noisy API timings) runtime models of LLMs, and estimate and compare runtimes,
GPU-seconds, joules and dollars across models.

* Writes need `Authorization: Bearer <key>` (`idealized-runtime apikey create`). Reads are public
  unless the server sets `IDEALIZED_RUNTIME_READS_REQUIRE_KEY=1`. The key is checked before the
  body is read: a request without a valid key gets 401, whatever its body.
* Bodies larger than the server's limit (`IDEALIZED_RUNTIME_MAX_BODY_BYTES`, 64 MiB by default)
  get 413 as soon as the limit is passed.
* JSON bodies are validated strictly: `true` is not a number, `"3"` and `1e3` are not integers,
  `NaN` and `Infinity` are not JSON.
* Writes accept an `Idempotency-Key` header: a retry returns the first response
  (`Idempotent-Replayed: true`); the same key with another request is refused with 409.
* Errors are JSON `{"detail": ...}` with a 4xx status. Each operation's description names the
  rules a schema cannot state (they depend on stored data or on a file's content).
"""


def create_app() -> FastAPI:
    settings = get_settings()
    from idealized_runtime import __version__

    log_backend()

    app = FastAPI(
        title="idealized-runtime",
        version=__version__,
        description=DESCRIPTION,
        openapi_url="/v1/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    errors.install(app)
    # The hot estimate routes first: routing tries routes in order.
    routers = [
        module.router
        for module in (
            estimates, service, catalog, measurements, fits, scores, leaderboard, load_summaries,
            plans, monitor,
        )
    ]  # fmt: skip
    routers.append(service.metrics_router)
    for router in routers:
        app.include_router(router)
    openapi.install(app, refuses_nul_text=not settings.is_sqlite)
    # Outermost last: count and time everything, check the key from the headers, then count the
    # body.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        KeyCheckMiddleware,
        reads_require_key=settings.reads_require_key,
        routes=[route for router in routers for route in router.routes],
    )
    app.add_middleware(ServerTimingMiddleware)
    app.add_middleware(MetricsMiddleware)
    compute_slots()  # the limit as a gauge from the start
    return app
