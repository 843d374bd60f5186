"""CPU cost of the pure decision core per operation: policy, budget and bookkeeping, no I/O.

Success path: ``CycleRecord(...)``, ``attempt_started``, ``succeeded()``.  Retry path: the
same operation failing once with an overload error (``failed()`` and its decision, a granted
retry), then succeeding on the retry, which refills the budget so every retry is granted.  Both
run single-threaded and on several threads sharing one controller (the budget lock contended);
CPU time is ``time.thread_time`` summed over the threads.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from pymongo.errors import OperationFailure

from backpressure.bench.threads import run_together
from backpressure.core.cycle_record import CycleRecord
from backpressure.core.decision import Retry, RetryController
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import DRAFT, Policy

__all__ = ["CoreCost", "measure_core_cost"]

_SERVER = ("localhost", 27017)


@dataclass(frozen=True)
class CoreCost:
    """Per-operation cost of one path at one thread count."""

    path: str
    threads: int
    operations: int
    cpu_ns_per_op: float
    """CPU time per operation (all threads), in nanoseconds."""
    wall_ops_per_s: float
    """Operations per second of wall time over all threads."""


def _overload_error() -> OperationFailure:
    """An ingress rate-limiter rejection as pymongo raises it."""
    labels = [SYSTEM_OVERLOADED, RETRYABLE]
    return OperationFailure(
        "Rate limiter 'ingressRequestRateLimiter' rate exceeded",
        code=462,
        details={"ok": 0, "code": 462, "errorLabels": labels},
    )


def _success_path(controller: RetryController, iterations: int) -> None:
    """Operations that succeed on the first attempt."""
    for _ in range(iterations):
        retries = CycleRecord(controller, "find")
        retries.attempt_started(_SERVER)
        retries.succeeded()


def _retry_path(controller: RetryController, iterations: int) -> None:
    """Operations that fail once with an overload error, then succeed on the retry."""
    error = _overload_error()
    for _ in range(iterations):
        retries = CycleRecord(controller, "find")
        retries.attempt_started(_SERVER)
        decision = retries.failed(error)
        if not isinstance(decision, Retry):
            raise AssertionError(f"expected a retry, got {decision!r}")
        retries.attempt_started(_SERVER)
        retries.succeeded()


PATHS: dict[str, Callable[[RetryController, int], None]] = {
    "success": _success_path,
    "retry": _retry_path,
}
"""The measured paths by name."""


def _measure(path: str, threads: int, iterations: int, policy: Policy) -> CoreCost:
    """Run ``iterations`` operations of ``path`` split over ``threads`` threads."""
    controller = RetryController(policy)
    body = PATHS[path]
    per_thread = max(1, iterations // threads)
    cpu: list[float] = []
    lock = threading.Lock()

    def run(_index: int) -> None:
        start = time.thread_time()
        body(controller, per_thread)
        spent = time.thread_time() - start
        with lock:
            cpu.append(spent)

    wall = run_together(run, threads)
    total = per_thread * threads
    return CoreCost(
        path=path,
        threads=threads,
        operations=total,
        cpu_ns_per_op=sum(cpu) / total * 1e9,
        wall_ops_per_s=total / wall if wall > 0 else 0.0,
    )


def measure_core_cost(
    iterations: int = 100_000, thread_counts: tuple[int, ...] = (1, 8), policy: Policy = DRAFT
) -> list[CoreCost]:
    """Measure both paths at each thread count (``iterations`` operations per measurement)."""
    if iterations < 1:
        raise ValueError("iterations must be >= 1")
    return [
        _measure(path, threads, iterations, policy) for path in PATHS for threads in thread_counts
    ]
