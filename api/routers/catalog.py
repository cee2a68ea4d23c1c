"""/v1/models (architectures) and /v1/hardware."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.bodies import json_body, request_body
from idealized_runtime.api.estimation import not_found
from idealized_runtime.api.idempotency import run_write
from idealized_runtime.api.routers.common import ERRORS, READ_ERRORS, WRITE_ERRORS
from idealized_runtime.api.routers.deps import Paging, Reader, ReadSession, Writer, WriteSession
from idealized_runtime.api.schemas import (
    HardwareIn,
    HardwareOut,
    HfModelIn,
    ModelIn,
    ModelOut,
    Page,
)
from idealized_runtime.api.state import invalidate_caches
from idealized_runtime.core.architectures import architecture_from_hf_config
from idealized_runtime.core.types import Architecture, Hardware

router = APIRouter(prefix="/v1", tags=["catalog"])

ARCHITECTURE_EXAMPLE = {
    "name": "my-llama-8b",
    "family": "llama",
    "num_layers": 32,
    "hidden_size": 4096,
    "num_heads": 32,
    "num_kv_heads": 8,
    "ffn_hidden_size": 14336,
    "vocab_size": 128256,
    "max_context": 8192,
    "activation": "swiglu",
    "norm": "rmsnorm",
    "position": "rotary",
    "bias": False,
}
HF_CONFIG_EXAMPLE = {
    "name": "my-qwen3-8b",
    "config": {
        "model_type": "qwen3",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        "tie_word_embeddings": False,
    },
}
HARDWARE_EXAMPLE = {
    "name": "my-accelerator",
    "vendor": "example",
    "memory_gb": 80,
    "memory_bandwidth_gbps": 3350,
    "peak_dense_tflops": 989,
    "board_power_w": 700,
    "hourly_price_usd": 3.0,
}


@router.post(
    "/models",
    status_code=201,
    response_model=ModelOut,
    responses={**WRITE_ERRORS, 409: ERRORS[409]},
    summary="Register an architecture (our schema, or a name and an HF config.json object)",
    description=(
        "Refused although schema-valid (rules between fields, or on a file's content, that a "
        "schema cannot state): an architecture whose shapes do not fit together (hidden_size "
        "divisible by num_heads without head_dim, num_heads a multiple of num_kv_heads, "
        "experts_per_token at most num_experts, sliding layers with a sliding_window, all four "
        "latent-attention sizes or none, group-limited routing dividing the experts, a "
        "precision's formats that pair), a parameter count beyond 2**63 - 1; rules on the "
        "content of `config` (an HF config.json object): the keys its model_type needs, "
        "values that make such an architecture (422, naming them)."
    ),
    openapi_extra=request_body(
        "ModelIn",
        examples={"architecture": ARCHITECTURE_EXAMPLE, "hf_config": HF_CONFIG_EXAMPLE},
    ),
)
def create_model(
    *,
    context: Writer,
    body: Architecture | HfModelIn = Depends(json_body(ModelIn, "ModelIn")),
    session: WriteSession,
) -> JSONResponse:
    # One loader for every entry point: the CLI's --arch config.json maps the same way.
    architecture = (
        architecture_from_hf_config(body.config, name=body.name, path="config")
        if isinstance(body, HfModelIn)
        else body
    )

    def work(s: Session) -> ModelOut:
        return crud.model_out(crud.add_architecture(s, architecture))

    response = run_write(session, context, work)
    invalidate_caches()
    return response


@router.get("/models", response_model=Page[ModelOut], responses=READ_ERRORS)
def list_models(
    *,
    family: str | None = Query(default=None, max_length=200),
    name_prefix: str | None = Query(default=None, max_length=200),
    page: Paging,
    _: Reader,
    session: ReadSession,
) -> Page[ModelOut]:
    rows, total = crud.list_architectures(
        session, family=family, name_prefix=name_prefix, limit=page.limit, offset=page.offset
    )
    return page.of([crud.model_out(r) for r in rows], total)


@router.get(
    "/models/{name:path}",
    response_model=ModelOut,
    responses={**READ_ERRORS, 404: ERRORS[404]},
    summary="Get an architecture (names may contain '/')",
)
def get_model(name: str, _: Reader, session: ReadSession) -> ModelOut:
    row = crud.get_architecture(session, name)
    if row is None:
        raise not_found(f"unknown model {name!r}")
    return crud.model_out(row)


@router.post(
    "/hardware",
    status_code=201,
    response_model=HardwareOut,
    responses={**WRITE_ERRORS, 409: ERRORS[409]},
    summary="Register an accelerator",
    openapi_extra=request_body("HardwareIn", examples={"accelerator": HARDWARE_EXAMPLE}),
)
def create_hardware(
    *,
    context: Writer,
    hardware: Hardware = Depends(json_body(HardwareIn, "HardwareIn")),
    session: WriteSession,
) -> JSONResponse:
    def work(s: Session) -> HardwareOut:
        return crud.hardware_out(crud.add_hardware(s, hardware))

    response = run_write(session, context, work)
    invalidate_caches()
    return response


@router.get("/hardware", response_model=Page[HardwareOut], responses=READ_ERRORS)
def list_hardware(
    *,
    vendor: str | None = Query(default=None, max_length=200),
    name_prefix: str | None = Query(default=None, max_length=200),
    page: Paging,
    _: Reader,
    session: ReadSession,
) -> Page[HardwareOut]:
    rows, total = crud.list_hardware(
        session, vendor=vendor, name_prefix=name_prefix, limit=page.limit, offset=page.offset
    )
    return page.of([crud.hardware_out(r) for r in rows], total)


@router.get(
    "/hardware/{name}", response_model=HardwareOut, responses={**READ_ERRORS, 404: ERRORS[404]}
)
def get_hardware(name: str, _: Reader, session: ReadSession) -> HardwareOut:
    row = crud.get_hardware(session, name)
    if row is None:
        raise not_found(f"unknown hardware {name!r}")
    return crud.hardware_out(row)
