"""The public switch: client classes, options, enable/disable, accessors, Motor."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pymongo
import pytest
from pymongo.errors import PyMongoError

import backpressure
from backpressure import CURRENT_SPEC, DRAFT, InvalidPolicyError
from backpressure.adapters import seams
from backpressure.core.backoff import backoff_ceiling
from backpressure.core.policy import DEFAULT_POLICY
from backpressure.switch.client import budget as budget_of
from backpressure.switch.client import state as state_of
from backpressure.switch.uri_options import InertOptionWarning
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import (
    FAST_BACKOFF,
    ClientFactory,
    CommandRecorder,
    RetryRecorder,
    overload_fail_point,
    resolve,
    to_list,
)

pytestmark = pytest.mark.timeout(60)

STOCK_ATTEMPTS = 3 if seams.HAS_NATIVE_BACKPRESSURE else 1
"""Inserts a stock client sends to an always-overloaded server (pymongo >= 4.17 retries twice)."""


async def _inserts_until_failure(client: Any, server: EmbeddedServer, commands: Any) -> int:
    """Run one insert against an always-overloaded server; return how many were started."""
    commands.reset()
    server.configure_fail_point(overload_fail_point(["insert"]))
    try:
        with pytest.raises(PyMongoError):
            await resolve(client.db.coll.insert_one({"x": 1}))
    finally:
        server.disable_fail_points()
    return len(commands.started_commands("insert"))


def _pin_jitter(client: Any) -> None:
    """Pin the jitter of an enabled client to 0 (keeps its policy)."""
    current = state_of(client)
    assert current is not None
    backpressure.enable(client, current.policy, listeners=current.listeners, random=lambda: 0.0)


async def test_client_class_is_enabled_by_default(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """backpressure.MongoClient/AsyncMongoClient retry with the default preset, current."""
    client = clients.backpressure(standalone_server.uri, event_listeners=[commands])
    state = state_of(client)
    assert state is not None
    assert state.policy is DEFAULT_POLICY
    assert DEFAULT_POLICY is CURRENT_SPEC
    assert backpressure.is_enabled(client)
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(client.db.coll.insert_one({"x": 1}))
    assert len(commands.started_commands("insert")) == 2


async def test_client_class_with_backpressure_false_is_stock(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """backpressure=False gives a stock client (pymongo's own behaviour, nothing wrapped)."""
    client = clients.backpressure(
        standalone_server.uri, backpressure=False, event_listeners=[commands]
    )
    assert state_of(client) is None
    assert budget_of(client) is None
    assert "_retry_internal" not in vars(client)
    assert await _inserts_until_failure(client, standalone_server, commands) == STOCK_ATTEMPTS


async def test_uri_options_configure_the_policy(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """maxAdaptiveRetries and enableOverloadRetargeting in the URI override the policy."""
    uri = standalone_server.uri + "?maxAdaptiveRetries=3&enableOverloadRetargeting=false"
    client = clients.backpressure(uri)
    state = state_of(client)
    assert state is not None
    assert state.policy == DEFAULT_POLICY.replace(max_retries=3, retarget=False)


async def test_uri_can_switch_backpressure_off(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """?backpressure=false gives a stock client; pymongo >= 4.17 still gets maxAdaptiveRetries."""
    uri = standalone_server.uri + "?backpressure=false&maxAdaptiveRetries=0"
    client = clients.backpressure(uri, event_listeners=[commands])
    assert state_of(client) is None
    if seams.HAS_NATIVE_BACKPRESSURE:
        assert client.options.max_adaptive_retries == 0
    assert await _inserts_until_failure(client, standalone_server, commands) == 1


async def test_keyword_options_win_over_the_uri(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Keyword arguments take precedence over URI options, as in pymongo."""
    uri = standalone_server.uri + "?maxAdaptiveRetries=4&backpressure=false"
    client = clients.backpressure(
        uri, backpressure="current", maxAdaptiveRetries=1, event_listeners=[commands]
    )
    state = state_of(client)
    assert state is not None
    assert state.policy == CURRENT_SPEC.replace(max_retries=1)
    _pin_jitter(client)
    assert await _inserts_until_failure(client, standalone_server, commands) == 2


async def test_snake_case_keywords_are_accepted(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """max_adaptive_retries / enable_overload_retargeting work like their camelCase forms."""
    client = clients.backpressure(
        standalone_server.uri, max_adaptive_retries=2, enable_overload_retargeting="false"
    )
    state = state_of(client)
    assert state is not None
    assert (state.policy.max_retries, state.policy.retarget) == (2, False)


async def test_policy_object_and_listeners_keywords(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """A Policy and backpressure_listeners can be given to the client class."""
    policy = DRAFT.replace(max_retries=1, base_backoff=0.001)
    client = clients.backpressure(
        standalone_server.uri,
        backpressure=policy,
        backpressure_listeners=[retries],
        event_listeners=[commands],
    )
    assert await _inserts_until_failure(client, standalone_server, commands) == 2
    assert len(retries.retries) == 1
    assert len(retries.give_ups) == 1


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"maxAdaptiveRetries": -1}, "maxAdaptiveRetries must be an integer >= 0"),
        ({"maxAdaptiveRetries": "many"}, "maxAdaptiveRetries"),
        ({"maxAdaptiveRetries": "-1"}, "maxAdaptiveRetries"),
        ({"enableOverloadRetargeting": "yes"}, "enableOverloadRetargeting"),
        ({"backpressure": "aggressive"}, "backpressure"),
        ({"backpressure": 3}, "backpressure"),
        ({"backpressure_listeners": "not-a-list"}, "backpressure_listeners"),
        ({"backpressure_listeners": [object()]}, r"backpressure_listeners\[0\]"),
        ({"enableOverloadRetargeting": "TRUE"}, "enableOverloadRetargeting"),
        ({"backpressure": "TRUE"}, "backpressure"),
        ({"maxAdaptiveRetries": -1, "max_adaptive_retries": 2}, "maxAdaptiveRetries"),
        # a keyword of the wrong type names the option and the allowed type and range
        ({"max_adaptive_retries": 2.0}, "maxAdaptiveRetries must be an integer >= 0"),
        ({"maxAdaptiveRetries": None}, "maxAdaptiveRetries must be an integer >= 0"),
        ({"maxAdaptiveRetries": "3.0"}, "maxAdaptiveRetries must be an integer >= 0"),
        ({"enableOverloadRetargeting": 1}, "enableOverloadRetargeting must be True, False"),
        ({"enableOverloadRetargeting": None}, "enableOverloadRetargeting must be"),
        ({"hedgeDelayMS": "-50"}, "hedgeDelayMS must be an integer from 0 to 3600000"),
        ({"hedge_delay_ms": 2.5}, "hedgeDelayMS must be an integer from 0 to 3600000"),
        ({"maxHedges": "5"}, "maxHedges must be an integer from 1 to 4"),
        ({"max_hedges": 2.0}, "maxHedges must be an integer from 1 to 4"),
        ({"backpressure": 1.0}, "backpressure must be a bool, 'true', 'false', a Policy"),
        ({"backpressure": ["current"]}, "backpressure must be a bool"),
        ({"backpressure_listeners": 5}, "backpressure_listeners must be a list or tuple"),
        ({"backpressure_listeners": [RetryRecorder(), "x"]}, r"backpressure_listeners\[1\]"),
    ],
)
def test_invalid_keywords_raise(
    flavour: str, standalone_server: EmbeddedServer, kwargs: dict[str, Any], names: str
) -> None:
    """Invalid keyword values raise InvalidPolicyError (a ConfigurationError) naming the option."""
    cls = backpressure.AsyncMongoClient if flavour == "async" else backpressure.MongoClient
    with pytest.raises(InvalidPolicyError, match=names) as info:
        cls(standalone_server.uri, **kwargs)
    assert isinstance(info.value, pymongo.errors.ConfigurationError)


@pytest.mark.parametrize(
    ("listeners", "match"),
    [
        ("abc", "listeners must be a list or tuple"),
        ([RetryRecorder(), object()], r"listeners\[1\] must be a listener"),
        ({"retried": None}, "listeners must be a list or tuple"),
    ],
)
async def test_enable_validates_listeners_once(
    clients: ClientFactory, standalone_server: EmbeddedServer, listeners: Any, match: str
) -> None:
    """Bad listeners are refused at enable time, naming the item; the client stays stock."""
    client = clients.plain(standalone_server.uri)
    with pytest.raises(InvalidPolicyError, match=match):
        backpressure.enable(client, DRAFT, listeners=listeners)
    assert not backpressure.is_enabled(client)


@pytest.mark.parametrize(("value", "enabled"), [("false", False), ("true", True)])
async def test_keyword_boolean_strings_as_in_the_uri(
    clients: ClientFactory, standalone_server: EmbeddedServer, value: str, enabled: bool
) -> None:
    """backpressure="false"/"true" as a keyword means what it means in the URI."""
    keyword = clients.backpressure(standalone_server.uri, backpressure=value)
    base = standalone_server.uri.split("?")[0].rstrip("/")
    uri = clients.backpressure(f"{base}/?backpressure={value}")
    assert backpressure.is_enabled(keyword) is backpressure.is_enabled(uri) is enabled


async def test_invalid_uri_values_warn_and_are_ignored(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """An invalid URI value warns (UserWarning, as pymongo does) and the default is kept."""
    uri = standalone_server.uri + "?maxAdaptiveRetries=-5&enableOverloadRetargeting=invalid"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client = clients.backpressure(uri)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert any("maxAdaptiveRetries" in m for m in messages)
    assert any("enableOverloadRetargeting" in m for m in messages)
    state = state_of(client)
    assert state is not None
    assert state.policy is DEFAULT_POLICY


async def test_enable_disable_round_trip(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """enable (current) -> 3 attempts; disable -> stock; enable("draft") -> 6 attempts."""
    client = clients.plain(standalone_server.uri, event_listeners=[commands])
    assert backpressure.enable(client, random=lambda: 0.0) is client
    assert backpressure.enable(client, True, random=lambda: 0.0) is client  # idempotent
    assert await _inserts_until_failure(client, standalone_server, commands) == 3
    assert backpressure.disable(client) is client
    assert backpressure.disable(client) is client  # no-op
    assert not backpressure.is_enabled(client)
    assert await _inserts_until_failure(client, standalone_server, commands) == STOCK_ATTEMPTS
    backpressure.enable(client, FAST_BACKOFF, random=lambda: 0.0)
    assert await _inserts_until_failure(client, standalone_server, commands) == 6
    backpressure.enable(client, False)
    assert state_of(client) is None


async def test_enable_rejects_bad_arguments(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """enable() raises InvalidPolicyError for a bad policy and TypeError for a non-client."""
    client = clients.plain(standalone_server.uri)
    with pytest.raises(InvalidPolicyError):
        backpressure.enable(client, "bogus")
    assert state_of(client) is None
    with pytest.raises(TypeError, match="MongoClient"):
        backpressure.enable(object())


async def test_budget_accessor_reports_tokens_and_refusals(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """budget(client) exposes the live token bucket (tokens, refused)."""
    client = clients.plain(standalone_server.uri, event_listeners=[commands])
    backpressure.enable(client, DRAFT.replace(budget_capacity=1), random=lambda: 0.0)
    bucket = budget_of(client)
    assert bucket is not None
    assert bucket.tokens == 1
    assert await _inserts_until_failure(client, standalone_server, commands) == 2
    assert (bucket.tokens, bucket.refused) == (0, 1)


def test_importing_backpressure_does_not_import_motor() -> None:
    """Motor is imported only when AsyncIOMotorClient is first used."""
    code = (
        "import sys, backpressure; assert 'motor' not in sys.modules; "
        "backpressure.AsyncIOMotorClient; assert 'motor' in sys.modules"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=root)


async def test_motor_client_retries_through_its_delegate(
    standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """Motor smoke test: two injected overloads on insert and find, both succeed."""
    client = backpressure.AsyncIOMotorClient(
        standalone_server.uri,
        backpressure=DRAFT.replace(base_backoff=0.001),
        event_listeners=[commands],
        serverSelectionTimeoutMS=3000,
    )
    try:
        assert backpressure.is_enabled(client)
        assert state_of(client) is state_of(client.delegate)
        standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
        await client.db.coll.insert_one({"_id": 1})
        standalone_server.configure_fail_point(overload_fail_point(["find"], times=2))
        docs = await to_list(client.db.coll.find({}))
        assert docs == [{"_id": 1}]
        assert len(commands.started_commands("insert")) == 3
        assert len(commands.started_commands("find")) == 3
    finally:
        client.close()


async def test_enable_works_on_a_stock_motor_client(
    standalone_server: EmbeddedServer, commands: CommandRecorder
) -> None:
    """enable() on Motor's own AsyncIOMotorClient enables its delegate."""
    from motor.motor_asyncio import AsyncIOMotorClient

    client = AsyncIOMotorClient(
        standalone_server.uri, event_listeners=[commands], serverSelectionTimeoutMS=3000
    )
    try:
        backpressure.enable(client, DRAFT.replace(base_backoff=0.001))
        assert backpressure.is_enabled(client.delegate)
        standalone_server.configure_fail_point(overload_fail_point(["ping"], times=2))
        await client.admin.command("ping")
        assert len(commands.started_commands("ping")) == 3
        backpressure.disable(client)
        assert not backpressure.is_enabled(client.delegate)
    finally:
        client.close()


async def test_client_class_accepts_pymongo_arguments_like_pymongo(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """Positional host/port/document_class/tz_aware and keyword options mean what they mean."""
    from bson.son import SON

    host, port = standalone_server.addresses[0]
    ours = clients.track(
        (backpressure.AsyncMongoClient if clients.is_async else backpressure.MongoClient)(
            host, port, SON, True, appname="bp-test", backpressure=False
        )
    )
    stock = clients.track(
        (pymongo.AsyncMongoClient if clients.is_async else pymongo.MongoClient)(
            host, port, SON, True, appname="bp-test"
        )
    )
    assert ours.codec_options == stock.codec_options
    assert ours.options.pool_options.metadata == stock.options.pool_options.metadata
    assert await resolve(ours.admin.command("ping")) == await resolve(stock.admin.command("ping"))


async def test_motor_client_with_backpressure_off(standalone_server: EmbeddedServer) -> None:
    """backpressure.AsyncIOMotorClient(backpressure=False) leaves its delegate stock."""
    client = backpressure.AsyncIOMotorClient(standalone_server.uri, backpressure=False)
    try:
        assert not backpressure.is_enabled(client)
        assert "_retry_internal" not in vars(client.delegate)
        assert (await client.admin.command("ping"))["ok"] == 1
    finally:
        client.close()


@pytest.mark.parametrize("flavour", ["sync", "motor"])
@pytest.mark.parametrize("connect", [True, False])
def test_topology_opens_only_once_the_client_is_enabled(
    monkeypatch: pytest.MonkeyPatch, standalone_server: EmbeddedServer, flavour: str, connect: bool
) -> None:
    """connect=True opens the topology after enable: no pool fills to minPoolSize, no monitor
    connects, before the hooks know the client (the backport's handshake errors would reach SDAM).
    """
    opened_enabled: list[bool] = []
    original = pymongo.MongoClient._get_topology

    def spy(self: Any) -> Any:
        if not self._opened:
            opened_enabled.append(backpressure.is_enabled(self))
        return original(self)

    monkeypatch.setattr(pymongo.MongoClient, "_get_topology", spy)
    if flavour == "sync":
        client: Any = backpressure.MongoClient(
            standalone_server.uri, connect=connect, minPoolSize=2, serverSelectionTimeoutMS=3000
        )
        pymongo_client = client
    else:
        client = backpressure.AsyncIOMotorClient(
            standalone_server.uri, connect=connect, minPoolSize=2, serverSelectionTimeoutMS=3000
        )
        pymongo_client = client.delegate
    try:
        assert opened_enabled == ([True] if connect else [])
        assert pymongo_client._opened is connect
        assert "_get_topology" not in vars(pymongo_client)
        assert pymongo_client.options.connect is connect
    finally:
        client.close()


@pytest.mark.skipif(not seams.HAS_NATIVE_BACKPRESSURE, reason="pymongo < 4.17 has no such options")
@pytest.mark.parametrize("given", ["keyword", "uri"])
async def test_enable_keeps_the_clients_own_overload_options(
    clients: ClientFactory, standalone_server: EmbeddedServer, commands: CommandRecorder, given: str
) -> None:
    """A stock client's explicit maxAdaptiveRetries / enableOverloadRetargeting beat the preset
    on ``enable`` (any preset, enabled again too), as they do for the client classes."""
    if given == "keyword":
        client = clients.plain(
            standalone_server.uri,
            event_listeners=[commands],
            maxAdaptiveRetries=1,
            enableOverloadRetargeting=False,
        )
    else:
        client = clients.plain(
            standalone_server.uri + "?maxAdaptiveRetries=1&enableOverloadRetargeting=false",
            event_listeners=[commands],
        )
    for preset in (True, "current", "draft", "adaptive"):
        backpressure.enable(client, preset, random=lambda: 0.0)
        state = state_of(client)
        assert state is not None
        assert (state.policy.max_retries, state.policy.retarget) == (1, False)
        assert (
            client.options.max_adaptive_retries,
            client.options.enable_overload_retargeting,
        ) == (
            1,
            False,
        )
    backpressure.enable(client, FAST_BACKOFF, random=lambda: 0.0)
    assert await _inserts_until_failure(client, standalone_server, commands) == 2
    backpressure.disable(client)
    assert (client.options.max_adaptive_retries, client.options.enable_overload_retargeting) == (
        1,
        False,
    )


async def test_enable_without_explicit_options_takes_the_presets(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """pymongo's own defaults are not explicit: the preset's attempts and retargeting apply."""
    client = clients.plain(standalone_server.uri)
    backpressure.enable(client, "draft")
    state = state_of(client)
    assert state is not None
    assert (state.policy.max_retries, state.policy.retarget) == (5, True)


async def test_default_jitter_follows_a_patched_random_random(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    commands: CommandRecorder,
    retries: RetryRecorder,
) -> None:
    """Without ``random=``, the jitter is drawn from ``random.random`` at each retry, as
    pymongo's own loop draws it: a test that patches it (pymongo's prose test 1 does) pins both."""
    client = clients.plain(standalone_server.uri, event_listeners=[commands])
    backpressure.enable(client, FAST_BACKOFF, listeners=[retries])
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    with patch("random.random", return_value=0.0):
        await resolve(client.db.coll.insert_one({"x": 1}))
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    with patch("random.random", return_value=1.0):
        await resolve(client.db.coll.insert_one({"x": 2}))
    first, second = retries.delays[:2], retries.delays[2:]
    assert first == [0.0, 0.0]
    assert second == [backoff_ceiling(FAST_BACKOFF, 1), backoff_ceiling(FAST_BACKOFF, 2)]


async def test_policy_returns_the_active_policy(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """backpressure.policy(client) is the policy in use: the preset after the client's options."""
    stock = clients.plain(standalone_server.uri)
    backpressure.enable(stock, "adaptive")
    assert backpressure.policy(stock) is backpressure.ADAPTIVE
    ours = clients.backpressure(standalone_server.uri, maxAdaptiveRetries=1)
    assert backpressure.policy(ours) == CURRENT_SPEC.replace(max_retries=1)
    assert backpressure.policy(ours).name == "current"
    backpressure.enable(ours, DRAFT)
    # pymongo >= 4.17 keeps the client's maxAdaptiveRetries as its own option, which beats a
    # preset given to enable(); before, the option lived only in the policy it was built with.
    expected = DRAFT.replace(max_retries=1) if seams.HAS_NATIVE_BACKPRESSURE else DRAFT
    assert backpressure.policy(ours) == expected


async def test_policy_of_a_motor_client(standalone_server: EmbeddedServer) -> None:
    """Motor: the policy is read through the sync delegate, from either object."""
    client = backpressure.AsyncIOMotorClient(standalone_server.uri, backpressure="draft")
    try:
        assert backpressure.policy(client) is DRAFT
        assert backpressure.policy(client.delegate) is DRAFT
    finally:
        client.close()


async def test_policy_of_a_client_that_is_not_enabled_is_a_clear_error(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """A stock client has no policy: ValueError saying so and how to enable it."""
    client = clients.plain(standalone_server.uri)
    with pytest.raises(ValueError, match="backpressure is not enabled on this") as raised:
        backpressure.policy(client)
    assert "backpressure.enable(client)" in str(raised.value)
    with pytest.raises(TypeError, match="MongoClient"):
        backpressure.policy(object())


async def test_client_state_repr_names_the_client_and_the_policy(
    clients: ClientFactory, standalone_server: EmbeddedServer, retries: RetryRecorder
) -> None:
    """The state's repr names the seeds, the preset with its key fields, and the listeners."""
    client = clients.backpressure(standalone_server.uri, backpressure_listeners=[retries])
    host, port = standalone_server.addresses[0]
    assert repr(state_of(client)) == (
        f"ClientState(client='{host}:{port}', policy=current: max_retries=2, base=100ms, "
        "max=10s, budget=off, retargeting=off, listeners=1)"
    )


async def test_enable_logs_one_info_line_per_client(
    clients: ClientFactory,
    standalone_server: EmbeddedServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Enabling says so once at INFO on logger ``backpressure`` (client, seeds, policy); the
    operations that follow add no such line."""
    caplog.set_level(logging.INFO, logger="backpressure")
    client = clients.backpressure(standalone_server.uri, maxAdaptiveRetries=1)
    for n in range(5):
        await resolve(client.db.coll.insert_one({"n": n}))
        assert await resolve(client.db.coll.find_one({"n": n})) is not None
    lines = [r for r in caplog.records if r.name == "backpressure"]
    assert len(lines) == 1
    (line,) = lines
    assert line.levelno == logging.INFO
    host, port = standalone_server.addresses[0]
    cls = "AsyncMongoClient" if clients.is_async else "MongoClient"
    assert line.getMessage() == (
        f"backpressure enabled on {cls}({host}:{port}) with policy current (modified): "
        "max_retries=1, base=100ms, max=10s, budget=off, retargeting=off"
    )


async def test_enable_on_a_closed_client_raises_invalid_operation(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """A closed client cannot be used again (pymongo 4): enable() says so with pymongo's error."""
    client = clients.plain(standalone_server.uri)
    await resolve(client.admin.command("ping"))
    await resolve(client.close())
    with pytest.raises(pymongo.errors.InvalidOperation, match="closed"):
        backpressure.enable(client)
    assert not backpressure.is_enabled(client)
    never_opened = clients.plain(standalone_server.uri)
    await resolve(never_opened.close())
    with pytest.raises(pymongo.errors.InvalidOperation, match="closed"):
        backpressure.enable(never_opened, "draft")


async def test_enable_on_a_closed_motor_client_raises_invalid_operation(
    standalone_server: EmbeddedServer,
) -> None:
    """Motor: a closed client (its delegate closed) is refused the same way."""
    from motor.motor_asyncio import AsyncIOMotorClient

    client = AsyncIOMotorClient(standalone_server.uri)
    client.close()
    with pytest.raises(pymongo.errors.InvalidOperation, match="closed AsyncIOMotorClient"):
        backpressure.enable(client)


@pytest.mark.parametrize("given", ["keyword", "uri"])
async def test_max_hedges_without_a_hedge_delay_warns(
    clients: ClientFactory, standalone_server: EmbeddedServer, given: str
) -> None:
    """maxHedges alone is inert: a UserWarning subclass names both options, at the user's line."""
    cls = backpressure.AsyncMongoClient if clients.is_async else backpressure.MongoClient
    uri, kwargs = standalone_server.uri, {"maxHedges": 2}
    if given == "uri":
        uri, kwargs = f"{uri}?maxHedges=2", {}
    match = "maxHedges=2 has no effect without hedgeDelayMS"
    with pytest.warns(InertOptionWarning, match=match) as record:
        client = clients.track(cls(uri, **kwargs))
    assert issubclass(InertOptionWarning, UserWarning)
    assert record[0].filename == __file__
    assert backpressure.policy(client).hedge_delay is None


async def test_max_hedges_with_a_hedge_delay_does_not_warn(
    clients: ClientFactory, standalone_server: EmbeddedServer
) -> None:
    """With hedgeDelayMS, or a policy that hedges, maxHedges acts: no warning (warnings are
    errors in this suite)."""
    client = clients.backpressure(standalone_server.uri, maxHedges=2, hedgeDelayMS=40)
    assert (backpressure.policy(client).hedge_delay, backpressure.policy(client).max_hedges) == (
        0.04,
        2,
    )
    hedging = DRAFT.replace(hedge_delay=0.05)
    client = clients.backpressure(standalone_server.uri, backpressure=hedging, maxHedges=3)
    assert backpressure.policy(client).max_hedges == 3
