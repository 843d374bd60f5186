"""The failCommand fail point: pure rules, then every mode and field against real clients."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest
from pymongo import monitoring
from pymongo.errors import (
    AutoReconnect,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WriteConcernError,
)

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.control.failpoints import FailCommand, FailCommandConfig
from backpressure.testing.server.errors import CommandError


def _configured(mode: Any, random: Callable[[], float] = lambda: 0.5, **data: Any) -> FailCommand:
    point = FailCommand(random=random)
    point.configure(
        FailCommandConfig.parse({"configureFailPoint": "failCommand", "mode": mode, "data": data})
    )
    return point


def _fires(
    point: FailCommand, name: str = "ping", app: str | None = None, n: int = 5
) -> list[bool]:
    return [point.evaluate(name, app) is not None for _ in range(n)]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("alwaysOn", [True] * 5),
        ("off", [False] * 5),
        ({"times": 2}, [True, True, False, False, False]),
        ({"skip": 2}, [False, False, True, True, True]),
        ({"activationProbability": 0}, [False] * 5),
        ({"activationProbability": 1}, [True] * 5),
    ],
)
def test_modes(mode: Any, expected: list[bool]) -> None:
    """Each mode fires on the documented matching commands."""
    assert _fires(_configured(mode, failCommands=["ping"], errorCode=2)) == expected


def test_non_matching_commands_do_not_move_counters() -> None:
    """Another command or another appName neither fires nor consumes times/skip."""
    point = _configured({"times": 1}, failCommands=["ping"], appName="a", errorCode=2)
    assert _fires(point, "find", "a") == [False] * 5
    assert _fires(point, "ping", "b") == [False] * 5
    assert _fires(point, "ping", None) == [False] * 5
    assert point.count == 0
    assert _fires(point, "ping", "a", 2) == [True, False]
    assert point.count == 1


def test_ismaster_alias_matches_is_master() -> None:
    """The legacy lower-case handshake name is the same command as isMaster."""
    point = _configured("alwaysOn", failCommands=["isMaster"], closeConnection=True)
    assert _fires(point, "ismaster", n=1) == [True]


def test_configure_returns_previous_count() -> None:
    """`count` in the reply is the number of activations of the previous configuration."""
    point = _configured("alwaysOn", failCommands=["ping"], errorCode=2)
    _fires(point, n=3)
    assert point.configure(FailCommandConfig.parse({"mode": "off"})) == 3


@pytest.mark.parametrize(
    ("doc", "code"),
    [
        ({"mode": {"times": -1}, "data": {"failCommands": ["ping"]}}, 2),
        ({"mode": {"times": float("inf")}, "data": {"failCommands": ["ping"]}}, 2),
        ({"mode": {"skip": float("nan")}, "data": {"failCommands": ["ping"]}}, 2),
        ({"mode": {"times": 2**31}, "data": {"failCommands": ["ping"]}}, 2),
        ({"mode": {"times": "1"}, "data": {"failCommands": ["ping"]}}, 2),
        ({"mode": "sometimes", "data": {"failCommands": ["ping"]}}, 2),
        ({"mode": {"activationProbability": 2}, "data": {"failCommands": ["ping"]}}, 2),
        ({"mode": {"activationProbability": float("nan")}, "data": {}}, 2),
        ({"mode": {"sometimes": 1}, "data": {}}, 2),
        ({"mode": "alwaysOn", "data": {"errorCode": float("nan")}}, 2),
        ({"mode": "alwaysOn", "data": {"errorCode": float("inf")}}, 2),
        ({"mode": "alwaysOn", "data": {"blockConnection": True, "blockTimeMS": float("inf")}}, 2),
        ({"mode": "alwaysOn", "data": {"blockConnection": True, "blockTimeMS": -1}}, 2),
        ({"mode": "alwaysOn", "data": {"failCommands": "ping"}}, 2),
        ({"mode": "alwaysOn", "data": {"namespace": 1}}, 2),
    ],
)
def test_invalid_configurations(doc: dict[str, Any], code: int) -> None:
    """Values that cannot mean anything (NaN, infinity, wrong types, out of range) are BadValue."""
    with pytest.raises(CommandError) as info:
        FailCommandConfig.parse(doc)
    assert info.value.code == code


def test_data_without_fail_commands_is_stored_and_matches_nothing() -> None:
    """Like mongod: no failCommands (a bare closeConnection, say) is accepted, fires never."""
    point = _configured("alwaysOn", closeConnection=True)
    assert point.active
    assert _fires(point, "ping") == [False] * 5
    assert point.count == 0


def test_fail_all_commands_matches_every_command() -> None:
    """failAllCommands fires for any command name."""
    point = _configured({"times": 2}, failAllCommands=True, errorCode=2)
    assert _fires(point, "find", n=1) == [True]
    assert _fires(point, "hello", n=2) == [True, False]


def test_fractional_times_are_truncated() -> None:
    """mongod reads times/skip as whole numbers: 2.7 is 2."""
    assert _fires(_configured({"times": 2.7}, failCommands=["ping"], errorCode=2), n=3) == [
        True,
        True,
        False,
    ]


def test_namespace_and_thread_name_filters() -> None:
    """namespace and threadName restrict matches like appName does, without moving counters."""
    point = _configured({"times": 1}, failCommands=["find"], namespace="db.a", errorCode=2)
    assert point.evaluate("find", None, namespace="db.b") is None
    assert point.evaluate("find", None, namespace="db.a") is not None
    point = _configured("alwaysOn", failCommands=["ping"], threadName="conn7", errorCode=2)
    assert point.evaluate("ping", None, thread_name="conn8") is None
    assert point.evaluate("ping", None, thread_name="conn7") is not None
    assert point.count == 1


def test_block_connection_without_time_fails_matched_commands() -> None:
    """mongod accepts the configuration and answers each matched command InvalidOptions."""
    point = _configured("alwaysOn", failCommands=["ping"], blockConnection=True)
    action = point.evaluate("ping", None)
    assert action is not None
    assert (action.error_code, action.block_ms, action.close_connection) == (72, 0, False)
    assert "blockTimeMS" in action.errmsg


def _fail(server: EmbeddedServer, mode: Any, **data: Any) -> None:
    server.configure_fail_point({"mode": mode, "data": data})


def _code(call: Callable[[], object]) -> int | None:
    try:
        call()
    except OperationFailure as exc:
        return exc.code
    return None


def test_times_skip_and_off_with_pymongo(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """times, skip and off drive a real client's ping results."""
    client = make_client(standalone_server.uri)
    ping = lambda: client.admin.command("ping")  # noqa: E731
    _fail(standalone_server, {"times": 2}, failCommands=["ping"], errorCode=2)
    assert [_code(ping) for _ in range(3)] == [2, 2, None]
    _fail(standalone_server, {"skip": 1}, failCommands=["ping"], errorCode=8)
    assert [_code(ping) for _ in range(3)] == [None, 8, 8]
    standalone_server.disable_fail_points()
    assert _code(ping) is None


def test_error_reply_shape(standalone_server: EmbeddedServer, raw_connect: Any) -> None:
    """An injected error looks like mongod's: errmsg, code, codeName, labels as given."""
    _fail(
        standalone_server,
        "alwaysOn",
        failCommands=["ping"],
        errorCode=462,
        errorLabels=["SystemOverloadedError", "RetryableError"],
    )
    reply = raw_connect(standalone_server.primary_address).command({"ping": 1})
    assert reply == {
        "ok": 0.0,
        "errmsg": "Failing command via 'failCommand' failpoint",
        "code": 462,
        "codeName": "IngressRequestRateLimitExceeded",
        "errorLabels": ["SystemOverloadedError", "RetryableError"],
    }
    _fail(standalone_server, "alwaysOn", failCommands=["ping"], errorCode=2, errmsg="custom")
    reply = raw_connect(standalone_server.primary_address).command({"ping": 1})
    assert (reply["errmsg"], reply["codeName"], "errorLabels" in reply) == (
        "custom",
        "BadValue",
        False,
    )


def test_configure_fail_point_is_never_failed(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """Listing configureFailPoint itself has no effect, and the reply carries count."""
    client = make_client(standalone_server.uri)
    data = {"failCommands": ["configureFailPoint", "ping"], "errorCode": 2}
    client.admin.command("configureFailPoint", "failCommand", mode="alwaysOn", data=data)
    assert _code(lambda: client.admin.command("ping")) == 2
    reply = client.admin.command("configureFailPoint", "failCommand", mode="off")
    assert reply["count"] == 1


def test_unknown_fail_point_is_an_error(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """Only failCommand exists."""
    client = make_client(standalone_server.uri)
    with pytest.raises(OperationFailure):
        client.admin.command("configureFailPoint", "noSuchFailPoint", mode="alwaysOn")


class _Recorder(monitoring.CommandListener):
    """Keeps every failed and succeeded reply."""

    def __init__(self) -> None:
        self.failures: list[Any] = []
        self.successes: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self.successes.append(event.command_name)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self.failures.append(event.failure)


def test_server_labels_make_a_retryable_write_retry(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """Without errorLabels, code 91 on a retryable write is labelled RetryableWriteError."""
    recorder = _Recorder()
    client = make_client(replicaset_server.uri, event_listeners=[recorder])
    _fail(replicaset_server, {"times": 1}, failCommands=["insert"], errorCode=91)
    client.test.c.insert_one({"x": 1})
    assert recorder.failures[0]["errorLabels"] == ["RetryableWriteError"]
    assert recorder.successes.count("insert") == 1


def test_empty_error_labels_suppress_server_labels(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """errorLabels: [] removes RetryableWriteError, so the write is not retried."""
    client = make_client(replicaset_server.uri)
    _fail(replicaset_server, {"times": 1}, failCommands=["insert"], errorCode=91, errorLabels=[])
    with pytest.raises(PyMongoError, match="failCommand") as info:
        client.test.c.insert_one({"x": 1})
    assert not getattr(info.value, "_error_labels", set())


def test_close_connection(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """closeConnection drops the socket: the client sees a network error, then recovers."""
    client = make_client(standalone_server.uri, retryReads=False)
    _fail(standalone_server, {"times": 1}, failCommands=["find"], closeConnection=True)
    with pytest.raises(AutoReconnect):
        client.test.c.find_one()
    assert client.test.c.find_one() is None
    assert standalone_server.stats()["commands"]["find"]["failed"] == 1


def test_block_connection_does_not_stall_others(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """A blocked command on one connection leaves other connections' commands unaffected."""
    blocked = make_client(standalone_server.uri, appname="blocked")
    other = make_client(standalone_server.uri, appname="other")
    blocked.admin.command("ping")
    other.admin.command("ping")
    _fail(
        standalone_server,
        {"times": 1},
        failCommands=["ping"],
        appName="blocked",
        blockConnection=True,
        blockTimeMS=400,
    )
    finished: list[str] = []
    pings = int(standalone_server.stats()["commands"]["ping"]["received"])
    thread = threading.Thread(
        target=lambda: (blocked.admin.command("ping"), finished.append("blocked"))
    )
    thread.start()
    deadline = time.monotonic() + 10  # the blocked ping has reached the server (and blocks)
    while standalone_server.stats()["commands"]["ping"]["received"] == pings:
        assert time.monotonic() < deadline, "the blocked ping never reached the server"
        time.sleep(0.001)
    for _ in range(5):
        other.admin.command("ping")
    finished.append("other")
    thread.join()
    assert finished == ["other", "blocked"]


def test_block_then_error(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """Block comes first, then the injected error."""
    client = make_client(standalone_server.uri)
    _fail(
        standalone_server,
        {"times": 1},
        failCommands=["ping"],
        blockConnection=True,
        blockTimeMS=50,
        errorCode=2,
    )
    started = time.monotonic()
    assert _code(lambda: client.admin.command("ping")) == 2
    assert time.monotonic() - started >= 0.045


def test_write_concern_error_after_the_write(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """writeConcernError is attached after the write has been applied."""
    client = make_client(standalone_server.uri, retryWrites=False)
    _fail(
        standalone_server,
        {"times": 1},
        failCommands=["insert"],
        writeConcernError={"code": 100, "errmsg": "wce"},
    )
    with pytest.raises(WriteConcernError) as info:
        client.test.c.insert_one({"_id": 1})
    assert info.value.code == 100
    assert client.test.c.find_one({"_id": 1}) == {"_id": 1}


def test_app_name_filter(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """Only the client with the matching appName is failed, and only it moves count."""
    target = make_client(standalone_server.uri, appname="target")
    bystander = make_client(standalone_server.uri, appname="bystander")
    _fail(standalone_server, "alwaysOn", failCommands=["ping"], appName="target", errorCode=2)
    assert _code(lambda: bystander.admin.command("ping")) is None
    assert _code(lambda: target.admin.command("ping")) == 2
    assert standalone_server.configure_fail_point({"mode": "off"}) == [1]


def test_handshake_failure_on_hello(standalone_server: EmbeddedServer, make_client: Any) -> None:
    """Failing [hello, isMaster] for one appName breaks that client's handshakes only."""
    _fail(
        standalone_server,
        "alwaysOn",
        failCommands=["hello", "isMaster"],
        appName="broken",
        closeConnection=True,
    )
    healthy = make_client(standalone_server.uri, appname="healthy")
    assert healthy.admin.command("ping")["ok"] == 1.0
    broken = make_client(standalone_server.uri, appname="broken", serverSelectionTimeoutMS=600)
    with pytest.raises(ServerSelectionTimeoutError):
        broken.admin.command("ping")
    commands = standalone_server.stats()["commands"]
    failed = commands.get("isMaster", {}).get("failed", 0) + commands.get("hello", {}).get(
        "failed", 0
    )
    assert failed >= 1
    standalone_server.disable_fail_points()
    assert broken.admin.command("ping")["ok"] == 1.0


def test_injected_error_in_transaction_does_not_abort_it(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """Code 112 injected on an insert inside a transaction: retry the insert, commit both."""
    client = make_client(replicaset_server.uri)
    coll = client.test.c
    coll.insert_one({"_id": 0})
    with client.start_session() as session, session.start_transaction():
        coll.insert_one({"_id": 1}, session=session)
        _fail(replicaset_server, {"times": 1}, failCommands=["insert"], errorCode=112)
        with pytest.raises(OperationFailure) as info:
            coll.insert_one({"_id": 2}, session=session)
        assert info.value.has_error_label("TransientTransactionError")
        coll.insert_one({"_id": 2}, session=session)
    assert sorted(d["_id"] for d in coll.find()) == [0, 1, 2]


@pytest.mark.parametrize("data", [{"errorCode": 112}, {"closeConnection": True}])
def test_failed_first_command_still_starts_the_transaction(
    replicaset_server: EmbeddedServer, make_client: Any, data: dict[str, Any]
) -> None:
    """mongod begins the transaction before failCommand fires: the next command continues it.

    The client sent ``startTransaction`` with the failed insert only; the second insert has no
    ``startTransaction`` and must find the transaction, and the commit must succeed.
    """
    listener = _StartedCommands()
    client = make_client(replicaset_server.uri, event_listeners=[listener])
    coll = client.test.c
    coll.insert_one({"_id": 0})
    _fail(replicaset_server, {"times": 1}, failCommands=["insert"], **data)
    with client.start_session() as session, session.start_transaction():
        with pytest.raises(PyMongoError) as info:
            coll.insert_one({"_id": 1}, session=session)
        assert info.value.has_error_label("TransientTransactionError")
        coll.insert_one({"_id": 2}, session=session)
    inserts = [c for c in listener.commands if "insert" in c and "autocommit" in c]
    assert [c.get("startTransaction") for c in inserts] == [True, None]
    assert sorted(d["_id"] for d in coll.find()) == [0, 2]


class _StartedCommands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.commands.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _txn_records(server: EmbeddedServer) -> list[dict[str, Any]]:
    return [t for t in server.stats()["transactions"] if t["txnNumber"] >= 1]


def _write_fail(server: EmbeddedServer, mode: Any, **data: Any) -> None:
    server.configure_fail_point(
        {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": mode, "data": data}
    )


def test_transactional_write_close_after_apply_is_retried_once(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """onPrimaryTransactionalWrite applies the insert, then drops the connection; the retry
    gets the stored reply, so the document is written once."""
    client = make_client(replicaset_server.uri)
    coll = client.test.c
    _write_fail(replicaset_server, {"times": 1})
    assert coll.insert_one({"_id": 1}).inserted_id == 1
    assert list(coll.find()) == [{"_id": 1}]
    (record,) = _txn_records(replicaset_server)
    assert (record["attempts"], record["applied"]) == (2, True)
    assert replicaset_server.stats(0)["commands"]["insert"] == {
        "received": 2,
        "failed": 1,
        "rejected": 0,
    }


def test_transactional_write_alwayson_fires_once_per_write(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """A retry of an applied write does not reach the write path, so alwaysOn lets it through;
    writes without a txnNumber (retryWrites=false) are never affected."""
    client = make_client(replicaset_server.uri)
    _write_fail(replicaset_server, "alwaysOn")
    client.test.c.update_one({"_id": 1}, {"$set": {"x": 1}}, upsert=True)
    plain = make_client(replicaset_server.uri, retryWrites=False)
    plain.test.c.insert_one({"_id": 2})
    assert replicaset_server.configure_fail_point(
        {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": "off"}, member=0
    ) == [1]
    assert list(client.test.c.find().sort("_id", 1)) == [{"_id": 1, "x": 1}, {"_id": 2}]


def test_transactional_write_fail_before_commit_is_not_applied(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """failBeforeCommitExceptionCode fails the write unapplied; a retryable code is retried."""
    client = make_client(replicaset_server.uri)
    coll = client.test.c
    _write_fail(
        replicaset_server, {"times": 1}, closeConnection=False, failBeforeCommitExceptionCode=91
    )
    coll.insert_one({"_id": 1})
    (record,) = _txn_records(replicaset_server)
    assert (record["attempts"], record["applied"]) == (1, True)
    _write_fail(
        replicaset_server, {"times": 1}, closeConnection=False, failBeforeCommitExceptionCode=2
    )
    with pytest.raises(OperationFailure) as info:
        coll.insert_one({"_id": 2})
    assert info.value.code == 2
    assert list(coll.find()) == [{"_id": 1}]


def test_invalid_transactional_write_configuration(standalone_server: EmbeddedServer) -> None:
    """A non-boolean closeConnection is BadValue, like other malformed fail point data."""
    reply = standalone_server.command(
        {
            "configureFailPoint": "onPrimaryTransactionalWrite",
            "mode": "alwaysOn",
            "data": {"closeConnection": 1},
        }
    )
    assert (reply["ok"], reply["code"]) == (0.0, 2)


def test_write_concern_error_on_commit_is_retried(
    replicaset_server: EmbeddedServer, make_client: Any
) -> None:
    """A retryable writeConcernError on commitTransaction: the client retries the commit."""
    client = make_client(replicaset_server.uri)
    coll = client.test.c
    _fail(
        replicaset_server,
        {"times": 1},
        failCommands=["commitTransaction"],
        writeConcernError={"code": 91, "errmsg": "Replication is being shut down"},
    )
    with client.start_session() as session, session.start_transaction():
        coll.insert_one({"_id": 1}, session=session)
    assert list(coll.find()) == [{"_id": 1}]
    counters = replicaset_server.stats(0)["commands"]["commitTransaction"]
    assert counters["received"] == 2


def test_bad_values_are_bad_value_replies_over_the_wire(
    standalone_server: EmbeddedServer, raw_connect: Any
) -> None:
    """Infinity and NaN reach the server as BSON doubles and get BadValue, not InternalError."""
    conn = raw_connect(standalone_server.primary_address)
    for doc in (
        {"mode": {"times": float("inf")}, "data": {"failCommands": ["ping"]}},
        {"mode": "alwaysOn", "data": {"failCommands": ["ping"], "errorCode": float("nan")}},
        {
            "mode": "alwaysOn",
            "data": {"failCommands": ["ping"], "blockConnection": True, "blockTimeMS": 1e400},
        },
    ):
        reply = conn.command({"configureFailPoint": "failCommand", **doc})
        assert (reply["ok"], reply["code"], reply["codeName"]) == (0.0, 2, "BadValue")
    assert conn.command({"ping": 1})["ok"] == 1.0


def test_fail_all_commands_and_namespace_against_a_client(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """failAllCommands limited to one namespace fails finds there and nowhere else."""
    client = make_client(standalone_server.uri, retryReads=False)
    _fail(standalone_server, "alwaysOn", failAllCommands=True, namespace="db.hit", errorCode=8)
    try:
        assert _code(lambda: client.db.hit.find_one()) == 8
        assert _code(lambda: client.db.miss.find_one()) is None
        assert _code(lambda: client.admin.command("ping")) is None
    finally:
        standalone_server.disable_fail_points()


def test_missing_block_time_fails_the_command(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """blockConnection without blockTimeMS: configure succeeds, the ping gets InvalidOptions."""
    client = make_client(standalone_server.uri)
    _fail(standalone_server, {"times": 1}, failCommands=["ping"], blockConnection=True)
    assert _code(lambda: client.admin.command("ping")) == 72
    assert _code(lambda: client.admin.command("ping")) is None
