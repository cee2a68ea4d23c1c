"""/v1/estimate (one request, the hot path), /v1/estimate/batch (columnar, 10^5+ rows),
/v1/estimate/hardware-model, /v1/compare (models over a workload) and /v1/workloads.

One concern, one module on purpose: answering runtimes. Every endpoint here resolves the same
targets (a model's fit or a reference stack, cached per fit) and evaluates them on token arrays
with the same cost columns; a comparison is a batch per model over a workload's requests."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from idealized_runtime.api.bodies import json_body, request_body
from idealized_runtime.api.compute import compute_slot
from idealized_runtime.api.db import get_database
from idealized_runtime.api.estimation import (
    CostColumns,
    EstimateCache,
    ResolvedFit,
    cost_columns,
    default_hardware_name,
    finite,
    not_found,
    require_finite,
    runtimes,
)
from idealized_runtime.api.routers.common import (
    COMPUTE_ERRORS,
    ERRORS,
    READ_ERRORS,
)
from idealized_runtime.api.routers.deps import Reader
from idealized_runtime.api.schemas import (
    BatchEstimateIn,
    BatchEstimateOut,
    CompareIn,
    CompareOut,
    CompareRow,
    CostColumnsOut,
    CostOut,
    EstimateOut,
    EstimateQuery,
    HardwareModelEstimateIn,
    HardwareModelEstimateOut,
    Metric,
    RequestShape,
    WorkloadOut,
)
from idealized_runtime.api.security import checks_reader, reader
from idealized_runtime.api.settings import get_settings
from idealized_runtime.api.state import estimate_cache
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.scenarios import (
    helm_scenario_results,
    scenario_workload,
    workload_names,
)
from idealized_runtime.core.types import Architecture, Deployment, Efficiency, Hardware

router = APIRouter(prefix="/v1", tags=["estimates"])
STORED_DATA_RULES = (
    "Refused although schema-valid (rules on stored data): a model, fit, hardware or stack not "
    "stored (404); on a stack, an architecture that does not fit the GPUs (a tensor-parallel "
    "size its heads cannot be split over, too little memory); stored figures that give an "
    "estimate beyond floating-point range (422)."
)
ESTIMATE_ERRORS = {**READ_ERRORS, 404: ERRORS[404]}


@dataclass(frozen=True)
class Target:
    """What an estimate is evaluated with: the fit, and the hardware and GPU count if known."""

    fit: ResolvedFit
    hardware: Hardware | None
    num_gpus: int | None


def _target_cached(
    cache: EstimateCache,
    model: str,
    metric: Metric,
    fit_id: int | None,
    hardware: str | None,
    num_gpus: int | None,
) -> Target | None:
    """The target from the cache alone, or None if anything has to be read from the database."""
    resolved = cache.cached_fit(model, metric, fit_id)
    if resolved is None:
        return None
    name = hardware or default_hardware_name(resolved.fit)
    if name is None:
        return Target(resolved, None, None)
    found = cache.cached_hardware(name)
    if found is None:
        return None
    if num_gpus is not None:
        return Target(resolved, found, num_gpus)
    if not cache.gpus_known(model, resolved.fit, found):
        return None
    return Target(resolved, found, cache.gpus_needed(None, model, resolved.fit, found))


def _target(
    cache: EstimateCache,
    session: Session,
    model: str,
    metric: Metric,
    fit_id: int | None,
    hardware: str | None,
    num_gpus: int | None,
) -> Target:
    resolved = cache.cached_fit(model, metric, fit_id) or cache.load_fit(
        session, model, metric, fit_id
    )
    name = hardware or default_hardware_name(resolved.fit)
    if name is None:
        return Target(resolved, None, None)
    found = cache.cached_hardware(name)
    if found is None:
        try:
            found = cache.load_hardware(session, name)
        except HTTPException:
            if hardware is not None:
                raise  # asked for by the caller: 404
            return Target(resolved, None, None)  # the fit's stack names unknown hardware
    gpus = (
        num_gpus if num_gpus is not None else cache.gpus_needed(session, model, resolved.fit, found)
    )
    return Target(resolved, found, gpus)


def _target_from_db(
    model: str, metric: Metric, fit_id: int | None, hardware: str | None, num_gpus: int | None
) -> Target:
    with get_database().read_sessions() as session:
        return _target(estimate_cache(), session, model, metric, fit_id, hardware, num_gpus)


@dataclass(frozen=True)
class StackTarget:
    """A hardware-model estimate: the model's architecture on a reference stack."""

    stack: str
    efficiency: Efficiency
    architecture: Architecture
    hardware: Hardware
    num_gpus: int


def _stack_target(
    model: str, stack_name: str, hardware: str | None, num_gpus: int | None, context: int
) -> StackTarget:
    """Resolve ``stack`` for ``model``: 404 for an unknown stack, architecture or hardware, 422
    for a GPU count the architecture cannot be split over."""
    from idealized_runtime.cost_model.hardware.planner import min_gpus
    from idealized_runtime.cost_model.hardware.stacks.catalog import get_stack

    try:
        stack = get_stack(stack_name)
    except InputError as error:
        raise not_found(str(error)) from None
    cache = estimate_cache()
    with get_database().read_sessions() as session:
        architecture = cache.architecture_for(session, model)
        if architecture is None:
            raise not_found(
                f"no architecture known for model {model!r}: a stack estimate needs the "
                "model's architecture"
            )
        name = hardware or stack.hardware[0]
        found = cache.cached_hardware(name) or cache.load_hardware(session, name)
    try:
        gpus = num_gpus or min_gpus(architecture, found, context_tokens=context)
    except InputError as error:
        raise unprocessable(str(error)) from None
    return StackTarget(stack.name, stack.efficiency, architecture, found, int(gpus))


def _stack_runtimes(target: StackTarget, p: np.ndarray, o: np.ndarray) -> np.ndarray:
    from idealized_runtime.cost_model.hardware.roofline import hardware_model_runtime

    try:
        values = np.asarray(
            hardware_model_runtime(
                Deployment(
                    architecture=target.architecture,
                    hardware=target.hardware,
                    tp=target.num_gpus,
                    efficiency=target.efficiency,
                ),
                p,
                o,
            ),
            dtype=np.float64,
        ).reshape(-1)
    except InputError as error:
        raise unprocessable(str(error)) from None
    return finite(values, f"the hardware model of {target.architecture.name!r} on {target.stack}")


def unprocessable(detail: str) -> HTTPException:
    return HTTPException(status_code=status.HTTP_422_UNPROCESSABLE_CONTENT, detail=detail)


def _stack_estimate(query: EstimateQuery) -> EstimateOut:
    p, o = query.prompt_tokens, query.output_tokens
    target = _stack_target(query.model, query.stack, query.hardware, query.num_gpus, p + o)  # type: ignore[arg-type]
    runtime = _stack_runtimes(target, np.array([p], float), np.array([o], float))
    costs = cost_columns(runtime, target.num_gpus, target.hardware)
    return EstimateOut(
        model=query.model,
        metric=query.metric,
        fit_id=None,
        method="calibrated",
        prompt_tokens=p,
        output_tokens=o,
        runtime_s=float(runtime[0]),
        cost=CostOut(
            hardware=costs.hardware,
            num_gpus=costs.num_gpus,
            gpu_seconds=_first(costs.gpu_seconds),  # type: ignore[arg-type]
            joules=_first(costs.joules),
            dollars=_first(costs.dollars),
        ),
        stack=target.stack,
    )


def _costs(target: Target, runtime_s: np.ndarray) -> CostColumns | None:
    if target.hardware is None or target.num_gpus is None:
        return None
    return cost_columns(runtime_s, target.num_gpus, target.hardware)


def _first(values: np.ndarray | None) -> float | None:
    return None if values is None else float(values.reshape(-1)[0])


def _sum(values: np.ndarray | None) -> float | None:
    return None if values is None else _total(values, "the costs")


def _total(values: np.ndarray, what: str) -> float:
    total = float(values.sum())
    if not math.isfinite(total):
        raise unprocessable(f"{what}: the total of these requests is beyond floating-point range")
    return total


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """OpenAPI query parameters from a pydantic model (for a route that validates its query
    string itself)."""
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))

    def value_schema(prop: dict[str, Any]) -> dict[str, Any]:
        # An optional parameter is omitted, never sent as null: keep the non-null branch.
        branches = [b for b in prop.get("anyOf", ()) if b.get("type") != "null"]
        plain = {k: v for k, v in prop.items() if k not in ("description", "examples", "anyOf")}
        return {**plain, **branches[0]} if len(branches) == 1 else plain

    return [
        {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": value_schema(prop),
            **({"description": prop["description"]} if "description" in prop else {}),
            **({"example": prop["examples"][0]} if prop.get("examples") else {}),
        }
        for name, prop in schema["properties"].items()
    ]


@router.get(
    "/estimate",
    response_model=EstimateOut,
    responses=ESTIMATE_ERRORS,
    openapi_extra={"parameters": _query_parameters(EstimateQuery)},
    summary="Idealized or denoised runtime of one request",
    description=(
        "Evaluates the model's newest fit of the metric (or `fit_id`). Cost variants "
        "(GPU-seconds, joules, dollars) are given when the hardware is known: from `hardware` "
        "or the fit's stack; the GPU count from `num_gpus` or the serving model."
        f"\n\n{STORED_DATA_RULES}"
    ),
)
@checks_reader
async def estimate(request: Request) -> Response:
    # The hot path. Async and answered from the in-process cache when warm: no thread hop, no
    # database. The query string is validated in one pydantic pass (FastAPI's per-parameter
    # machinery cost more than the estimate itself); the parameters are documented from the
    # same model (openapi_extra above), and errors have FastAPI's 422 shape.
    await reader(request)
    try:
        query = EstimateQuery.model_validate(dict(request.query_params.items()))
    except ValidationError as error:
        raise RequestValidationError(
            [{**e, "loc": ("query", *e["loc"])} for e in error.errors()]
        ) from None
    if query.stack is not None:
        out = await run_in_threadpool(_stack_estimate, query)
        return Response(
            content=require_finite(out).model_dump_json(), media_type="application/json"
        )
    model, metric, fit_id = query.model, query.metric, query.fit_id
    hardware, num_gpus = query.hardware, query.num_gpus
    prompt_tokens, output_tokens = query.prompt_tokens, query.output_tokens
    target = _target_cached(estimate_cache(), model, metric, fit_id, hardware, num_gpus)
    if target is None:
        target = await run_in_threadpool(_target_from_db, model, metric, fit_id, hardware, num_gpus)
    fit = target.fit.fit
    runtime = runtimes(fit, prompt_tokens, output_tokens).reshape(1)
    costs = _costs(target, runtime)
    out = EstimateOut(
        model=model,
        metric=metric,
        fit_id=target.fit.id,
        method=fit.method,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        runtime_s=float(runtime[0]),
        cost=None
        if costs is None
        else CostOut(
            hardware=costs.hardware,
            num_gpus=costs.num_gpus,
            gpu_seconds=_first(costs.gpu_seconds),  # type: ignore[arg-type]
            joules=_first(costs.joules),
            dollars=_first(costs.dollars),
        ),
    )
    # Serialised directly (the response_model stays for the schema): FastAPI would validate
    # the object it was just built from again. (Its numbers are finite: runtimes() and
    # cost_columns() refuse others.)
    return Response(content=out.model_dump_json(), media_type="application/json")


def _check_batch(count: int, what: str = "rows") -> None:
    limit = get_settings().max_batch_rows
    if count > limit:
        raise HTTPException(
            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=f"{count} {what} in one batch; at most {limit} "
            "(IDEALIZED_RUNTIME_MAX_BATCH_ROWS)",
        )


def _token_arrays(requests: list[RequestShape]) -> tuple[np.ndarray, np.ndarray]:
    _check_batch(len(requests))
    count = len(requests)
    prompt = np.fromiter((r["prompt_tokens"] for r in requests), dtype=np.float64, count=count)
    output = np.fromiter((r["output_tokens"] for r in requests), dtype=np.float64, count=count)
    return prompt, output


@router.post(
    "/estimate/batch",
    response_model=BatchEstimateOut,
    responses=COMPUTE_ERRORS,
    openapi_extra=request_body("BatchEstimateIn"),
    summary="Runtimes of many requests of one model",
    description=(
        "Up to the server's max_batch_rows (default 1,000,000) requests. The `Server-Timing` "
        "header gives the server time including body parsing; `server_time_ms` the "
        "computation.\n\nRefused although schema-valid (rules on stored data): a model, fit, "
        "hardware or stack not stored (404); more requests than the server's max_batch_rows; "
        "on a stack, an architecture that does not fit the GPUs (a tensor-parallel size its "
        "heads cannot be split over, too little memory); stored figures that give an "
        "estimate beyond floating-point range (422)."
    ),
)
def estimate_batch(
    _: Reader,
    payload: BatchEstimateIn = Depends(json_body(BatchEstimateIn, "BatchEstimateIn")),
    _slot: None = Depends(compute_slot),
) -> Response:
    start = time.perf_counter()
    p, o = _token_arrays(payload.requests)
    if payload.stack is not None:
        return _stack_batch(payload, p, o, start)
    target = _target_from_db(
        payload.model, payload.metric, payload.fit_id, payload.hardware, payload.num_gpus
    )
    runtime = runtimes(target.fit.fit, p, o)
    return _batch_response(
        payload,
        runtime,
        _costs(target, runtime),
        start,
        fit_id=target.fit.id,
        method=target.fit.fit.method,
    )


def _stack_batch(payload: BatchEstimateIn, p: np.ndarray, o: np.ndarray, start: float) -> Response:
    context = int((p + o).max())
    target = _stack_target(
        payload.model,
        payload.stack,
        payload.hardware,
        payload.num_gpus,
        context,  # type: ignore[arg-type]
    )
    runtime = _stack_runtimes(target, p, o)
    costs = cost_columns(runtime, target.num_gpus, target.hardware)
    return _batch_response(
        payload, runtime, costs, start, fit_id=None, method="calibrated", stack=target.stack
    )


def _batch_response(
    payload: BatchEstimateIn,
    runtime: np.ndarray,
    costs: CostColumns | None,
    start: float,
    *,
    fit_id: int | None,
    method: str,
    stack: str | None = None,
) -> Response:
    """A batch's runtimes and costs (per row only with ``include_rows``), timed from ``start``;
    the same for a fit and for a stack."""
    rows = payload.include_rows
    total = _total(runtime, payload.model)
    out = BatchEstimateOut.model_construct(
        model=payload.model,
        metric=payload.metric,
        fit_id=fit_id,
        method=method,
        stack=stack,
        count=int(runtime.size),
        total_runtime_s=total,
        mean_runtime_s=total / runtime.size,
        runtime_s=runtime.tolist() if rows else None,
        cost=None
        if costs is None
        else CostColumnsOut.model_construct(
            hardware=costs.hardware,
            num_gpus=costs.num_gpus,
            gpu_seconds=costs.gpu_seconds.tolist() if rows else None,
            joules=costs.joules.tolist() if rows and costs.joules is not None else None,
            dollars=costs.dollars.tolist() if rows and costs.dollars is not None else None,
            total_gpu_seconds=float(costs.gpu_seconds.sum()),
            total_joules=_sum(costs.joules),
            total_dollars=_sum(costs.dollars),
        ),
        server_time_ms=0.0,
    )
    out.server_time_ms = round((time.perf_counter() - start) * 1e3, 3)
    # Serialised by pydantic-core directly: no per-row Python objects on the way out.
    return Response(content=out.model_dump_json(), media_type="application/json")


def _workload_shapes(payload: CompareIn) -> tuple[str, np.ndarray, np.ndarray]:
    if (payload.workload is None) == (payload.requests is None):
        raise HTTPException(
            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail="give exactly one of 'workload' (a HELM scenario group) or 'requests'",
        )
    if payload.requests is not None:
        p, o = _token_arrays(payload.requests)
        return "requests", p, o
    name = payload.workload
    assert name is not None
    scenario_workload(name)  # 404 with the known names when unknown
    # A group stands for its scenarios, each at its mean request shape; a scenario for itself.
    scenarios = sorted(
        {
            r.scenario
            for r in helm_scenario_results()
            if name in (r.group, r.scenario) and r.mean_prompt_tokens is not None
        }
    )
    shapes = [scenario_workload(s) for s in scenarios]
    p = np.array([max(w.mean_prompt_tokens, 1.0) for w in shapes])
    o = np.array([max(w.mean_output_tokens, 0.0) for w in shapes])
    return name, p, o


@router.post(
    "/compare",
    response_model=CompareOut,
    responses=COMPUTE_ERRORS,
    openapi_extra=request_body("CompareIn"),
    summary="Compare models over a workload: totals, means, ratios to the best",
    description=(
        "`workload` is a HELM scenario group (GET /v1/workloads): each of its scenarios counts "
        "as one request at that scenario's mean prompt/output tokens. Or send `requests`."
        "\n\nRefused although schema-valid (rules on stored data): a model without a fit of "
        "the metric, an unknown workload or hardware (404); more requests than the server's "
        "max_batch_rows; stored figures that give an estimate beyond floating-point range "
        "(422)."
    ),
)
def compare(
    _: Reader,
    payload: CompareIn = Depends(json_body(CompareIn, "CompareIn")),
    _slot: None = Depends(compute_slot),
) -> CompareOut:
    name, p, o = _workload_shapes(payload)
    models = list(dict.fromkeys(payload.models))
    _check_batch(len(models) * len(p), "models x requests")
    results = []
    for model in models:
        target = _target_from_db(model, payload.metric, None, payload.hardware, None)
        runtime = runtimes(target.fit.fit, p, o)
        results.append((model, target, runtime, _costs(target, runtime)))
    totals = {model: _total(runtime, model) for model, _, runtime, _ in results}
    best_total = min(totals.values())
    gpu_totals = {m: float(c.gpu_seconds.sum()) for m, _, _, c in results if c is not None}
    best_gpu = min(gpu_totals.values()) if gpu_totals else None
    rows = []
    for model, target, _runtime, costs in results:
        total = totals[model]
        rows.append(
            CompareRow(
                model=model,
                fit_id=target.fit.id,
                method=target.fit.fit.method,
                total_runtime_s=total,
                mean_runtime_s=total / p.size,
                ratio_to_best=total / best_total if best_total > 0 else 1.0,
                cost=None
                if costs is None
                else CostOut(
                    hardware=costs.hardware,
                    num_gpus=costs.num_gpus,
                    gpu_seconds=gpu_totals[model],
                    joules=_sum(costs.joules),
                    dollars=_sum(costs.dollars),
                ),
                cost_ratio_to_best=gpu_totals[model] / best_gpu
                if model in gpu_totals and best_gpu
                else None,
            )
        )
    rows.sort(key=lambda row: row.total_runtime_s)
    return require_finite(
        CompareOut(
            workload=name,
            num_requests=int(p.size),
            mean_prompt_tokens=float(p.mean()),
            mean_output_tokens=float(o.mean()),
            metric=payload.metric,
            best=rows[0].model,
            rows=rows,
        )
    )


@router.get(
    "/workloads",
    response_model=list[WorkloadOut],
    summary="Named workloads for /v1/compare: the bundled HELM scenario groups",
)
def list_workloads(_: Reader) -> list[WorkloadOut]:
    return [
        WorkloadOut(
            name=w.name,
            mean_prompt_tokens=w.mean_prompt_tokens,
            mean_output_tokens=w.mean_output_tokens,
            num_results=w.num_results,
        )
        for w in map(scenario_workload, workload_names())
    ]


@router.post(
    "/estimate/hardware-model",
    response_model=HardwareModelEstimateOut,
    responses=COMPUTE_ERRORS,
    openapi_extra=request_body("HardwareModelEstimateIn"),
    summary="One request from the hardware model, at any precision, without a profile",
    description=(
        "Runtime, GPUs, GPU-seconds, energy and dollars of one request on `hardware`, from the "
        "architecture (a stored one, or an HF config.json object in `config`) and the precision "
        "(`weights`, `kv_cache`, `activations`), as `idealized-runtime estimate --arch` gives "
        "them.\n\nRefused although schema-valid: an architecture or hardware not stored (404); "
        "rules on the content of `config` (the keys its model_type needs, a consistent shape); "
        "an unknown stack (the engine and reference stacks are named); a precision and "
        "hardware pair the hardware cannot run (fp8 compute without fp8 tensor cores), a "
        "request longer than the architecture's context length, a request that does not fit "
        "the GPUs' memory, stored hardware figures that give an estimate beyond floating-point "
        "range (422)."
    ),
)
def estimate_hardware_model(
    _: Reader,
    payload: HardwareModelEstimateIn = Depends(
        json_body(HardwareModelEstimateIn, "HardwareModelEstimateIn")
    ),
    _slot: None = Depends(compute_slot),
) -> HardwareModelEstimateOut:
    from idealized_runtime.core.architectures import architecture_from_hf_config
    from idealized_runtime.core.errors import InputError
    from idealized_runtime.cost_model.hardware.estimate import estimate_request

    if (payload.architecture is None) == (payload.config is None):
        raise InputError("give exactly one of architecture (a stored name) or config")
    cache = estimate_cache()
    with get_database().read_sessions() as session:
        if payload.config is not None:
            name = str(payload.config.get("_name_or_path") or "config")
            architecture = architecture_from_hf_config(payload.config, name=name, path="config")
        else:
            found = cache.architecture_for(session, payload.architecture or "")
            if found is None:
                raise HTTPException(
                    status.HTTP_404_NOT_FOUND,
                    f"unknown architecture {payload.architecture!r}; GET /v1/models lists them",
                )
            architecture = found
        hardware = cache.cached_hardware(payload.hardware) or cache.load_hardware(
            session, payload.hardware
        )
    result, precision, calibration = estimate_request(payload, architecture, hardware)
    costs = result.costs
    return require_finite(
        HardwareModelEstimateOut(
            source=result.source,  # type: ignore[arg-type]
            calibration=calibration or None,
            model=result.model,
            hardware=hardware.name,
            precision=result.precision or precision.label,
            prompt_tokens=result.num_prompt_tokens,
            output_tokens=result.num_output_tokens,
            batch_size=result.batch_size,
            runtime_s=result.runtime_s,
            alpha_s=result.alpha_s,
            beta_s=result.beta_s,
            output_tokens_per_s=result.output_tokens_per_s,
            tensor_parallel_size=result.tp,
            num_gpus=result.num_gpus,
            gpu_seconds=costs["gpu_seconds"],
            energy_j=costs["energy_j"],
            cost_usd=costs["cost_usd"],
            notes=list(result.notes),
        )
    )
