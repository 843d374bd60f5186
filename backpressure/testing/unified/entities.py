"""Entities of a unified test (clients, databases, collections, sessions, saved results).

:class:`TestContext` carries what operations need: the entity map, the matcher, the fail points
to turn off after the test, and the factory that opens client entities (which knows the preset,
sync or async, and the deployment). ``create_entities`` implements ``createEntities``.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import make_read_preference
from pymongo.write_concern import WriteConcern

from backpressure.testing.unified.events import EventRecorder
from backpressure.testing.unified.matching import Matcher

__all__ = [
    "ClientEntity",
    "EntityMap",
    "TestContext",
    "Unsupported",
    "create_entities",
    "maybe_await",
    "read_concern",
    "read_preference",
    "write_concern",
]


class Unsupported(Exception):
    """The test needs something the runner or the client does not support: it is skipped."""


async def maybe_await(value: Any) -> Any:
    """Await ``value`` when it is awaitable (async client), else return it (sync client)."""
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass
class ClientEntity:
    """A client entity: the pymongo client and the recorder of its events."""

    id: str
    """Entity id."""
    client: Any
    """``MongoClient``/``AsyncMongoClient`` (stock or ``backpressure``)."""
    recorder: EventRecorder
    """Events the entity observes."""


@dataclass
class EntityMap:
    """Entities by id with their kind (client, database, collection, session, ...)."""

    values: dict[str, tuple[str, Any]] = field(default_factory=dict)
    """id -> (kind, value)."""
    lsids: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Session id -> lsid, kept after the session ends (``$$sessionLsid``)."""

    def add(self, kind: str, entity_id: str, value: Any) -> None:
        """Add an entity; ids are unique within a test."""
        if entity_id in self.values:
            raise ValueError(f"entity {entity_id!r} already exists")
        self.values[entity_id] = (kind, value)

    def get(self, entity_id: str) -> Any:
        """The entity's value."""
        return self.entry(entity_id)[1]

    def kind(self, entity_id: str) -> str:
        """The entity's kind."""
        return self.entry(entity_id)[0]

    def entry(self, entity_id: str) -> tuple[str, Any]:
        """(kind, value) of an entity."""
        try:
            return self.values[entity_id]
        except KeyError:
            raise ValueError(f"no entity {entity_id!r}") from None

    def client(self, entity_id: str) -> ClientEntity:
        """A client entity."""
        kind, value = self.entry(entity_id)
        if kind != "client":
            raise ValueError(f"entity {entity_id!r} is a {kind}, not a client")
        return value  # type: ignore[no-any-return]

    def session_lsid(self, entity_id: str) -> Mapping[str, Any]:
        """The lsid of a session entity (also after it ended)."""
        if entity_id not in self.lsids:
            raise ValueError(f"no session entity {entity_id!r}")
        return self.lsids[entity_id]


@dataclass
class TestContext:
    """Everything an operation of one test can reach."""

    __test__ = False  # not a pytest test class

    entities: EntityMap
    """The test's entities."""
    open_client: Callable[[Mapping[str, Any]], ClientEntity]
    """Open a client entity from its ``createEntities`` description."""
    is_async: bool
    """Whether client entities are ``AsyncMongoClient`` instances."""
    topology: str
    """The deployment's topology (``single``, ``replicaset``, ``sharded``...)."""
    fail_points: list[tuple[Any, str]] = field(default_factory=list)
    """(client, fail point name) to turn off after the test."""
    internal_client: Any = None
    """The runner's sync ``MongoClient`` (``assertCollectionExists`` and friends read with it)."""
    direct_clients: dict[str, Any] = field(default_factory=dict)
    """Sync clients connected directly to one server (``host:port``), closed after the test."""
    matcher: Optional[Matcher] = None
    """The matcher (set once the entity map exists)."""

    def get_matcher(self) -> Matcher:
        """The matcher, created on first use."""
        if self.matcher is None:
            self.matcher = Matcher(self.entities.get, self.entities.session_lsid)
        return self.matcher


def read_concern(doc: Optional[Mapping[str, Any]]) -> Optional[ReadConcern]:
    """A ``ReadConcern`` from ``{"level": ...}``."""
    return None if doc is None else ReadConcern(doc.get("level"))


def write_concern(doc: Optional[Mapping[str, Any]]) -> Optional[WriteConcern]:
    """A ``WriteConcern`` from ``{"w": ..., "j": ..., "wtimeoutMS": ...}``."""
    if doc is None:
        return None
    return WriteConcern(w=doc.get("w"), wtimeout=doc.get("wtimeoutMS"), j=doc.get("journal"))


def read_preference(doc: Optional[Mapping[str, Any]]) -> Any:
    """A read preference from ``{"mode": ..., "tagSets": ..., "maxStalenessSeconds": ...}``."""
    if doc is None:
        return None
    unknown = set(doc) - {"mode", "tagSets", "maxStalenessSeconds", "hedge"}
    if unknown:
        raise Unsupported(f"read preference options {sorted(unknown)} are not supported")
    mode = doc["mode"]
    mode_name = mode[0].lower() + mode[1:]
    mode_number = {
        "primary": 0,
        "primaryPreferred": 1,
        "secondary": 2,
        "secondaryPreferred": 3,
        "nearest": 4,
    }[mode_name]
    return make_read_preference(mode_number, doc.get("tagSets"), doc.get("maxStalenessSeconds", -1))


def _database_options(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``databaseOptions``/``collectionOptions`` as pymongo keyword arguments."""
    unknown = set(doc) - {"readConcern", "writeConcern", "readPreference", "timeoutMS"}
    if unknown:
        raise Unsupported(f"database/collection options {sorted(unknown)} are not supported")
    if "timeoutMS" in doc:
        raise Unsupported("timeoutMS on a database or collection entity is not supported")
    options: dict[str, Any] = {}
    if "readConcern" in doc:
        options["read_concern"] = read_concern(doc["readConcern"])
    if "writeConcern" in doc:
        options["write_concern"] = write_concern(doc["writeConcern"])
    if "readPreference" in doc:
        options["read_preference"] = read_preference(doc["readPreference"])
    return options


def _session_options(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``sessionOptions`` as ``start_session`` keyword arguments."""
    # Where TransactionOptions lives moved between pymongo releases; the public module has it.
    transaction_options = importlib.import_module("pymongo.client_session").TransactionOptions
    options: dict[str, Any] = {}
    for key, value in doc.items():
        if key == "causalConsistency":
            options["causal_consistency"] = value
        elif key == "snapshot":
            options["snapshot"] = value
        elif key == "defaultTransactionOptions":
            options["default_transaction_options"] = transaction_options(
                read_concern=read_concern(value.get("readConcern")),
                write_concern=write_concern(value.get("writeConcern")),
                read_preference=read_preference(value.get("readPreference")),
                max_commit_time_ms=value.get("maxCommitTimeMS"),
            )
        else:
            raise Unsupported(f"session option {key!r} is not supported")
    return options


_UNSUPPORTED_ENTITIES = ("thread", "clientEncryption")


def _bucket(db: Any, options: Mapping[str, Any]) -> Any:
    """A GridFS bucket of the database entity's flavour (sync, async or Motor)."""
    unknown = set(options) - {"bucketName", "chunkSizeBytes", "writeConcern", "readPreference"}
    if unknown:
        raise Unsupported(f"bucketOptions {sorted(unknown)} are not supported")
    kwargs: dict[str, Any] = {}
    if "bucketName" in options:
        kwargs["bucket_name"] = options["bucketName"]
    if "chunkSizeBytes" in options:
        kwargs["chunk_size_bytes"] = options["chunkSizeBytes"]
    if "writeConcern" in options:
        kwargs["write_concern"] = write_concern(options["writeConcern"])
    if "readPreference" in options:
        kwargs["read_preference"] = read_preference(options["readPreference"])
    if type(db).__module__.startswith("motor"):
        from motor.motor_asyncio import AsyncIOMotorGridFSBucket

        return AsyncIOMotorGridFSBucket(db, **kwargs)
    import gridfs

    if inspect.iscoroutinefunction(type(db).command):
        return gridfs.AsyncGridFSBucket(db, **kwargs)
    return gridfs.GridFSBucket(db, **kwargs)


MONGOS_DISCOVERY_TIMEOUT = 10.0
"""Seconds a multi-mongos client entity may take to discover every mongos of its URI."""


async def _await_every_mongos(client: Any) -> None:
    """Wait until ``client`` knows the type of every mongos in its seed list.

    Tests that retry on "the other mongos" need both to be selectable from the first
    operation; a client that has heard from only one would send the retry back to it.
    Past the timeout the test runs anyway and fails on its own expectations.
    """
    deadline = time.monotonic() + MONGOS_DISCOVERY_TIMEOUT
    while time.monotonic() < deadline:
        servers = client.topology_description.server_descriptions().values()
        if all(server.is_server_type_known for server in servers):
            return
        await asyncio.sleep(0.01)


async def create_entities(ctx: TestContext, docs: list[Mapping[str, Any]]) -> None:
    """Create the entities described by a ``createEntities`` array, in order."""
    for item in docs:
        ((kind, spec),) = item.items()
        if kind in _UNSUPPORTED_ENTITIES:
            raise Unsupported(f"{kind} entities are not supported")
        entity_id = spec["id"]
        if kind == "client":
            entity = ctx.open_client(spec)
            ctx.entities.add("client", entity_id, entity)
            if ctx.is_async:
                # An AsyncMongoClient starts monitoring only when connected (sync ones at once).
                await entity.client.aconnect()
            if ctx.topology == "sharded" and spec.get("useMultipleMongoses", True):
                await _await_every_mongos(entity.client)
        elif kind == "database":
            client = ctx.entities.client(spec["client"]).client
            options = _database_options(spec.get("databaseOptions", {}))
            db = client.get_database(spec["databaseName"], **options)
            ctx.entities.add("database", entity_id, db)
        elif kind == "collection":
            db = ctx.entities.get(spec["database"])
            options = _database_options(spec.get("collectionOptions", {}))
            coll = db.get_collection(spec["collectionName"], **options)
            ctx.entities.add("collection", entity_id, coll)
        elif kind == "session":
            client = ctx.entities.client(spec["client"]).client
            options = _session_options(spec.get("sessionOptions", {}))
            session = await maybe_await(client.start_session(**options))
            ctx.entities.add("session", entity_id, session)
            ctx.entities.lsids[entity_id] = dict(session.session_id)
        elif kind == "bucket":
            db = ctx.entities.get(spec["database"])
            ctx.entities.add("bucket", entity_id, _bucket(db, spec.get("bucketOptions", {})))
        else:
            raise Unsupported(f"unknown entity type {kind!r}")
