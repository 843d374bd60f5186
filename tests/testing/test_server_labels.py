"""mongod's error-label rules and code names as the embedded server applies them."""

from __future__ import annotations

from typing import Any

import pytest

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.cluster.replies import (
    error_reply,
    mongod_labels,
    rate_limited_reply,
)

_RETRYABLE_WRITE = {"insert": "c", "txnNumber": 1}
_IN_TXN = {"insert": "c", "txnNumber": 1, "autocommit": False}
_PLAIN = {"insert": "c"}


@pytest.mark.parametrize(
    ("code", "name", "body", "labels"),
    [
        (91, "insert", _RETRYABLE_WRITE, ["RetryableWriteError"]),
        (91, "insert", _PLAIN, []),
        (2, "insert", _RETRYABLE_WRITE, []),
        (112, "insert", _IN_TXN, ["TransientTransactionError"]),
        (10107, "insert", _IN_TXN, ["TransientTransactionError"]),
        (251, "find", _IN_TXN, ["TransientTransactionError"]),
        (2, "insert", _IN_TXN, []),
        (251, "commitTransaction", _IN_TXN, ["TransientTransactionError"]),
        (189, "commitTransaction", _IN_TXN, ["RetryableWriteError"]),
        (112, "commitTransaction", _IN_TXN, ["TransientTransactionError"]),
        (462, "find", {"find": "c"}, ["SystemOverloadedError", "RetryableError"]),
    ],
)
def test_computed_labels(code: int, name: str, body: dict[str, Any], labels: list[str]) -> None:
    """Labels follow the code and whether the command is a retryable write or in a transaction."""
    assert mongod_labels(code, name, body) == labels


def test_no_such_transaction_with_write_concern_error_is_not_transient() -> None:
    """On commit, NoSuchTransaction alongside a write concern error may have been rolled back."""
    assert mongod_labels(251, "commitTransaction", _IN_TXN, write_concern_error=True) == []


def test_explicit_labels_replace_computed_ones() -> None:
    """An explicit (even empty) label list wins over the computed labels."""
    assert "errorLabels" not in error_reply(
        91, "x", name="insert", body=_RETRYABLE_WRITE, labels=[]
    )
    reply = error_reply(91, "x", name="insert", body=_RETRYABLE_WRITE, labels=["Custom"])
    assert reply["errorLabels"] == ["Custom"]
    assert reply["codeName"] == "ShutdownInProgress"


def test_rate_limited_reply_labels() -> None:
    """Without retries allowed the rejection keeps only SystemOverloadedError."""
    assert rate_limited_reply(True)["errorLabels"] == ["SystemOverloadedError", "RetryableError"]
    assert rate_limited_reply(False)["errorLabels"] == ["SystemOverloadedError"]


def test_unknown_codes_are_named_like_mongod_assertions(
    standalone_server: EmbeddedServer, raw_connect: Any
) -> None:
    """A code without a name becomes ``Location<code>``, as mongod names assertion codes."""
    assert error_reply(4242, "x", name="ping", body={"ping": 1})["codeName"] == "Location4242"
    standalone_server.configure_fail_point(
        {"mode": {"times": 1}, "data": {"failCommands": ["ping"], "errorCode": 4242}}
    )
    reply = raw_connect(standalone_server.primary_address).command({"ping": 1})
    assert (reply["code"], reply["codeName"]) == (4242, "Location4242")
