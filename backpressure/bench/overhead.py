"""Overhead with no overload: the same operations through a stock and a backpressure client.

Both clients talk to the same server.  Each round runs a block of ``block`` operations on one
client, then the same block on the other (the order alternates every round, so drift and warm-up
hit both alike); the per-round ratio enabled/plain of the time per operation is summarised by its
median and interquartile range.
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


def _time_block(op: Operation, collection: Collection[Document], block: int) -> float:
    """Return seconds per operation over one block."""
    start = time.perf_counter()
    for i in range(block):
        op(collection, i)
    return (time.perf_counter() - start) / block


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
    enabled = policy.open(uri)
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
            plain_times: list[float] = []
            enabled_times: list[float] = []
            for r in range(rounds):
                order = ("plain", "enabled") if r % 2 == 0 else ("enabled", "plain")
                for side in order:
                    seconds = _time_block(op, collection_for(side, name), block)
                    (plain_times if side == "plain" else enabled_times).append(seconds)
                progress(1.0)
            ratios = [e / p for e, p in zip(enabled_times, plain_times)]
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
