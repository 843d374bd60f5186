"""The recovery benchmark: the fleet's think time and lifted limit, and its figures."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from backpressure.bench.fleet import FleetPlan, fleet_arms, run_processes
from backpressure.bench.goals import run_numbers
from backpressure.bench.recovery import (
    RECOVERY_GOALS,
    judge,
    ratio_to_stock,
    recovery_plan,
    render_recovery_markdown,
    render_recovery_report,
    run_recovery,
    summarize_recovery,
)
from backpressure.testing import EmbeddedServer
from backpressure.workload.arms import ARM_KEY, STOCK, default_policy_name

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "adaptive-default"


def test_a_lifted_limit_lets_the_thinking_fleet_through(replicaset_server: EmbeddedServer) -> None:
    """No limit, 20 ops/s, no limit (1.5 s each): the limited phase admits at most its rate
    and burst, the phases around it many more; a 20 ms think bounds every thread's pace."""
    plan = FleetPlan(
        processes=2,
        threads=2,
        rates=(math.inf, 20.0, math.inf),
        step_s=1.5,
        settle_s=0.0,
        keys=50,
        think_s=0.02,
    )
    reports, received = run_processes(replicaset_server, ["current", "current"], plan)
    bins = [
        sum(r["success_bins"][i] for r in reports) for i in range(len(reports[0]["success_bins"]))
    ]
    per_phase = [sum(bins[15 * k : 15 * (k + 1)]) for k in range(3)]
    # The parent applies the limit on its own schedule, late by however long a loaded machine
    # makes it, and until then the fleet runs at 200/s: the bound leaves out the limited
    # phase's first 0.2 s (the burst may still be spent after it).
    limited = sum(bins[17:30])
    assert limited <= 20 * 1.3 + 20 + 4  # rate, burst, and one in flight per thread
    assert per_phase[0] > per_phase[1]
    assert per_phase[2] > per_phase[1]
    ops = sum(int(r["ops"]) for r in reports)
    assert ops <= 4 * (plan.duration_s / plan.think_s + 1)
    assert received >= ops
    for report in reports:
        assert len(report["error_start_bins"]) == len(report["success_bins"])
        assert sum(report["error_start_bins"]) == report["errors"]


def _report(
    success_bins: list[int], error_starts: list[int], errors_raised: list[int]
) -> dict[str, Any]:
    """One process's report as :func:`run_processes` returns it."""
    return {
        "ops": sum(success_bins) + sum(error_starts),
        "errors": sum(error_starts),
        "success_bins": success_bins,
        "error_bins": errors_raised,
        "error_start_bins": error_starts,
        "error_kinds": {"NetworkTimeout": sum(error_starts)} if sum(error_starts) else {},
    }


def test_the_figures_count_each_second_after_the_end() -> None:
    """10 s steps at 0.1 s bins: 50/s then 40/s unlimited (the demand: the best second),
    10/s overloaded, then 20, 40, 50, 50... after the end; one error started before the end
    and raised after it, none started after."""
    plan = recovery_plan()
    bins = [5] * 50 + [4] * 50 + [1] * 100 + [2] * 10 + [4] * 10 + [5] * 82
    starts = [0] * 302
    raised = [0] * 302
    starts[99 + 100] = 1  # started 9.9 s into the overload
    raised[100 + 100] = 1  # raised at the end
    run = summarize_recovery("adaptive", plan, [_report(bins, starts, raised)])
    assert run.after_per_s == (20, 40, 50, 50)
    assert run.demand_per_s == pytest.approx(50.0)
    assert run.shares == pytest.approx((0.4, 0.8, 1.0, 1.0))
    assert run.overload_successes == 100
    assert (run.errors_started_after, run.errors_raised_after) == (0, 1)
    stock = summarize_recovery(STOCK, plan, [_report([5] * 302, [0] * 302, [0] * 302)])
    assert ratio_to_stock(run, stock) == pytest.approx(140 / 150)
    assert judge(run, stock) == dict(zip(RECOVERY_GOALS, (False, False, True)))
    assert judge(stock, stock) == dict(zip(RECOVERY_GOALS, (True, True, True)))
    assert judge(run, None)[RECOVERY_GOALS[1]] is None
    rows = render_recovery_markdown([stock, run], plan).splitlines()
    table = [row for row in rows if row.startswith("| ") and not row.startswith("| arm |")]
    assert [row.split("|")[1].strip() for row in table] == ["stock pymongo", "adaptive"]
    assert "| 40% | 80% | 100% | 100% |" in table[1]


def test_a_recovery_plan_must_lift_the_limit(replicaset_server: EmbeddedServer) -> None:
    """A plan whose last phase keeps a limit is refused before anything runs."""
    with pytest.raises(ValueError, match=r"\(math.inf, capacity, math.inf\)"):
        run_recovery(replicaset_server, ["current"], FleetPlan(rates=(100.0, 200.0, 300.0)))
    with pytest.raises(ValueError, match="think_s must be in"):
        FleetPlan(think_s=-1.0)


@pytest.mark.parametrize("run", run_numbers(RESULTS, "recovery-run"))
def test_the_committed_runs_are_the_rendering_of_their_raw_data(run: int) -> None:
    """``recovery-run<n>.md`` is exactly what ``render_recovery_report`` makes of its JSON,
    every arm's row there, the default's first."""
    data = json.loads((RESULTS / f"recovery-run{run}.json").read_text(encoding="utf-8"))
    text = (RESULTS / f"recovery-run{run}.md").read_text(encoding="utf-8")
    assert text == render_recovery_report(data)
    assert data["runs"][0][ARM_KEY] == default_policy_name()
    assert {entry[ARM_KEY] for entry in data["runs"]} == set(fleet_arms())
