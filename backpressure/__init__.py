"""Overload-aware retries ("client backpressure") for PyMongo, AsyncMongoClient and Motor.

Quick start::

    import backpressure

    # the default preset, "current"
    client = backpressure.MongoClient("mongodb://localhost/")
    backpressure.enable(pymongo_client)  # or an existing client
    backpressure.policy(client)          # the policy it retries with

The names below are the public API; everything else is importable from its own module
(``backpressure.core.*``, ``backpressure.switch.*``) but not re-exported here.  The subpackages
``backpressure.metrics``, ``backpressure.testing`` and ``backpressure.sim`` are imported on first
attribute access, and ``backpressure.AsyncIOMotorClient`` is built on first access, so importing
this package never imports Motor, SimPy, prometheus-client or OpenTelemetry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backpressure.adapters.seams import UntestedPymongoWarning
from backpressure.core.adaptive import LocalOverloadError
from backpressure.core.events import GiveUpEvent, RetryEvent, RetryListener
from backpressure.core.extras import MissingExtraError
from backpressure.core.labels import is_retryable_overload
from backpressure.core.outer import is_transient, retry_outside
from backpressure.core.overrides import Criticality
from backpressure.core.policy import ADAPTIVE, CURRENT_SPEC, DRAFT, InvalidPolicyError, Policy
from backpressure.core.stats import BackpressureStats
from backpressure.switch.classes import AsyncMongoClient, MongoClient
from backpressure.switch.client import (
    disable,
    enable,
    is_enabled,
    policy,
    stats,
)
from backpressure.switch.overrides import overrides
from backpressure.switch.registry import register, unregister

if TYPE_CHECKING:
    from backpressure import metrics as metrics
    from backpressure import sim as sim
    from backpressure import testing as testing

__version__ = "0.1.0"
"""The version of the pymongo-backpressure distribution."""

__all__ = [
    "ADAPTIVE",
    "CURRENT_SPEC",
    "DRAFT",
    "AsyncIOMotorClient",
    "AsyncMongoClient",
    "BackpressureStats",
    "Criticality",
    "GiveUpEvent",
    "InvalidPolicyError",
    "LocalOverloadError",
    "MissingExtraError",
    "MongoClient",
    "Policy",
    "RetryEvent",
    "RetryListener",
    "UntestedPymongoWarning",
    "__version__",
    "disable",
    "enable",
    "is_enabled",
    "is_retryable_overload",
    "is_transient",
    "overrides",
    "policy",
    "register",
    "retry_outside",
    "stats",
    "unregister",
]

_SUBPACKAGES = {
    # subpackage -> (a module it cannot work without, the extra that installs it), or None
    "metrics": None,
    "testing": None,
    "sim": ("simpy", "sim"),
}


def __getattr__(name: str) -> Any:
    """Build ``AsyncIOMotorClient`` or import a subpackage on first access.

    Raises:
        MissingExtraError: ``backpressure.AsyncIOMotorClient`` without Motor, or
            ``backpressure.sim`` without SimPy.
        AttributeError: any other unknown name.
    """
    if name == "AsyncIOMotorClient":
        from backpressure.switch.classes import motor_client_class

        return motor_client_class()
    if name in _SUBPACKAGES:
        import importlib

        from backpressure.core.extras import require

        needs = _SUBPACKAGES[name]
        if needs is not None:
            require(needs[0], needs[1], f"backpressure.{name}")
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
