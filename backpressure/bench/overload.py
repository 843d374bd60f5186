"""Overload benchmark: every arm in both loop shapes and with one hot member, in one run.

Scenarios (all against the same embedded replica set, one arm after another):

* **Closed loop**: ``workers`` threads (32, 128, 512) each run operations back to back for
  ``closed_seconds`` against capacity C; every operation may take ``allowed_wait`` seconds.
* **Open loop**: paced arrivals at 1.5x, 3x and 10x C (a warm-up below C, then the sustained
  load) and a burst (below C, ``burst`` seconds at ``burst_load`` x C, recovery below C).
* **Hot member**: reads with ``readPreference=secondary``; one secondary is rate-limited, the
  other members are not.

Per (scenario, arm): app errors (raised, plus arrivals never sent), the physical minimum the
simulator's oracle (:mod:`backpressure.sim.oracle`) computes for the same arrival log and the
ratio of the two, server-received attempts per operation, goodput, p50/p99 latency of successful
operations, local waits and refusals, and retries refused by a budget.  The goals of the adaptive
preset are judged from these figures; a goal that no-retries also meets says nothing about
retries and is dropped (listed as such).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from backpressure.sim.oracle import (
    Capacity,
    closed_loop_min_error_fraction,
    physical_min_errors,
)
from backpressure.workload import ARMS, RunResult, WorkloadConfig, run_arm
from backpressure.workload.arms import to_file
from backpressure.workload.driver import LoadTarget, run_closed_loop
from backpressure.workload.metrics import rate_per_second
from backpressure.workload.plan import HOT_MEMBER, OverloadPlan

__all__ = [
    "BASELINE",
    "Goal",
    "OverloadPlan",
    "ScenarioRun",
    "closed_loop_floor",
    "evaluate_goals",
    "oracle_min_errors",
    "run_overload",
]

BASELINE = "no-retries"
"""The arm whose success makes a goal uninformative."""


@dataclass(frozen=True)
class ScenarioRun:
    """One (scenario, arm) run, summarised."""

    scenario: str
    """``closed 32w``, ``open 3x``, ``burst 3x 3s``, ``hot member``."""
    kind: str
    """``closed``, ``open`` or ``hot``."""
    arm: str
    workers: int
    capacity: float
    operations: int
    """Operations that arrived (open loop: scheduled; closed loop: issued)."""
    app_errors: int
    """Operations that raised plus arrivals never handed to the client."""
    physical_min: int
    """The oracle's minimum app errors for this arrival log."""
    floor_fraction: Optional[float]
    """Closed loop: the steady-state error fraction no arm can beat, max(0, 1 - C*W/N)."""
    attempts_per_op: Optional[float]
    """Workload commands the server received per operation."""
    goodput: float
    """Successful operations per second (closed: after the first ``goodput_skip`` s)."""
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    never_sent: int
    """Operations that raised without sending anything (refused locally)."""
    local_waits: Optional[int]
    local_refusals: Optional[int]
    budget_refused: Optional[int]
    result: RunResult = field(repr=False)

    @property
    def error_fraction(self) -> float:
        """App errors / operations."""
        return self.app_errors / self.operations if self.operations else 0.0

    @property
    def vs_min(self) -> Optional[float]:
        """App errors / the physical minimum (None without the oracle or when the minimum is 0)."""
        if self.physical_min == 0:
            return None
        return self.app_errors / self.physical_min

    def to_dict(self) -> dict[str, Any]:
        """Render as JSON-ready data (the run's timeline included, its arrival log not)."""
        data = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "result"}
        data["error_fraction"] = self.error_fraction
        data["vs_min"] = self.vs_min
        data["result"] = self.result.to_dict()
        return to_file(data)


def oracle_min_errors(
    arrivals: Sequence[float], allowed_wait: float, capacity: float, burst_seconds: float
) -> int:
    """The fewest app errors any arm could have for these arrivals on one limited server."""
    return physical_min_errors(
        list(arrivals), allowed_wait, Capacity.constant(capacity, burst_seconds)
    )


def closed_loop_floor(workers: int, allowed_wait: float, capacity: float) -> float:
    """Steady-state error fraction no arm can beat: max(0, 1 - capacity * wait / workers)."""
    return closed_loop_min_error_fraction(workers, allowed_wait, capacity)


def _closed_goodput(result: RunResult, skip: float) -> float:
    """Successes per second of a closed loop after its first ``skip`` seconds."""
    times: list[float] = result.timeline["t"]
    width = times[1] - times[0] if len(times) > 1 else 1.0
    planned = result.phases[0].duration
    picked = [i for i, t in enumerate(times) if t >= skip - 1e-9 and t + width <= planned + 1e-9]
    if not picked:
        return result.goodput
    return rate_per_second(
        sum(result.timeline["successes"][i] for i in picked), len(picked) * width
    )


def _summarize(
    result: RunResult,
    scenario: str,
    kind: str,
    capacity: float,
    plan: OverloadPlan,
) -> ScenarioRun:
    """Summarise one run, with the oracle's minimum for its arrival log."""
    if kind == "hot":
        physical_min = 0  # the healthy members are not limited
        floor: Optional[float] = 0.0
    else:
        physical_min = oracle_min_errors(
            result.arrivals, plan.allowed_wait, capacity, plan.burst_seconds
        )
        floor = closed_loop_floor(result.workers, plan.allowed_wait, capacity)
        floor = floor if kind == "closed" else None
    if kind == "open":
        window = next(p for p in result.phases if p.name in ("overload", "burst"))
        goodput = window.goodput
    else:
        goodput = _closed_goodput(result, plan.goodput_skip)
    return ScenarioRun(
        scenario=scenario,
        kind=kind,
        arm=result.arm,
        workers=result.workers,
        capacity=capacity,
        operations=result.offered,
        app_errors=result.app_errors,
        physical_min=physical_min,
        floor_fraction=floor,
        attempts_per_op=(result.server_received / result.offered if result.offered else None),
        goodput=goodput,
        p50_ms=result.latency_p50_ms,
        p99_ms=result.latency_p99_ms,
        never_sent=result.never_sent,
        local_waits=result.local_waits,
        local_refusals=result.local_refusals,
        budget_refused=result.refused,
        result=result,
    )


def run_overload(
    target: LoadTarget,
    arms: Sequence[str],
    plan: OverloadPlan,
    *,
    database: str = "backpressure_bench",
    progress: Callable[[float], None] = lambda _: None,
) -> list[ScenarioRun]:
    """Run every scenario for every arm (scenario by scenario) and return the summaries."""
    runs: list[ScenarioRun] = []

    def config(capacity: float, threads: int, read_fraction: float = 0.5) -> WorkloadConfig:
        return WorkloadConfig(
            capacity=capacity,
            threads=threads,
            read_fraction=read_fraction,
            burst_seconds=plan.burst_seconds,
            allowed_wait=plan.allowed_wait,
            database=database,
        )

    for workers in plan.closed_workers:
        for name in arms:
            result = run_closed_loop(
                target,
                ARMS[name],
                workers,
                plan.closed_seconds,
                config(plan.capacity, workers),
                progress=progress,
            )
            runs.append(_summarize(result, f"closed {workers}w", "closed", plan.capacity, plan))
    for label, phases in plan.open_shapes().items():
        open_config = config(plan.open_capacity, plan.open_threads)
        for name in arms:
            result = run_arm(target, ARMS[name], phases, open_config, progress=progress)
            runs.append(_summarize(result, label, "open", plan.open_capacity, plan))
    hot_config = config(plan.hot_capacity, plan.hot_workers, read_fraction=1.0)
    for name in arms:
        result = run_closed_loop(
            target,
            ARMS[name],
            plan.hot_workers,
            plan.hot_seconds,
            hot_config,
            read_preference="secondary",
            limited_member=HOT_MEMBER,
            progress=progress,
        )
        runs.append(_summarize(result, "hot member", "hot", plan.hot_capacity, plan))
    return runs


# -- goals ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    """One goal judged for every arm that ran it.

    ``met`` maps an arm to True/False, or None when a figure the goal needs is missing.
    ``dropped`` is True when no-retries meets the goal (so it says nothing about retries).
    """

    goal: str
    scenario: str
    figures: dict[str, str]
    """Per arm: the figures the verdict rests on."""
    met: dict[str, Optional[bool]]
    dropped: bool

    def to_dict(self) -> dict[str, Any]:
        """Render as JSON-ready data."""
        return {
            "goal": self.goal,
            "scenario": self.scenario,
            "figures": self.figures,
            "met": self.met,
            "dropped": self.dropped,
        }


def _pct(value: float) -> str:
    """Format a fraction as a percentage."""
    return f"{value:.1%}"


def _num(value: Optional[float], digits: int = 2) -> str:
    """Format a number (``-`` for None)."""
    return "-" if value is None else f"{value:,.{digits}f}"


Judge = Callable[[ScenarioRun], tuple[Optional[bool], str]]


def _verdict(ok: bool) -> str:
    """One sub-goal's verdict as a word."""
    return "met" if ok else "NOT met"


def _closed_judge(plan: OverloadPlan) -> Judge:
    """The closed-loop goals of the adaptive-policy issue, all at once.

    App errors <= 1 % applies only "whenever workers / capacity is below the wait an operation
    is allowed": with more workers than the deadline's worth of capacity, some operations must
    fail and how many depends on how fast a failure returns, so no bound is judged (the
    arm-independent floor max(0, 1 - C*W/N) is shown for reference).  The others always
    apply: attempts per operation <= 1.1, goodput >= 95 % of C, p99 <= 2 N/C + 100 ms.
    """

    def judge(run: ScenarioRun) -> tuple[Optional[bool], str]:
        p99_bound = 2.0 * run.workers / run.capacity * 1000.0 + 100.0
        applies = run.workers / run.capacity < plan.allowed_wait
        errors_ok = run.error_fraction <= 0.01 if applies else True
        attempts_ok = run.attempts_per_op is not None and run.attempts_per_op <= 1.1
        goodput_ok = run.goodput >= 0.95 * run.capacity
        p99_ok = run.p99_ms is not None and run.p99_ms <= p99_bound
        if applies:
            errors = f"errors {_pct(run.error_fraction)} (<= 1%: {_verdict(errors_ok)})"
        else:
            floor = run.floor_fraction or 0.0
            errors = f"errors {_pct(run.error_fraction)} (not judged; floor {_pct(floor)})"
        figures = (
            f"{errors}, attempts/op {_num(run.attempts_per_op)} ({_verdict(attempts_ok)}), "
            f"goodput {run.goodput / run.capacity:.0%} of C ({_verdict(goodput_ok)}), "
            f"p99 {_num(run.p99_ms, 0)} ms (<= {p99_bound:,.0f}: {_verdict(p99_ok)})"
        )
        return errors_ok and attempts_ok and goodput_ok and p99_ok, figures

    return judge


def _open_judge(run: ScenarioRun) -> tuple[Optional[bool], str]:
    """The open-loop goals: errors within 1.1x the oracle's minimum, attempts per op <= 1.1."""
    attempts_ok = run.attempts_per_op is not None and run.attempts_per_op <= 1.1
    errors_ok = run.app_errors <= 1.1 * run.physical_min
    return errors_ok and attempts_ok, (
        f"errors {run.app_errors:,} vs min {run.physical_min:,} (x{_num(run.vs_min)}: "
        f"{_verdict(errors_ok)}), attempts/op {_num(run.attempts_per_op)} "
        f"({_verdict(attempts_ok)})"
    )


def _hot_judge(run: ScenarioRun) -> tuple[Optional[bool], str]:
    """Hot member: no app errors to speak of, no refused retry, no waiting behind the hot one."""
    refused = run.budget_refused or 0
    checks = [
        run.error_fraction <= 0.01,
        refused == 0,
        run.p99_ms is not None and run.p99_ms <= 100.0,
    ]
    return all(checks), (
        f"errors {_pct(run.error_fraction)} (<= 1%: {_verdict(checks[0])}), budget refused "
        f"{refused:,} ({_verdict(checks[1])}), p99 {_num(run.p99_ms, 0)} ms "
        f"(<= 100: {_verdict(checks[2])})"
    )


def evaluate_goals(runs: Sequence[ScenarioRun], plan: OverloadPlan) -> list[Goal]:
    """Judge every scenario's goal for every arm; drop those no-retries meets."""
    goals: list[Goal] = []
    scenarios: list[str] = []
    for run in runs:
        if run.scenario not in scenarios:
            scenarios.append(run.scenario)
    closed = _closed_judge(plan)
    for scenario in scenarios:
        mine = [r for r in runs if r.scenario == scenario]
        kind = mine[0].kind
        if kind == "closed":
            workers = mine[0].workers
            waits = workers / mine[0].capacity
            errors = (
                "errors <= 1%" if waits < plan.allowed_wait else "errors not judged (N/C >= wait)"
            )
            text = (
                f"closed loop {workers} workers (N/C = {waits:.2f} s vs wait "
                f"{plan.allowed_wait:g} s): {errors}, attempts/op <= 1.1, "
                f"goodput >= 95% C, p99 <= 2N/C + 100 ms"
            )
            judge: Judge = closed
        elif kind == "open":
            text = f"{scenario}: app errors <= 1.1 x oracle minimum, attempts/op <= 1.1"
            judge = _open_judge
        else:
            text = (
                "hot member: errors <= 1%, no budget refusal, p99 <= 100 ms "
                "(healthy members serve without waiting behind the hot one)"
            )
            judge = _hot_judge
        met: dict[str, Optional[bool]] = {}
        figures: dict[str, str] = {}
        for run in mine:
            met[run.arm], figures[run.arm] = judge(run)
        dropped = met.get(BASELINE) is True
        goals.append(Goal(text, scenario, figures, met, dropped))
    return goals
