"""Pure metric functions for the demo and the benchmarks: percentiles, ratios, timelines."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Optional

__all__ = [
    "amplification",
    "bucket_counts",
    "iqr",
    "median",
    "percentile",
    "rate_per_second",
]


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """Return the ``q``-th percentile (0..100, linear interpolation) or None when empty."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in 0..100, got {q!r}")
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return float(ordered[low])
    fraction = position - low
    return float(ordered[low] + (ordered[high] - ordered[low]) * fraction)


def median(values: Sequence[float]) -> Optional[float]:
    """Return the median or None when empty."""
    return percentile(values, 50.0)


def iqr(values: Sequence[float]) -> Optional[float]:
    """Return the interquartile range (p75 - p25) or None when empty."""
    p25 = percentile(values, 25.0)
    p75 = percentile(values, 75.0)
    if p25 is None or p75 is None:
        return None
    return p75 - p25


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
