"""The installed pymongo's wrapped methods against the signatures the native adapter knows.

A pymongo release that changes ``_retry_internal`` or ``_select_server`` fails here first, with
the release and the parameters named, rather than deep inside an integration test.
"""

from __future__ import annotations

from typing import Any, Optional

import pymongo
import pytest

from backpressure.adapters import seams

pytestmark = pytest.mark.skipif(
    not seams.HAS_NATIVE_BACKPRESSURE, reason="pymongo < 4.17 has no native loop to wrap"
)


def _client_classes() -> list[type]:
    """pymongo's client classes of the installed release."""
    return [pymongo.MongoClient, pymongo.AsyncMongoClient]


@pytest.mark.parametrize("cls", _client_classes(), ids=lambda cls: cls.__name__)
def test_installed_pymongo_has_a_known_signature(cls: type) -> None:
    """pymongo's own clients get the positional wrappers (the overhead figures' flavour)."""
    client = cls(connect=False)
    try:
        assert seams.native_signature(client) is not None, seams.signature_report(cls)
        assert (
            seams.retry_internal_arity(client)
            == len(seams.NATIVE_RETRY_INTERNAL_SIGNATURES[seams.native_signature(client) or ""]) - 1
        )
    finally:
        if cls is pymongo.MongoClient:
            client.close()


class _Later:
    """A client class whose ``_retry_internal`` takes a parameter no known release has."""

    def _retry_internal(
        self,
        func: Any,
        session: Any,
        bulk: Any,
        operation: Any,
        is_read: bool = False,
        address: Any = None,
        read_pref: Any = None,
        retryable: bool = False,
        operation_id: Optional[int] = None,
        is_run_command: bool = False,
        is_aggregate_write: bool = False,
        conn_mgr: Any = None,
        hedge: Any = None,
    ) -> None:
        """Take one parameter more than pymongo 4.20.1."""

    def _select_server(
        self,
        server_selector: Any,
        session: Any,
        operation: Any,
        address: Any = None,
        deprioritized_servers: Any = None,
        operation_id: Optional[int] = None,
    ) -> None:
        """Take pymongo 4.17-4.20.1's parameters."""


def test_an_unknown_signature_is_reported_by_release_and_parameter() -> None:
    """The report names the release, the method, what it takes and every known signature."""
    assert seams.native_signature(_Later()) is None
    report = seams.signature_report(_Later)
    head = f"pymongo {pymongo.__version__}: _Later._retry_internal has parameters"
    assert report.startswith(head)
    assert "'conn_mgr', 'hedge')" in report
    assert "not in the known signatures (4.17-4.20.0: (" in report
    assert "; 4.20.1: (" in report
    assert "_select_server" not in report
    assert report.endswith("(the adapter falls back to its forwarding wrappers)")


def test_each_known_signature_is_recognised() -> None:
    """Every entry of the table is recognised as itself, with its own arity."""
    for releases, signature in seams.NATIVE_RETRY_INTERNAL_SIGNATURES.items():
        names = ", ".join(
            name if default is seams._EMPTY else f"{name}={default!r}"
            for name, default in signature
        )
        namespace: dict[str, Any] = {}
        exec(f"def _retry_internal({names}): pass", namespace)  # a signature built from the table
        cls = type("Known", (_Later,), {"_retry_internal": namespace["_retry_internal"]})
        assert seams.native_signature(cls()) == releases
        assert seams.retry_internal_arity(cls()) == len(signature) - 1
        assert f"has the known _retry_internal signature {releases}" in seams.signature_report(cls)
