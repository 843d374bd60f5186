"""pytest plugin for scripts/pymongo_tests.py: enable backpressure on every client the tests make.

Loaded in the pytest process that runs pymongo's own test files (``-p pymongo_tests_enable``,
with this folder on ``PYTHONPATH``); ``BACKPRESSURE_PYMONGO_TESTS_PRESET`` names the preset.
The plugin wraps ``MongoClient.__init__`` and ``AsyncMongoClient.__init__`` (the classes
themselves, so every helper of pymongo's test suite goes through it: ``client_context``,
``rs_or_single_client``, ``simple_client``, the unified runner's entities). Each client is
counted as it is made and, unless the preset is ``stock``, enabled with
``backpressure.enable(client, preset)`` before its constructor returns; ``stock`` enables
nothing and does not import ``backpressure``. Nothing on disk is changed. At the end the counts
go to the JSON file named by ``BACKPRESSURE_PYMONGO_TESTS_COUNTS`` (when set), so the runner can
check that the hook worked.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Callable

import pymongo

PRESET_VARIABLE = "BACKPRESSURE_PYMONGO_TESTS_PRESET"
COUNTS_VARIABLE = "BACKPRESSURE_PYMONGO_TESTS_COUNTS"
STOCK = "stock"

_counts = {"created": 0, "enabled": 0}
_originals: dict[type, Callable[..., None]] = {}


def _client_classes() -> list[type]:
    """pymongo's client classes (AsyncMongoClient exists from pymongo 4.9 on)."""
    classes: list[type] = [pymongo.MongoClient]
    async_class = getattr(pymongo, "AsyncMongoClient", None)
    if async_class is not None:
        classes.append(async_class)
    return classes


def _wrap(cls: type, preset: str) -> None:
    """Replace ``cls.__init__`` with one that counts and (unless stock) enables the client."""
    original = cls.__dict__["__init__"]

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _counts["created"] += 1
        if preset != STOCK:
            import backpressure

            if not backpressure.is_enabled(self):
                backpressure.enable(self, preset)
                _counts["enabled"] += 1

    _originals[cls] = original
    cls.__init__ = __init__  # type: ignore[misc]


def pytest_configure(config: Any) -> None:
    """Wrap the client classes before any test module is imported."""
    preset = os.environ.get(PRESET_VARIABLE, STOCK)
    if preset != STOCK:
        from backpressure.core.policy import resolve_policy

        resolve_policy(preset)  # an unknown preset fails here, once, naming the value
    for cls in _client_classes():
        _wrap(cls, preset)


def pytest_unconfigure(config: Any) -> None:
    """Restore the constructors and write the counts."""
    for cls, original in _originals.items():
        cls.__init__ = original  # type: ignore[misc]
    _originals.clear()
    path = os.environ.get(COUNTS_VARIABLE)
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(_counts, handle)
