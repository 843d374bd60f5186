"""Typical user code, checked by ``mypy --strict`` in ``make lint`` (never run by pytest).

It guards the public signatures: a changed parameter, a lost annotation or a narrowed return type
makes ``make lint`` fail here before it fails a user.  Only names from ``backpressure.__all__``
and the lazily served subpackages are used, as a user would.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import pymongo
from typing_extensions import assert_type

import backpressure


class PrintingListener:
    """A retry listener, as an application writes one (structurally a RetryListener)."""

    def retried(self, event: backpressure.RetryEvent) -> None:
        """Report a retry."""
        print(event.operation, event.attempt, event.delay, event.server)

    def gave_up(self, event: backpressure.GiveUpEvent) -> None:
        """Report a give-up."""
        print(event.operation, event.attempts, event.reason.value, event.total_backoff)


def sync_client() -> None:
    """A client of the package's class, an enabled stock client, their policy and statistics."""
    listener: backpressure.RetryListener = PrintingListener()
    client: backpressure.MongoClient[dict[str, Any]] = backpressure.MongoClient(
        "mongodb://localhost/?maxAdaptiveRetries=3",
        backpressure="current",
        backpressure_listeners=[listener],
        enableOverloadRetargeting=True,
    )
    assert isinstance(client, pymongo.MongoClient)
    assert_type(backpressure.is_enabled(client), bool)
    policy = backpressure.policy(client)
    assert_type(policy, backpressure.Policy)
    assert_type(policy.max_retries, int)
    assert_type(policy.describe(), str)
    stats = backpressure.stats(client)
    assert_type(stats, backpressure.BackpressureStats)
    assert_type(stats.attempts_per_operation, float)

    stock: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient("mongodb://localhost/")
    enabled = backpressure.enable(stock, backpressure.ADAPTIVE, listeners=[listener])
    assert_type(enabled, pymongo.MongoClient[dict[str, Any]])
    backpressure.enable(stock, backpressure.CURRENT_SPEC.replace(max_retries=1, retarget=False))
    backpressure.enable(stock, backpressure.DRAFT)
    assert_type(backpressure.disable(stock), pymongo.MongoClient[dict[str, Any]])

    with backpressure.overrides(max_retries=0, criticality=backpressure.Criticality.SHEDDABLE):
        client.db.coll.insert_one({"x": 1})
    with backpressure.overrides(enabled=False):
        client.db.coll.find_one()

    backpressure.register(listener)
    backpressure.unregister(listener)
    client.close()


def outer_retry_loop(client: pymongo.MongoClient[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """An application's own retry loop that leaves overload errors to the package."""
    for _ in range(3):
        try:
            return client.db.coll.find_one()
        except pymongo.errors.PyMongoError as exc:
            assert_type(backpressure.retry_outside(exc), bool)
            assert_type(backpressure.is_transient(exc), bool)
            assert_type(backpressure.is_retryable_overload(exc), bool)
            if isinstance(exc, backpressure.LocalOverloadError) or not backpressure.retry_outside(
                exc
            ):
                raise
    return None


async def async_client() -> None:
    """The async client class and a policy built from a preset."""
    policy = backpressure.Policy(max_retries=1, base_backoff=0.05, name="mine")
    client: backpressure.AsyncMongoClient[dict[str, Any]] = backpressure.AsyncMongoClient(
        "mongodb://localhost/", backpressure=policy
    )
    await client.db.coll.insert_one({"x": 1})
    assert_type(backpressure.policy(client), backpressure.Policy)
    await client.close()


def optional_parts() -> None:
    """Metrics, the test switch and Motor, reached as attributes of the package."""
    backpressure.metrics.enable_prometheus()
    backpressure.testing.set_testing(True)
    motor_client = backpressure.AsyncIOMotorClient("mongodb://localhost/")
    backpressure.policy(motor_client)
    version: str = backpressure.__version__
    print(version)
    try:
        limit = backpressure.sim.physical_limit
    except backpressure.MissingExtraError as exc:
        print(exc.extra)
    else:
        print(limit)


def errors() -> None:
    """The package's own errors and warnings are ordinary exception classes."""
    error: pymongo.errors.ConfigurationError = backpressure.InvalidPolicyError("bad")
    missing: ImportError = backpressure.MissingExtraError("simpy", "sim", "backpressure.sim")
    warning: Warning = backpressure.UntestedPymongoWarning("newer than tested")
    print(error, missing, warning)
    try:
        backpressure.DRAFT.replace(max_retrys=3)
    except backpressure.InvalidPolicyError as exc:
        print(exc)


if __name__ == "__main__":  # pragma: no cover - type-checked, not run
    asyncio.run(async_client())
