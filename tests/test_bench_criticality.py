"""The criticality benchmark: open-loop processes, a seeded sheddable half, each half's figures."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from backpressure.bench.criticality import (
    CRITICALITY_GOAL,
    QUICK,
    CriticalityPlan,
    CriticalityRun,
    arrivals,
    criticality_report,
    main,
    render_criticality_markdown,
    render_criticality_report,
    run_criticality,
    simulated,
)
from backpressure.bench.goals import latest_runs, run_numbers
from backpressure.testing import EmbeddedServer
from backpressure.workload.arms import ARM_KEY
from backpressure.workload.report import machine_info

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "adaptive-default"


def test_the_arrivals_are_seeded_poisson_at_each_phases_share_of_the_demand() -> None:
    """Each process gets its share of every phase's demand, the same arrivals every time, a
    different stream per process, and the sheddable draw keeps the plan's fraction."""
    plan = CriticalityPlan()
    first = arrivals(plan, 0)
    assert first == arrivals(plan, 0)
    assert first != arrivals(plan, 1)
    assert [at for at, _ in first] == sorted(at for at, _ in first)
    everyone = [entry for index in range(plan.processes) for entry in arrivals(plan, index)]
    start = 0.0
    for seconds, load in plan.phases:
        count = sum(1 for at, _ in everyone if start <= at < start + seconds)
        expected = seconds * load * plan.capacity
        assert abs(count - expected) < 4 * expected**0.5  # Poisson: within 4 sigma
        start += seconds
    sheddable = sum(1 for _, shed in everyone if shed)
    assert abs(sheddable / len(everyone) - 0.5) < 0.03
    assert all(not shed for _, shed in arrivals(CriticalityPlan(sheddable_fraction=0.0), 0))


def test_the_plan_rejects_bad_numbers_naming_the_field() -> None:
    """Invalid plans raise ValueError naming the field and its range."""
    with pytest.raises(ValueError, match="processes >= 1"):
        CriticalityPlan(processes=0)
    with pytest.raises(ValueError, match=r"phases must be \(seconds > 0, load >= 0\)"):
        CriticalityPlan(phases=((0.0, 1.0),))
    with pytest.raises(ValueError, match=r"sheddable_fraction must be in \[0, 1\]"):
        CriticalityPlan(sheddable_fraction=1.5)
    with pytest.raises(ValueError, match="capacity must be a finite number > 0"):
        CriticalityPlan(capacity=float("inf"))
    with pytest.raises(ValueError, match=r"settle_s must be in \[0, 20\)"):
        CriticalityPlan(settle_s=20.0)


def test_the_floor_is_the_overloads_excess_over_the_capacity() -> None:
    """2 x C for 20 s beside 0.5 x C for 15 s: 20 C - C (the burst) of 95 C / 2 operations."""
    plan = CriticalityPlan()
    assert plan.overload_window == (5.0, 25.0)
    assert plan.floor_fraction() == pytest.approx(19 / 47.5)
    assert CriticalityPlan(phases=((5.0, 0.5), (5.0, 1.0))).floor_fraction() == 0.0


def test_a_quick_run_accounts_for_every_arrival_in_its_half(
    replicaset_server: EmbeddedServer,
) -> None:
    """Two processes under the default preset, 2 x C for 2 s: every arrival of the seeded
    schedule ends as a success or an error of its own half, the arrivals served are among
    those due, and the page's row is the default's."""
    (run,) = run_criticality(replicaset_server, ["current"], QUICK)
    schedule = [entry for index in range(QUICK.processes) for entry in arrivals(QUICK, index)]
    assert run.sheddable_ops == sum(1 for _, shed in schedule if shed)
    assert run.critical_ops == len(schedule) - run.sheddable_ops
    assert sum(run.due_bins) == len(schedule)
    errors = run.critical_errors + run.sheddable_errors
    assert sum(run.served_bins) == sum(run.success_bins) == run.operations - errors
    assert all(s <= d for s, d in zip(run.served_bins, run.due_bins))
    assert sum(run.error_kinds.values()) == errors
    assert run.critical_error_kinds is not None
    assert sum(run.critical_error_kinds.values()) == run.critical_errors
    assert all(n <= run.error_kinds[kind] for kind, n in run.critical_error_kinds.items())
    assert run.server_received >= run.operations - run.error_kinds.get("NotStarted", 0)
    assert run.per_process_competed_s == (None, None)  # the default preset does not pace
    assert sum(ops for ops, _ in run.per_process_critical) == run.critical_ops
    page = render_criticality_markdown([run], QUICK)
    assert "| default (current) |" in page
    assert f"{CRITICALITY_GOAL}: " in page


def _run(arm: str, critical_errors: int) -> CriticalityRun:
    return CriticalityRun(
        arm=arm,
        critical_ops=1000,
        critical_errors=critical_errors,
        sheddable_ops=1000,
        sheddable_errors=500,
        server_received=2400,
        success_bins=(10,) * 40,
        due_bins=(20,) * 40,
        served_bins=(10,) * 40,
        errors_after_end=3,
        per_process_critical=((500, critical_errors), (500, 0)),
        per_process_competed_s=(None, None) if arm != "adaptive" else (0.0, 1.5),
        local_refusals=None,
        error_kinds={"OperationFailure": 500 + critical_errors},
        client_cpu_s=1.0,
        bin_s=0.1,
        overload_window=(0.5, 2.5),
        settle_s=0.5,
        capacity=60.0,
    )


def test_the_goal_the_order_and_the_page_from_the_raw_data() -> None:
    """The goal is met at <= 1 % critical errors; the default's row comes first whatever the
    order of the runs; the page is the run's line, then the table the JSON gives."""
    runs = [_run("adaptive", 10), _run("pymongo-native", 400), _run("current", 400)]
    assert runs[0].judge() == {CRITICALITY_GOAL: True}
    assert _run("adaptive", 11).judge() == {CRITICALITY_GOAL: False}
    assert runs[0].overload_goodput == pytest.approx(100 / 60)
    assert runs[0].after_end == (0.5, 0.5)
    rows = [
        line.split("|")[1].strip()
        for line in render_criticality_markdown(runs, QUICK).splitlines()
        if line.startswith("| ") and not line.startswith("| arm |")
    ]
    assert rows == ["default (current)", "adaptive", "stock pymongo"]
    data = criticality_report(runs, QUICK, machine_info(), [1.0, 2.0], 12.5, "abc1234")
    data = json.loads(json.dumps(data))
    line, table = render_criticality_report(data).split("\n\n", 1)
    assert "abc1234" in line
    assert table == render_criticality_markdown(runs, QUICK)
    assert "Seconds competing per process (the neighbour test's mode): adaptive: 0.0, 1.5." in table
    assert "critical half's errors by kind" not in table  # runs recorded before the split


def test_the_critical_halfs_error_kinds_are_reported_apart() -> None:
    """A run that recorded its critical half's errors by kind lists them on their own line
    (a run without them, committed before they were split, renders as it did)."""
    split = dataclasses.replace(
        _run("adaptive", 10),
        critical_error_kinds={"LocalOverloadError": 7, "OperationFailure": 3},
    )
    runs = [_run("current", 400), split]
    page = render_criticality_markdown(runs, QUICK)
    assert (
        "The critical half's errors by kind: adaptive: LocalOverloadError 7, OperationFailure 3."
        in page
    )
    data = json.loads(json.dumps(criticality_report(runs, QUICK, machine_info(), [1.0], 1.0, "x")))
    assert CriticalityRun.from_dict(data["runs"][1]) == split
    assert CriticalityRun.from_dict(data["runs"][0]).critical_error_kinds is None


def test_an_unknown_arm_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """``--arms`` with a name that is no arm exits 2 and names it."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--arms", "current,bogus"])
    assert exit_info.value.code == 2
    assert "bogus" in capsys.readouterr().err


@pytest.mark.parametrize("run", run_numbers(RESULTS, "criticality-run"))
def test_the_committed_criticality_page_is_the_rendering_of_its_raw_data(run: int) -> None:
    """``criticality-run<N>.md`` is what ``render_criticality_report`` makes of its JSON, and
    every arm ran, stock pymongo and ``adaptive`` among them."""
    data = json.loads((RESULTS / f"criticality-run{run}.json").read_text(encoding="utf-8"))
    page = (RESULTS / f"criticality-run{run}.md").read_text(encoding="utf-8")
    assert page == render_criticality_report(data)
    arms = {entry[ARM_KEY] for entry in data["runs"]}
    assert {"current", "pymongo-native", "adaptive"} <= arms


def test_the_committed_agreement_table_is_the_simulators_runs_of_the_same_plan() -> None:
    """``criticality-agreement.md`` is what ``bench.agreement --criticality`` prints for the
    latest two committed runs (simulated seeds 1 and 2: the simulator is deterministic for a
    seed, and runs today's code, as the latest runs did), every arm's row, the default's
    first."""
    pytest.importorskip("simpy")
    from backpressure.bench.agreement import criticality_agreement_markdown

    reports = [report for _, report in latest_runs(RESULTS, "criticality-run")]
    page = (RESULTS / "criticality-agreement.md").read_text(encoding="utf-8")
    assert page == criticality_agreement_markdown(reports, (1, 2)) + "\n"
    rows = [line.split("|")[1].strip() for line in page.splitlines()[2:]]
    assert rows == ["default (current)", "stock pymongo", "draft", "adaptive"]


def test_the_simulated_plan_is_the_benchmarks() -> None:
    """The simulator's ``bench-criticality`` scenario has the plan's clients, threads, deadline,
    sheddable share, capacity and phases, and its overload ends where the plan's does."""
    pytest.importorskip("simpy")
    plan = CriticalityPlan()
    scenario = simulated(plan)
    (group,) = scenario.clients
    assert (group.count, group.timeout_ms, group.sheddable_fraction) == (8, 1000.0, 0.5)
    assert group.workload.threads == plan.threads  # type: ignore[union-attr]
    assert scenario.servers[0].limiter.rate_per_s == plan.capacity
    assert scenario.duration_s == plan.duration_s
    assert scenario.overload_end_s == plan.overload_window[1]
    with pytest.raises(ValueError, match="different plans"):
        _agreement_of_two_plans()


def _agreement_of_two_plans() -> str:
    """Ask for the agreement of two reports whose plans differ."""
    from backpressure.bench.agreement import criticality_agreement_markdown
    from backpressure.bench.criticality import criticality_report

    reports = [
        criticality_report([], plan, machine_info(), [1.0, 1.0], 1.0, "abc")
        for plan in (QUICK, CriticalityPlan())
    ]
    return criticality_agreement_markdown(reports)
