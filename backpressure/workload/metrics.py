"""Pure metric functions for the demo and the benchmarks: percentiles, ratios, timelines."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Optional, TypeVar

__all__ = [
    "AFTER_FAULT_S",
    "COEXISTENCE_SHARE",
    "amplification",
    "bucket_counts",
    "coexists",
    "counts_by_fault",
    "jain_index",
    "percentile",
    "rate_per_second",
]


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The ``q``-th percentile (0..100) of ``values`` by nearest rank, None when empty.

    Nearest rank: the smallest sample with at least ``q`` % of the samples at or below it, that
    is the ``ceil(q / 100 * n)``-th smallest of ``n`` (the smallest for ``q`` 0). It is always a
    measured value, never one interpolated between two. Every latency table (the simulator's,
    the benchmarks', the demo's) takes its percentiles from this one function.
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in 0..100, got {q!r}")
    if not values:
        return None
    ordered = sorted(values)
    # q * n / 100 rather than q / 100 * n: exact for a whole q (0.07 * 100 is 7.000000000000001).
    rank = max(1, math.ceil(q * len(ordered) / 100.0))
    return ordered[rank - 1]


def jain_index(values: Sequence[float]) -> Optional[float]:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)``: 1.0 when all are equal, 1/n when
    one takes everything (None for fewer than two values; 1.0 when all are 0).

    Every fairness figure (the simulator's, the fleet benchmarks') comes from this function.
    """
    if len(values) < 2:
        return None
    squares = sum(x * x for x in values)
    if squares == 0:
        return 1.0
    total = sum(values)
    return float(total * total / (len(values) * squares))


N = TypeVar("N", int, float)

AFTER_FAULT_S = 1.0
""":func:`counts_by_fault` counts each fault's stretch until this long after its end."""


def counts_by_fault(
    bins: Sequence[N], width: float, faults: Iterable[tuple[float, float, str]]
) -> dict[str, N]:
    """Counts per time bin added up by fault kind, from each fault's start to
    :data:`AFTER_FAULT_S` after its end (whole bins of ``width`` seconds; a bin counts for the
    first fault that reaches it), and the rest under ``"none"``.

    ``faults`` are ``(start_s, end_s, kind)``.  The real fault soak and the simulated one both
    count their acks by fault kind with this function.
    """
    taken = [False] * len(bins)
    counts: dict[str, N] = {}
    for start, end, kind in faults:
        last = min(len(bins), math.ceil((end + AFTER_FAULT_S) / width))
        for slot in range(int(start / width), last):
            if not taken[slot]:
                taken[slot] = True
                counts[kind] = counts.get(kind, 0) + bins[slot]
    counts["none"] = sum(n for n, used in zip(bins, taken) if not used)
    return counts


def amplification(attempts: int, successes: int) -> Optional[float]:
    """Return attempts per success, or None when nothing succeeded."""
    if attempts < 0 or successes < 0:
        raise ValueError(f"attempts and successes must be >= 0, got {attempts!r} and {successes!r}")
    if successes == 0:
        return None
    return attempts / successes


def rate_per_second(count: int, seconds: float) -> float:
    """Return ``count / seconds`` (0 for an empty interval)."""
    return count / seconds if seconds > 0 else 0.0


def bucket_counts(times: Iterable[float], start: float, width: float, buckets: int) -> list[int]:
    """Count ``times`` per bucket ``[start + i*width, start + (i+1)*width)``, i in 0..buckets-1.

    Times before ``start`` are ignored; times at or after the last bucket go into the last one
    (operations that finish during the drain after the final phase).
    """
    if width <= 0:
        raise ValueError(f"bucket width must be > 0, got {width!r}")
    if buckets <= 0:
        raise ValueError(f"buckets must be > 0, got {buckets!r}")
    counts = [0] * buckets
    for t in times:
        if t < start:
            continue
        index = min(int((t - start) / width), buckets - 1)
        counts[index] += 1
    return counts


COEXISTENCE_SHARE = 0.95
"""The share of a stock process's successes an upgraded process must keep in a mixed fleet."""


def coexists(share: float, error_rate: float, stock_error_rate: float) -> bool:
    """The mixed-fleet goal: an upgraded process keeps at least :data:`COEXISTENCE_SHARE` of a
    stock process's successes (``share``), at an error rate no higher than the stock half's."""
    return share >= COEXISTENCE_SHARE and error_rate <= stock_error_rate
