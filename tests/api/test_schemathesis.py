"""Property-based tests of the whole OpenAPI schema against the live server (schemathesis):
no 5xx, documented status codes, content types and headers, responses matching their schemas,
schema-valid requests accepted, and 405 answers that list every method of a path in ``Allow``.

Two runs with a random seed, printed and settable with ``SCHEMATHESIS_SEED`` to replay one:
authenticated (the generated bodies reach the handlers) and anonymous (every write is a 401,
whatever its body: the key is checked first).

A schema-valid request may only be refused (422) by a rule no schema can state: it depends on
stored data or on a file's content, or relates fields in a way JSON Schema cannot express.
Each such rule is named in its operation's description; ``RULES`` pairs the refusals seen
with the words of the description that name them, and the test checks both."""

from __future__ import annotations

import json
import os
import random
import re
from collections import Counter

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

from idealized_runtime.api.openapi import INTEGER_FORM
from tests.api.conftest import Service

EXAMPLES = 30  # per operation, authenticated
# Anonymous: every write is refused from its headers before its body is read, and the reads
# are the authenticated run's; fewer bodies say as much.
ANONYMOUS_EXAMPLES = 10

# (what a 422's detail says, what the operation's description must say about it)
RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p), phrase)
    for p, phrase in [
        # stored data
        (
            r"beta cannot be fitted|output lengths|num_output_tokens = 1|mixes batch sizes"
            r"|too few for|regression failed|fit failed on these timings",
            "timings the method cannot fit",
        ),
        (r"has no rows of the requested models", "without rows of the requested models"),
        (r"\d+ (rows|requests|models x requests) in one batch; at most", "max_batch_rows"),
        (r"IDEALIZED_RUNTIME_MAX_(PLAN_EVALUATIONS|SIMULATED_REQUESTS)", "than the server allows"),
        # the streaming parser of measurement sets holds integers in 64 bits
        (r"integer overflow", "integers beyond 64 bits"),
        (r"tensor-parallel|does not fit|cannot be split|GPUs", "does not fit"),
        (r"output tokens exceed the context length of", "longer than the architecture's context"),
        (r"beyond floating-point range", "beyond floating-point range"),
        (r"no deployment of .* could be evaluated", "no deployment could be evaluated"),
        (r"^unknown stack '", "an unknown stack"),
        # a grammar (int4-gN: N a power of two >= 8) the schema gives in words, not a pattern
        (
            r"^unknown (weight|activation) format '|the group size after -g",
            "an unknown stack or format",
        ),
        (r"prefix tokens or a prefix-cache hit rate, not both", "hit rate together"),
        (r"shared prefix of \d+ tokens is longer than the prompts", "longer than the prompts"),
        # a file's content: CSV, JSONL, archives, HF config.json objects
        (r"^upload(:|,| )", "file's content"),
        (r"no summaries \(or no request rows\)|line \d+ is not a JSON object", "raw rows"),
        (r"the HELM runs hold no request", "file's content"),
        (r'"config[:,]|config\.json|config: ', "content of `config`"),
        (r"fp8|precision|tensor cores|weights", "precision and hardware pair"),
        (r"too large to store", "2**63 - 1"),  # a derived count: an architecture's weights
        (r"NUL \(0x00\)", "NUL (0x00)"),  # text PostgreSQL cannot store
        # a rule between a parameter and the media type
        (r"slo applies to raw rows", "`slo` with a JSON body"),
        # a rule between two parameters
        (r"from is after to", "`from` after `to`"),
    ]
]
# Whole-object rules (an architecture's shapes, a precision's pairs, ttft_s within runtime_s):
# validators report them at the object, not at a field, with these words.
CROSS_FIELD_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p), phrase)
    for p, phrase in [
        (r"divisible|multiple of|experts_per_token|sliding_window|latent|n_group|q_lora_rank"
         r"|layer_pattern", "shapes do not fit together"),
        (r"weights|activations|dequantize", "formats that pair"),
        (r"ttft_s .* greater than runtime_s", "ttft_s is greater than its runtime_s"),
        (r"finished_at is before started_at|failed_requests is more than requests"
         r"|status must be ok or degraded when|status must be degraded only when",
         "rules between fields of the round"),
        (r"must be between .*, not", "outside its metric's range"),
    ]
]  # fmt: skip


def _detail(response: object) -> object:
    try:
        return response.json()["detail"]  # type: ignore[attr-defined]
    except (ValueError, KeyError, TypeError):
        return None


def _whole_object(item: dict) -> bool:
    """A whole-object validator's error (at the body, a tagged form of it, a list item, a
    nested precision), as opposed to a field's own."""
    loc = item.get("loc", [])
    whole = ("body", "architecture", "hf_config", "precision")
    return (
        item.get("type") == "value_error"
        and bool(loc)
        and loc[0] == "body"
        and (loc[-1] in whole or isinstance(loc[-1], int))
    )


class Refusals:
    """The documented refusals a run met, per rule (printed: what the run exercised)."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def _named(self, rules: list, text: str, description: str, label: str) -> bool:
        for pattern, phrase in rules:
            if pattern.search(text) and phrase in description:
                self.seen[f"{label}: {phrase}"] += 1
                return True
        return False

    def accepts(self, response: object, case: schemathesis.Case) -> bool:
        """Whether a 422 to a schema-valid request is a documented rule of its operation: a
        handler's refusal (one sentence), or validation errors each of which is an integer
        written as 3.0 or 3e0 or a whole-object rule."""
        description = case.operation.definition.raw.get("description", "")
        label = case.operation.label
        detail = _detail(response)
        if isinstance(detail, str):
            return self._named(RULES, detail, description, label)
        if not isinstance(detail, list) or not detail:
            return False
        for item in detail:
            message = item.get("msg", "")
            if "written as one" in message and INTEGER_FORM in description:
                self.seen[f"{label}: integers written as such"] += 1
            elif not (
                (_whole_object(item) or item.get("type") == "json_invalid")
                and self._named([*CROSS_FIELD_RULES, *RULES], message, description, label)
            ):
                return False
        return True


def _accepts_schema_valid_data(refusals: Refusals):  # type: ignore[no-untyped-def]
    def check(ctx: object, response: object, case: schemathesis.Case) -> None:
        status = getattr(response, "status_code", 0)
        if status == 422 and refusals.accepts(response, case):
            return None
        return positive_data_acceptance(ctx, response, case)

    return check


def _integers_as_integers(value: object) -> object:
    """``value`` with whole floats (3.0, as hypothesis writes JSON Schema integers) written as
    integers. Harmless for number fields (JSON numbers either way); integer fields want them
    so (the service reads JSON strictly; tested in test_request_rules). More generated bodies
    reach the handlers."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _integers_as_integers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integers_as_integers(item) for item in value]
    return value


@schemathesis.serializer("application/json")
def _json(ctx: object, value: object) -> bytes:
    return json.dumps(_integers_as_integers(value)).encode()


@schemathesis.serializer("application/gzip", "application/zip")
def _archive(ctx: object, value: object) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


@schemathesis.serializer("text/csv")
def _csv(ctx: object, value: object) -> bytes:
    return value.encode() if isinstance(value, str) else str(value).encode()


@pytest.fixture(scope="module")
def api_schema(service: Service) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{service.base_url}/v1/openapi.json")


def _run_seed() -> int:
    run_seed = int(os.environ.get("SCHEMATHESIS_SEED") or random.randrange(2**32))
    print(f"schemathesis seed: {run_seed} (replay: SCHEMATHESIS_SEED={run_seed})")
    return run_seed


def _is_write(operation: schemathesis.APIOperation) -> bool:
    # Writes require the key; reads list the anonymous alternative ({}) too.
    return {} not in operation.definition.raw.get("security", [{}])


def _check_operation(
    operation: schemathesis.APIOperation,
    headers: dict[str, str],
    run_seed: int,
    refusals: Refusals,
    *,
    anonymous: bool,
) -> None:
    @seed(run_seed)
    @given(case=operation.as_strategy())
    @settings(
        max_examples=ANONYMOUS_EXAMPLES if anonymous else EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=False,
        database=None,
    )
    def check(case: schemathesis.Case) -> None:
        response = case.call(headers=headers, timeout=60)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}"
        )
        if anonymous and _is_write(operation):
            # Refused from the headers: never a 415 or 422 about a body it did not read.
            assert response.status_code == 401, (case.method, case.path, response.text[:300])
        case.validate_response(
            response,
            checks=[
                not_a_server_error,
                status_code_conformance,
                content_type_conformance,
                response_headers_conformance,
                response_schema_conformance,
                _accepts_schema_valid_data(refusals),
            ],
        )

    try:
        check()
    except BaseException as error:
        error.add_note(f"schemathesis seed {run_seed}: rerun with SCHEMATHESIS_SEED={run_seed}")
        raise


def _operations(api_schema: schemathesis.BaseSchema) -> list[schemathesis.APIOperation]:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20
    return operations


def test_api_conforms_to_its_schema(api_schema: schemathesis.BaseSchema, service: Service) -> None:
    run_seed, refusals = _run_seed(), Refusals()
    for operation in _operations(api_schema):
        _check_operation(operation, service.auth, run_seed, refusals, anonymous=False)
    print("documented refusals met:", dict(refusals.seen))


def test_api_conforms_to_its_schema_anonymously(
    api_schema: schemathesis.BaseSchema, service: Service
) -> None:
    run_seed, refusals = _run_seed(), Refusals()
    for operation in _operations(api_schema):
        _check_operation(operation, {}, run_seed, refusals, anonymous=True)


def test_every_refusal_rule_is_named_where_it_applies(
    api_schema: schemathesis.BaseSchema, service: Service
) -> None:
    # The phrases RULES looks for are in the document: a renamed description fails here, not
    # only on the run that happens to meet the rule.
    descriptions = " ".join(
        operation.definition.raw.get("description", "") for operation in _operations(api_schema)
    )
    for _pattern, phrase in [*RULES, *CROSS_FIELD_RULES]:
        if phrase == "NUL (0x00)" and service.backend == "sqlite":
            continue  # SQLite stores it
        assert phrase in descriptions, phrase


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


def test_every_reference_resolves(api_schema: schemathesis.BaseSchema) -> None:
    document = api_schema.raw_schema
    references = set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(document)))
    assert references <= set(document["components"]["schemas"]), references
