"""The version guard: every pymongo seam is probed at enable time; a mismatch never installs."""

from __future__ import annotations

from typing import Any

import pytest

import backpressure
from backpressure import DRAFT
from backpressure.adapters import seams
from backpressure.core.client_state import STATE_ATTRIBUTE
from backpressure.testing import EmbeddedServer
from tests.integration.conftest import ClientFactory, overload_fail_point, resolve


def assert_untouched(client: Any, policy_before: Any) -> None:
    """Nothing of ours is left on ``client``: no state, no instance wrappers, pymongo's policy."""
    assert not backpressure.is_enabled(client)
    assert STATE_ATTRIBUTE not in vars(client)
    for name in ("_retry_internal", "_select_server", "_process_response"):
        assert name not in vars(client)
    assert getattr(client, "_retry_policy", None) is policy_before


async def test_the_wrong_adapter_is_refused_naming_pymongo_and_the_seam(
    clients: ClientFactory, standalone_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Detection forced to pick the other adapter: a clear error, the client untouched and
    still working (before the guard, the backport on 4.20 made find_one raise TypeError)."""
    client = clients.plain(standalone_server.uri)
    native = seams.client_has_native_backpressure(client)
    monkeypatch.setattr(seams, "client_has_native_backpressure", lambda _client: not native)
    policy_before = getattr(client, "_retry_policy", None)
    with pytest.raises(seams.UnsupportedPymongoError) as info:
        backpressure.enable(client, DRAFT)
    message = str(info.value)
    assert f"pymongo {seams._version_text()}" in message
    assert ("_retry_policy.backoff" if not native else "_retry_internal") in message
    assert "left untouched" in message
    assert_untouched(client, policy_before)
    await resolve(client.db.coll.insert_one({"_id": 1}))
    assert await resolve(client.db.coll.find_one()) == {"_id": 1}


async def test_one_missing_seam_is_named(
    clients: ClientFactory, standalone_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seam both adapters need (``_select_server``) missing: the error names it."""
    client = clients.plain(standalone_server.uri)
    policy_before = getattr(client, "_retry_policy", None)
    monkeypatch.setattr(type(client), "_select_server", None)
    with pytest.raises(seams.UnsupportedPymongoError, match=r"_select_server is missing"):
        backpressure.enable(client, DRAFT)
    assert_untouched(client, policy_before)


async def test_newer_pymongo_whose_seams_match_is_enabled_with_one_warning(
    clients: ClientFactory, standalone_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pymongo newer than the tested range whose seams all match: one warning, then enabled."""
    monkeypatch.setattr(seams.versions, "PYMONGO_VERSION", (seams.TESTED_RANGE[1][0], 99, 0))
    monkeypatch.setattr(seams.versions, "_WARNED", [])
    first = clients.plain(standalone_server.uri)
    with pytest.warns(seams.UntestedPymongoWarning, match="newer"):
        backpressure.enable(first, DRAFT.replace(base_backoff=0.001), random=lambda: 0.0)
    second = clients.plain(standalone_server.uri)
    backpressure.enable(second, DRAFT)  # warnings are errors in this suite: none here
    assert backpressure.is_enabled(first)
    assert backpressure.is_enabled(second)
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=1))
    await resolve(first.db.coll.insert_one({"_id": 2}))


def test_the_tested_range_covers_the_installed_pymongo() -> None:
    """The suite runs on a pymongo inside the tested range (so it never sees the warning)."""
    low, high = seams.TESTED_RANGE
    assert low <= seams.PYMONGO_VERSION[:2] <= high
