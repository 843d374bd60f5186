"""$where: sleeps evaluated as safe arithmetic, constant results, everything else an error."""

from __future__ import annotations

import time
from typing import Any

import pytest
from bson.code import Code
from pymongo.errors import OperationFailure

from backpressure.testing import EmbeddedServer
from backpressure.testing.server.engine.dispatch import Engine
from backpressure.testing.server.engine.request import CommandContext
from backpressure.testing.server.engine.where import WhereCode, analyse_where
from backpressure.testing.server.errors import CommandError


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("function() { sleep(0.100000 * 1000); return true; }", WhereCode(100.0, True)),
        ("function(){sleep(2000);return true;}", WhereCode(2000.0, True)),
        ("function() { sleep(10); return false; }", WhereCode(10.0, False)),
        ("function() { sleep(10); }", WhereCode(10.0, False)),
        ("sleep(300) || true", WhereCode(300.0, True)),
        ("sleep((1 + 2) * 50 / 3 - 10 % 4)", WhereCode(48.0, False)),
        ("false && sleep(100)", WhereCode(0.0, False)),
        ("true", WhereCode(0.0, True)),
        ("!false", WhereCode(0.0, True)),
        ("1 === 1 && 2 !== 3", WhereCode(0.0, True)),
        ("sleep(-5) || 1 > 2", WhereCode(0.0, False)),
        ("function() { return 1e2 <= 100; }", WhereCode(0.0, True)),
        (Code("function() { sleep(5); return true; }"), WhereCode(5.0, True)),
    ],
)
def test_supported_code(code: str, expected: WhereCode) -> None:
    """pymongo's helper format and other arithmetic give exact sleeps and results."""
    assert analyse_where(code) == expected


@pytest.mark.parametrize(
    "code",
    [
        "this.a == 1",
        "function() { return this.x > 2; }",
        "sleep(n)",
        "sleep('100')",
        "function() { var x = 1; return true; }",
        "sleep(2 ** 10)",
        "sleep(1/0)",
        "sleep(" + "9" * 400 + ")",
        "return true",
        "sleep(100",
        "[1].length",
        "(" * 300 + "1" + ")" * 300,
        "+".join(["1"] * 3000),
        "x" * 5000,
    ],
)
def test_unsupported_code_is_an_error(code: str) -> None:
    """Nothing is guessed: code outside the subset is NotImplemented (238) with the reason."""
    with pytest.raises(CommandError) as info:
        analyse_where(code)
    assert info.value.code == 238
    assert "$where" in info.value.errmsg


def test_non_string_where_is_ignored_by_the_analyser() -> None:
    """A non-string $where has no analysis (the engine rejects it with BadValue)."""
    assert analyse_where(5) is None
    engine = Engine()
    ctx = CommandContext(connection_id=1, app_name=None, role="primary", max_wire_version=25)
    engine.execute("test", {"insert": "t", "documents": [{"_id": 1}]}, ctx)
    with pytest.raises(CommandError) as info:
        engine.execute("test", {"find": "t", "filter": {"$where": 5}}, ctx)
    assert info.value.code == 2


def test_pymongo_helper_sleep_delays_the_reply(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """`sleep(0.100000 * 1000)` (pymongo's delay helper) now delays, once per document."""
    client = make_client(standalone_server.uri)
    collection = client.test.where_delay
    collection.drop()
    collection.insert_many([{"_id": 1}, {"_id": 2}])
    started = time.monotonic()
    found = list(collection.find({"$where": "function() { sleep(0.100000 * 1000); return true; }"}))
    assert len(found) == 2
    assert time.monotonic() - started >= 0.18  # lower bound only: two 100 ms sleeps


def test_unsupported_where_reaches_the_client_as_an_error(
    standalone_server: EmbeddedServer, make_client: Any
) -> None:
    """A field comparison in $where fails loudly instead of silently matching everything."""
    client = make_client(standalone_server.uri)
    collection = client.test.where_error
    collection.drop()
    collection.insert_one({"_id": 1, "a": 1})
    with pytest.raises(OperationFailure) as info:
        collection.find_one({"$where": "this.a == 2"})
    assert info.value.code == 238
    assert "this" in str(info.value)
