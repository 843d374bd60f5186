"""Drop-in parity of our client options with stock pymongo's, value by value.

``TABLE`` says, for each keyword value, what pymongo 4.17+ does with it: the setting it gives, or
the kind of error (``ValueError``/``TypeError``) it raises.  Our clients (sync, async, Motor) must
do the same on every pymongo era: the same setting in the policy, or an
:class:`~backpressure.InvalidPolicyError` that is also that kind of error and names the option.
Where pymongo has the options (>= 4.17) the table itself is checked against
``pymongo.MongoClient(..., connect=False)``, so it cannot drift from stock; on older eras, which
do not know the options, the table is what we accept (docs/presets.md says so).  URI values get
the same treatment: accepted with the same setting, or a warning naming the option and the value
ignored.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any, Union

import pymongo
import pytest

import backpressure
from backpressure.adapters import seams
from backpressure.core.policy import DEFAULT_POLICY

Outcome = Union[int, bool, type[Exception]]

MAX = "maxAdaptiveRetries"
RETARGET = "enableOverloadRetargeting"
TABLE: list[tuple[str, Any, Outcome]] = [
    (MAX, 0, 0),
    (MAX, 7, 7),
    (MAX, 10**6, 10**6),
    (MAX, "7", 7),
    (MAX, " 7 ", 7),
    (MAX, "+7", 7),
    (MAX, "0_7", 7),
    (MAX, True, 1),
    (MAX, False, 0),
    (MAX, -1, ValueError),
    (MAX, "-1", ValueError),
    (MAX, "7.0", ValueError),
    (MAX, "", ValueError),
    (MAX, "many", ValueError),
    (MAX, 7.0, TypeError),
    (MAX, None, TypeError),
    (MAX, [7], TypeError),
    ("max_adaptive_retries", "3", 3),
    ("MAXADAPTIVERETRIES", 4, 4),
    ("max_adaptive_retries", -3, ValueError),
    (RETARGET, True, True),
    (RETARGET, False, False),
    (RETARGET, "true", True),
    (RETARGET, "false", False),
    (RETARGET, "True", ValueError),
    (RETARGET, "TRUE", ValueError),
    (RETARGET, "1", ValueError),
    (RETARGET, "yes", ValueError),
    (RETARGET, 1, TypeError),
    (RETARGET, 0, TypeError),
    (RETARGET, None, TypeError),
    ("enable_overload_retargeting", "true", True),
    ("ENABLEOVERLOADRETARGETING", False, False),
]
"""(keyword, value, pymongo 4.17+'s setting or error kind)."""

URI_TABLE: list[tuple[str, Union[int, bool, None]]] = [
    ("maxAdaptiveRetries=7", 7),
    ("maxAdaptiveRetries=%207", 7),
    ("maxAdaptiveRetries=+7", 7),
    ("MAXADAPTIVERETRIES=3", 3),
    ("maxAdaptiveRetries=-1", None),
    ("maxAdaptiveRetries=7.0", None),
    ("maxAdaptiveRetries=", None),
    ("enableOverloadRetargeting=true", True),
    ("enableOverloadRetargeting=false", False),
    ("enableOverloadRetargeting=True", None),
    ("enableOverloadRetargeting=1", None),
]
"""(URI option, pymongo 4.17+'s setting, or None: a warning naming the option, value ignored)."""

_FIELD = {"maxadaptiveretries": "max_retries", "enableoverloadretargeting": "retarget"}
_STOCK = {"max_retries": "max_adaptive_retries", "retarget": "enable_overload_retargeting"}
CLASSES = ["MongoClient", "AsyncMongoClient"] + (
    ["AsyncIOMotorClient"] if importlib.util.find_spec("motor") else []
)
URI = "mongodb://localhost:1"


def _field(option: str) -> str:
    """The Policy field an option sets (any spelling)."""
    return _FIELD[option.lower().replace("_", "")]


async def _close(client: Any) -> None:
    """Close a sync, async or Motor client."""
    result = client.close()
    if result is not None:
        await result


async def _ours(cls: str, uri: str, **kwargs: Any) -> Any:
    """The policy of one of our clients built with ``kwargs`` (never connecting)."""
    client = getattr(backpressure, cls)(uri, connect=False, **kwargs)
    try:
        return backpressure.policy(client)
    finally:
        await _close(client)


def _stock(uri: str, option: str, **kwargs: Any) -> Any:
    """Stock pymongo's setting of ``option`` (a Policy field name) for a client built so."""
    client = pymongo.MongoClient(uri, connect=False, **kwargs)
    try:
        return getattr(client.options, _STOCK[option])
    finally:
        client.close()


@pytest.mark.parametrize(("option", "value", "expected"), TABLE)
def test_the_table_is_stock_pymongo(option: str, value: Any, expected: Outcome) -> None:
    """pymongo 4.17+ gives each keyword value the table's setting, or raises its error kind."""
    if not seams.HAS_NATIVE_BACKPRESSURE:
        pytest.skip("pymongo < 4.17 has no maxAdaptiveRetries / enableOverloadRetargeting")
    if isinstance(expected, type):
        with pytest.raises(expected):
            _stock(URI, _field(option), **{option: value})
    else:
        setting = _stock(URI, _field(option), **{option: value})
        assert setting == expected
        assert type(setting) is type(value) or isinstance(value, str)


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize(("option", "value", "expected"), TABLE)
async def test_our_clients_read_keywords_as_the_table(
    cls: str, option: str, value: Any, expected: Outcome
) -> None:
    """Our clients give the same setting, or raise an InvalidPolicyError of the same kind that
    names the option and what it allows."""
    if isinstance(expected, type):
        with pytest.raises(backpressure.InvalidPolicyError) as info:
            await _ours(cls, URI, **{option: value})
        assert isinstance(info.value, expected)
        canonical = MAX if _field(option) == "max_retries" else RETARGET
        assert canonical in str(info.value)
        assert "must be" in str(info.value)
    else:
        policy = await _ours(cls, URI, **{option: value})
        assert getattr(policy, _field(option)) == expected


@pytest.mark.parametrize(("query", "expected"), URI_TABLE)
def test_the_uri_table_is_stock_pymongo(query: str, expected: Union[int, bool, None]) -> None:
    """pymongo 4.17+ reads each URI value as the table says (or warns and ignores it)."""
    if not seams.HAS_NATIVE_BACKPRESSURE:
        pytest.skip("pymongo < 4.17 has no maxAdaptiveRetries / enableOverloadRetargeting")
    field = _field(query.partition("=")[0])
    default = _stock(URI, field)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        setting = _stock(f"{URI}/?{query}", field)
    assert setting == (default if expected is None else expected)
    assert bool(caught) is (expected is None)


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize(("query", "expected"), URI_TABLE)
async def test_our_clients_read_uris_as_the_table(
    cls: str, query: str, expected: Union[int, bool, None]
) -> None:
    """Our clients take the same URI values; an invalid one warns, naming the option, and the
    preset's own value stays."""
    option = query.partition("=")[0]
    field = _field(option)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy = await _ours(cls, f"{URI}/?{query}")
    if expected is None:
        assert getattr(policy, field) == getattr(DEFAULT_POLICY, field)
        canonical = MAX if field == "max_retries" else RETARGET
        assert [str(w.message) for w in caught if canonical in str(w.message)]
    else:
        assert getattr(policy, field) == expected
        assert not caught
