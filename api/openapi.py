"""The OpenAPI document: FastAPI's, completed where routes read their own bodies
(``api.bodies``) and where FastAPI's defaults would misstate the service.

* Request bodies validated by the routes are documented by reference; their schemas are added
  to ``components`` here, so every ``$ref`` of the document resolves.
* Reads without a required key are marked optionally authenticated (``{}``).
* Error answers are JSON everywhere, also on routes whose success is HTML.
* Operations with a JSON body say that integers are written as integers (strict JSON); on
  PostgreSQL, operations taking text say that it cannot hold NUL characters.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from pydantic import TypeAdapter

_REF = "#/components/schemas/{model}"
_REQUEST_SCHEMAS: dict[str, Any] = {}


def register_request_schema(name: str, schema: Any) -> None:
    """Document ``schema`` (a type pydantic validates) as ``#/components/schemas/<name>``."""
    _REQUEST_SCHEMAS[name] = schema


def _add_request_schemas(components: dict[str, Any]) -> None:
    inputs = [
        (name, "validation", TypeAdapter(schema)) for name, schema in _REQUEST_SCHEMAS.items()
    ]
    if not inputs:
        return
    mapping, definitions = TypeAdapter.json_schemas(inputs, ref_template=_REF)  # type: ignore[arg-type]
    generated: dict[str, Any] = dict(definitions.get("$defs", {}))
    for (name, _mode), schema in mapping.items():
        if schema.get("$ref") != _REF.format(model=name):
            generated[name] = schema
    # A name FastAPI already uses for another schema (a response model's serialization form,
    # say) is renamed on our side, references included.
    text = json.dumps(generated)
    for name in list(generated):
        if name in components and components[name] != generated[name]:
            text = text.replace(f'"{_REF.format(model=name)}"', f'"{_REF.format(model=name)}Input"')
            text = text.replace(f'"{name}":', f'"{name}Input":', 1)
    components.update(json.loads(text))


def _operations(paths: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every operation of the document's ``paths``, to be completed in place."""
    for item in paths.values():
        yield from item.values()


def _add_note(operation: dict[str, Any], note: str) -> None:
    """Append ``note`` to the operation's description as a paragraph of its own."""
    text = operation.get("description", "").rstrip()
    operation["description"] = f"{text}\n\n{note}".lstrip()


def _mark_optional_auth(paths: dict[str, Any]) -> None:
    # Reads take the key from the header themselves (``api.security.reader``), for speed.
    for operation in _operations(paths):
        if "security" not in operation:
            operation["security"] = [{"ApiKey": []}, {}]


def _errors_are_json(paths: dict[str, Any]) -> None:
    # FastAPI gives documented error responses the route's media type (text/html for the HTML
    # leaderboard); the errors themselves are JSON.
    for operation in _operations(paths):
        for code, response in operation.get("responses", {}).items():
            content = response.get("content", {})
            if code[:1] in "45" and "application/json" not in content and content:
                schema = next(iter(content.values())).get("schema", {})
                response["content"] = {"application/json": {"schema": schema}}


# JSON Schema's integers are numbers without a fractional part, 3.0 and 3e0 included; the
# service reads JSON strictly and wants them written as integers.
INTEGER_FORM = (
    "Integers in the JSON body are written as integers: 3, not 3.0 or 3e0 (the same number to "
    "JSON Schema, which cannot state this rule)."
)


def _note_integer_form(paths: dict[str, Any]) -> None:
    for operation in _operations(paths):
        if "application/json" in operation.get("requestBody", {}).get("content", {}):
            _add_note(operation, INTEGER_FORM)


NUL_TEXT = (
    "On this server (PostgreSQL), text holding a NUL (0x00) character is refused (422): the "
    "database cannot store it."
)


def _note_nul_text(paths: dict[str, Any]) -> None:
    for operation in _operations(paths):
        if operation.get("parameters") or operation.get("requestBody"):
            _add_note(operation, NUL_TEXT)


def install(app: FastAPI, *, refuses_nul_text: bool = False) -> None:
    """Complete ``app``'s OpenAPI document; ``refuses_nul_text``: the database is PostgreSQL."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            _add_request_schemas(document.setdefault("components", {}).setdefault("schemas", {}))
            _mark_optional_auth(document["paths"])
            _errors_are_json(document["paths"])
            _note_integer_form(document["paths"])
            if refuses_nul_text:
                _note_nul_text(document["paths"])
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
