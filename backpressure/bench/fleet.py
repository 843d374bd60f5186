"""The fleet benchmark: K client processes x T threads share one embedded replica set.

Real processes (``multiprocessing``, spawn), each with its own pymongo client (so its own
retry state, pacing and GIL) and T threads running a closed loop: 50% ``find_one`` by ``_id``
and 50% ``insert_one``, every operation under ``pymongo.timeout(deadline)``.  The embedded
replica set runs in its own process and is reached over real TCP; nothing is mocked.  The
primary's ingress rate limit steps through ``rates`` (200 -> 100 -> 300 ops/s by default) every
``step_s`` seconds, set from this process over the server's control connection.

Per arm (every arm runs on the same server, one after another, the default's first):
app errors, attempts per operation (workload commands the servers received, from their own
counters, per operation), Jain's fairness index over the processes' successes, goodput per
phase as a share of the capacity from ``settle_s`` after each step, p50/p99 of successful
operations, local waits and refusals per second (the package's listeners), and the client
processes' CPU.  Each goal (errors <= 1%, <= 1.1 attempts/op, Jain >= 0.95, goodput >= 95% of
capacity in every phase) is marked met or not met.

Example::

    python -m backpressure.bench --only fleet --fleet-shapes 8x8,4x16 --output bench/results
"""

from __future__ import annotations

import functools
import logging
import math
import multiprocessing
import queue
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

import pymongo
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from backpressure.workload import ARMS
from backpressure.workload.arms import (
    arm_label,
    default_first,
    default_policy_name,
    from_file,
    to_file,
)
from backpressure.workload.driver import LoadTarget, LocalEventCounter, received_commands
from backpressure.workload.metrics import jain_index, percentile

__all__ = [
    "FLEET_GOALS",
    "QUICK",
    "FleetPlan",
    "FleetRun",
    "default_policy_name",
    "fleet_arms",
    "plan_from_dict",
    "render_fleet_markdown",
    "require_positive",
    "run_fleet",
    "run_processes",
]

DATABASE = "backpressure_fleet"
"""The workload's database (a name of its own: ``--uri`` runs drop and refill its collection on
the user's deployment)."""
COLLECTION = "ops"


def require_positive(plan: object, names: Sequence[str]) -> None:
    """Raise ValueError naming the first of ``plan``'s fields ``names`` that is not a finite
    number > 0 (a benchmark plan's validation)."""
    for name in names:
        value = getattr(plan, name)
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(
                f"{type(plan).__name__}.{name} must be a finite number > 0, got {value!r}"
            )


@dataclass(frozen=True)
class FleetPlan:
    """The shape of one fleet run."""

    processes: int = 8
    threads: int = 8
    rates: tuple[float, ...] = (200.0, 100.0, 300.0)
    """The primary's rate limit in each phase, ops/s (``math.inf``: no limit)."""
    step_s: float = 10.0
    """Length of each phase."""
    deadline_s: float = 1.0
    """``pymongo.timeout`` of every operation."""
    settle_s: float = 2.0
    """Seconds after each step left out of that phase's goodput."""
    burst_seconds: float = 1.0
    """The limiter's burst allowance, seconds of its rate."""
    keys: int = 500
    """Documents preloaded for ``find_one``."""
    bin_s: float = 0.1
    """Width of the success-time histogram each process returns."""
    start_timeout_s: float = 120.0
    """How long the client processes may take to start and connect."""
    think_s: float = 0.0
    """Pause of each thread after each operation (0: back to back)."""

    def __post_init__(self) -> None:
        """Validate the numbers."""
        if self.processes < 1 or self.threads < 1:
            raise ValueError(
                f"FleetPlan needs processes >= 1 and threads >= 1, got "
                f"{self.processes} and {self.threads}"
            )
        if not self.rates or any(not (rate > 0) for rate in self.rates):
            raise ValueError(f"FleetPlan.rates must be positive, got {self.rates!r}")
        require_positive(self, ("step_s", "deadline_s", "burst_seconds", "bin_s"))
        if not (0 <= self.think_s < 60 and math.isfinite(self.think_s)):
            raise ValueError(f"FleetPlan.think_s must be in [0, 60), got {self.think_s!r}")
        if not 0 <= self.settle_s < self.step_s:
            raise ValueError(f"FleetPlan.settle_s must be in [0, step_s), got {self.settle_s!r}")

    @property
    def duration_s(self) -> float:
        """Seconds of load."""
        return self.step_s * len(self.rates)

    @property
    def shape(self) -> str:
        """``KxT``."""
        return f"{self.processes}x{self.threads}"


QUICK = FleetPlan(processes=2, threads=2, rates=(60.0, 30.0), step_s=1.5, settle_s=0.5, keys=50)
"""A run of a few seconds for the tests."""

FLEET_GOALS: tuple[str, ...] = (
    "app errors <= 1%",
    "<= 1.1 attempts/op",
    "Jain >= 0.95",
    "goodput >= 95% of capacity",
)


def fleet_arms(names: Optional[Sequence[str]] = None) -> list[str]:
    """``names`` (default: no-retries, stock pymongo, current, draft, adaptive, those that run
    here) with the default arm's moved first; unknown names raise ValueError."""
    if names is None:
        names = [
            name
            for name in ("no-retries", "pymongo-native", "current", "draft", "adaptive")
            if name in ARMS and ARMS[name].unavailable() is None
        ]
    unknown = [name for name in names if name not in ARMS]
    if unknown:
        raise ValueError(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    return default_first(names)


# -- the client processes ---------------------------------------------------------------------


def _client_process(
    index: int,
    uri: str,
    arm_name: str,
    plan: FleetPlan,
    ready: Any,
    go: Any,
    start_at: Any,
    results: Any,
) -> None:
    """One client process: open the arm's client, wait for ``go``, run T closed loops."""
    cpu_start = time.process_time()
    # A load generator under deliberate overload: one log line per give-up is noise.
    logging.getLogger("backpressure").setLevel(logging.ERROR)
    events = LocalEventCounter()
    client = ARMS[arm_name].open(
        uri,
        local_listener=events,
        maxPoolSize=plan.threads + 10,
        appname=f"fleet-{index}",
    )
    try:
        collection = client.client[DATABASE][COLLECTION]
        collection.find_one({"_id": -1})  # connect and discover before the clock starts
        ready.put(index)
        if not go.wait(plan.start_timeout_s * 2):
            return
        t0 = float(start_at.value)
        end = t0 + plan.duration_s
        bins = [0] * (int(plan.duration_s / plan.bin_s) + 2)
        error_bins = [0] * len(bins)
        error_start_bins = [0] * len(bins)
        latencies: list[float] = []
        counts = {"ops": 0, "errors": 0}
        kinds: dict[str, int] = {}
        lock = threading.Lock()

        def worker(number: int) -> None:
            rng = random.Random(f"{index}:{number}")
            pause = threading.Event()  # never set: waits of think_s
            own: list[float] = []
            ops = errors = 0
            own_kinds: dict[str, int] = {}
            own_bins: dict[int, int] = {}
            own_error_bins: dict[int, int] = {}
            own_error_starts: dict[int, int] = {}
            _wait_until(t0)  # the same start instant in every process
            while True:
                started = time.time()
                if started >= end:
                    break
                ops += 1
                try:
                    with pymongo.timeout(plan.deadline_s):
                        if rng.random() < 0.5:
                            key = rng.randrange(plan.keys)
                            client.call(functools.partial(collection.find_one, {"_id": key}))
                        else:
                            client.call(functools.partial(collection.insert_one, {"w": number}))
                except PyMongoError as exc:
                    errors += 1
                    name = type(exc).__name__
                    own_kinds[name] = own_kinds.get(name, 0) + 1
                    slot = int((time.time() - t0) / plan.bin_s)
                    own_error_bins[slot] = own_error_bins.get(slot, 0) + 1
                    slot = int((started - t0) / plan.bin_s)
                    own_error_starts[slot] = own_error_starts.get(slot, 0) + 1
                else:
                    done = time.time()
                    own.append((done - started) * 1000.0)
                    slot = int((done - t0) / plan.bin_s)
                    own_bins[slot] = own_bins.get(slot, 0) + 1
                if plan.think_s:
                    pause.wait(plan.think_s)
            with lock:
                latencies.extend(own)
                counts["ops"] += ops
                counts["errors"] += errors
                for name, n in own_kinds.items():
                    kinds[name] = kinds.get(name, 0) + n
                for slot, n in own_bins.items():
                    if 0 <= slot < len(bins):
                        bins[slot] += n
                for slot, n in own_error_bins.items():
                    if 0 <= slot < len(error_bins):
                        error_bins[slot] += n
                for slot, n in own_error_starts.items():
                    if 0 <= slot < len(error_start_bins):
                        error_start_bins[slot] += n

        threads = [
            threading.Thread(target=worker, args=(n,), daemon=True) for n in range(plan.threads)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        results.put(
            {
                "index": index,
                "ops": counts["ops"],
                "errors": counts["errors"],
                "successes": counts["ops"] - counts["errors"],
                "success_bins": bins,
                "error_bins": error_bins,
                "error_start_bins": error_start_bins,
                "latencies_ms": latencies,
                "error_kinds": kinds,
                "local_waits": events.waits if events.reported else None,
                "local_refusals": events.refusals if events.reported else None,
                "cpu_s": time.process_time() - cpu_start,
                "competed_s": competed_seconds(client.client),
            }
        )
    finally:
        client.close()


def competed_seconds(client: Any) -> Optional[float]:
    """Seconds ``client``'s pacers competed (summed over servers); None without pacing.

    A stock or non-adaptive client has no pacers to ask: its processes report None, so a
    table can tell "never competed" (0.0) from "cannot compete".
    """
    import backpressure

    if not backpressure.is_enabled(client) or not backpressure.policy(client).adaptive:
        return None
    pacing = backpressure.stats(client).pacing
    return round(sum(snapshot.competed_s for snapshot in pacing.values()), 3)


# -- one arm's run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseShare:
    """Goodput of one phase, from ``settle_s`` after its step to its end."""

    rate: float
    goodput_per_s: float

    @property
    def share(self) -> float:
        """Goodput over capacity."""
        return self.goodput_per_s / self.rate


@dataclass(frozen=True)
class FleetRun:
    """One arm's fleet run, summarised."""

    arm: str
    shape: str
    operations: int
    app_errors: int
    server_received: int
    """Workload commands (find, insert) the servers received."""
    per_process_successes: tuple[int, ...]
    phases: tuple[PhaseShare, ...]
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    local_waits: Optional[int]
    local_refusals: Optional[int]
    error_kinds: dict[str, int]
    client_cpu_s: float
    duration_s: float
    floor_fraction: float
    """max(0, 1 - C * deadline / N) of the worst phase: no arm can do better there."""
    goals: dict[str, bool] = field(default_factory=dict)
    phase_successes: tuple[tuple[int, ...], ...] = ()
    """Each phase's successes per process (the whole step, settle time included; empty in
    runs from before it was recorded)."""
    per_process_competed_s: tuple[Optional[float], ...] = ()
    """Seconds each process's pacers competed (None: the arm does not pace; empty: not
    recorded, as in runs from before it was)."""
    success_bins: tuple[int, ...] = ()
    """Successes of all processes per ``bin_s`` from the start (by completion time)."""
    error_bins: tuple[int, ...] = ()
    """App errors of all processes per ``bin_s`` from the start (by the time they were raised)."""
    bin_s: float = 0.1

    @property
    def error_fraction(self) -> float:
        """App errors per operation."""
        return self.app_errors / self.operations if self.operations else 0.0

    @property
    def attempts_per_op(self) -> float:
        """Server-received workload commands per operation."""
        return self.server_received / self.operations if self.operations else 0.0

    @property
    def jain(self) -> float:
        """Jain's fairness index over the processes' successes (1.0: equal shares)."""
        return jain_index(self.per_process_successes) or 1.0

    @property
    def phase_jain(self) -> tuple[float, ...]:
        """Jain's index over the processes' successes within each phase."""
        return tuple(jain_index(values) or 1.0 for values in self.phase_successes)

    @property
    def worst_phase(self) -> float:
        """The lowest goodput share of capacity over the phases."""
        return min((phase.share for phase in self.phases), default=0.0)

    @property
    def refusals_per_s(self) -> Optional[float]:
        """Local refusals per second of load."""
        if self.local_refusals is None:
            return None
        return self.local_refusals / self.duration_s

    def judge(self) -> dict[str, bool]:
        """Each of :data:`FLEET_GOALS`: met or not."""
        return {
            FLEET_GOALS[0]: self.error_fraction <= 0.01,
            FLEET_GOALS[1]: self.attempts_per_op <= 1.1,
            FLEET_GOALS[2]: self.jain >= 0.95,
            FLEET_GOALS[3]: self.worst_phase >= 0.95,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FleetRun:
        """The run :meth:`to_dict` described."""
        names = {f for f in cls.__dataclass_fields__ if f != "goals"}
        values = {k: v for k, v in from_file(data).items() if k in names}
        values["per_process_successes"] = tuple(values["per_process_successes"])
        values["phase_successes"] = tuple(tuple(p) for p in values.get("phase_successes", ()))
        for name in ("per_process_competed_s", "success_bins", "error_bins"):
            values[name] = tuple(values.get(name, ()))
        values["phases"] = tuple(
            PhaseShare(p["rate"], p["goodput_per_s"]) for p in values["phases"]
        )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        data = asdict(self)
        data.update(
            error_fraction=self.error_fraction,
            attempts_per_op=self.attempts_per_op,
            jain=self.jain,
            phase_jain=self.phase_jain,
            worst_phase=self.worst_phase,
            refusals_per_s=self.refusals_per_s,
            goals=self.judge(),
        )
        return to_file(data)


def _preload(uri: str, plan: FleetPlan) -> None:
    """Drop the collection and insert the documents ``find_one`` reads (limiter off)."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    try:
        collection = client[DATABASE][COLLECTION]
        collection.drop()
        collection.insert_many([{"_id": key} for key in range(plan.keys)])
    finally:
        client.close()


def _wait_until(instant: float) -> None:
    """Block until ``time.time()`` reaches ``instant``."""
    remaining = instant - time.time()
    if remaining > 0:
        threading.Event().wait(remaining)


def _await_ready(ready: Any, processes: Sequence[Any], timeout: float) -> None:
    """Wait until every client process has connected (raise if one died or it takes too long)."""
    deadline = time.monotonic() + timeout
    waiting = len(processes)
    while waiting:
        try:
            ready.get(timeout=0.5)
            waiting -= 1
            continue
        except queue.Empty:
            pass
        dead = [p.name for p in processes if p.exitcode is not None]
        if dead:
            raise RuntimeError(f"fleet client process(es) exited before starting: {dead}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{waiting} fleet client process(es) not ready after {timeout} s")


def _apply_rate(target: LoadTarget, rate: float, plan: FleetPlan) -> None:
    """Limit the server to ``rate`` ops/s, or lift the limit when ``rate`` is infinite."""
    if math.isinf(rate):
        target.disable_rate_limit()
    else:
        target.set_rate_limit(rate, burst_seconds=plan.burst_seconds)


def run_arm_fleet(target: LoadTarget, arm: str, plan: FleetPlan) -> FleetRun:
    """Run ``plan`` once with every process under ``arm`` and summarise it."""
    collected, received = run_processes(target, [arm] * plan.processes, plan)
    return summarize(arm, plan, collected, received)


def run_processes(
    target: LoadTarget,
    arms: Sequence[str],
    plan: FleetPlan,
    worker: Callable[..., None] = _client_process,
) -> tuple[list[dict[str, Any]], int]:
    """Run ``plan`` once, process ``i`` under ``arms[i]`` (a mixed fleet when they differ).

    ``worker`` is each process's body (the closed loop of :func:`_client_process` unless
    another benchmark brings its own load): a picklable callable taking ``_client_process``'s
    arguments, which reports a dict with ``"index"`` on ``results``.  Returns every process's
    report, in process order, and the workload commands the server received.
    """
    if len(arms) != plan.processes:
        raise ValueError(f"{plan.processes} processes need as many arms, got {len(arms)}")
    context = multiprocessing.get_context("spawn")
    ready: Any = context.Queue()
    results: Any = context.Queue()
    go = context.Event()
    start_at = context.Value("d", 0.0)
    target.reset()
    target.disable_rate_limit()
    _preload(target.uri, plan)
    processes = [
        context.Process(
            target=worker,
            args=(index, target.uri, arm, plan, ready, go, start_at, results),
            name=f"fleet-{arm}-{index}",
            daemon=True,
        )
        for index, arm in enumerate(arms)
    ]
    for process in processes:
        process.start()
    collected: list[dict[str, Any]] = []
    try:
        _await_ready(ready, processes, plan.start_timeout_s)
        _apply_rate(target, plan.rates[0], plan)
        target.stats(reset=True)
        t0 = time.time() + 0.2
        start_at.value = t0
        go.set()
        for number, rate in enumerate(plan.rates[1:], start=1):
            _wait_until(t0 + number * plan.step_s)
            _apply_rate(target, rate, plan)
        _wait_until(t0 + plan.duration_s)
        for _ in processes:
            collected.append(results.get(timeout=plan.deadline_s + 60.0))
        stats = target.stats()
    finally:
        go.set()
        for process in processes:
            process.join(timeout=30.0)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5.0)
        target.disable_rate_limit()
    collected.sort(key=lambda r: int(r["index"]))
    return collected, received_commands(stats, ("find", "insert"))


def summarize(
    arm: str, plan: FleetPlan, processes: Sequence[dict[str, Any]], received: int
) -> FleetRun:
    """Turn the processes' reports and the server's count into a :class:`FleetRun`."""
    bins = [0] * max(len(p["success_bins"]) for p in processes)
    error_bins = [0] * len(bins)
    for report in processes:
        for slot, n in enumerate(report["success_bins"]):
            bins[slot] += n
        for slot, n in enumerate(report.get("error_bins", ())):
            if slot < len(error_bins):
                error_bins[slot] += n
    steps = [
        (round(number * plan.step_s / plan.bin_s), round((number + 1) * plan.step_s / plan.bin_s))
        for number in range(len(plan.rates))
    ]
    phase_successes = tuple(
        tuple(sum(report["success_bins"][first:last]) for report in processes)
        for first, last in steps
    )
    phases = []
    for number, rate in enumerate(plan.rates):
        begin = number * plan.step_s + plan.settle_s
        end = (number + 1) * plan.step_s
        first, last = round(begin / plan.bin_s), round(end / plan.bin_s)
        successes = sum(bins[first:last])
        phases.append(PhaseShare(rate, successes / ((last - first) * plan.bin_s)))
    latencies = [x for report in processes for x in report["latencies_ms"]]
    kinds: dict[str, int] = {}
    for report in processes:
        for name, n in report["error_kinds"].items():
            kinds[name] = kinds.get(name, 0) + n
    waits = [r["local_waits"] for r in processes if r["local_waits"] is not None]
    refusals = [r["local_refusals"] for r in processes if r["local_refusals"] is not None]
    workers = plan.processes * plan.threads
    floor = max(max(0.0, 1.0 - rate * plan.deadline_s / workers) for rate in plan.rates)
    return FleetRun(
        arm=arm,
        shape=plan.shape,
        operations=sum(int(r["ops"]) for r in processes),
        app_errors=sum(int(r["errors"]) for r in processes),
        server_received=received,
        per_process_successes=tuple(int(r["successes"]) for r in processes),
        phase_successes=phase_successes,
        per_process_competed_s=tuple(r.get("competed_s") for r in processes),
        phases=tuple(phases),
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        local_waits=sum(waits) if waits else None,
        local_refusals=sum(refusals) if refusals else None,
        error_kinds=dict(sorted(kinds.items())),
        client_cpu_s=sum(float(r["cpu_s"]) for r in processes),
        duration_s=plan.duration_s,
        floor_fraction=floor,
        success_bins=tuple(bins),
        error_bins=tuple(error_bins),
        bin_s=plan.bin_s,
    )


def run_fleet(
    target: LoadTarget,
    arms: Optional[Sequence[str]] = None,
    plan: FleetPlan = FleetPlan(),
    *,
    progress: Optional[Callable[[str], None]] = None,
) -> list[FleetRun]:
    """Run every arm (the default's first) through ``plan`` on ``target``."""
    runs = []
    for arm in fleet_arms(arms):
        if progress is not None:
            progress(f"fleet {plan.shape}: {arm}")
        runs.append(run_arm_fleet(target, arm, plan))
    return runs


# -- the report -------------------------------------------------------------------------------


def _ms(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.0f}"


def render_fleet_markdown(runs: Sequence[FleetRun], plan: FleetPlan) -> str:
    """One shape's table (every arm, the default's first) and its goals."""
    runs = sorted(runs, key=lambda run: run.arm != default_policy_name())
    steps = " -> ".join(f"{rate:g}" for rate in plan.rates)
    header = ["arm", "ops", "app errors", "attempts/op", "Jain"]
    header += [f"goodput @{rate:g}/s" for rate in plan.rates]
    header += ["p50 ms", "p99 ms", "refusals/s", "client CPU s"]
    lines = [
        f"### {plan.processes} processes x {plan.threads} threads",
        "",
        f"Capacity {steps} ops/s, {plan.step_s:g} s each; deadline {plan.deadline_s:g} s; "
        f"goodput from {plan.settle_s:g} s after each step. Floor (no arm can do better): "
        f"{100 * runs[0].floor_fraction:.1f}% app errors (N/C = "
        f"{plan.processes * plan.threads / min(plan.rates):.2f} s at the lowest capacity).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for run in runs:
        refusals = run.refusals_per_s
        cells = [
            arm_label(run.arm),
            f"{run.operations:,}",
            f"{100 * run.error_fraction:.1f}% ({run.app_errors:,})",
            f"{run.attempts_per_op:.2f}",
            f"{run.jain:.3f}",
            *(f"{100 * phase.share:.1f}%" for phase in run.phases),
            _ms(run.p50_ms),
            _ms(run.p99_ms),
            "-" if refusals is None else f"{refusals:,.1f}",
            f"{run.client_cpu_s:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Goals:", ""]
    for run in runs:
        verdicts = ", ".join(
            f"{goal}: {'met' if met else 'NOT met'}" for goal, met in run.judge().items()
        )
        lines.append(f"- **{arm_label(run.arm)}**: {verdicts}")
    successes = "; ".join(
        f"{arm_label(run.arm)}: {', '.join(f'{n:,}' for n in run.per_process_successes)}"
        for run in runs
    )
    kinds = "; ".join(
        f"{arm_label(run.arm)}: "
        + (", ".join(f"{name} {n:,}" for name, n in run.error_kinds.items()) or "-")
        for run in runs
    )
    lines += ["", f"App errors by kind: {kinds}.", "", f"Successes per process: {successes}.", ""]
    fair = [run for run in runs if run.phase_successes]
    if fair:
        steps = " -> ".join(f"{rate:g}/s" for rate in plan.rates)
        jains = "; ".join(
            f"{arm_label(run.arm)}: {', '.join(f'{j:.3f}' for j in run.phase_jain)}" for run in fair
        )
        lines += [f"Jain within each phase ({steps}): {jains}.", ""]
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


def plan_from_dict(data: dict[str, Any]) -> FleetPlan:
    """The plan ``asdict`` described."""
    return FleetPlan(**{**data, "rates": tuple(data["rates"])})


def parse_shape(text: str) -> tuple[int, int]:
    """``"8x8"`` -> (8, 8)."""
    processes, sep, threads = text.lower().partition("x")
    if not sep:
        raise ValueError(f"a fleet shape is PROCESSESxTHREADS, got {text!r}")
    return int(processes), int(threads)
