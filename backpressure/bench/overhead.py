"""Overhead with no overload: the same operations through a stock and a backpressure client.

Both clients talk to the same server.  Each round runs a block of ``block`` operations on one
client, then the same block on the other (the order alternates every round, so drift and warm-up
hit both alike); the per-round ratio enabled/plain of the time per operation is summarised by its
median and interquartile range.  Wall time is what the application sees; the client thread's CPU
time (``time.thread_time``) leaves out waiting for the server and so isolates the client's own
cost, which is where a wrapper's overhead lives.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from pymongo import MongoClient
from pymongo.collection import Collection

from backpressure.workload.metrics import iqr, median, percentile
from backpressure.workload.policies import POLICIES, Document

__all__ = ["OPERATIONS", "OverheadResult", "measure_overhead"]

Operation = Callable[[Collection[Document], int], None]

_SMALL_DOCS = 5
_SMALL_BATCH = 2


def _insert_one(collection: Collection[Document], i: int) -> None:
    """Insert one small document."""
    collection.insert_one({"n": i})


def _find_one(collection: Collection[Document], i: int) -> None:
    """Find one document by _id."""
    collection.find_one({"_id": i % _SMALL_DOCS})


def _find_get_more(collection: Collection[Document], i: int) -> None:
    """Read 5 documents in batches of 2: one find and two getMores."""
    docs = list(collection.find({"_id": {"$lt": _SMALL_DOCS}}, batch_size=_SMALL_BATCH))
    if len(docs) != _SMALL_DOCS:
        raise AssertionError(f"expected {_SMALL_DOCS} documents, got {len(docs)}")


OPERATIONS: Mapping[str, Operation] = {
    "insert_one": _insert_one,
    "find_one": _find_one,
    "find+getMore": _find_get_more,
}
"""The measured operations by name."""


@dataclass(frozen=True)
class OverheadResult:
    """One operation's timings and enabled/plain ratios."""

    operation: str
    rounds: int
    block: int
    plain_us: float
    """Median time per operation of the stock client, in microseconds."""
    enabled_us: float
    """Median time per operation of the backpressure client, in microseconds."""
    ratio_median: float
    ratio_p25: float
    ratio_p75: float
    ratio_iqr: float
    plain_cpu_us: float
    """Median client-thread CPU time per operation of the stock client, in microseconds."""
    enabled_cpu_us: float
    """Median client-thread CPU time per operation of the backpressure client."""
    cpu_ratio_median: float
    cpu_ratio_p25: float
    cpu_ratio_p75: float


def _time_block(op: Operation, collection: Collection[Document], block: int) -> tuple[float, float]:
    """Return wall seconds and client-thread CPU seconds per operation over one block."""
    cpu = time.thread_time()
    start = time.perf_counter()
    for i in range(block):
        op(collection, i)
    wall = time.perf_counter() - start
    return wall / block, (time.thread_time() - cpu) / block


def measure_overhead(
    uri: str,
    *,
    rounds: int = 25,
    block: int = 200,
    operations: Mapping[str, Operation] = OPERATIONS,
    progress: Callable[[float], None] = lambda _: None,
) -> tuple[list[OverheadResult], str]:
    """Measure every operation; return the results and how the enabled client was built."""
    if rounds < 1 or block < 1:
        raise ValueError("rounds and block must be >= 1")
    policy = POLICIES["draft"]
    plain: MongoClient[Document] = MongoClient(uri)
    try:
        enabled = policy.open(uri)
    except BaseException:
        plain.close()
        raise
    try:
        seed = plain["backpressure_bench"]["overhead"]
        seed.drop()
        seed.insert_many([{"_id": i} for i in range(_SMALL_DOCS)])
        pairs: dict[str, tuple[Collection[Document], Collection[Document]]] = {
            "plain": (seed, plain["backpressure_bench"]["overhead_inserts"]),
            "enabled": (
                enabled.client["backpressure_bench"]["overhead"],
                enabled.client["backpressure_bench"]["overhead_inserts"],
            ),
        }

        def collection_for(side: str, name: str) -> Collection[Document]:
            reads, inserts = pairs[side]
            return inserts if name == "insert_one" else reads

        results = []
        for name, op in operations.items():
            for side in ("plain", "enabled"):  # warm-up block
                _time_block(op, collection_for(side, name), block)
            times: dict[str, list[float]] = {"plain": [], "enabled": []}
            cpus: dict[str, list[float]] = {"plain": [], "enabled": []}
            for r in range(rounds):
                order = ("plain", "enabled") if r % 2 == 0 else ("enabled", "plain")
                for side in order:
                    wall, cpu = _time_block(op, collection_for(side, name), block)
                    times[side].append(wall)
                    cpus[side].append(cpu)
                progress(1.0)
            plain_times, enabled_times = times["plain"], times["enabled"]
            ratios = [e / p for e, p in zip(enabled_times, plain_times)]
            cpu_ratios = [e / p if p > 0 else 1.0 for e, p in zip(cpus["enabled"], cpus["plain"])]
            results.append(
                OverheadResult(
                    operation=name,
                    rounds=rounds,
                    block=block,
                    plain_us=_us(median(plain_times)),
                    enabled_us=_us(median(enabled_times)),
                    ratio_median=_num(median(ratios)),
                    ratio_p25=_num(percentile(ratios, 25)),
                    ratio_p75=_num(percentile(ratios, 75)),
                    ratio_iqr=_num(iqr(ratios)),
                    plain_cpu_us=_us(median(cpus["plain"])),
                    enabled_cpu_us=_us(median(cpus["enabled"])),
                    cpu_ratio_median=_num(median(cpu_ratios)),
                    cpu_ratio_p25=_num(percentile(cpu_ratios, 25)),
                    cpu_ratio_p75=_num(percentile(cpu_ratios, 75)),
                )
            )
        return results, policy.integration()
    finally:
        plain.close()
        enabled.close()


def _num(value: Any) -> float:
    """Unwrap a statistic of a non-empty sample."""
    assert value is not None
    return float(value)


def _us(seconds: Any) -> float:
    """Seconds to microseconds."""
    return _num(seconds) * 1e6
