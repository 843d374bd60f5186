"""The fault soak: its seeded schedule, its audit of acked writes, and a short real soak."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Callable

import pytest

from backpressure.bench.faults import (
    FAULT_GOALS,
    OVERLOAD_LABELS,
    QUICK_FAULTS,
    ROUNDS_PER_TABLE,
    STOCK_GOAL,
    Fault,
    FaultPlan,
    FaultRun,
    acked_by_kind,
    audit,
    fault_schedule,
    faults_report,
    judge,
    judge_rounds,
    kind_ratios,
    mean_interval,
    paired_ratios,
    render_faults_markdown,
    render_faults_report,
    round_faults,
    rounds_from_report,
    run_arm_faults,
    run_faults,
    soak_arms,
    split_arm,
    total_run,
)
from backpressure.bench.faults import _Controller as Controller
from backpressure.bench.fleet import fleet_arms
from backpressure.bench.goals import run_numbers
from backpressure.bench.publish import publish_run
from backpressure.testing import EmbeddedServer
from backpressure.workload.arms import ARM_KEY, STOCK, default_policy_name

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "adaptive-default"
SHARDED_SOAK = RESULTS.parent / "faults-sharded"
"""The committed sharded soak (``.json`` and ``.md``)."""


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


def _run(arm: str, acked: int, errors: int, duplicated: int = 0, lost: int = 0) -> FaultRun:
    return FaultRun(arm, 1000, 100, errors, acked, acked, duplicated, lost, 1100, 10)


def test_the_goals_compare_with_current() -> None:
    """acked >= 98 % of current's and errors <= current's; no duplicate and no loss."""
    current = _run("current", 10_000, 50)
    assert judge(_run("adaptive", 9_800, 50), current) == dict.fromkeys(FAULT_GOALS, True)
    verdicts = judge(_run("adaptive", 9_799, 51, duplicated=1, lost=2), current)
    assert verdicts == dict.fromkeys(FAULT_GOALS, False)
    assert judge(current, None)[FAULT_GOALS[0]] is None
    rows = render_faults_markdown([_run("adaptive", 9_000, 40), current], QUICK_FAULTS)
    lines = rows.splitlines()
    table = [row for row in lines if row.startswith("| ") and not row.startswith("| arm |")]
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
    run = run_arm_faults(replicaset_server, "current", plan, faults)
    assert run.acked > 0
    assert run.transactions > 0
    assert (run.duplicated, run.lost) == (0, 0)
    assert run.stored >= run.acked
    assert run.server_received > run.operations - run.transactions  # a retry or a commit each
    assert run.faults == len(faults)
    assert sum(run.ok_bins) == run.acked
    assert sum(run.error_bins) == run.errors
    assert run.seconds == plan.seconds
    assert run.cpu_s > 0
    assert run.machine_busy is None or 0.0 <= run.machine_busy <= 1.0


def test_a_bad_plan_names_the_option() -> None:
    """Out-of-range numbers are refused with the option's name."""
    with pytest.raises(ValueError, match=r"transaction_share must be in 0\.\.1"):
        FaultPlan(transaction_share=1.5)
    with pytest.raises(ValueError, match=r"FaultPlan\.seconds must be"):
        FaultPlan(seconds=0.0)


@pytest.mark.parametrize("run", run_numbers(RESULTS, "faults-run"))
def test_the_committed_soaks_are_the_rendering_of_their_raw_data(run: int) -> None:
    """``faults-run<n>.md`` is exactly what ``render_faults_report`` makes of its JSON, every
    arm's row there, the default's first."""
    data = json.loads((RESULTS / f"faults-run{run}.json").read_text(encoding="utf-8"))
    text = (RESULTS / f"faults-run{run}.md").read_text(encoding="utf-8")
    assert text == render_faults_report(data)
    assert data["runs"][0][ARM_KEY] == default_policy_name()
    assert {entry[ARM_KEY] for entry in data["runs"]} == set(fleet_arms())


def test_a_round_replays_its_slice_of_the_schedule_shifted_and_cut() -> None:
    """Round r holds the faults starting in its slice, shifted to 0 and cut at the slice's
    end; a window the cut would leave shorter than 0.1 s is left out."""
    plan = FaultPlan(seconds=20.0, rounds=2)
    faults = [
        Fault(1.0, 1.0, "close", "3 closed"),
        Fault(8.0, 12.0, "overload", "all rejected 4.0 s"),
        Fault(9.95, 11.0, "limit", "50/s for 1.1 s", rate=50.0),
        Fault(14.5, 15.5, "limit", "20/s for 1.0 s", rate=20.0),
    ]
    assert round_faults(faults, plan, 0) == [
        faults[0],
        dataclasses.replace(faults[1], end=10.0),
    ]
    assert round_faults(faults, plan, 1) == [dataclasses.replace(faults[3], at=4.5, end=5.5)]
    with pytest.raises(ValueError, match=r"round index must be in 0\.\.1"):
        round_faults(faults, plan, 2)
    with pytest.raises(ValueError, match=r"FaultPlan\.rounds must be an int >= 1"):
        FaultPlan(rounds=0)


def test_the_rounds_alternate_their_order_and_pair_each_arm_with_current() -> None:
    """A fake runner records the calls: every round runs every arm on that round's slice,
    the default first in even rounds and last in odd ones, each on a round-long plan."""
    calls: list[tuple[str, float, int, tuple[float, ...]]] = []
    acked = {"current": 1000, "adaptive": 900}

    def runner(_target: object, arm: str, plan: FaultPlan, faults: Sequence[Fault]) -> FaultRun:
        calls.append((arm, plan.seconds, plan.rounds, tuple(f.at for f in faults)))
        number = sum(1 for call in calls if call[0] == arm)
        return _run(arm, acked[arm] + 10 * number, 5)

    plan = FaultPlan(seconds=30.0, rounds=3)
    rounds = run_faults(None, ["adaptive", "current"], plan, runner=runner)
    assert [one.order for one in rounds] == [
        ("current", "adaptive"),
        ("adaptive", "current"),
        ("current", "adaptive"),
    ]
    assert [call[0] for call in calls] == [
        "current", "adaptive", "adaptive", "current", "current", "adaptive",
    ]  # fmt: skip
    assert {(call[1], call[2]) for call in calls} == {(10.0, 1)}
    schedule = fault_schedule(plan.seed, plan.seconds)
    for one in rounds:
        assert one.faults == tuple(round_faults(schedule, plan, one.index))
        assert calls[2 * one.index][3] == calls[2 * one.index + 1][3]
    ratios = paired_ratios(rounds, "adaptive")
    assert ratios == pytest.approx([910 / 1010, 920 / 1020, 930 / 1030])
    assert paired_ratios(rounds, "current") == [1.0, 1.0, 1.0]


def test_the_interval_is_students_t_over_the_rounds() -> None:
    """Mean +- t(0.975, n-1) * s / sqrt(n); one value has no interval; none is refused."""
    mean, low, high = mean_interval([0.9, 1.0, 1.1])
    assert mean == pytest.approx(1.0)
    half = 4.303 * 0.1 / 3**0.5
    assert low == pytest.approx(1.0 - half)
    assert high == pytest.approx(1.0 + half)
    assert mean_interval([0.5]) == (0.5, None, None)
    _, low, high = mean_interval([1.0] * 40)
    assert low == high == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least one value"):
        mean_interval([])


def test_the_acked_goal_is_decided_only_when_the_interval_clears_98_percent() -> None:
    """met: the whole interval at or above 0.98; NOT met: all of it below; otherwise not
    decided. Errors against current's totals; duplicates and losses in any round fail."""
    current = _run("current", 3000, 30)
    assert judge_rounds(_run("adaptive", 3000, 30), [0.995, 1.0, 1.005], current) == {
        FAULT_GOALS[0]: "met",
        FAULT_GOALS[1]: "met",
        FAULT_GOALS[2]: "met",
        FAULT_GOALS[3]: "met",
    }
    verdicts = judge_rounds(_run("adaptive", 2000, 31, lost=1), [0.6, 0.7, 0.65], current)
    assert verdicts[FAULT_GOALS[0]] == "NOT met"
    assert verdicts[FAULT_GOALS[1]] == verdicts[FAULT_GOALS[3]] == "NOT met"
    assert judge_rounds(_run("adaptive", 2900, 3), [0.9, 1.1], current)[FAULT_GOALS[0]] == (
        "not decided"
    )
    assert judge_rounds(_run("adaptive", 2900, 3), [1.0], None)[FAULT_GOALS[0]] == "-"


def test_totals_add_up_the_rounds_and_acks_are_counted_by_fault_kind() -> None:
    """An arm's total is the sum of its rounds (CPU too); each fault's acks run from its
    start to 1 s after its end, the rest is ``none``."""
    one = dataclasses.replace(
        _run("adaptive", 10, 1),
        ok_bins=(1, 2, 3, 4, 5, 6, 7, 8),
        bin_s=0.5,
        seconds=4.0,
        cpu_s=2.0,
        machine_busy=0.5,
    )
    two = dataclasses.replace(one, acked=30, cpu_s=4.0, machine_busy=1.0, error_kinds={"X": 2})
    total = total_run([one, two])
    assert (total.acked, total.errors, total.cpu_s, total.seconds) == (40, 2, 6.0, 8.0)
    assert total.machine_busy == 0.75
    assert total.error_kinds == {"X": 2}
    assert total.cpu_ms_per_ack == pytest.approx(150.0)
    assert total.cpu_cores == pytest.approx(0.75)
    with pytest.raises(ValueError, match="one arm"):
        total_run([one, _run("current", 1, 1)])
    faults = [Fault(0.5, 0.5, "close", "1 closed"), Fault(2.0, 2.5, "overload", "all rejected")]
    assert acked_by_kind(one, faults) == {"close": 2 + 3, "overload": 5 + 6 + 7, "none": 1 + 4 + 8}


def test_an_interleaved_report_renders_from_its_json(tmp_path: Path) -> None:
    """The report of fake rounds goes through JSON and back to the same page: the default's
    row first, the per-round and per-kind tables, the goals."""
    plan = FaultPlan(seconds=30.0, rounds=2)

    def runner(_target: object, arm: str, plan: FaultPlan, faults: Sequence[Fault]) -> FaultRun:
        bins = (100,) * int(plan.seconds / 0.25)
        acked = sum(bins) if arm == "current" else sum(bins) - 300
        return dataclasses.replace(
            _run(arm, acked, 4),
            ok_bins=bins,
            seconds=plan.seconds,
            cpu_s=3.0,
            faults=len(faults),
        )

    rounds = run_faults(None, ["adaptive", "current"], plan, runner=runner)
    info = {"date": "d", "cpu_count": 2, "python": "3", "pymongo": "4", "backpressure": "0"}
    data = json.loads(json.dumps(faults_report(rounds, plan, info, [1.0, 2.0], 9.0, "abc")))
    text = render_faults_report(data)
    assert [row[ARM_KEY] for row in data["runs"]] == [default_policy_name(), "adaptive"]
    table = [row for row in text.splitlines() if row.startswith("| default (current) | 12,000")]
    assert len(table) == 1
    assert "| 1.000 | 1.000-1.000 |" in table[0]
    assert "| adaptive | 11,400 | 0.950 | 0.950-0.950 |" in text
    assert "| round 1 | round 2 |" in text
    assert "acked >= 98% of current's: NOT met" in text
    assert "in round 1 and the reverse in 2" in text
    back = rounds_from_report(data)
    assert [one.order for one in back] == [one.order for one in rounds]
    ratios = kind_ratios(back, "adaptive")
    assert set(ratios) == {fault.kind for one in rounds for fault in one.faults} | {"none"}
    assert kind_ratios(back, "current") == dict.fromkeys(ratios, 1.0)


def test_a_soak_of_many_rounds_gets_one_per_round_table_per_eight_rounds() -> None:
    """Sixteen rounds do not fit the page in one table: the acked writes per round come in
    tables of ``ROUNDS_PER_TABLE`` rounds (a soak of eight or fewer keeps its one table)."""
    latest = run_numbers(RESULTS, "faults-run")[-1]
    soak = json.loads((RESULTS / f"faults-run{latest}.json").read_text(encoding="utf-8"))
    data = {**soak, "rounds": soak["rounds"][:ROUNDS_PER_TABLE]}
    more = copy.deepcopy(data["rounds"][:2])
    for offset, entry in enumerate(more):
        entry["index"] = ROUNDS_PER_TABLE + offset
    longer = {**data, "rounds": [*data["rounds"], *more]}
    headers = [
        line
        for line in render_faults_report(longer).splitlines()
        if "| round 1 |" in line or "| round 9 |" in line
    ]
    assert headers == [
        "| arm | " + " | ".join(f"round {n}" for n in range(1, 9)) + " |",
        "| arm | round 9 | round 10 |",
    ]
    assert sum("| round 1 |" in line for line in render_faults_report(data).splitlines()) == 1


# -- the sharded soak -------------------------------------------------------------------------


def _quick_faults() -> list[Fault]:
    """A close, an all-reject window, two closed commits and a tight limit, in 3 s."""
    return [
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


def test_a_short_sharded_soak_hits_one_router_and_loses_nothing(
    embedded_server_factory: Callable[..., EmbeddedServer],
) -> None:
    """2 x 2 writers for 3 s against 3 mongos, every fault on mongos 0: every acked write is
    stored once, no update fails on the other routers, and mongos 0's share is counted."""
    server = embedded_server_factory(topology="sharded", members=3)
    plan = dataclasses.replace(
        QUICK_FAULTS, seconds=3.0, transaction_share=0.5, capacity=100_000.0, topology="sharded"
    )
    run = run_arm_faults(server, default_policy_name(), plan, _quick_faults())
    assert run.acked > 0
    assert run.transactions > 0
    assert (run.duplicated, run.lost) == (0, 0)
    assert run.stored >= run.acked
    assert sum(run.ok_bins) == run.acked
    assert sum(run.error_bins) == run.errors
    members = [server.stats(member=index)["commands"] for index in range(3)]
    received = [
        sum(commands.get(name, {}).get("received", 0) for name in ("update", "commitTransaction"))
        for commands in members
    ]
    assert run.faulty_received == received[0]
    assert run.server_received == sum(received)
    assert run.faulty_share == received[0] / sum(received)
    for healthy in members[1:]:  # no update failed outside mongos 0
        assert healthy.get("update", {}).get("failed", 0) == 0
    with pytest.raises(ValueError, match="the plan's topology is replicaset, the server's sharded"):
        run_arm_faults(server, default_policy_name(), QUICK_FAULTS, [])


class _Recorder:
    """A stand-in server that records the fail points and limits it is sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, object]] = []

    def configure_fail_point(self, doc: dict[str, object], member: object = None) -> None:
        self.calls.append(("fail point", doc["mode"], member))

    def set_rate_limit(self, rate: float, member: object = None) -> None:
        self.calls.append(("limit", rate, member))


@pytest.mark.parametrize(("topology", "limited"), [("replicaset", None), ("sharded", 0)])
def test_every_fault_goes_to_one_member_and_a_router_limit_to_that_router(
    topology: str, limited: object
) -> None:
    """Fail points go to member 0 (the primary, or mongos 0); a tight limit and its end go to
    every member of the replica set (only the primary takes writes) but to mongos 0 alone."""
    plan = dataclasses.replace(QUICK_FAULTS, seconds=3.0, topology=topology)
    target = _Recorder()
    faults = [fault for fault in _quick_faults() if fault.kind in ("overload", "limit")]
    Controller(target, plan, faults).run(t0=0.0)  # every instant has passed: no wait
    assert target.calls == [
        ("fail point", "alwaysOn", 0),
        ("fail point", "off", 0),
        ("limit", 20.0, limited),
        ("limit", plan.capacity, limited),
    ]


def test_an_arm_may_carry_client_options() -> None:
    """``current+routeAroundOverload=false`` is current with server choice off; options need one
    of the package's presets and a value; the default's row comes first."""
    assert split_arm("current+routeAroundOverload=false") == (
        "current",
        {"routeAroundOverload": "false"},
    )
    assert split_arm(STOCK) == (STOCK, {})
    for bad, message in (
        ("current+routeAroundOverload", "expected OPTION=VALUE"),
        ("current+=false", "expected OPTION=VALUE"),
        (f"{STOCK}+routeAroundOverload=false", "need one of this package's presets"),
        ("nosuch+x=1", "unknown arm 'nosuch'"),
    ):
        with pytest.raises(ValueError, match=message):
            split_arm(bad)
    names = soak_arms(["current+routeAroundOverload=false", STOCK, default_policy_name()])
    assert names[0] == default_policy_name()
    assert soak_arms() == fleet_arms()


def test_a_sharded_plan_names_its_topology_and_routers() -> None:
    """The topology is one of the two; a sharded cluster needs a choice of routers."""
    assert FaultPlan(topology="sharded").members == 3
    assert FaultPlan().members is None
    with pytest.raises(ValueError, match=r"FaultPlan\.topology must be one of replicaset, sharded"):
        FaultPlan(topology="standalone")
    with pytest.raises(ValueError, match=r"FaultPlan\.routers must be an int >= 2"):
        FaultPlan(topology="sharded", routers=1)


def test_a_sharded_report_compares_every_arm_with_stock() -> None:
    """The sharded page pairs every arm with stock pymongo round by round, gives mongos 0's
    share of the writes, and judges acked >= stock's on the totals; the replica set's page keeps
    its columns."""
    acked = {default_policy_name(): 1000, STOCK: 900, "current+routeAroundOverload=false": 880}

    def runner(_target: object, arm: str, plan: FaultPlan, faults: Sequence[Fault]) -> FaultRun:
        return dataclasses.replace(
            _run(arm, acked[arm], 4), faulty_received=110, seconds=plan.seconds
        )

    names = [STOCK, "current+routeAroundOverload=false", default_policy_name()]
    plan = FaultPlan(seconds=30.0, rounds=2, topology="sharded")
    info = {"date": "d", "cpu_count": 2, "python": "3", "pymongo": "4", "backpressure": "0"}
    rounds = run_faults(None, names, plan, runner=runner)
    data = json.loads(json.dumps(faults_report(rounds, plan, info, [1.0], 9.0, "abc")))
    rows = {row[ARM_KEY]: row for row in data["runs"]}
    assert data["runs"][0][ARM_KEY] == default_policy_name()
    assert rows[default_policy_name()]["stock_ratios"] == [round(1000 / 900, 4)] * 2
    assert rows[default_policy_name()]["goals"][STOCK_GOAL] == "met"
    assert rows["current+routeAroundOverload=false"]["goals"][STOCK_GOAL] == "NOT met"
    assert STOCK_GOAL not in rows[STOCK]["goals"]
    text = render_faults_report(data)
    assert "3 mongos routers" in text
    assert "| vs stock | 95% CI (stock) |" in text
    assert "| machine busy | to mongos 0 |" in text
    assert "| 10.0% |" in text  # 110 of the 1,100 commands each run counted
    replicaset = dataclasses.replace(plan, topology="replicaset")
    data = faults_report(rounds, replicaset, info, [1.0], 9.0, "abc")
    assert "vs stock" not in render_faults_report(data)
    assert STOCK_GOAL not in data["runs"][0]["goals"]


def test_a_run_is_published_from_the_topology_it_asks_for() -> None:
    """``publish_run`` starts the deployment the benchmark names: here 3 mongos routers."""
    data = publish_run(
        lambda server: [server.topology, len(server.addresses)],
        lambda runs, info, load, wall_s, commit: {"runs": runs},
        lambda data: "",
        topology="sharded",
        members=3,
    )
    assert data == {"runs": ["sharded", 3]}


def test_the_committed_sharded_soak_is_the_rendering_of_its_raw_data() -> None:
    """``faults-sharded.md`` is what ``render_faults_report`` makes of its JSON: a sharded
    soak with the default's row first and stock pymongo's beside it."""
    data = json.loads(SHARDED_SOAK.with_suffix(".json").read_text(encoding="utf-8"))
    text = SHARDED_SOAK.with_suffix(".md").read_text(encoding="utf-8")
    assert text == render_faults_report(data)
    assert data["plan"]["topology"] == "sharded"
    assert [row[ARM_KEY] for row in data["runs"]][:2] == [default_policy_name(), STOCK]
    assert all(STOCK_GOAL in row["goals"] for row in data["runs"] if row[ARM_KEY] != STOCK)
