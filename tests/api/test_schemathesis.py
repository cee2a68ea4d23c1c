"""Property-based tests of the whole OpenAPI schema against the live server (schemathesis):
no 5xx, documented status codes, content types and headers, responses matching their schemas,
schema-valid requests accepted, and 405 answers that list every method of a path in ``Allow``.
Writes are authenticated, so the generated bodies reach the handlers rather than stopping at 401.

Two runs: a derandomized one (the same cases every time) and one with a random seed, printed
on failure and settable with ``SCHEMATHESIS_SEED`` to replay it."""

from __future__ import annotations

import os
import random
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import Service

MAX_EXAMPLES = 25
RANDOM_EXAMPLES = 10  # per operation, with a fresh seed each run (27 operations: ~270 cases)
# Rules that depend on stored data or relate two fields in a way OpenAPI cannot state (both are
# documented in the operation's description): a schema-valid request may still get this 422.
DATA_DEPENDENT_422 = re.compile(
    r"prompt_tokens has \d+ rows, output_tokens \d+"  # equal-length columns
    r"|needs at least two output lengths"  # the default fit of a set with one output length
    r"|has no rows of the requested models"
    r"|missing required column"  # a CSV body's header row (the description lists the columns)
    r"|empty file"  # a CSV body of whitespace only (minLength cannot exclude it)
    r"|archive"  # an archive's content (HELM runs inside a .tar.gz/.zip)
    r"|not UTF-8 text"  # a CSV file part is bytes in the schema; it must be UTF-8 text
    r"|prompt sizes must be increasing"  # the order of a HELM table's keys
    r"|too large to store"  # a derived count (an architecture's parameters) beyond 64 bits
    r'|"detail":"config[:,]'  # an HF config.json object: its model_type decides what it needs
)


def _accepts_schema_valid_data(ctx: object, response: object, case: schemathesis.Case) -> None:
    """schemathesis' positive-data check, except for the documented data-dependent 422s."""
    status = getattr(response, "status_code", 0)
    if status == 404:  # a name the schema cannot list: architectures, hardware, sets not stored
        return None
    if status == 422 and _handler_refusal(response):
        return None
    if status == 422 and (
        DATA_DEPENDENT_422.search(getattr(response, "text", "")) or _cross_field(response)
    ):
        return None
    return positive_data_acceptance(ctx, response, case)


def _handler_refusal(response: object) -> bool:
    """A 422 whose detail is one sentence from a handler (a rule about the data itself: a context
    beyond the model's, a file's contents), not a list of schema-level field errors, which is
    what a schema-valid request must never get."""
    try:
        detail = response.json()["detail"]  # type: ignore[attr-defined]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(detail, str)


# Where whole-object validators report: the body, an architecture (hidden_size divisible by
# num_heads), a precision (fp8 activations need fp8 weights) inside a body or an architecture.
CROSS_FIELD_LOCATIONS = (
    ["body"],
    ["body", "architecture"],
    ["body", "precision"],
    ["body", "architecture", "precision"],
)


def _cross_field(response: object) -> bool:
    """A whole-body validator's error (``loc == ["body"]``, or ``["body", FORM]`` for a body of
    several tagged forms): a rule between fields, such as an architecture's hidden_size divisible
    by num_heads, which a JSON schema cannot state. Every field's own range is in the schema, so
    those errors point at the field instead."""
    try:
        detail = response.json()["detail"]  # type: ignore[attr-defined]
    except (ValueError, KeyError, TypeError):
        return False
    return (
        isinstance(detail, list)
        and bool(detail)
        and all(
            item.get("loc") in CROSS_FIELD_LOCATIONS and item.get("type") == "value_error"
            for item in detail
        )
    )


@schemathesis.serializer("application/gzip", "application/zip")
def _archive(ctx: object, value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


@schemathesis.serializer("text/csv")
def _csv(ctx: object, value: object) -> bytes:
    return value.encode() if isinstance(value, str) else str(value).encode()


@pytest.fixture(scope="module")
def api_schema(service: Service) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{service.base_url}/v1/openapi.json")


def _check_operation(
    operation: schemathesis.APIOperation,
    service: Service,
    *,
    examples: int = MAX_EXAMPLES,
    random_seed: int | None = None,
) -> None:
    @given(case=operation.as_strategy())
    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=random_seed is None,
        database=None,
    )
    def check(case: schemathesis.Case) -> None:
        response = case.call(headers=service.auth, timeout=60)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}"
        )
        case.validate_response(
            response,
            checks=[
                not_a_server_error,
                status_code_conformance,
                content_type_conformance,
                response_headers_conformance,
                response_schema_conformance,
                _accepts_schema_valid_data,
            ],
        )

    if random_seed is not None:
        check = seed(random_seed)(check)
    check()


def test_api_conforms_to_its_schema(api_schema: schemathesis.BaseSchema, service: Service) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20
    for operation in operations:
        _check_operation(operation, service)


def test_api_conforms_to_its_schema_with_a_random_seed(
    api_schema: schemathesis.BaseSchema, service: Service
) -> None:
    run_seed = int(os.environ.get("SCHEMATHESIS_SEED") or random.randrange(2**32))
    print(f"schemathesis seed: {run_seed} (replay: SCHEMATHESIS_SEED={run_seed})")
    for operation in (result.ok() for result in api_schema.get_all_operations()):
        try:
            _check_operation(operation, service, examples=RANDOM_EXAMPLES, random_seed=run_seed)
        except BaseException as error:
            error.add_note(f"schemathesis seed {run_seed}: rerun with SCHEMATHESIS_SEED={run_seed}")
            raise


def _template(path: str) -> str:
    return re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path))


def test_405_lists_every_method_of_the_path(
    api_schema: schemathesis.BaseSchema, service: Service
) -> None:
    spec = api_schema.raw_schema
    methods = {"get", "post", "put", "patch", "delete"}
    with service.client(headers=service.auth) as client:
        for path, item in spec["paths"].items():
            documented = {method.upper() for method in item if method in methods}
            concrete = re.sub(r"\{[^}]+\}", "1", path)
            # A method another (templated) path serves at this URL is that path's, not a 405:
            # /v1/measurement-sets/csv is also /v1/measurement-sets/{set_id}.
            overlapping = {
                method.upper()
                for other, other_item in spec["paths"].items()
                if other != path and re.fullmatch(_template(other), concrete)
                for method in other_item
                if method in methods
            }  # fmt: skip
            for method in sorted({"PUT", "PATCH", "DELETE", "POST"} - documented - overlapping)[:1]:
                response = client.request(method, concrete)
                assert response.status_code == 405, (method, path, response.status_code)
                allow = {m.strip() for m in response.headers["allow"].split(",")}
                assert allow == documented, (path, allow, documented)
