"""One listener rule for ``register()``, ``enable(listeners=...)`` and ``backpressure_listeners``.

A listener implements at least one method of a listener protocol (retry, operation, admission,
hedge); anything else raises the same :class:`InvalidListenerError` with the same message.
"""

from __future__ import annotations

from typing import Any

import pytest

import backpressure
from backpressure.core.events import LISTENER_METHODS, InvalidListenerError, check_listener
from backpressure.switch import registry
from backpressure.switch.client import validate_listeners

METHODS = sorted(method for methods in LISTENER_METHODS.values() for method in methods)


def listener_with(method: str) -> Any:
    """An object implementing only ``method``."""

    def callback(self: Any, event: Any) -> None:
        """Ignore the event."""

    return type(f"Only_{method}", (), {method: callback})()


class NotCallable:
    """Has the method names as plain attributes: no listener."""

    retried = 1
    hedged = None


class Unrelated:
    """Has a method of no listener protocol."""

    def started(self, event: Any) -> None:
        """Ignore the event."""


def test_the_protocols_and_their_methods() -> None:
    """The rule knows the four documented protocols."""
    assert dict(LISTENER_METHODS) == {
        "RetryListener": ("retried", "gave_up"),
        "OperationListener": ("operation_finished",),
        "PacingListener": ("waited", "refused"),
        "HedgeListener": ("hedged",),
    }


@pytest.mark.parametrize("method", METHODS)
def test_one_method_of_any_protocol_makes_a_listener(method: str) -> None:
    """register() and the option validation accept an object with any single listener method."""
    listener = listener_with(method)
    check_listener(listener, "x")
    assert validate_listeners([listener], "backpressure_listeners") == (listener,)
    backpressure.register(listener)
    try:
        assert listener in registry.registered_listeners()
    finally:
        backpressure.unregister(listener)
    assert listener not in registry.registered_listeners()


@pytest.mark.parametrize("bad", [object(), NotCallable(), Unrelated(), "retried", 42])
def test_anything_else_is_refused_alike_on_both_paths(bad: Any) -> None:
    """register() and the options raise the same error type, with the same list of methods."""
    with pytest.raises(InvalidListenerError) as by_register:
        backpressure.register(bad)
    with pytest.raises(InvalidListenerError) as by_option:
        validate_listeners([bad], "backpressure_listeners")
    assert bad not in registry.registered_listeners()
    for raised in (by_register.value, by_option.value):
        assert isinstance(raised, backpressure.InvalidPolicyError)
        assert isinstance(raised, TypeError)
        for method in METHODS:
            assert f"{method}()" in str(raised)
    # The messages differ only in how they name the object.
    assert (
        str(by_register.value).split(" must be ", 1)[1]
        == str(by_option.value).split(" must be ", 1)[1]
    )
    assert str(by_option.value).startswith("backpressure_listeners[0] must be a listener")


def test_a_listener_collection_must_be_a_list_or_tuple() -> None:
    """The option takes a list or tuple; anything else is the same error type."""
    with pytest.raises(InvalidListenerError, match="must be a list or tuple"):
        validate_listeners(listener_with("hedged"), "backpressure_listeners")
