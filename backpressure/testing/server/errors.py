"""Errors shared by every part of the embedded server: mongod's error codes and ``CommandError``.

The engine, the control plane (fail points, parameters) and the transport all raise and render
``CommandError``; this module imports nothing else from the server, so any part may use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Optional

__all__ = ["CODE_NAMES", "CommandError", "code_name_of"]

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
        463: "IngressOperationRateLimitExceeded",
        473: "InterruptedDueToOverload",
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
