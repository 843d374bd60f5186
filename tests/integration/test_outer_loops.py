"""Outer retry loops (the real tenacity and stamina) with backpressure.retry_outside."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import stamina
import tenacity
from pymongo.errors import AutoReconnect, OperationFailure, PyMongoError

import backpressure
from backpressure import DRAFT
from backpressure.core.decision import StopReason
from backpressure.core.events import RetrySummary, attach_summary
from backpressure.core.labels import is_overload
from backpressure.core.outer import handled_by_backpressure
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import overload_fail_point

pytestmark = pytest.mark.timeout(60)

FAST = DRAFT.replace(max_retries=3, base_backoff=0.001)


@pytest.fixture
def client(standalone_server: EmbeddedServer) -> Iterator[Any]:
    """An enabled sync client with 3 overload retries (pymongo retries a network error once)."""
    with backpressure.MongoClient(
        standalone_server.uri, backpressure=FAST, serverSelectionTimeoutMS=3000
    ) as enabled:
        yield enabled


@pytest.fixture
def no_retry_writes(standalone_server: EmbeddedServer) -> Iterator[Any]:
    """An enabled client with retryWrites off: a dropped connection reaches the outer loop."""
    with backpressure.MongoClient(
        standalone_server.uri, backpressure=FAST, retryWrites=False, serverSelectionTimeoutMS=3000
    ) as enabled:
        yield enabled


def _inserts(server: EmbeddedServer) -> int:
    """Inserts the server received."""
    return int(server.stats()["commands"].get("insert", {}).get("received", 0))


def test_tenacity_does_not_retry_what_backpressure_gave_up_on(
    client: Any, standalone_server: EmbeddedServer
) -> None:
    """Under overload: the predicate stops tenacity after one outer try (4 inserts, not 12)."""
    outer_tries = []

    @tenacity.retry(
        retry=tenacity.retry_if_exception(backpressure.retry_outside),
        stop=tenacity.stop_after_attempt(3),
        wait=tenacity.wait_none(),
        reraise=True,
    )
    def insert() -> None:
        outer_tries.append(1)
        client.db.coll.insert_one({"x": 1})

    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(OperationFailure) as raised:
        insert()
    assert is_overload(raised.value)
    assert len(outer_tries) == 1
    assert _inserts(standalone_server) == 4


def test_naive_tenacity_loop_multiplies_the_attempts(
    client: Any, standalone_server: EmbeddedServer
) -> None:
    """The contrast: retrying every PyMongoError sends 3 x 4 = 12 inserts."""

    @tenacity.retry(
        retry=tenacity.retry_if_exception_type(PyMongoError),
        stop=tenacity.stop_after_attempt(3),
        wait=tenacity.wait_none(),
        reraise=True,
    )
    def insert() -> None:
        client.db.coll.insert_one({"x": 1})

    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with pytest.raises(OperationFailure):
        insert()
    assert _inserts(standalone_server) == 12


def test_tenacity_still_retries_a_network_error(
    no_retry_writes: Any, standalone_server: EmbeddedServer
) -> None:
    """Two dropped connections (no overload label) are left to the outer loop: 3 tries."""
    outer_tries = []

    @tenacity.retry(
        retry=tenacity.retry_if_exception(backpressure.retry_outside),
        stop=tenacity.stop_after_attempt(3),
        wait=tenacity.wait_none(),
        reraise=True,
    )
    def insert() -> None:
        outer_tries.append(1)
        no_retry_writes.db.coll.insert_one({"x": 1})

    standalone_server.configure_fail_point(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 2},
            "data": {"failCommands": ["insert"], "closeConnection": True},
        }
    )
    insert()
    assert len(outer_tries) == 3
    assert no_retry_writes.db.coll.count_documents({}) == 1


def test_stamina_does_not_retry_what_backpressure_gave_up_on(
    client: Any, standalone_server: EmbeddedServer
) -> None:
    """stamina.retry(on=backpressure.retry_outside): one outer try under overload."""
    outer_tries = []

    @stamina.retry(on=backpressure.retry_outside, attempts=3)
    def insert() -> None:
        outer_tries.append(1)
        client.db.coll.insert_one({"x": 1})

    standalone_server.configure_fail_point(overload_fail_point(["insert"]))
    with stamina.set_testing(True, attempts=3), pytest.raises(OperationFailure):
        insert()
    assert len(outer_tries) == 1
    assert _inserts(standalone_server) == 4


def test_stamina_still_retries_a_network_error(
    no_retry_writes: Any, standalone_server: EmbeddedServer
) -> None:
    """stamina retries the dropped connection and the insert lands once."""
    outer_tries = []

    @stamina.retry(on=backpressure.retry_outside, attempts=3)
    def insert() -> None:
        outer_tries.append(1)
        no_retry_writes.db.coll.insert_one({"x": 1})

    standalone_server.configure_fail_point(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 2},
            "data": {"failCommands": ["insert"], "closeConnection": True},
        }
    )
    with stamina.set_testing(True, attempts=3):
        insert()
    assert len(outer_tries) == 3
    assert no_retry_writes.db.coll.count_documents({}) == 1


def test_predicates_on_constructed_errors() -> None:
    """The rules: overload handled; retried operations handled; transient kinds only."""
    network = AutoReconnect("connection closed")
    assert backpressure.retry_outside(network)
    retried = AutoReconnect("closed after overload retries")
    attach_summary(retried, RetrySummary(3, 0.2, (("a", 1),), StopReason.DEADLINE))
    classic = AutoReconnect("pymongo's own retry of a network error failed too")
    attach_summary(classic, RetrySummary(2, 0.0, (("a", 1),), StopReason.NOT_RETRYABLE))
    assert backpressure.retry_outside(classic)
    assert handled_by_backpressure(retried)
    assert not backpressure.retry_outside(retried)
    labelled = OperationFailure("x", code=91, details={"errorLabels": ["RetryableWriteError"]})
    assert backpressure.retry_outside(labelled)
    assert not backpressure.retry_outside(OperationFailure("duplicate key", code=11000))
    assert not backpressure.retry_outside(ValueError("not pymongo"))
