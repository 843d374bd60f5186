"""Defect 6: hostile ``baseBackoffMS`` and ``errorLabels`` in a server reply never crash an
enabled client: the reply is cleaned in ``MongoClient._process_response``, which pymongo calls
with every command reply before it builds the error (both adapters, every era)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from bson.decimal128 import Decimal128
from pymongo.errors import OperationFailure
from pymongo.helpers_shared import _check_command_response

import backpressure
from backpressure import DRAFT
from backpressure.adapters import seams
from backpressure.core.labels import (
    RETRYABLE,
    SYSTEM_OVERLOADED,
    is_retryable_overload,
    server_base_backoff,
)
from backpressure.testing import EmbeddedServer
from tests.integration.conftest import ClientFactory, resolve

HOSTILE_BACKOFFS = [
    "x",
    "100",
    {"ms": 100},
    [100],
    Decimal128("100"),
    datetime.datetime(2026, 1, 1),
    None,
    True,
    float("nan"),
    -5,
]
HOSTILE_LABELS = [None, 42, [["SystemOverloadedError"]], {"a": 1}, "SystemOverloadedError"]


def overload_reply(**fields: Any) -> dict[str, Any]:
    """An overload error reply as the server sends it, with ``fields`` replaced."""
    reply: dict[str, Any] = {
        "ok": 0,
        "code": 462,
        "errmsg": "overloaded",
        "errorLabels": [SYSTEM_OVERLOADED, RETRYABLE],
    }
    reply.update(fields)
    return reply


@pytest.mark.parametrize("value", HOSTILE_BACKOFFS, ids=repr)
def test_hostile_base_backoff_is_removed(value: Any) -> None:
    """A baseBackoffMS that is not a positive finite number is taken out of the reply."""
    reply = overload_reply(baseBackoffMS=value)
    seams.sanitize_reply(reply)
    assert "baseBackoffMS" not in reply
    assert reply["errorLabels"] == [SYSTEM_OVERLOADED, RETRYABLE]


def test_valid_base_backoff_is_kept() -> None:
    """A sane hint is left as it is."""
    reply = overload_reply(baseBackoffMS=250)
    seams.sanitize_reply(reply)
    assert reply["baseBackoffMS"] == 250


@pytest.mark.parametrize("value", HOSTILE_LABELS, ids=repr)
def test_malformed_labels_are_treated_as_absent(value: Any) -> None:
    """errorLabels that is not a list of strings keeps only its strings (none: no labels)."""
    reply = overload_reply(errorLabels=value)
    seams.sanitize_reply(reply)
    assert reply["errorLabels"] == []
    mixed = overload_reply(errorLabels=[SYSTEM_OVERLOADED, 5, [RETRYABLE]])
    seams.sanitize_reply(mixed)
    assert mixed["errorLabels"] == [SYSTEM_OVERLOADED]


def test_an_immutable_reply_is_left_alone() -> None:
    """A reply that cannot be changed is left to pymongo, without raising."""
    reply = (("ok", 0),)
    seams.sanitize_reply(reply)
    assert reply == (("ok", 0),)


@pytest.mark.parametrize("value", HOSTILE_BACKOFFS[:6], ids=repr)
async def test_enabled_client_cleans_the_reply_before_pymongo_reads_it(
    clients: ClientFactory, standalone_server: EmbeddedServer, value: Any
) -> None:
    """Through the enabled client's own ``_process_response`` (as pymongo calls it), the error
    pymongo then builds is a plain retryable overload error with no server hint, and asking
    the client's policy about it does not raise (stock pymongo >= 4.18 raises TypeError on
    ``baseBackoffMS / 1000``)."""
    client = clients.plain(standalone_server.uri)
    backpressure.enable(client, DRAFT, random=lambda: 0.0)
    await resolve(client.admin.command("ping"))
    reply = overload_reply(baseBackoffMS=value, errorLabels=[SYSTEM_OVERLOADED, RETRYABLE, 7])
    await resolve(client._process_response(reply, None))
    with pytest.raises(OperationFailure) as info:
        _check_command_response(reply, 25)
    assert is_retryable_overload(info.value)
    assert server_base_backoff(info.value) is None
    assert getattr(info.value, "_base_backoff_ms", None) is None
