"""The fault soak: its seeded schedule, its audit of acked writes, and a short real soak."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from backpressure.bench.faults import (
    FAULT_GOALS,
    OVERLOAD_LABELS,
    QUICK_FAULTS,
    Fault,
    FaultPlan,
    FaultRun,
    audit,
    fault_schedule,
    judge,
    render_faults_markdown,
    render_faults_report,
    run_policy_faults,
)
from backpressure.bench.fleet import fleet_policies
from backpressure.testing import EmbeddedServer
from backpressure.workload.arms import default_policy_name

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "adaptive-default"


def test_the_schedule_is_seeded_and_draws_every_kind() -> None:
    """The same seed gives the same faults; 120 s hold every kind, one at a time, in order."""
    faults = fault_schedule(1, 120.0)
    assert faults == fault_schedule(1, 120.0)
    assert faults != fault_schedule(2, 120.0)
    assert {fault.kind for fault in faults} == {"close", "block", "overload", "limit", "commit"}
    for before, after in zip(faults, faults[1:]):
        assert before.at <= before.end < after.at
    for fault in faults:
        assert 1.0 <= fault.at < 119.0
        assert (fault.rate is None) == (fault.kind != "limit")
        assert (fault.fail_point is None) == (fault.kind == "limit")


def test_the_audit_finds_duplicated_and_lost_documents() -> None:
    """A document applied twice is duplicated; an acked id absent is lost; an unacked one
    present (a write that failed late) is neither."""
    assert audit([1, 2, 3], {1: 1, 2: 1, 3: 1, 4: 1}) == (0, 0)
    assert audit([1, 2, 3], {1: 1, 2: 2, 4: 1}) == (1, 1)


def _run(policy: str, acked: int, errors: int, duplicated: int = 0, lost: int = 0) -> FaultRun:
    return FaultRun(policy, 1000, 100, errors, acked, acked, duplicated, lost, 1100, 10)


def test_the_goals_compare_with_current() -> None:
    """acked >= 98 % of current's and errors <= current's; no duplicate and no loss."""
    current = _run("current", 10_000, 50)
    assert judge(_run("adaptive", 9_800, 50), current) == dict.fromkeys(FAULT_GOALS, True)
    verdicts = judge(_run("adaptive", 9_799, 51, duplicated=1, lost=2), current)
    assert verdicts == dict.fromkeys(FAULT_GOALS, False)
    assert judge(current, None)[FAULT_GOALS[0]] is None
    rows = render_faults_markdown([_run("adaptive", 9_000, 40), current], QUICK_FAULTS)
    table = [row for row in rows.splitlines() if row.startswith("| ") and "policy" not in row]
    assert [row.split("|")[1].strip() for row in table] == ["default (current)", "adaptive"]
    assert "| 0.900 |" in table[1]


def test_a_short_soak_loses_nothing_under_closes_rejections_and_failed_commits(
    replicaset_server: EmbeddedServer,
) -> None:
    """2 x 2 writers for 3 s, half of the operations transactions: closed connections, an
    all-reject window, closed commits and a tight limit; every acked write is stored once."""
    plan = dataclasses.replace(QUICK_FAULTS, seconds=3.0, transaction_share=0.5)
    faults = [
        Fault(
            0.3,
            0.3,
            "close",
            "3 closed",
            {"mode": {"times": 3}, "data": {"failCommands": ["update"], "closeConnection": True}},
        ),
        Fault(
            0.8,
            1.2,
            "overload",
            "all rejected",
            {
                "mode": "alwaysOn",
                "data": {
                    "failCommands": ["update"],
                    "errorCode": 462,
                    "errorLabels": OVERLOAD_LABELS,
                },
            },
        ),
        Fault(
            1.5,
            1.5,
            "commit",
            "2 commits closed",
            {
                "mode": {"times": 2},
                "data": {"failCommands": ["commitTransaction"], "closeConnection": True},
            },
        ),
        Fault(2.0, 2.5, "limit", "20/s", rate=20.0),
    ]
    run = run_policy_faults(replicaset_server, "current", plan, faults)
    assert run.acked > 0
    assert run.transactions > 0
    assert (run.duplicated, run.lost) == (0, 0)
    assert run.stored >= run.acked
    assert run.server_received > run.operations - run.transactions  # a retry or a commit each
    assert run.faults == len(faults)
    assert sum(run.ok_bins) == run.acked
    assert sum(run.error_bins) == run.errors


def test_a_bad_plan_names_the_option() -> None:
    """Out-of-range numbers are refused with the option's name."""
    with pytest.raises(ValueError, match=r"transaction_share must be in 0\.\.1"):
        FaultPlan(transaction_share=1.5)
    with pytest.raises(ValueError, match=r"FaultPlan\.seconds must be"):
        FaultPlan(seconds=0.0)


@pytest.mark.parametrize("run", [1, 2])
def test_the_committed_soaks_are_the_rendering_of_their_raw_data(run: int) -> None:
    """``faults-run<n>.md`` is exactly what ``render_faults_report`` makes of its JSON, every
    policy's row there, the default's first."""
    data = json.loads((RESULTS / f"faults-run{run}.json").read_text(encoding="utf-8"))
    text = (RESULTS / f"faults-run{run}.md").read_text(encoding="utf-8")
    assert text == render_faults_report(data)
    assert data["runs"][0]["policy"] == default_policy_name()
    assert {entry["policy"] for entry in data["runs"]} == set(fleet_policies())
