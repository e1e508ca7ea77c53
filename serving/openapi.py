"""The request bodies of ``POST /event`` and ``/batch`` in the OpenAPI document, from the plan (SPEC §4, §2.2).

The routes read their bodies themselves (one JSON parse, errors in SPEC
§4's shape), so FastAPI cannot see them. This module writes them into
``/openapi.json``: an event is one of the topology's event types, each an
object with ``_type`` (that type), optional ``_time`` (ISO-8601 text or epoch
ms) and ``_id``, and its inputs (``$.a.b`` paths become nested objects;
``bool`` boolean, ``int`` integer, ``float`` number, ``string`` string,
``time`` ISO-8601 text or epoch ms; ``?`` inputs and inputs with a default
are optional and nullable). Other fields are allowed and ignored, as the API
ignores them. Clients and generated test cases (``tests/serving/test_fuzz.py``,
schemathesis) read it from there.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from compiler.plan import Plan

__all__ = ["event_schema", "install_event_schemas"]

_JSON_TYPES: dict[str, dict[str, Any]] = {
    "bool": {"type": "boolean"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "string": {"type": "string"},
    "time": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "integer"}]},
}


def _place(props: dict, required: list, path: tuple[str, ...], schema: dict, needed: bool) -> None:
    """Put ``schema`` at ``path`` in a nested ``properties`` tree."""
    head, rest = path[0], path[1:]
    if not rest:
        props[head] = schema
        if needed and head not in required:
            required.append(head)
        return
    node = props.setdefault(head, {"type": "object", "properties": {}, "required": []})
    if "properties" not in node:  # the path also names a leaf: keep the leaf's schema
        return
    if needed and head not in required:
        required.append(head)
    _place(node["properties"], node["required"], rest, schema, needed)


def _drop_empty_required(schema: dict) -> dict:
    if schema.get("required") == []:
        del schema["required"]
    for sub in schema.get("properties", {}).values():
        _drop_empty_required(sub)
    return schema


def event_schema(plan: Plan) -> dict[str, Any]:
    """Return the JSON Schema of one event of ``plan`` (module docstring): a ``oneOf`` over the event types."""
    variants = []
    for name, ep in sorted(plan.events.items()):
        props: dict[str, Any] = {
            "_type": {"type": "string", "enum": [name]},
            "_time": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "integer"}]},
            "_id": {"type": "string"},
        }
        required: list[str] = ["_type"]
        for f in ep.features:
            if f.kind != "input" or f.input is None:
                continue
            spec = f.input
            base = _JSON_TYPES.get(f.type, {})
            optional = spec.optional or spec.has_default
            schema = {"anyOf": [base, {"type": "null"}]} if optional and base else dict(base)
            _place(props, required, tuple(spec.path), schema, needed=not optional)
        variants.append(_drop_empty_required({"type": "object", "title": name, "properties": props,
                                              "required": required, "additionalProperties": True}))
    return {"oneOf": variants} if len(variants) > 1 else variants[0]


def install_event_schemas(app: FastAPI, plan: Plan) -> None:
    """Make ``app.openapi()`` include the request bodies of ``/event`` (one event) and ``/batch`` (an array)."""
    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = base_openapi()
        one = event_schema(plan)
        doc.setdefault("components", {}).setdefault("schemas", {})["Event"] = one
        ref = {"$ref": "#/components/schemas/Event"}
        bodies = {"/event": ref, "/batch": {"type": "array", "items": ref}}
        for path, schema in bodies.items():
            op = doc.get("paths", {}).get(path, {}).get("post")
            if op is not None:
                op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
        app.openapi_schema = doc
        return doc

    app.openapi = openapi
