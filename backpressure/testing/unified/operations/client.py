"""Operations on client entities."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backpressure.testing.unified.entities import (
    TestContext,
    Unsupported,
    maybe_await,
    write_concern,
)
from backpressure.testing.unified.operations.arguments import Arguments, Operation, to_list
from backpressure.testing.unified.operations.shared import close, watch
from backpressure.testing.unified.operations.write_models import write_model

__all__ = ["CLIENT_OPERATIONS"]


async def _client_list_databases(ctx: TestContext, client: Any, raw: dict[str, Any]) -> Any:
    """``listDatabases``."""
    args = Arguments(ctx, "listDatabases", raw)
    kwargs = {**args.session(), **args.options({"nameOnly": "nameOnly", "comment": "comment"})}
    if (flt := args.optional("filter")) is not None:
        kwargs["filter"] = flt
    if (authorized := args.optional("authorizedDatabases")) is not None:
        kwargs["authorizedDatabases"] = authorized
    args.done()
    return await to_list(await maybe_await(client.list_databases(**kwargs)))


async def _client_list_database_names(ctx: TestContext, client: Any, raw: dict[str, Any]) -> Any:
    """``listDatabaseNames``."""
    args = Arguments(ctx, "listDatabaseNames", raw)
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    if args.optional("filter"):
        raise Unsupported("listDatabaseNames: pymongo's list_database_names takes no filter")
    args.done()
    return await maybe_await(client.list_database_names(**kwargs))


def _client_bulk_model(model: Mapping[str, Any]) -> Any:
    """One ``clientBulkWrite`` model as a pymongo operation with a namespace."""
    ((name, spec),) = model.items()
    spec = dict(spec)
    namespace = spec.pop("namespace")
    return write_model(name, spec, namespace=namespace)


async def _client_bulk_write(ctx: TestContext, client: Any, raw: dict[str, Any]) -> Any:
    """``clientBulkWrite``."""
    if not hasattr(client, "bulk_write"):
        raise Unsupported("clientBulkWrite needs pymongo >= 4.9")
    args = Arguments(ctx, "clientBulkWrite", raw)
    models = [_client_bulk_model(m) for m in args.required("models")]
    kwargs = {
        **args.session(),
        **args.options(
            {
                "ordered": "ordered",
                "verboseResults": "verbose_results",
                "bypassDocumentValidation": "bypass_document_validation",
                "comment": "comment",
                "let": "let",
            }
        ),
    }
    if "writeConcern" in raw:
        kwargs["write_concern"] = write_concern(args.required("writeConcern"))
    args.done()
    return await maybe_await(client.bulk_write(models, **kwargs))


CLIENT_OPERATIONS: dict[str, Operation] = {
    "listDatabases": _client_list_databases,
    "listDatabaseObjects": _client_list_databases,
    "listDatabaseNames": _client_list_database_names,
    "createChangeStream": watch,
    "clientBulkWrite": _client_bulk_write,
    "close": close,
}
"""Operations on client entities."""
