"""The mixed-fleet benchmark: real processes, a policy per process, each half reported."""

from __future__ import annotations

import pytest

from backpressure.bench.fleet import QUICK
from backpressure.bench.mixed_fleet import STOCK, Half, MixedRun, render, run_mixed
from backpressure.testing import EmbeddedServer


def test_a_quick_mixed_fleet_reports_each_half(replicaset_server: EmbeddedServer) -> None:
    """2 processes x 2 threads, one on stock pymongo and one on ``current``: each half's
    figures come from its own processes, and the table shows the stock half's row first."""
    run = run_mixed(replicaset_server, 1, "current", QUICK)
    assert (run.stock.policy, run.upgraded.policy) == (STOCK, "current")
    assert run.stock.processes == run.upgraded.processes == 1
    for half in (run.stock, run.upgraded):
        assert half.operations > 0
        assert half.successes + half.errors == half.operations
    assert run.server_received >= run.stock.operations + run.upgraded.operations
    rows = render([(1, run)], QUICK.processes).splitlines()[2:]
    assert [row.split("|")[2].strip() for row in rows] == ["stock pymongo", "default (current)"]
    with pytest.raises(ValueError, match=r"stock must be in 1\.\.1"):
        run_mixed(replicaset_server, 2, "current", QUICK)


def test_the_goal_needs_both_the_share_and_the_error_rate() -> None:
    """Met at >= 95 % of a stock process's successes with no higher error rate, else missed."""
    stock = Half(STOCK, 4, 1000, 300, 700)
    assert MixedRun(stock, Half("adaptive", 4, 900, 200, 700), 0).met
    assert not MixedRun(stock, Half("adaptive", 4, 800, 200, 600), 0).met  # 86 %
    assert not MixedRun(stock, Half("adaptive", 4, 1100, 400, 700), 0).met  # 36 % errors
    assert MixedRun(stock, Half("adaptive", 4, 900, 200, 700), 0).share == pytest.approx(1.0)
