"""Property-based tests of the whole OpenAPI schema against the live server (schemathesis):
no 5xx, documented status codes and content types, responses matching their schemas. Writes are
authenticated, so the generated bodies reach the handlers rather than stopping at 401."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import Service

MAX_EXAMPLES = 25


@schemathesis.serializer("text/csv")
def _csv(ctx: object, value: object) -> bytes:
    return value.encode() if isinstance(value, str) else str(value).encode()


@pytest.fixture(scope="module")
def api_schema(service: Service) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{service.base_url}/v1/openapi.json")


def _check_operation(operation: schemathesis.APIOperation, service: Service) -> None:
    @given(case=operation.as_strategy())
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
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
                not_a_server_error,
                response_schema_conformance,
            ],
        )

    check()


def test_api_conforms_to_its_schema(api_schema: schemathesis.BaseSchema, service: Service) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20
    for operation in operations:
        _check_operation(operation, service)
