"""Overload-aware retries ("client backpressure") for PyMongo, AsyncMongoClient and Motor.

Quick start::

    import backpressure

    client = backpressure.MongoClient("mongodb://localhost/")          # draft policy, on
    backpressure.enable(pymongo_client, "current")                     # or an existing client

``backpressure.AsyncIOMotorClient`` is built on first access, so importing this package never
imports Motor.
"""

from __future__ import annotations

from typing import Any

from backpressure.budget import NullBudget, RetryBudget
from backpressure.client import (
    AsyncMongoClient,
    MongoClient,
    budget,
    disable,
    enable,
    is_enabled,
    state,
)
from backpressure.decision import GiveUp, Retry, RetryController, StopReason
from backpressure.events import GiveUpEvent, RetryEvent, RetryListener, RetrySummary, retry_summary
from backpressure.labels import (
    RETRYABLE,
    SYSTEM_OVERLOADED,
    is_overload,
    is_retryable_overload,
)
from backpressure.policy import (
    CURRENT_SPEC,
    DRAFT,
    PRESETS,
    InvalidPolicyError,
    Policy,
    resolve_policy,
)
from backpressure.uri import parse_backpressure_options

__version__ = "0.1.0"

__all__ = [
    "CURRENT_SPEC",
    "DRAFT",
    "PRESETS",
    "RETRYABLE",
    "SYSTEM_OVERLOADED",
    "AsyncIOMotorClient",
    "AsyncMongoClient",
    "GiveUp",
    "GiveUpEvent",
    "InvalidPolicyError",
    "MongoClient",
    "NullBudget",
    "Policy",
    "Retry",
    "RetryBudget",
    "RetryController",
    "RetryEvent",
    "RetryListener",
    "RetrySummary",
    "StopReason",
    "__version__",
    "budget",
    "disable",
    "enable",
    "is_enabled",
    "is_overload",
    "is_retryable_overload",
    "parse_backpressure_options",
    "resolve_policy",
    "retry_summary",
    "state",
]


def __getattr__(name: str) -> Any:
    """Build ``AsyncIOMotorClient`` on first access (imports Motor)."""
    if name == "AsyncIOMotorClient":
        from backpressure.client import motor_client_class

        return motor_client_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
