"""The one percentile every latency table uses (``backpressure.workload.metrics.percentile``):
nearest rank, always a measured value, the same answer in the simulator and the benchmarks."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backpressure.workload.metrics import percentile

SAMPLES = st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=300)


def test_nearest_rank_on_a_small_sample() -> None:
    """The ceil(q/100 * n)-th smallest, never a value between two samples."""
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 25) == 1.0
    assert percentile(values, 26) == 2.0
    assert percentile(values, 50) == 2.0
    assert percentile(values, 51) == 3.0
    assert percentile(values, 75) == 3.0
    assert percentile(values, 99) == 4.0
    assert percentile(values, 100) == 4.0
    assert percentile([7.0], 99) == 7.0


def test_p99_of_a_hundred_and_of_a_thousand() -> None:
    """p99 of 1..100 is 99 (interpolation would give 99.01); of 1..1000 it is 990."""
    assert percentile([float(v) for v in range(100, 0, -1)], 99) == 99.0
    assert percentile([float(v) for v in range(1, 1001)], 99) == 990.0
    assert percentile([float(v) for v in range(1, 1001)], 50) == 500.0


def test_whole_percentages_have_exact_ranks() -> None:
    """q * n / 100 is exact for a whole q, where q / 100 * n is not (0.07 * 100 > 7)."""
    values = [float(v) for v in range(1, 101)]
    for q in range(1, 101):
        assert percentile(values, q) == float(q)


def test_empty_gives_none_and_out_of_range_is_refused() -> None:
    """No samples, no percentile; q outside 0..100 names the allowed range."""
    assert percentile([], 50) is None
    for q in (-1, 100.5, math.nan):
        with pytest.raises(ValueError, match=r"percentile must be in 0\.\.100"):
            percentile([1.0], q)


@given(values=SAMPLES, q=st.floats(min_value=0, max_value=100))
def test_definition_holds_for_any_sample(values: list[float], q: float) -> None:
    """The result is a sample; at least q % of the samples are <= it, fewer than q % below it."""
    result = percentile(values, q)
    assert result in values
    n, slack = len(values), 1e-9 * len(values)  # q * n / 100 is computed in floating point
    assert sum(v <= result for v in values) * 100 >= q * n - slack
    below = sum(v < result for v in values)
    assert below == 0 or below * 100 < q * n + slack


def test_every_table_takes_this_function() -> None:
    """The simulator, the benchmarks and the workload driver call this function; the package
    holds no other percentile (no copy, no statistics.quantiles)."""
    import backpressure.bench.fleet
    import backpressure.bench.hedging
    import backpressure.bench.transient
    import backpressure.sim.runner
    import backpressure.workload.driver

    for module in (
        backpressure.sim.runner,
        backpressure.bench.fleet,
        backpressure.bench.hedging,
        backpressure.bench.transient,
        backpressure.workload.driver,
    ):
        assert module.percentile is percentile, module.__name__
    package = Path(backpressure.__file__).parent
    copies = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if re.search(r"def _?percentile\(|quantiles\(", path.read_text(encoding="utf-8"))
    ]
    assert copies == ["workload/metrics.py"]
