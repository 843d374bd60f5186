"""Operations on database entities."""

from __future__ import annotations

from typing import Any

from backpressure.testing.unified.entities import TestContext, maybe_await, read_preference
from backpressure.testing.unified.operations.arguments import Arguments, Operation, to_list
from backpressure.testing.unified.operations.shared import aggregate, watch

__all__ = ["DATABASE_OPERATIONS"]


async def _db_list_collections(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``listCollections``."""
    args = Arguments(ctx, "listCollections", raw)
    kwargs = {**args.session(), **args.options({"batchSize": "batchSize", "comment": "comment"})}
    kwargs["filter"] = args.optional("filter")
    if (name_only := args.optional("nameOnly")) is not None:
        kwargs["nameOnly"] = name_only
    args.done()
    return await to_list(await maybe_await(db.list_collections(**kwargs)))


async def _db_list_collection_names(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``listCollectionNames``."""
    args = Arguments(ctx, "listCollectionNames", raw)
    kwargs = {**args.session(), **args.options({"comment": "comment"})}
    kwargs["filter"] = args.optional("filter")
    args.done()
    return await maybe_await(db.list_collection_names(**kwargs))


async def _db_run_command(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``runCommand``."""
    args = Arguments(ctx, "runCommand", raw)
    command = args.required("command")
    args.optional("commandName")
    kwargs = args.session()
    if (pref := args.optional("readPreference")) is not None:
        kwargs["read_preference"] = read_preference(pref)
    args.done()
    return await maybe_await(db.command(command, **kwargs))


async def _db_create_collection(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``createCollection`` (other options are passed to the command as given)."""
    args = Arguments(ctx, "createCollection", raw)
    name = args.required("collection")
    kwargs = args.session()
    extra = {k: args.required(k) for k in list(raw) if k not in ("collection", "session")}
    args.done()
    await maybe_await(db.create_collection(name, **kwargs, **extra))
    return None


async def _db_drop_collection(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``dropCollection``."""
    args = Arguments(ctx, "dropCollection", raw)
    name = args.required("collection")
    kwargs = args.session()
    args.done()
    await maybe_await(db.drop_collection(name, **kwargs))
    return None


async def _db_modify_collection(ctx: TestContext, db: Any, raw: dict[str, Any]) -> Any:
    """``modifyCollection``: the ``collMod`` command (pymongo has no helper); options as given."""
    args = Arguments(ctx, "modifyCollection", raw)
    name = args.required("collection")
    kwargs = args.session()
    options = {k: args.required(k) for k in list(raw) if k not in ("collection", "session")}
    args.done()
    await maybe_await(db.command({"collMod": name, **options}, **kwargs))
    return None


DATABASE_OPERATIONS: dict[str, Operation] = {
    "aggregate": aggregate,
    "listCollections": _db_list_collections,
    "listCollectionObjects": _db_list_collections,
    "listCollectionNames": _db_list_collection_names,
    "runCommand": _db_run_command,
    "createChangeStream": watch,
    "createCollection": _db_create_collection,
    "dropCollection": _db_drop_collection,
    "modifyCollection": _db_modify_collection,
}
"""Operations on database entities."""
