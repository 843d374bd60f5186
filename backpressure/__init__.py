"""Overload-aware retries ("client backpressure") for PyMongo, AsyncMongoClient and Motor.

Quick start::

    import backpressure

    client = backpressure.MongoClient("mongodb://localhost/")          # default preset, current
    backpressure.enable(pymongo_client, "current")                     # or an existing client

``backpressure.AsyncIOMotorClient`` is built on first access, so importing this package never
imports Motor.
"""

from __future__ import annotations

from typing import Any

from backpressure.adapters.seams import UnsupportedPymongoError, UntestedPymongoWarning
from backpressure.core.adaptive import (
    AdmissionControl,
    AdmissionListener,
    LocalOverloadError,
    LocalRefusalEvent,
    LocalWaitEvent,
)
from backpressure.core.backoff import backoff_ceiling, backoff_delay
from backpressure.core.budget import A6Budget, NullBudget, RetryBudget, ServerBudgets, budget_for
from backpressure.core.client_state import ClientState
from backpressure.core.decision import GiveUp, Retry, RetryController, StopReason
from backpressure.core.events import (
    GiveUpEvent,
    HedgeEvent,
    HedgeListener,
    OperationFinishedEvent,
    OperationListener,
    RetryEvent,
    RetryListener,
    RetrySummary,
    retry_summary,
)
from backpressure.core.extras import MissingExtraError
from backpressure.core.labels import (
    NO_WRITES_PERFORMED,
    RETRYABLE,
    SYSTEM_OVERLOADED,
    add_overload_labels,
    has_no_writes_performed,
    is_overload,
    is_retryable_overload,
    server_base_backoff,
)
from backpressure.core.operation import OperationRetries
from backpressure.core.outer import handled_by_backpressure, is_transient, retry_outside
from backpressure.core.overrides import Criticality
from backpressure.core.policy import (
    ADAPTIVE,
    CURRENT_SPEC,
    DRAFT,
    PRESETS,
    InvalidPolicyError,
    Policy,
    resolve_policy,
)
from backpressure.core.stats import BackpressureStats, ServerStats
from backpressure.switch.client import (
    AsyncMongoClient,
    MongoClient,
    budget,
    disable,
    enable,
    is_enabled,
    state,
    stats,
)
from backpressure.switch.overrides import overrides
from backpressure.switch.registry import register, unregister
from backpressure.switch.uri_options import parse_backpressure_options

__version__ = "0.1.0"

__all__ = [
    "ADAPTIVE",
    "CURRENT_SPEC",
    "DRAFT",
    "NO_WRITES_PERFORMED",
    "PRESETS",
    "RETRYABLE",
    "SYSTEM_OVERLOADED",
    "A6Budget",
    "AdmissionControl",
    "AdmissionListener",
    "AsyncIOMotorClient",
    "AsyncMongoClient",
    "BackpressureStats",
    "ClientState",
    "Criticality",
    "GiveUp",
    "GiveUpEvent",
    "HedgeEvent",
    "HedgeListener",
    "InvalidPolicyError",
    "LocalOverloadError",
    "LocalRefusalEvent",
    "LocalWaitEvent",
    "MissingExtraError",
    "MongoClient",
    "NullBudget",
    "OperationFinishedEvent",
    "OperationListener",
    "OperationRetries",
    "Policy",
    "Retry",
    "RetryBudget",
    "RetryController",
    "RetryEvent",
    "RetryListener",
    "RetrySummary",
    "ServerBudgets",
    "ServerStats",
    "StopReason",
    "UnsupportedPymongoError",
    "UntestedPymongoWarning",
    "__version__",
    "add_overload_labels",
    "backoff_ceiling",
    "backoff_delay",
    "budget",
    "budget_for",
    "disable",
    "enable",
    "handled_by_backpressure",
    "has_no_writes_performed",
    "is_enabled",
    "is_overload",
    "is_retryable_overload",
    "is_transient",
    "overrides",
    "parse_backpressure_options",
    "register",
    "resolve_policy",
    "retry_outside",
    "retry_summary",
    "server_base_backoff",
    "state",
    "stats",
    "unregister",
]


def __getattr__(name: str) -> Any:
    """Build ``AsyncIOMotorClient`` on first access (imports Motor)."""
    if name == "AsyncIOMotorClient":
        from backpressure.switch.client import motor_client_class

        return motor_client_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
