"""Run unified-format tests (schema up to 1.21) against a deployment with a chosen client preset.

Per test: check ``runOnRequirements`` and ``skipReason``; reset the deployment (embedded server:
data, fail points, sessions); write ``initialData`` through an internal stock client; create the
entities; run the operations, checking ``expectResult``/``expectError``; check ``expectEvents``;
turn off the fail points the test set; close every entity; check ``outcome``. Anything the runner
or the client cannot do raises :class:`Unsupported` and the test is reported as SKIP with the
reason; it never passes silently.

Presets: ``draft``, ``current`` and ``adaptive`` open ``backpressure`` clients with that policy
preset; ``none`` opens stock ``pymongo`` clients (on pymongo >= 4.17 their native backpressure is
the reference behaviour). Client entities may carry the runner extension ``backpressurePolicy`` (see
the README next to this module). With ``fast_backoff`` the jitter source is pinned to 0 (every
backoff sleep is 0 s; attempt counts are unchanged).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import enum
import re
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pymongo
from pymongo import MongoClient
from pymongo.errors import (
    BulkWriteError,
    ClientBulkWriteException,
    NotPrimaryError,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from backpressure.switch.client import state as state_of
from backpressure.testing.unified.entities import (
    ClientEntity,
    EntityMap,
    TestContext,
    Unsupported,
    create_entities,
    maybe_await,
)
from backpressure.testing.unified.events import (
    CMAP_EVENTS,
    COMMAND_EVENTS,
    event_category,
    recorder_for,
)
from backpressure.testing.unified.loader import SpecFile, SpecTest
from backpressure.testing.unified.matching import MISSING, MatchError
from backpressure.testing.unified.operations import (
    OPERATIONS,
    match_event_fields,
    partial_bulk_write_document,
    result_document,
)

__all__ = [
    "DEFAULT_PRESET",
    "FLAVOURS",
    "PRESET_NAMES",
    "SUPPORTED_SCHEMA",
    "Deployment",
    "Outcome",
    "RunnerConfig",
    "TestResult",
    "UnifiedRunner",
    "choose_topology",
    "unmet_requirements",
]

SUPPORTED_SCHEMA = (1, 21)
"""Newest schema version the runner understands.

What 1.18-1.21 added and the runner does not support is reported per test as a skip: named KMS
providers (1.18, client-side encryption), ``authMechanism`` requirements and ``uriOptions``
placeholders (1.19, auth), ``topologyDescriptionChangedEvent`` (1.20). ``writeErrors`` and
``writeConcernErrors`` in ``expectError`` (1.21) are supported.
"""

PRESET_NAMES = ("draft", "current", "adaptive", "none")
"""``--preset`` values: our client with one of the package's policy presets, or stock pymongo."""

DEFAULT_PRESET = "current"
"""The command line's ``--preset``: the package's default preset."""

FLAVOURS = ("sync", "async", "motor")
"""Client flavours: ``MongoClient``, ``AsyncMongoClient``, Motor's ``AsyncIOMotorClient``."""

_SUPPORTED_EVENTS = COMMAND_EVENTS | CMAP_EVENTS | {"serverDescriptionChangedEvent"}
_CLIENT_KEYS = {
    "id",
    "uriOptions",
    "useMultipleMongoses",
    "observeEvents",
    "ignoreCommandMonitoringEvents",
    "observeSensitiveCommands",
    "backpressurePolicy",
}
# The format's topology names for the server's kinds.
_TOPOLOGY_NAMES = {"standalone": "single", "replicaset": "replicaset", "sharded": "sharded"}


class Outcome(str, enum.Enum):
    """What happened to one test."""

    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class TestResult:
    """The result of one test."""

    __test__ = False  # not a pytest test class

    test_id: str
    """``<folder>/<file>::<description>``."""
    outcome: Outcome
    """PASS, FAIL or SKIP."""
    reason: str = ""
    """Why it failed or was skipped."""
    duration: float = 0.0
    """Wall time in seconds."""


@dataclass(frozen=True)
class RunnerConfig:
    """How clients are opened."""

    preset: str = "none"
    """``draft``, ``current`` or ``adaptive`` (our client with that preset), or ``none`` (stock
    pymongo)."""
    flavour: str = "sync"
    """``sync`` (``MongoClient``), ``async`` (``AsyncMongoClient``) or ``motor``."""
    fast_backoff: bool = False
    """Pin the backoff jitter to 0 (no sleeps; attempt counts unchanged)."""
    server_selection_timeout_ms: int = 5000
    """Default ``serverSelectionTimeoutMS`` of client entities (uriOptions override it)."""

    def __post_init__(self) -> None:
        """Validate the preset name."""
        if self.preset not in PRESET_NAMES:
            raise ValueError(f"preset must be one of {PRESET_NAMES}, got {self.preset!r}")
        if self.flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {FLAVOURS}, got {self.flavour!r}")


def _version_tuple(text: str) -> tuple[int, ...]:
    """``"8.2.0-rc1"`` -> ``(8, 2, 0)``."""
    parts = [int(p) for p in re.findall(r"\d+", text.split("-")[0])]
    return tuple(parts)


def _version_cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Compare versions padded with zeros."""
    width = max(len(a), len(b))
    pa, pb = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (pa > pb) - (pa < pb)


def _split_uri(uri: str) -> tuple[str, str, list[str], str]:
    """``mongodb://user@h1,h2/db?x`` -> (scheme, userinfo@, [h1, h2], "/db?x")."""
    scheme, _, rest = uri.partition("://")
    hosts_part, slash, tail = rest.partition("/")
    userinfo = ""
    if "@" in hosts_part:
        at = hosts_part.rindex("@")
        userinfo, hosts_part = hosts_part[: at + 1], hosts_part[at + 1 :]
    if not slash and "?" in hosts_part:
        hosts_part, _, query = hosts_part.partition("?")
        tail = "?" + query
    else:
        tail = slash + tail
    return scheme, userinfo, hosts_part.split(","), tail or "/"


class Deployment:
    """The deployment under test: topology, version, an internal client and a reset hook."""

    def __init__(self, uri: str, *, server: Any = None) -> None:
        """Connect the internal client and read the topology and version."""
        self.uri = uri
        self.server = server
        self.internal: MongoClient[dict[str, Any]] = MongoClient(
            uri, serverSelectionTimeoutMS=10000
        )
        try:
            hello = self.internal.admin.command("hello")
            build = self.internal.admin.command("buildInfo")
        except BaseException:
            self.internal.close()
            raise
        if "loadbalanced=true" in uri.lower():
            self.topology = "load-balanced"
        elif hello.get("msg") == "isdbgrid":
            self.topology = "sharded"
        elif hello.get("setName"):
            self.topology = "replicaset"
        else:
            self.topology = "single"
        version = build.get("versionArray") or _version_tuple(str(build.get("version", "0")))
        self.version: tuple[int, ...] = tuple(int(v) for v in version[:3])
        self.auth = "@" in uri.partition("://")[2].partition("/")[0]

    def close(self) -> None:
        """Close the internal client."""
        self.internal.close()

    def entity_uri(self, use_multiple_mongoses: bool) -> str:
        """The URI client entities use: one mongos unless ``useMultipleMongoses``."""
        if self.topology != "sharded" or use_multiple_mongoses:
            return self.uri
        scheme, userinfo, hosts, tail = _split_uri(self.uri)
        return f"{scheme}://{userinfo}{hosts[0]}{tail}"

    def server_parameter(self, name: str) -> Any:
        """A server parameter (``getParameter``, read afresh); Unsupported when unknown."""
        try:
            reply = self.internal.admin.command({"getParameter": 1, name: 1})
        except OperationFailure as exc:
            raise Unsupported(f"server parameter {name!r} is unavailable: {exc}") from exc
        if name not in reply:
            raise Unsupported(f"server parameter {name!r} is unavailable")
        return reply[name]

    def reset(self) -> None:
        """Forget the previous test: embedded reset, else kill all sessions."""
        if self.server is not None:
            self.server.reset()
            return
        with contextlib.suppress(PyMongoError):
            self.internal.admin.command({"killAllSessions": []})


def _requirement_unmet(req: Mapping[str, Any], deployment: Deployment) -> Optional[str]:
    """Why one runOnRequirement is not met, or None."""
    if "minServerVersion" in req:
        wanted = _version_tuple(str(req["minServerVersion"]))
        if _version_cmp(deployment.version, wanted) < 0:
            return (
                f"server version {deployment.version} < minServerVersion {req['minServerVersion']}"
            )
    if "maxServerVersion" in req:
        wanted = _version_tuple(str(req["maxServerVersion"]))
        if _version_cmp(deployment.version[: len(wanted)], wanted) > 0:
            return (
                f"server version {deployment.version} > maxServerVersion {req['maxServerVersion']}"
            )
    topologies = req.get("topologies")
    if topologies is not None and deployment.topology not in topologies:
        return f"topology {deployment.topology} not in {topologies}"
    if req.get("serverless") == "require":
        return "requires serverless"
    if "auth" in req and bool(req["auth"]) != deployment.auth:
        return "requires auth" if req["auth"] else "requires no auth"
    if "authMechanism" in req:
        return "authMechanism requirements are not supported"
    if req.get("csfle"):
        return "requires client-side field level encryption"
    for name, value in req.get("serverParameters", {}).items():
        try:
            actual = deployment.server_parameter(name)
        except Unsupported as exc:
            return str(exc)
        try:
            _plain_matcher().match(value, actual, root=True)
        except MatchError:
            return f"server parameter {name}={actual!r} does not match {value!r}"
    return None


def _plain_matcher() -> Any:
    """A matcher without entities (for serverParameters)."""
    from backpressure.testing.unified.matching import Matcher

    def no_entity(name: str) -> Any:
        raise Unsupported(f"no entity {name!r} while checking requirements")

    return Matcher(no_entity, no_entity)


def unmet_requirements(
    requirements: Optional[Sequence[Mapping[str, Any]]], deployment: Deployment
) -> Optional[str]:
    """None when any requirement is met (or there are none), else why none is."""
    if not requirements:
        return None
    reasons = []
    for req in requirements:
        reason = _requirement_unmet(req, deployment)
        if reason is None:
            return None
        reasons.append(reason)
    return "runOnRequirements not met: " + "; ".join(reasons)


def _allowed_topologies(requirements: Optional[Sequence[Mapping[str, Any]]]) -> set[str]:
    """Topology names any requirement in the list allows (all when unrestricted)."""
    every = {"single", "replicaset", "sharded", "sharded-replicaset", "load-balanced"}
    if not requirements:
        return every
    allowed: set[str] = set()
    for req in requirements:
        allowed |= set(req.get("topologies", every))
    return allowed


def choose_topology(spec: SpecFile) -> Optional[str]:
    """The embedded topology that runs most of a file: replicaset, then sharded, then standalone."""
    file_allowed = _allowed_topologies(spec.doc.get("runOnRequirements"))
    per_test = [
        file_allowed & _allowed_topologies(t.doc.get("runOnRequirements")) for t in spec.tests
    ] or [file_allowed]
    for kind in ("replicaset", "sharded", "standalone"):
        if any(_TOPOLOGY_NAMES[kind] in allowed for allowed in per_test):
            return kind
    return None


def _schema_unsupported(spec: SpecFile) -> Optional[str]:
    """Why a file's schemaVersion is not supported, or None."""
    version = _version_tuple(str(spec.doc.get("schemaVersion", "1.0")))
    if not version or version[0] != SUPPORTED_SCHEMA[0] or version[:2] > SUPPORTED_SCHEMA:
        newest = ".".join(map(str, SUPPORTED_SCHEMA))
        return f"schemaVersion {spec.doc.get('schemaVersion')} is newer than {newest}"
    return None


def _snake(name: str) -> str:
    """``budgetCapacity`` -> ``budget_capacity``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _custom_policy(doc: Mapping[str, Any], default_preset: str) -> Any:
    """The ``backpressurePolicy`` runner extension as a :class:`backpressure.Policy`."""
    from backpressure.core.policy import Policy, resolve_policy

    fields = dict(doc)
    preset = fields.pop("preset", default_preset if default_preset != "none" else "draft")
    base = resolve_policy(preset)
    if base is None:
        raise ValueError(f"backpressurePolicy.preset {preset!r} disables backpressure")
    known = {f.name for f in dataclasses.fields(Policy)}
    changes = {}
    for key, value in fields.items():
        name = _snake(key)
        if name not in known:
            raise ValueError(f"backpressurePolicy: unknown field {key!r}")
        changes[name] = value
    return dataclasses.replace(base, **changes)


def _is_server_error(exc: BaseException) -> bool:
    """Whether an error came from the server (not the client or the network)."""
    if type(exc).__name__ == "ClientBulkWriteException":
        inner = getattr(exc, "error", None)
        return inner is None or not isinstance(inner, BaseException) or _is_server_error(inner)
    return isinstance(exc, (OperationFailure, NotPrimaryError, WriteConcernError))


def _error_code(exc: BaseException) -> Any:
    """The server error code of an error, if any."""
    inner = (
        getattr(exc, "error", None) if type(exc).__name__ == "ClientBulkWriteException" else None
    )
    if isinstance(inner, BaseException):
        return _error_code(inner)
    if isinstance(inner, Mapping):
        return inner.get("code")
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if code is None and isinstance(details, Mapping):
        # NotPrimaryError (an AutoReconnect) keeps the server's code only in its reply.
        code = details.get("code")
    return code


def _has_label(exc: BaseException, label: str) -> bool:
    """Whether an error (or a client bulk write's top-level error) carries a label."""
    if isinstance(exc, PyMongoError) and exc.has_error_label(label):
        return True
    inner = getattr(exc, "error", None)
    return isinstance(inner, PyMongoError) and inner.has_error_label(label)


def check_error(ctx: TestContext, expected: Mapping[str, Any], exc: BaseException) -> None:
    """Check an ``expectError`` against the raised exception."""
    for key, value in expected.items():
        if key == "isError":
            continue
        if key == "isClientError":
            if bool(value) == _is_server_error(exc):
                kind = "client" if value else "server"
                raise AssertionError(f"expected a {kind} error, got {exc!r}")
        elif key == "isTimeoutError":
            if bool(value) != bool(getattr(exc, "timeout", False)):
                raise AssertionError(f"isTimeoutError {value}: got {exc!r}")
        elif key == "errorContains":
            if str(value).lower() not in str(exc).lower():
                raise AssertionError(f"error {exc!r} does not contain {value!r}")
        elif key == "errorCode":
            if _error_code(exc) != value:
                raise AssertionError(
                    f"expected error code {value}, got {_error_code(exc)}: {exc!r}"
                )
        elif key == "errorCodeName":
            inner = exc.error if isinstance(exc, ClientBulkWriteException) else None
            details = getattr(inner if isinstance(inner, BaseException) else exc, "details", None)
            details = details or {}
            if details.get("codeName") != value:
                raise AssertionError(f"expected codeName {value}, got {details.get('codeName')}")
        elif key == "errorLabelsContain":
            missing = [label for label in value if not _has_label(exc, label)]
            if missing:
                raise AssertionError(f"error {exc!r} lacks labels {missing}")
        elif key == "errorLabelsOmit":
            present = [label for label in value if _has_label(exc, label)]
            if present:
                raise AssertionError(f"error {exc!r} has labels {present}")
        elif key == "expectResult":
            _check_error_result(ctx, value, exc)
        elif key == "errorResponse":
            ctx.get_matcher().match(value, _error_response(exc), root=True, path="errorResponse")
        elif key == "writeErrors":
            _check_write_errors(ctx, value, exc)
        elif key == "writeConcernErrors":
            _check_write_concern_errors(ctx, value, exc)
        else:
            raise Unsupported(f"expectError.{key} is not supported")


def _check_error_result(ctx: TestContext, expected: Any, exc: BaseException) -> None:
    """``expectError.expectResult``: what a bulk write wrote before it failed."""
    if isinstance(exc, BulkWriteError):
        actual: Any = partial_bulk_write_document(exc.details)
    elif isinstance(exc, ClientBulkWriteException):
        partial = exc.partial_result
        actual = MISSING if partial is None else result_document(partial)
    else:
        # e.g. a network error ending a bulkWrite: pymongo raises it without a result.
        raise Unsupported(
            f"expectError.expectResult: pymongo raised {type(exc).__name__}, which carries no "
            "write result"
        )
    ctx.get_matcher().match(expected, actual, root=True, path="expectError.expectResult")


def _error_response(exc: BaseException) -> Mapping[str, Any]:
    """The server reply behind an error (a client bulk write's top-level error's reply)."""
    if isinstance(exc, ClientBulkWriteException) and isinstance(exc.error, OperationFailure):
        return exc.error.details or {}
    if isinstance(exc, ClientBulkWriteException) and isinstance(exc.error, Mapping):
        return exc.error
    if isinstance(exc, BulkWriteError):
        raise Unsupported("errorResponse of a BulkWriteError (it merges several replies)")
    details = getattr(exc, "details", None)
    if not isinstance(details, Mapping):
        raise AssertionError(f"errorResponse: {exc!r} carries no server reply")
    return details


def _check_write_errors(ctx: TestContext, expected: Mapping[str, Any], exc: BaseException) -> None:
    """``expectError.writeErrors``: exactly these indexes failed, each matching as a root."""
    if not isinstance(exc, ClientBulkWriteException):
        raise AssertionError(f"writeErrors: expected a client bulk write error, got {exc!r}")
    # pymongo types them as WriteError; they are the server's documents, with the request's idx.
    errors: list[Any] = list(exc.write_errors or [])
    actual = {str(error["idx"]): error for error in errors}
    if set(actual) != set(expected):
        raise AssertionError(f"writeErrors at {sorted(actual)}, expected {sorted(expected)}")
    for index, want in expected.items():
        ctx.get_matcher().match(want, actual[index], root=True, path=f"writeErrors.{index}")


def _check_write_concern_errors(
    ctx: TestContext, expected: Sequence[Any], exc: BaseException
) -> None:
    """``expectError.writeConcernErrors``: the same list, in order, each matching as a root."""
    if not isinstance(exc, ClientBulkWriteException):
        raise AssertionError(f"writeConcernErrors: expected a client bulk write error, got {exc!r}")
    # The format names the server's errmsg "message" (the driver's WriteConcernError field).
    # pymongo types them as WriteConcernError; they are the server's documents.
    errors: list[Any] = list(exc.write_concern_errors or [])
    actual = [{"message": error.get("errmsg"), **error} for error in errors]
    if len(actual) != len(expected):
        raise AssertionError(f"{len(actual)} writeConcernErrors, expected {len(expected)}")
    for i, (want, got) in enumerate(zip(expected, actual)):
        ctx.get_matcher().match(want, got, root=True, path=f"writeConcernErrors.{i}")


class UnifiedRunner:
    """Runs tests of unified-format files against one deployment."""

    def __init__(self, deployment: Deployment, config: RunnerConfig) -> None:
        """Bind a deployment and a client configuration."""
        self.deployment = deployment
        self.config = config

    # -- public API ----------------------------------------------------------------------------

    def run_file(self, spec: SpecFile) -> list[TestResult]:
        """Run every test of a file in order."""
        return [self.run_test(test) for test in spec.tests]

    def run_test(self, test: SpecTest) -> TestResult:
        """Run one test (in a fresh event loop) and report PASS, FAIL or SKIP."""
        started = time.monotonic()
        try:
            asyncio.run(self._run(test))
        except Unsupported as exc:
            return TestResult(test.test_id, Outcome.SKIP, str(exc), time.monotonic() - started)
        except (AssertionError, PyMongoError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            return TestResult(test.test_id, Outcome.FAIL, reason, time.monotonic() - started)
        except Exception as exc:
            reason = f"runner error {type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            return TestResult(test.test_id, Outcome.FAIL, reason, time.monotonic() - started)
        return TestResult(test.test_id, Outcome.PASS, "", time.monotonic() - started)

    # -- one test ------------------------------------------------------------------------------

    async def _run(self, test: SpecTest) -> None:
        """Run one test; raise Unsupported to skip, AssertionError or PyMongoError to fail."""
        self._check_runnable(test)
        self.deployment.reset()
        self._write_initial_data(test.file.doc.get("initialData", []))
        ctx = TestContext(
            entities=EntityMap(),
            open_client=self._open_client,
            is_async=self.config.flavour == "async",
            topology=self.deployment.topology,
            internal_client=self.deployment.internal,
        )
        try:
            await create_entities(ctx, test.file.doc.get("createEntities", []))
            for operation in test.doc.get("operations", []):
                await self._execute(ctx, operation)
            for expectation in test.doc.get("expectEvents", []):
                self._check_events(ctx, expectation)
        except BaseException:
            await self._clean_up(ctx, strict=False)  # keep the test's own error
            raise
        await self._clean_up(ctx, strict=True)
        for expected in test.doc.get("outcome", []):
            self._check_outcome(expected)

    def _check_runnable(self, test: SpecTest) -> None:
        """Raise Unsupported when the test must not run here."""
        reason = _schema_unsupported(test.file)
        reason = reason or unmet_requirements(
            test.file.doc.get("runOnRequirements"), self.deployment
        )
        reason = reason or unmet_requirements(test.doc.get("runOnRequirements"), self.deployment)
        if reason is None and "skipReason" in test.doc:
            reason = f"skipReason: {test.doc['skipReason']}"
        if reason is not None:
            raise Unsupported(reason)

    def _write_initial_data(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Drop and fill the collections of ``initialData`` (majority write concern)."""
        for item in items:
            db = self.deployment.internal.get_database(
                item["databaseName"], write_concern=WriteConcern(w="majority")
            )
            db.drop_collection(item["collectionName"])
            options = dict(item.get("createOptions", {}))
            documents = item.get("documents", [])
            if documents and not options:
                db[item["collectionName"]].insert_many(documents)
            else:
                db.create_collection(item["collectionName"], **options)
                if documents:
                    db[item["collectionName"]].insert_many(documents)

    def _open_client(self, spec: Mapping[str, Any]) -> ClientEntity:
        """Open a client entity with the configured preset and flavour."""
        unknown = set(spec) - _CLIENT_KEYS
        if unknown:
            raise Unsupported(f"client entity fields {sorted(unknown)} are not supported")
        observe = spec.get("observeEvents", [])
        unsupported = [name for name in observe if name not in _SUPPORTED_EVENTS]
        if unsupported:
            raise Unsupported(f"observing {unsupported} is not supported")
        recorder = recorder_for(
            observe,
            ignore_commands=spec.get("ignoreCommandMonitoringEvents", ()),
            observe_sensitive=bool(spec.get("observeSensitiveCommands", False)),
        )
        kwargs: dict[str, Any] = {
            "serverSelectionTimeoutMS": self.config.server_selection_timeout_ms,
            **spec.get("uriOptions", {}),
            "event_listeners": [recorder],
        }
        uri = self.deployment.entity_uri(bool(spec.get("useMultipleMongoses", True)))
        client = self._make_client(uri, kwargs, spec.get("backpressurePolicy"))
        return ClientEntity(spec["id"], client, recorder)

    def _make_client(self, uri: str, kwargs: dict[str, Any], custom: Any) -> Any:
        """Stock pymongo for preset none, else our client; pin the jitter when asked."""
        import backpressure

        flavour = self.config.flavour
        if flavour == "motor":
            # Motor defaults to connect=False; the format expects monitoring from the start.
            kwargs.setdefault("connect", True)
        is_ours = custom is not None or self.config.preset != "none" or "backpressure" in kwargs
        if not is_ours:
            client = _stock_client_class(flavour)(uri, **kwargs)
            if self.config.fast_backoff:
                # Motor's pymongo client is its delegate (pymongo clients have no such attribute:
                # their __getattr__ would return a Database named "delegate").
                _pin_native_backoff(client.delegate if flavour == "motor" else client)
            return client
        ours: Any = {
            "sync": backpressure.MongoClient,
            "async": backpressure.AsyncMongoClient,
            "motor": backpressure.AsyncIOMotorClient,
        }[flavour]
        if custom is not None:
            kwargs["backpressure"] = _custom_policy(custom, self.config.preset)
        elif "backpressure" not in kwargs:
            kwargs["backpressure"] = self.config.preset
        client = ours(uri, **kwargs)
        if self.config.fast_backoff:
            state = state_of(client)
            if state is not None:
                backpressure.enable(client, state.policy, listeners=state.listeners, random=_zero)
        return client

    async def _execute(self, ctx: TestContext, op: Mapping[str, Any]) -> None:
        """Run one operation and check its expectations."""
        name, obj = op["name"], op["object"]
        # A copy: pymongo sets _id on inserted documents, and a test may run more than once.
        args = copy.deepcopy(dict(op.get("arguments", {})))
        if obj == "testRunner":
            kind, target = "testRunner", None
        else:
            kind, value = ctx.entities.entry(obj)
            target = value.client if kind == "client" else value
        table = OPERATIONS.get(kind, {})
        operation = table.get(name)
        if operation is None:
            raise Unsupported(f"operation {name!r} on a {kind} is not supported")
        timeout_ms = args.pop("timeoutMS", None)
        timeout = (
            pymongo.timeout(timeout_ms / 1000.0)
            if timeout_ms is not None
            else contextlib.nullcontext()
        )
        expect_error = op.get("expectError")
        try:
            with timeout:
                result = await operation(ctx, target, args)
        except Unsupported:
            raise
        except Exception as exc:
            if expect_error is not None:
                check_error(ctx, expect_error, exc)
                return
            if op.get("ignoreResultAndError"):
                return
            if isinstance(exc, (PyMongoError, AssertionError)):
                raise
            raise AssertionError(f"{obj}.{name} raised {exc!r}") from exc
        if expect_error is not None:
            raise AssertionError(f"{obj}.{name}: expected an error, got {result!r}")
        if "expectResult" in op and not op.get("ignoreResultAndError"):
            try:
                ctx.get_matcher().match(op["expectResult"], result_document(result), root=True)
            except MatchError as exc:
                raise AssertionError(f"{obj}.{name} result: {exc}") from exc
        if "saveResultAsEntity" in op:
            saved_kind = "cursor" if hasattr(result, "try_next") else "value"
            ctx.entities.add(saved_kind, op["saveResultAsEntity"], result)

    def _check_events(self, ctx: TestContext, expectation: Mapping[str, Any]) -> None:
        """Check one ``expectEvents`` entry (in order; extra events only when ignored)."""
        client_id = expectation["client"]
        category = expectation.get("eventType", "command")
        recorder = ctx.entities.client(client_id).recorder
        actual = recorder.of_category(category)
        expected = expectation["events"]
        shown = [
            e.name + (f"({e.fields['commandName']})" if "commandName" in e.fields else "")
            for e in actual
        ]
        if len(actual) < len(expected) or (
            len(actual) > len(expected) and not expectation.get("ignoreExtraEvents", False)
        ):
            raise AssertionError(
                f"client {client_id!r}: expected {len(expected)} {category} events, got "
                f"{len(actual)}: {shown}"
            )
        for i, (want, got) in enumerate(zip(expected, actual)):
            ((name, fields),) = want.items()
            if event_category(name) != category:
                raise Unsupported(f"event {name!r} in an eventType {category!r} list")
            if got.name != name:
                raise AssertionError(
                    f"client {client_id!r} event {i}: expected {name}, got {got.name}; all: {shown}"
                )
            try:
                match_event_fields(ctx, fields, got)
            except MatchError as exc:
                raise AssertionError(f"client {client_id!r} event {i}: {exc}") from exc

    async def _clean_up(self, ctx: TestContext, *, strict: bool) -> None:
        """Turn off fail points, then close cursors, sessions and clients (newest first).

        With ``strict`` a failed clean-up step fails the test, unless the deployment is an
        embedded server (its reset before the next test clears what was left).
        """
        for entry in ctx.entities.values.values():
            if entry[0] == "client":
                entry[1].recorder.mute()
        errors: list[str] = []
        for client, name in reversed(ctx.fail_points):
            try:
                await maybe_await(client.admin.command({"configureFailPoint": name, "mode": "off"}))
            except PyMongoError as exc:
                errors.append(f"turning off {name}: {exc}")
        for direct in ctx.direct_clients.values():
            direct.close()
        for kind, value in reversed(list(ctx.entities.values.values())):
            try:
                if kind == "cursor":
                    await maybe_await(value.close())
                elif kind == "session":
                    await maybe_await(value.end_session())
            except PyMongoError as exc:
                errors.append(f"closing a {kind}: {exc}")
        for kind, value in reversed(list(ctx.entities.values.values())):
            if kind == "client":
                await maybe_await(value.client.close())
        if errors and strict and self.deployment.server is None:
            raise AssertionError("clean-up failed: " + "; ".join(errors))

    def _check_outcome(self, expected: Mapping[str, Any]) -> None:
        """Compare a collection's documents (sorted by _id) with ``outcome``."""
        coll = self.deployment.internal.get_database(
            expected["databaseName"],
            read_preference=ReadPreference.PRIMARY,
            read_concern=ReadConcern("local"),
        )[expected["collectionName"]]
        documents = list(coll.find({}, sort=[("_id", 1)]))
        matcher = _plain_matcher()
        try:
            matcher.match(expected["documents"], documents, root=False, path="outcome")
        except MatchError as exc:
            where = f"{expected['databaseName']}.{expected['collectionName']}"
            raise AssertionError(f"outcome of {where}: {exc}") from exc


def _stock_client_class(flavour: str) -> Any:
    """The stock client class of a flavour (Motor is imported only when asked for)."""
    if flavour == "motor":
        from motor.motor_asyncio import AsyncIOMotorClient

        return AsyncIOMotorClient
    return pymongo.AsyncMongoClient if flavour == "async" else pymongo.MongoClient


def _zero() -> float:
    """A jitter source that always returns 0 (``--fast-backoff``)."""
    return 0.0


def _pin_native_backoff(client: Any) -> None:
    """Stock pymongo >= 4.17: make its native backoff 0 s (attempt counts unchanged)."""
    hook = getattr(client, "_retry_policy", None)  # pymongo's retry hook (``_RetryPolicy``)
    if hook is not None and hasattr(hook, "backoff_initial"):
        hook.backoff_initial = 0.0
