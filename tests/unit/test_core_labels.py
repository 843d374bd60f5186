"""Unit tests for backpressure.core.labels: classification and the server backoff hint."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pymongo.errors import (
    AutoReconnect,
    ClientBulkWriteException,
    OperationFailure,
    PyMongoError,
)

from backpressure.core import labels
from backpressure.core.labels import (
    NO_WRITES_PERFORMED,
    RETRYABLE,
    RETRYABLE_WRITE,
    SYSTEM_OVERLOADED,
    OverloadLabels,
    add_overload_labels,
    error_labels,
    has_no_writes_performed,
    is_overload,
    is_retryable_overload,
    overload_labels,
    server_base_backoff,
)


def overload(backoff_ms: Any = None, *, label_list: Any = None) -> OperationFailure:
    """Build an IngressRequestRateLimitExceeded error as the server sends it."""
    doc: dict[str, Any] = {
        "ok": 0.0,
        "errmsg": "Rate limiter 'ingressRequestRateLimiter' rate exceeded",
        "code": 462,
        "errorLabels": [SYSTEM_OVERLOADED, RETRYABLE] if label_list is None else label_list,
    }
    if backoff_ms is not None:
        doc["baseBackoffMS"] = backoff_ms
    return OperationFailure(doc["errmsg"], 462, doc)


def test_constants() -> None:
    """The label constants are the server's spellings."""
    assert SYSTEM_OVERLOADED == "SystemOverloadedError"
    assert RETRYABLE == "RetryableError"
    assert NO_WRITES_PERFORMED == "NoWritesPerformed"
    assert RETRYABLE_WRITE == "RetryableWriteError"


def test_overload_error_is_retryable_overload() -> None:
    """An error with both labels is a retryable overload error."""
    exc = overload()
    assert error_labels(exc) == frozenset({SYSTEM_OVERLOADED, RETRYABLE})
    assert is_overload(exc)
    assert is_retryable_overload(exc)
    assert not has_no_writes_performed(exc)


def test_overload_without_retryable_label() -> None:
    """SystemOverloadedError alone is an overload error but not retryable."""
    exc = overload(label_list=[SYSTEM_OVERLOADED])
    assert is_overload(exc)
    assert not is_retryable_overload(exc)


@pytest.mark.parametrize(
    "exc",
    [ValueError("x"), KeyboardInterrupt(), PyMongoError("plain"), AutoReconnect("net")],
)
def test_non_overload_errors(exc: BaseException) -> None:
    """Errors without labels, and non-pymongo errors, have no labels."""
    assert error_labels(exc) == frozenset()
    assert not is_overload(exc)
    assert not is_retryable_overload(exc)


def test_non_string_labels_ignored() -> None:
    """Labels that are not strings are ignored."""
    exc = PyMongoError("x", error_labels=[SYSTEM_OVERLOADED, 5, None, (1,)])  # type: ignore[list-item]
    assert error_labels(exc) == frozenset({SYSTEM_OVERLOADED})


def test_broken_label_container() -> None:
    """When pymongo's own ``has_error_label`` raises (corrupted state), there are no labels."""
    exc = PyMongoError("x")
    exc._error_labels = 42  # type: ignore[assignment]
    assert error_labels(exc) == frozenset()
    assert not is_overload(exc)


def test_no_writes_performed() -> None:
    """The NoWritesPerformed label is detected."""
    exc = AutoReconnect("x", errors=None)
    exc._add_error_label(NO_WRITES_PERFORMED)
    assert has_no_writes_performed(exc)


def test_client_bulk_write_exception_inner_error() -> None:
    """ClientBulkWriteException exposes the labels and hint of its top-level error."""
    inner = overload(backoff_ms=250)
    exc = ClientBulkWriteException({"error": inner, "writeErrors": []}, verbose=False)
    assert is_retryable_overload(exc)
    assert server_base_backoff(exc) == pytest.approx(0.25)
    odd = ClientBulkWriteException({"error": "not an exception"}, verbose=False)
    assert error_labels(odd) == frozenset()
    assert server_base_backoff(odd) is None


def test_add_overload_labels_idempotent() -> None:
    """add_overload_labels adds both labels once and ignores non-pymongo errors."""
    exc = AutoReconnect("reset by peer")
    add_overload_labels(exc)
    add_overload_labels(exc)
    assert is_retryable_overload(exc)
    assert error_labels(exc) == frozenset({SYSTEM_OVERLOADED, RETRYABLE})
    other = ValueError("x")
    add_overload_labels(other)
    assert error_labels(other) == frozenset()


@pytest.mark.parametrize(
    ("value", "seconds"), [(50, 0.05), (1, 0.001), (250.5, 0.2505), (86_400_000, 86_400.0)]
)
def test_server_base_backoff_valid(value: float, seconds: float) -> None:
    """Positive finite baseBackoffMS values are returned in seconds."""
    assert server_base_backoff(overload(value)) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [
        -50,
        0,
        0.0,
        math.nan,
        math.inf,
        -math.inf,
        "50",
        b"50",
        True,
        False,
        1e308,
        10**400,
        {"$numberLong": "50"},
        {"a": {"b": {"c": [1, 2, 3]}}},
        [50],
    ],
)
def test_server_base_backoff_hostile(value: Any) -> None:
    """Hostile or nonsensical baseBackoffMS values are ignored."""
    assert server_base_backoff(overload(value)) is None


def test_server_base_backoff_absent() -> None:
    """No hint, non-mapping details and non-pymongo errors give None."""
    assert server_base_backoff(overload()) is None
    assert server_base_backoff(ValueError("x")) is None
    exc = OperationFailure("x", 2, None)
    assert server_base_backoff(exc) is None


class _Exploding(Exception):
    """An exception whose ``details`` property raises."""

    @property
    def details(self) -> Any:
        """Raise on access."""
        raise RuntimeError("boom")


def test_server_base_backoff_never_raises() -> None:
    """A raising ``details`` property yields None."""
    assert server_base_backoff(_Exploding()) is None


def test_private_backoff_attribute_is_not_read() -> None:
    """Only the public ``details`` are read; pymongo's private ``_base_backoff_ms`` is not."""

    class Legacy(PyMongoError):
        """Carries only the private attribute."""

        _base_backoff_ms = 75

    assert server_base_backoff(Legacy("x")) is None


def _broken() -> PyMongoError:
    """An error whose label container is corrupted (``has_error_label`` raises)."""
    exc = PyMongoError("x")
    exc._error_labels = 42  # type: ignore[assignment]
    return exc


@pytest.mark.parametrize(
    "make",
    [
        overload,
        lambda: overload(label_list=[SYSTEM_OVERLOADED]),
        lambda: overload(label_list=[RETRYABLE]),
        lambda: PyMongoError("plain"),
        lambda: ValueError("x"),
        lambda: ClientBulkWriteException({"error": overload(), "writeErrors": []}, verbose=False),
        _broken,
    ],
)
def test_overload_labels_answer_as_the_predicates(make: Any) -> None:
    """The labels read once give the answers of ``is_overload`` and ``is_retryable_overload``."""
    exc = make()
    assert overload_labels(exc) == OverloadLabels(is_overload(exc), is_retryable_overload(exc))


def test_module_exports() -> None:
    """Every name in __all__ exists."""
    for name in labels.__all__:
        assert hasattr(labels, name)


class _BadLabels:
    """A label container whose iteration fails half-way."""

    def __iter__(self) -> Any:
        """Yield one label, then fail."""
        yield SYSTEM_OVERLOADED
        raise RuntimeError("corrupt")


def test_label_iteration_failure() -> None:
    """A label container that raises while searched never raises out of classification: each
    label is what pymongo's ``has_error_label`` answers, False where it raises."""
    exc = PyMongoError("x")
    exc._error_labels = _BadLabels()  # type: ignore[assignment]
    assert error_labels(exc) <= frozenset({SYSTEM_OVERLOADED})
    assert not is_retryable_overload(exc)


def test_bulk_error_property_raising() -> None:
    """A ClientBulkWriteException whose details break is classified without raising."""
    exc = ClientBulkWriteException({"error": None}, verbose=False)
    exc._OperationFailure__details = None  # type: ignore[attr-defined]
    assert error_labels(exc) == frozenset()
    assert server_base_backoff(exc) is None
