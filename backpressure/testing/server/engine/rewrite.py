"""Rewrite command bodies into forms mongomock understands, before they are executed.

* ``let`` variables: ``"$$name"`` strings become ``{"$literal": value}`` (mongomock has no
  variables), in the whole body except the documents being inserted.
* ``$replaceWith: expr`` stages become ``$replaceRoot: {newRoot: expr}``.
* ``{$type: "null"}`` (or 10) conditions become ``{$exists: true, $eq: null}``.
* Under a case-insensitive ``collation`` (strength 1 or 2), string equality conditions become
  anchored case-insensitive regular expressions (accents stay significant).

Each function returns new containers where it changes something and never mutates its input.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "case_insensitive",
    "rewrite_body",
    "rewrite_filter",
    "rewrite_pipeline",
    "substitute_variables",
]

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


def case_insensitive(collation: Any) -> bool:
    """True for a collation that compares strings ignoring case (strength 1 or 2)."""
    return (
        isinstance(collation, Mapping)
        and collation.get("locale") not in (None, "simple")
        and collation.get("strength") in (1, 2)
    )


def _ci_regex(text: str) -> dict[str, Any]:
    return {"$regex": f"^{re.escape(text)}$", "$options": "i"}


def rewrite_filter(query: Any, ci: bool = False) -> Any:
    """Rewrite ``$type: null`` (and, with ``ci``, string equality) conditions of a filter."""
    if not isinstance(query, Mapping):
        return query
    out: dict[str, Any] = {}
    for key, value in query.items():
        if key in ("$and", "$or", "$nor") and isinstance(value, list):
            out[key] = [rewrite_filter(item, ci) for item in value]
        elif not key.startswith("$") and isinstance(value, Mapping):
            out[key] = _rewrite_condition(value, ci)
        elif ci and not key.startswith("$") and isinstance(value, str):
            out[key] = _ci_regex(value)
        else:
            out[key] = value
    return out


def _rewrite_condition(condition: Mapping[str, Any], ci: bool = False) -> Any:
    if ci and isinstance(condition.get("$eq"), str) and "$regex" not in condition:
        fixed = {key: value for key, value in condition.items() if key != "$eq"}
        return {**fixed, **_ci_regex(condition["$eq"])}
    if condition.get("$type") not in _NULL_TYPES or "$eq" in condition:
        return condition
    fixed = {key: value for key, value in condition.items() if key != "$type"}
    fixed.setdefault("$exists", True)
    fixed["$eq"] = None
    return fixed


def rewrite_pipeline(pipeline: Any, ci: bool = False) -> Any:
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
                stage = {"$match": rewrite_filter(spec, ci)}
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
                ci = case_insensitive(stmt.get("collation"))
                stmt[filter_key] = rewrite_filter(stmt[filter_key], ci)
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
    ci = case_insensitive(body.get("collation"))
    if name == "find" and "filter" in body:
        return {**body, "filter": rewrite_filter(body["filter"], ci)}
    if name in ("count", "distinct") and "query" in body:
        return {**body, "query": rewrite_filter(body["query"], ci)}
    if name == "aggregate":
        return {**body, "pipeline": rewrite_pipeline(body.get("pipeline"), ci)}
    if name == "delete":
        return {**body, "deletes": _rewrite_statements(body.get("deletes"), "q")}
    if name == "update":
        return {**body, "updates": _rewrite_statements(body.get("updates"), "q", "u")}
    if name == "findAndModify":
        rewritten = {**body, "query": rewrite_filter(body.get("query"), ci)}
        if isinstance(body.get("update"), list):
            rewritten["update"] = rewrite_pipeline(body["update"])
        return rewritten
    if name == "bulkWrite":
        return {**body, "ops": _rewrite_statements(body.get("ops"), "filter", "updateMods")}
    return body
