"""Rewrite command bodies into forms mongomock understands, before they are executed.

* ``let`` variables: ``"$$name"`` strings become ``{"$literal": value}`` (mongomock has no
  variables), in the whole body except the documents being inserted.
* ``$replaceWith: expr`` stages become ``$replaceRoot: {newRoot: expr}``.
* ``{$type: "null"}`` (or 10) conditions become ``{$exists: true, $eq: null}``.

Each function returns new containers where it changes something and never mutates its input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["rewrite_body", "rewrite_filter", "rewrite_pipeline", "substitute_variables"]

_NULL_TYPES = ("null", 10)


def substitute_variables(value: Any, variables: Mapping[str, Any]) -> Any:
    """Replace ``"$$name"`` strings by ``{"$literal": variables[name]}``, recursively."""
    if isinstance(value, str):
        if value.startswith("$$") and value[2:] in variables:
            return _as_expression(variables[value[2:]])
        return value
    if isinstance(value, Mapping):
        return {key: substitute_variables(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute_variables(item, variables) for item in value]
    return value


def _as_expression(value: Any) -> Any:
    """A let value as an expression: strings that look like paths must stay literal."""
    if isinstance(value, Mapping) and set(value) == {"$literal"}:
        inner = value["$literal"]
        if isinstance(inner, (Mapping, list)) or (isinstance(inner, str) and inner.startswith("$")):
            return value
        return inner
    if isinstance(value, str) and value.startswith("$"):
        return {"$literal": value}
    return value


def rewrite_filter(query: Any) -> Any:
    """Rewrite ``$type: null`` conditions of a query filter (logical operators included)."""
    if not isinstance(query, Mapping):
        return query
    out: dict[str, Any] = {}
    for key, value in query.items():
        if key in ("$and", "$or", "$nor") and isinstance(value, list):
            out[key] = [rewrite_filter(item) for item in value]
        elif not key.startswith("$") and isinstance(value, Mapping):
            out[key] = _rewrite_condition(value)
        else:
            out[key] = value
    return out


def _rewrite_condition(condition: Mapping[str, Any]) -> Any:
    if condition.get("$type") not in _NULL_TYPES or "$eq" in condition:
        return condition
    fixed = {key: value for key, value in condition.items() if key != "$type"}
    fixed.setdefault("$exists", True)
    fixed["$eq"] = None
    return fixed


def rewrite_pipeline(pipeline: Any) -> Any:
    """Rewrite ``$replaceWith`` stages and ``$match`` filters of an aggregation pipeline."""
    if not isinstance(pipeline, list):
        return pipeline
    out: list[Any] = []
    for stage in pipeline:
        if isinstance(stage, Mapping) and len(stage) == 1:
            op, spec = next(iter(stage.items()))
            if op == "$replaceWith":
                stage = {"$replaceRoot": {"newRoot": spec}}
            elif op == "$match":
                stage = {"$match": rewrite_filter(spec)}
        out.append(stage)
    return out


def _rewrite_statements(statements: Any, filter_key: str, update_key: str | None = None) -> Any:
    if not isinstance(statements, list):
        return statements
    out: list[Any] = []
    for stmt in statements:
        if isinstance(stmt, Mapping):
            stmt = dict(stmt)
            if filter_key in stmt:
                stmt[filter_key] = rewrite_filter(stmt[filter_key])
            if update_key is not None and isinstance(stmt.get(update_key), list):
                stmt[update_key] = rewrite_pipeline(stmt[update_key])
        out.append(stmt)
    return out


def rewrite_body(name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Return ``body`` rewritten for mongomock (``body`` itself when nothing applies)."""
    variables = body.get("let")
    if isinstance(variables, Mapping) and variables and name != "insert":
        body = {
            key: value if key == "let" else substitute_variables(value, variables)
            for key, value in body.items()
        }
    if name == "find" and "filter" in body:
        return {**body, "filter": rewrite_filter(body["filter"])}
    if name in ("count", "distinct") and "query" in body:
        return {**body, "query": rewrite_filter(body["query"])}
    if name == "aggregate":
        return {**body, "pipeline": rewrite_pipeline(body.get("pipeline"))}
    if name == "delete":
        return {**body, "deletes": _rewrite_statements(body.get("deletes"), "q")}
    if name == "update":
        return {**body, "updates": _rewrite_statements(body.get("updates"), "q", "u")}
    if name == "findAndModify":
        rewritten = {**body, "query": rewrite_filter(body.get("query"))}
        if isinstance(body.get("update"), list):
            rewritten["update"] = rewrite_pipeline(body["update"])
        return rewritten
    if name == "bulkWrite":
        return {**body, "ops": _rewrite_statements(body.get("ops"), "filter", "updateMods")}
    return body
