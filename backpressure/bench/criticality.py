"""The criticality benchmark: critical and sheddable work from a fleet at twice the capacity.

``python -m backpressure.bench.criticality`` runs 8 real client processes
(:func:`backpressure.bench.fleet.run_processes`), each an open loop: Poisson arrivals at its
share of the demand, served by a pool of threads, half ``find_one`` by ``_id`` and half
``insert_one``, every operation under ``pymongo.timeout(deadline)`` counted from its arrival.
A seeded half of the operations run under ``backpressure.overrides(criticality="sheddable")``.
The embedded replica set (its own process, real TCP) admits 200 ops/s throughout; the demand is
half of that for 5 s, twice that for 20 s, then half again for 10 s: the simulator's
``criticality-fleet`` scenario on real processes.

The arms run one after another on the same server with the same arrivals (the default's row
first; stock pymongo beside it).  Stock pymongo has no notion of criticality, so its two halves
fail alike; the goal is that of the adaptive preset: <= 1 % errors on the critical half.  Per
arm: errors of each half (raised, plus arrivals no thread could start before their deadline),
attempts per operation (the server's own counters), the overload's goodput as a share of the
capacity, the share of the arrivals of each of the 2 seconds after the overload ends that
succeeded (what holding sheddable work costs once it is over), errors of operations that arrived
after the end, each process's critical errors (a client that sends sheddable work while another
refuses critical work shows here) and its pacers' competing seconds.
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import random
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import pymongo
from pymongo.errors import PyMongoError

import backpressure
from backpressure.bench.fleet import (
    COLLECTION,
    DATABASE,
    FleetPlan,
    _wait_until,
    competed_seconds,
    fleet_arms,
    require_positive,
    run_processes,
)
from backpressure.bench.publish import publish_run
from backpressure.cli import run_cli
from backpressure.workload import ARMS
from backpressure.workload.arms import arm_label, default_first, from_file, to_file
from backpressure.workload.driver import LoadTarget, LocalEventCounter
from backpressure.workload.report import run_line

if TYPE_CHECKING:
    from backpressure.sim.model import Scenario

__all__ = [
    "CRITICALITY_GOAL",
    "CriticalityPlan",
    "CriticalityRun",
    "arrivals",
    "criticality_report",
    "main",
    "plan_from_dict",
    "render_criticality_markdown",
    "render_criticality_report",
    "run_criticality",
    "simulated",
    "summarize_criticality",
]

CRITICALITY_GOAL = "critical errors <= 1%"
"""The adaptive preset's goal for critical work at twice the capacity."""

ARM_NAMES: tuple[str, ...] = ("pymongo-native", "current", "draft", "adaptive")
"""The arms a run compares by default (those that run here; the default's first)."""


@dataclass(frozen=True)
class CriticalityPlan:
    """The shape of one criticality run."""

    processes: int = 8
    threads: int = 64
    """Threads of each process serving its arrivals."""
    capacity: float = 200.0
    """The primary's rate limit, ops/s, for the whole run."""
    phases: tuple[tuple[float, float], ...] = ((5.0, 0.5), (20.0, 2.0), (10.0, 0.5))
    """(seconds, demand as a multiple of the capacity) of each phase; the highest is the
    overload."""
    sheddable_fraction: float = 0.5
    """Share of the operations run as sheddable."""
    deadline_s: float = 1.0
    """``pymongo.timeout`` of every operation, from its arrival."""
    burst_seconds: float = 1.0
    """The limiter's burst allowance, seconds of its rate."""
    settle_s: float = 2.0
    """Seconds after the overload starts left out of its goodput."""
    keys: int = 500
    """Documents preloaded for ``find_one``."""
    bin_s: float = 0.1
    """Width of the histograms each process returns."""
    seed: int = 1
    """Seed of the arrivals, the operation mix and the sheddable draw."""
    start_timeout_s: float = 120.0
    """How long the client processes may take to start and connect."""

    def __post_init__(self) -> None:
        """Validate the numbers."""
        if self.processes < 1 or self.threads < 1:
            raise ValueError(
                f"CriticalityPlan needs processes >= 1 and threads >= 1, got "
                f"{self.processes} and {self.threads}"
            )
        if not self.phases or any(
            not (seconds > 0 and math.isfinite(seconds) and load >= 0 and math.isfinite(load))
            for seconds, load in self.phases
        ):
            raise ValueError(
                "CriticalityPlan.phases must be (seconds > 0, load >= 0) pairs, got "
                f"{self.phases!r}"
            )
        require_positive(self, ("capacity", "deadline_s", "burst_seconds", "bin_s"))
        if not 0.0 <= self.sheddable_fraction <= 1.0:
            raise ValueError(
                "CriticalityPlan.sheddable_fraction must be in [0, 1], got "
                f"{self.sheddable_fraction!r}"
            )
        overload = self.phases[self.overload_index][0]
        if not 0 <= self.settle_s < overload:
            raise ValueError(
                f"CriticalityPlan.settle_s must be in [0, {overload:g}) (the overload's "
                f"length), got {self.settle_s!r}"
            )

    @property
    def duration_s(self) -> float:
        """Seconds of arrivals."""
        return sum(seconds for seconds, _ in self.phases)

    @property
    def overload_index(self) -> int:
        """Index of the phase with the highest demand (the first such)."""
        loads = [load for _, load in self.phases]
        return loads.index(max(loads))

    @property
    def overload_window(self) -> tuple[float, float]:
        """Start and end of the overload, seconds from the start."""
        start = sum(seconds for seconds, _ in self.phases[: self.overload_index])
        return start, start + self.phases[self.overload_index][0]

    @property
    def fleet(self) -> FleetPlan:
        """The fleet plan :func:`run_processes` runs: one phase at the capacity."""
        return FleetPlan(
            processes=self.processes,
            threads=self.threads,
            rates=(self.capacity,),
            step_s=self.duration_s,
            deadline_s=self.deadline_s,
            settle_s=0.0,
            burst_seconds=self.burst_seconds,
            keys=self.keys,
            bin_s=self.bin_s,
            start_timeout_s=self.start_timeout_s,
        )

    def floor_fraction(self) -> float:
        """Errors no client can avoid, per operation: the overload's excess over the capacity
        and the burst allowance, over the whole run's expected arrivals."""
        demand = sum(seconds * load * self.capacity for seconds, load in self.phases)
        seconds, load = self.phases[self.overload_index]
        excess = (load - 1.0) * self.capacity * seconds - self.burst_seconds * self.capacity
        return max(0.0, excess) / demand if demand else 0.0


QUICK = CriticalityPlan(
    processes=2,
    threads=8,
    capacity=60.0,
    phases=((0.5, 0.5), (2.0, 2.0), (1.0, 0.5)),
    settle_s=0.5,
    keys=50,
)
"""A run of a few seconds for the tests."""


def simulated(plan: CriticalityPlan) -> Scenario:
    """The simulator's ``bench-criticality`` scenario of ``plan`` (needs the ``sim`` extra)."""
    from backpressure.sim.scenarios import bench_criticality

    return bench_criticality(
        plan.processes,
        plan.threads,
        plan.capacity,
        plan.phases,
        plan.deadline_s,
        plan.sheddable_fraction,
        plan.burst_seconds,
    )


def arrivals(plan: CriticalityPlan, index: int) -> list[tuple[float, bool]]:
    """Process ``index``'s arrivals: (seconds from the start, sheddable), Poisson at its share
    of each phase's demand, the same for every arm (seeded by the plan and the index)."""
    rng = random.Random(f"criticality:{plan.seed}:{index}")
    schedule: list[tuple[float, bool]] = []
    start = 0.0
    for seconds, load in plan.phases:
        rate = load * plan.capacity / plan.processes
        at = start
        while rate > 0:
            at += rng.expovariate(rate)
            if at >= start + seconds:
                break
            schedule.append((at, rng.random() < plan.sheddable_fraction))
        start += seconds
    return schedule


# -- the client processes ---------------------------------------------------------------------


def _open_loop_process(
    plan: CriticalityPlan,
    index: int,
    uri: str,
    arm_name: str,
    fleet: FleetPlan,
    ready: Any,
    go: Any,
    start_at: Any,
    results: Any,
) -> None:
    """One client process: open the arm's client, wait for ``go``, serve its arrivals.

    The arguments after ``plan`` are those :func:`run_processes` gives every process body
    (``fleet``, the plan it runs, is ``plan.fleet``).
    """
    cpu_start = time.process_time()
    logging.getLogger("backpressure").setLevel(logging.ERROR)  # one line per give-up is noise
    events = LocalEventCounter()
    client = ARMS[arm_name].open(
        uri, local_listener=events, maxPoolSize=plan.threads + 10, appname=f"criticality-{index}"
    )
    try:
        collection = client.client[DATABASE][COLLECTION]
        collection.find_one({"_id": -1})  # connect and discover before the clock starts
        schedule = arrivals(plan, index)
        mix = random.Random(f"mix:{plan.seed}:{index}")
        reads = [mix.random() < 0.5 for _ in schedule]
        keys = [mix.randrange(plan.keys) for _ in schedule]
        ready.put(index)
        if not go.wait(plan.start_timeout_s * 2):
            return
        t0 = float(start_at.value)
        lock = threading.Lock()
        cursor = [0]
        outcomes: list[tuple[int, float, str]] = []  # (arrival, completion offset, error name)

        def operation(number: int) -> None:
            if reads[number]:
                collection.find_one({"_id": keys[number]})
            else:
                collection.insert_one({"w": index})

        def serve() -> None:
            while True:
                with lock:
                    number = cursor[0]
                    cursor[0] += 1
                if number >= len(schedule):
                    return
                due, sheddable = schedule[number]
                _wait_until(t0 + due)
                remaining = t0 + due + plan.deadline_s - time.time()
                if remaining <= 0:  # no thread was free before its deadline
                    outcome = (number, due + plan.deadline_s, "NotStarted")
                else:
                    error = ""
                    hint = backpressure.overrides(
                        criticality="sheddable" if sheddable else "critical"
                    )
                    try:
                        with hint, pymongo.timeout(remaining):
                            client.call(functools.partial(operation, number))
                    except PyMongoError as exc:
                        error = type(exc).__name__
                    outcome = (number, time.time() - t0, error)
                with lock:
                    outcomes.append(outcome)

        threads = [threading.Thread(target=serve, daemon=True) for _ in range(plan.threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        results.put(_process_report(plan, index, schedule, outcomes, events, client, cpu_start))
    finally:
        client.close()


def _process_report(
    plan: CriticalityPlan,
    index: int,
    schedule: Sequence[tuple[float, bool]],
    outcomes: Sequence[tuple[int, float, str]],
    events: LocalEventCounter,
    client: Any,
    cpu_start: float,
) -> dict[str, Any]:
    """Add up one process's outcomes into the dict :func:`summarize_criticality` reads."""
    bins = math.ceil(plan.duration_s / plan.bin_s) + math.ceil(plan.deadline_s / plan.bin_s)
    successes, due, served = [0] * bins, [0] * bins, [0] * bins
    counts = {"critical_ops": 0, "critical_errors": 0, "sheddable_ops": 0, "sheddable_errors": 0}
    kinds: dict[str, int] = {}
    critical_kinds: dict[str, int] = {}
    end = plan.overload_window[1]
    errors_after_end = 0
    for at, _ in schedule:
        due[min(bins - 1, int(at / plan.bin_s))] += 1
    for number, done, error in outcomes:
        at, sheddable = schedule[number]
        half = "sheddable" if sheddable else "critical"
        counts[f"{half}_ops"] += 1
        if error:
            counts[f"{half}_errors"] += 1
            kinds[error] = kinds.get(error, 0) + 1
            if not sheddable:
                critical_kinds[error] = critical_kinds.get(error, 0) + 1
            errors_after_end += at >= end
        else:
            successes[min(bins - 1, int(done / plan.bin_s))] += 1
            served[min(bins - 1, int(at / plan.bin_s))] += 1
    return {
        "index": index,
        **counts,
        "success_bins": successes,
        "due_bins": due,
        "served_bins": served,
        "errors_after_end": errors_after_end,
        "error_kinds": kinds,
        "critical_error_kinds": critical_kinds,
        "local_refusals": events.refusals if events.reported else None,
        "competed_s": competed_seconds(client.client),
        "cpu_s": time.process_time() - cpu_start,
    }


# -- one arm's run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CriticalityRun:
    """One arm's criticality run, summarised."""

    arm: str
    critical_ops: int
    critical_errors: int
    sheddable_ops: int
    sheddable_errors: int
    server_received: int
    """Workload commands (find, insert) the server received."""
    success_bins: tuple[int, ...]
    """Successes of all processes per ``bin_s`` from the start (by completion time)."""
    due_bins: tuple[int, ...]
    """Arrivals of all processes per ``bin_s`` from the start."""
    served_bins: tuple[int, ...]
    """Arrivals that succeeded, per ``bin_s`` of their arrival."""
    errors_after_end: int
    """Errors of operations that arrived after the overload's end."""
    per_process_critical: tuple[tuple[int, int], ...]
    """(critical operations, critical errors) of each process."""
    per_process_competed_s: tuple[Optional[float], ...]
    """Seconds each process's pacers competed (None: the arm does not pace)."""
    local_refusals: Optional[int]
    error_kinds: dict[str, int]
    client_cpu_s: float
    bin_s: float
    overload_window: tuple[float, float]
    settle_s: float
    capacity: float
    goals: dict[str, bool] = field(default_factory=dict)
    critical_error_kinds: Optional[dict[str, int]] = None
    """The critical half's errors by kind (None: a run recorded before they were split)."""

    @property
    def operations(self) -> int:
        """Operations of both halves."""
        return self.critical_ops + self.sheddable_ops

    @property
    def critical_error_rate(self) -> float:
        """Errors per critical operation."""
        return self.critical_errors / self.critical_ops if self.critical_ops else 0.0

    @property
    def sheddable_error_rate(self) -> float:
        """Errors per sheddable operation."""
        return self.sheddable_errors / self.sheddable_ops if self.sheddable_ops else 0.0

    @property
    def error_rate(self) -> float:
        """Errors per operation, both halves."""
        errors = self.critical_errors + self.sheddable_errors
        return errors / self.operations if self.operations else 0.0

    @property
    def attempts_per_op(self) -> float:
        """Server-received workload commands per operation."""
        return self.server_received / self.operations if self.operations else 0.0

    def _bins(self, start: float, end: float) -> slice:
        return slice(round(start / self.bin_s), round(end / self.bin_s))

    @property
    def overload_goodput(self) -> float:
        """Successes per second from ``settle_s`` into the overload to its end, over the
        capacity."""
        start, end = self.overload_window
        window = self._bins(start + self.settle_s, end)
        return sum(self.success_bins[window]) / (end - start - self.settle_s) / self.capacity

    @property
    def after_end(self) -> tuple[float, float]:
        """The share of the arrivals of each of the 2 seconds after the overload's end that
        succeeded (1.0 for a second with none)."""
        end = self.overload_window[1]
        shares = []
        for second in (0, 1):
            window = self._bins(end + second, end + second + 1)
            due = sum(self.due_bins[window])
            shares.append(sum(self.served_bins[window]) / due if due else 1.0)
        return shares[0], shares[1]

    def judge(self) -> dict[str, bool]:
        """The goal: met or not."""
        return {CRITICALITY_GOAL: self.critical_error_rate <= 0.01}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CriticalityRun:
        """The run :meth:`to_dict` described."""
        names = {f for f in cls.__dataclass_fields__ if f != "goals"}
        values = {k: v for k, v in from_file(data).items() if k in names}
        for name in (
            "success_bins",
            "due_bins",
            "served_bins",
            "per_process_competed_s",
            "overload_window",
        ):
            values[name] = tuple(values[name])
        values["per_process_critical"] = tuple(
            (int(ops), int(errors)) for ops, errors in values["per_process_critical"]
        )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        data = asdict(self)
        data.update(
            critical_error_rate=self.critical_error_rate,
            sheddable_error_rate=self.sheddable_error_rate,
            error_rate=self.error_rate,
            attempts_per_op=self.attempts_per_op,
            overload_goodput=self.overload_goodput,
            after_end=list(self.after_end),
            goals=self.judge(),
        )
        return to_file(data)


def summarize_criticality(
    arm: str, plan: CriticalityPlan, processes: Sequence[dict[str, Any]], received: int
) -> CriticalityRun:
    """Turn the processes' reports and the server's count into a :class:`CriticalityRun`."""
    width = max(len(report["success_bins"]) for report in processes)
    histograms = {name: [0] * width for name in ("success_bins", "due_bins", "served_bins")}
    kinds: dict[str, int] = {}
    critical_kinds: dict[str, int] = {}
    for report in processes:
        for name, total in histograms.items():
            for slot, n in enumerate(report[name]):
                total[slot] += n
        for name, n in report["error_kinds"].items():
            kinds[name] = kinds.get(name, 0) + n
        for name, n in report["critical_error_kinds"].items():
            critical_kinds[name] = critical_kinds.get(name, 0) + n
    refusals = [r["local_refusals"] for r in processes if r["local_refusals"] is not None]
    return CriticalityRun(
        arm=arm,
        critical_ops=sum(int(r["critical_ops"]) for r in processes),
        critical_errors=sum(int(r["critical_errors"]) for r in processes),
        sheddable_ops=sum(int(r["sheddable_ops"]) for r in processes),
        sheddable_errors=sum(int(r["sheddable_errors"]) for r in processes),
        server_received=received,
        success_bins=tuple(histograms["success_bins"]),
        due_bins=tuple(histograms["due_bins"]),
        served_bins=tuple(histograms["served_bins"]),
        errors_after_end=sum(int(r["errors_after_end"]) for r in processes),
        per_process_critical=tuple(
            (int(r["critical_ops"]), int(r["critical_errors"])) for r in processes
        ),
        per_process_competed_s=tuple(r.get("competed_s") for r in processes),
        local_refusals=sum(refusals) if refusals else None,
        error_kinds=dict(sorted(kinds.items())),
        client_cpu_s=sum(float(r["cpu_s"]) for r in processes),
        bin_s=plan.bin_s,
        overload_window=plan.overload_window,
        settle_s=plan.settle_s,
        capacity=plan.capacity,
        critical_error_kinds=dict(sorted(critical_kinds.items())),
    )


def run_criticality(
    target: LoadTarget,
    arms: Optional[Sequence[str]] = None,
    plan: CriticalityPlan = CriticalityPlan(),
    *,
    progress: Optional[Callable[[str], None]] = None,
) -> list[CriticalityRun]:
    """Run every arm (default: :data:`ARM_NAMES` that run here; the default's first)
    through ``plan`` on ``target``, one after another (``progress`` hears each arm's name
    as it starts)."""
    names = fleet_arms(arms if arms is not None else _available())
    worker = functools.partial(_open_loop_process, plan)
    runs = []
    for arm in names:
        if progress is not None:
            progress(f"criticality: {arm} ...")
        reports, received = run_processes(target, [arm] * plan.processes, plan.fleet, worker)
        runs.append(summarize_criticality(arm, plan, reports, received))
    return runs


def _available() -> list[str]:
    """:data:`ARM_NAMES` that run with this pymongo."""
    return [name for name in ARM_NAMES if ARMS[name].unavailable() is None]


# -- the report -------------------------------------------------------------------------------


def _kinds_by_arm(kinds: Iterable[tuple[str, dict[str, int]]]) -> str:
    """``arm: Kind n, Kind n; arm: ...`` for each (arm, errors by kind); ``-`` for none."""
    return "; ".join(
        f"{arm_label(arm)}: " + (", ".join(f"{name} {n:,}" for name, n in by_kind.items()) or "-")
        for arm, by_kind in kinds
    )


def render_criticality_markdown(runs: Sequence[CriticalityRun], plan: CriticalityPlan) -> str:
    """The table (every arm, the default's first), the goal and the per-process lines."""
    order = default_first([run.arm for run in runs])
    runs = sorted(runs, key=lambda run: order.index(run.arm))
    phases = ", then ".join(f"{load:g} x C for {seconds:g} s" for seconds, load in plan.phases)
    start, end = plan.overload_window
    header = [
        "arm",
        "critical errors",
        "sheddable errors",
        "all errors",
        "attempts/op",
        "overload goodput (of C)",
        "arrivals served, 1st / 2nd s after the end",
        "errors after the end",
        "client CPU s",
    ]
    lines = [
        f"### {plan.processes} processes, open loop, {plan.sheddable_fraction:.0%} sheddable",
        "",
        f"Capacity C = {plan.capacity:g} ops/s throughout; demand {phases} (Poisson, "
        f"{plan.threads} threads per process); deadline {plan.deadline_s:g} s from arrival; "
        f"overload goodput from {plan.settle_s:g} s after its start ({start:g} s) to its end "
        f"({end:g} s). Floor (no client can do better): 0 critical errors while the critical "
        f"demand fits in C, and {100 * plan.floor_fraction():.1f}% of all operations (the "
        "overload's excess).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for run in runs:
        first, second = run.after_end
        cells = [
            arm_label(run.arm),
            f"{100 * run.critical_error_rate:.2f}% ({run.critical_errors:,} of "
            f"{run.critical_ops:,})",
            f"{100 * run.sheddable_error_rate:.1f}% ({run.sheddable_errors:,} of "
            f"{run.sheddable_ops:,})",
            f"{100 * run.error_rate:.1f}%",
            f"{run.attempts_per_op:.2f}",
            f"{100 * run.overload_goodput:.1f}%",
            f"{100 * first:.0f}% / {100 * second:.0f}%",
            f"{run.errors_after_end:,}",
            f"{run.client_cpu_s:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Goal:", ""]
    for run in runs:
        verdicts = ", ".join(
            f"{goal}: {'met' if met else 'NOT met'}" for goal, met in run.judge().items()
        )
        lines.append(f"- **{arm_label(run.arm)}**: {verdicts}")
    per_process = "; ".join(
        f"{arm_label(run.arm)}: "
        + ", ".join(f"{100 * e / n if n else 0:.1f}%" for n, e in run.per_process_critical)
        for run in runs
    )
    kinds = _kinds_by_arm((run.arm, run.error_kinds) for run in runs)
    lines += [
        "",
        f"Critical errors per process: {per_process}.",
        "",
        f"Errors by kind (NotStarted: no thread was free before the deadline): {kinds}.",
        "",
    ]
    split = [
        (run.arm, run.critical_error_kinds) for run in runs if run.critical_error_kinds is not None
    ]
    if split:
        lines += [f"The critical half's errors by kind: {_kinds_by_arm(split)}.", ""]
    competed = [
        run for run in runs if any(seconds is not None for seconds in run.per_process_competed_s)
    ]
    if competed:
        seconds = "; ".join(
            f"{arm_label(run.arm)}: "
            + ", ".join(f"{s:.1f}" for s in run.per_process_competed_s if s is not None)
            for run in competed
        )
        lines += [f"Seconds competing per process (the neighbour test's mode): {seconds}.", ""]
    return "\n".join(lines)


def criticality_report(
    runs: Sequence[CriticalityRun],
    plan: CriticalityPlan,
    info: dict[str, Any],
    load: Sequence[float],
    wall_s: float,
    commit: str,
) -> dict[str, Any]:
    """The raw data of one invocation, as written to JSON."""
    return {
        "machine": info,
        "load_average": [round(x, 2) for x in load],
        "wall_s": round(wall_s, 1),
        "commit": commit,
        "plan": asdict(plan),
        "runs": [run.to_dict() for run in runs],
    }


def plan_from_dict(data: dict[str, Any]) -> CriticalityPlan:
    """The plan ``asdict`` described."""
    phases = tuple((float(seconds), float(load)) for seconds, load in data["phases"])
    return CriticalityPlan(**{**data, "phases": phases})


def render_criticality_report(data: dict[str, Any]) -> str:
    """The Markdown page of :func:`criticality_report`'s data: the run's line, then the table."""
    plan = plan_from_dict(data["plan"])
    runs = [CriticalityRun.from_dict(run) for run in data["runs"]]
    line = run_line(data["machine"], data["load_average"], data["wall_s"], data["commit"])
    return line + "\n\n" + render_criticality_markdown(runs, plan)


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv`` and run every arm on one embedded replica set."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench.criticality",
        description="Critical and sheddable work from a fleet at twice the capacity.",
    )
    parser.add_argument(
        "--arms",
        help="arms, comma-separated (default: stock pymongo, current, draft, adaptive; "
        "the default's row first)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the page")
    args = parser.parse_args(argv)
    arms = None
    if args.arms is not None:
        arms = [part.strip() for part in args.arms.split(",") if part.strip()]
        try:
            fleet_arms(arms)
        except ValueError as exc:
            parser.error(f"--arms: {exc}")
    plan = CriticalityPlan()

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    publish_run(
        lambda server: run_criticality(server, arms, plan, progress=progress),
        lambda runs, info, load, wall_s, commit: criticality_report(
            runs, plan, info, load, wall_s, commit
        ),
        render_criticality_report,
        markdown=args.markdown,
        json_path=args.json,
    )
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.bench.criticality``: 0, or 2 on a usage error."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
