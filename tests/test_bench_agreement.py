"""The simulator agrees with real pymongo clients against the embedded server.

Only quantities that timing noise on a loaded machine cannot move much are compared, with a
generous tolerance: app errors are bounded by the tokens the limiter hands out whatever the
client's speed, and attempts per operation by each arm's retry cap.
"""

from __future__ import annotations

import pytest

pytest.importorskip("simpy")
pytest.importorskip("mongomock")

from backpressure.bench.agreement import compare
from backpressure.workload.plan import OverloadPlan
from backpressure.workload.server import embedded_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_open_loop_overload_agrees_with_real_runs() -> None:
    """3x C for 3 s at C = 40/s: the simulator's error fraction is within 20% of the real one."""
    plan = OverloadPlan(open_capacity=40.0, open_loads=(3.0,), open_threads=64, sustained=3.0)
    with embedded_server() as target:
        rows = compare(
            target,
            plan=plan,
            arms=("no-retries", "current"),
            scenarios=("bench-open-3x",),
            cpu_ms_per_attempt=1.0,
        )
    assert [(row.scenario, row.arm) for row in rows] == [
        ("bench-open-3x", "no-retries"),
        ("bench-open-3x", "current"),
    ]
    for row in rows:
        assert row.errors_difference is not None
        assert abs(row.errors_difference) < 0.2, row
    no_retries, current = rows
    assert no_retries.real_attempts_per_op == pytest.approx(1.0, abs=0.05)
    assert no_retries.sim_attempts_per_op == 1.0
    # Retries: both above one attempt per operation, both within the current spec's cap of 3.
    assert 1.2 < current.real_attempts_per_op <= 3.0
    assert 1.2 < current.sim_attempts_per_op <= 3.0
    assert abs(current.attempts_difference or 0.0) < 0.5, current
