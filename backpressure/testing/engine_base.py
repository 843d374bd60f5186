"""Shared pieces of the embedded server's command engine: errors, codes, request context.

Every ``engine_*`` module imports from here, never from ``engine.py``, so the command modules and
the engine facade do not import each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from backpressure.testing.engine_cursors import CursorRegistry
    from backpressure.testing.engine_sessions import SessionRegistry, Transaction
    from backpressure.testing.engine_store import DataStore

__all__ = [
    "CODE_NAMES",
    "CommandContext",
    "CommandError",
    "Handler",
    "Request",
    "code_name_of",
    "collection_name",
    "opt_bool",
    "opt_document",
    "opt_int",
]

CODE_NAMES: Mapping[int, str] = MappingProxyType(
    {
        1: "InternalError",
        2: "BadValue",
        4: "NoSuchKey",
        6: "HostUnreachable",
        7: "HostNotFound",
        8: "UnknownError",
        9: "FailedToParse",
        11: "UserNotFound",
        13: "Unauthorized",
        14: "TypeMismatch",
        15: "Overflow",
        16: "InvalidLength",
        17: "ProtocolError",
        18: "AuthenticationFailed",
        20: "IllegalOperation",
        22: "InvalidBSON",
        24: "LockTimeout",
        26: "NamespaceNotFound",
        27: "IndexNotFound",
        28: "PathNotViable",
        40: "ConflictingUpdateOperators",
        43: "CursorNotFound",
        46: "LockBusy",
        47: "NoMatchingDocument",
        48: "NamespaceExists",
        50: "MaxTimeMSExpired",
        52: "DollarPrefixedFieldName",
        53: "InvalidIdField",
        56: "EmptyFieldName",
        57: "DottedFieldName",
        59: "CommandNotFound",
        64: "WriteConcernTimeout",
        66: "ImmutableField",
        67: "CannotCreateIndex",
        68: "IndexAlreadyExists",
        72: "InvalidOptions",
        73: "InvalidNamespace",
        76: "NoReplicationEnabled",
        79: "UnknownReplWriteConcern",
        85: "IndexOptionsConflict",
        86: "IndexKeySpecsConflict",
        89: "NetworkTimeout",
        91: "ShutdownInProgress",
        96: "OperationFailed",
        100: "UnsatisfiableWriteConcern",
        112: "WriteConflict",
        115: "CommandNotSupported",
        117: "ConflictingOperationInProgress",
        121: "DocumentValidationFailure",
        125: "CommandFailed",
        133: "FailedToSatisfyReadPreference",
        134: "ReadConcernMajorityNotAvailableYet",
        136: "CappedPositionLost",
        148: "ReadConcernMajorityNotEnabled",
        150: "StaleEpoch",
        166: "CommandNotSupportedOnView",
        175: "QueryPlanKilled",
        189: "PrimarySteppedDown",
        202: "NetworkInterfaceExceededTimeLimit",
        206: "NoSuchSession",
        211: "KeyNotFound",
        217: "IncompleteTransactionHistory",
        225: "TransactionTooOld",
        234: "RetryChangeStream",
        237: "CursorKilled",
        238: "NotImplemented",
        239: "SnapshotTooOld",
        246: "SnapshotUnavailable",
        251: "NoSuchTransaction",
        256: "TransactionCommitted",
        257: "TransactionTooLarge",
        260: "InvalidResumeToken",
        262: "ExceededTimeLimit",
        263: "OperationNotSupportedInTransaction",
        267: "PreparedTransactionInProgress",
        279: "ClientDisconnect",
        280: "ChangeStreamFatalError",
        286: "ChangeStreamHistoryLost",
        290: "TransactionExceededLifetimeLimitSeconds",
        433: "AdmissionQueueOverflow",
        449: "RateLimitExceeded",
        462: "IngressRequestRateLimitExceeded",
        9001: "SocketException",
        10058: "LegacyNotPrimary",
        10107: "NotWritablePrimary",
        10334: "BSONObjectTooLarge",
        11000: "DuplicateKey",
        11600: "InterruptedAtShutdown",
        11601: "Interrupted",
        11602: "InterruptedDueToReplStateChange",
        13113: "MergeStageNoMatchingDocument",
        13388: "StaleConfig",
        13435: "NotPrimaryNoSecondaryOk",
        13436: "NotPrimaryOrSecondary",
        40413: "IDLDuplicateField",
        40414: "IDLFailedToParse",
        40415: "IDLUnknownField",
        46841: "ClientMarkedKilled",
        50768: "NotARetryableWriteCommand",
        50915: "BackupCursorOpenConflictWithCheckpoint",
    }
)
"""mongod's names for the error codes the embedded server can produce (``codeName``).

Codes missing here are named like mongod names assertion codes: ``Location<code>``.
"""


def code_name_of(code: int) -> str:
    """Return mongod's ``codeName`` for an error code."""
    return CODE_NAMES.get(code) or f"Location{code}"


class CommandError(Exception):
    """A command failure rendered as a mongod-shaped error reply."""

    code: int
    """The numeric error code (``code``)."""
    code_name: str
    """The symbolic error name (``codeName``)."""
    errmsg: str
    """The human-readable message (``errmsg``)."""
    labels: tuple[str, ...]
    """Error labels to attach (``errorLabels``)."""
    extra: dict[str, Any]
    """Additional top-level reply fields."""

    def __init__(
        self,
        code: int,
        errmsg: str,
        code_name: Optional[str] = None,
        labels: Sequence[str] = (),
        extra: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Build the error; ``code_name`` defaults to the name in ``CODE_NAMES``."""
        super().__init__(errmsg)
        self.code = code
        self.errmsg = errmsg
        self.code_name = code_name or code_name_of(code)
        self.labels = tuple(labels)
        self.extra = dict(extra or {})

    def to_reply(self) -> dict[str, Any]:
        """Render the error as a command reply document."""
        reply: dict[str, Any] = {
            "ok": 0.0,
            "errmsg": self.errmsg,
            "code": self.code,
            "codeName": self.code_name,
        }
        if self.labels:
            reply["errorLabels"] = list(self.labels)
        reply.update(self.extra)
        return reply

    def __repr__(self) -> str:
        """Show code, name and message."""
        return f"CommandError({self.code}, {self.errmsg!r}, {self.code_name!r})"


@dataclass
class CommandContext:
    """What the transport knows about the request being executed."""

    connection_id: int
    """The server-side id of the connection the request arrived on."""
    app_name: Optional[str]
    """The client's ``appName`` from its handshake, if any."""
    role: str
    """The member's role: ``standalone``, ``primary``, ``secondary`` or ``mongos``."""
    max_wire_version: int
    """The wire version the member advertises."""


@dataclass
class Request:
    """One command as seen by a command handler."""

    name: str
    """The command name (the body's first key)."""
    db: str
    """The target database (``$db``)."""
    body: dict[str, Any]
    """The command document, document sequences merged."""
    ctx: CommandContext
    """The transport's context."""
    store: DataStore
    """The data the command reads and writes (a transaction's workspace inside transactions)."""
    cursors: CursorRegistry
    """The engine's open cursors."""
    sessions: SessionRegistry
    """The engine's sessions, retryable-write records and transactions."""
    txn: Optional[Transaction] = None
    """The running transaction this command belongs to, if any."""

    @property
    def target(self) -> Any:
        """The value of the command-name field (usually the collection name)."""
        return self.body[self.name]


Handler = Callable[[Request], dict[str, Any]]
"""A command implementation: request in, ``ok: 1`` reply out (or ``CommandError`` raised)."""


def collection_name(req: Request, field: Optional[str] = None, *, virtual: bool = False) -> str:
    """Return the collection named by ``field`` (default: the command field), validated.

    With ``virtual``, cursor namespaces such as ``$cmd.aggregate`` are accepted too.
    """
    key = field or req.name
    value = req.body.get(key)
    if not isinstance(value, str):
        raise CommandError(
            73,
            f"collection name has invalid type {type(value).__name__}",
            extra={"field": key} if field else None,
        )
    if not value or "\x00" in value or (value.startswith("$") and not virtual):
        raise CommandError(73, f"Invalid namespace specified '{req.db}.{value}'")
    return value


def opt_document(body: Mapping[str, Any], field: str) -> Optional[dict[str, Any]]:
    """Return an optional sub-document field, or raise TypeMismatch for another type."""
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise CommandError(
            14, f"BSON field '{field}' is the wrong type '{type(value).__name__}', expected object"
        )
    return dict(value)


def opt_int(body: Mapping[str, Any], field: str, default: Optional[int] = None) -> Optional[int]:
    """Return an optional numeric field as an int, or raise TypeMismatch for another type."""
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CommandError(
            14, f"BSON field '{field}' is the wrong type '{type(value).__name__}', expected number"
        )
    return int(value)


def opt_bool(body: Mapping[str, Any], field: str, default: bool = False) -> bool:
    """Return an optional boolean field (numbers accepted as mongod does)."""
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, (bool, int, float)):
        return bool(value)
    raise CommandError(
        14, f"BSON field '{field}' is the wrong type '{type(value).__name__}', expected boolean"
    )
