"""Run a scenario under several arms and summarise each run: the programmatic API.

Example::

    from backpressure.sim import run, scenario

    result = run(scenario("sustained-3x"), ["no-retries", "current", "draft"], seed=1)
    for name, arm in result.arms.items():
        print(name, arm.app_errors, arm.physical_min_errors, arm.attempts_per_op)
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from backpressure.core.policy import Policy
from backpressure.sim.arms import SimArm, resolve_all
from backpressure.sim.engine import REFUSED, simulate
from backpressure.sim.model import Scenario
from backpressure.workload.arms import ARMS_KEY
from backpressure.workload.metrics import jain_index, percentile

__all__ = ["ArmResult", "PhaseGoodput", "RecoveryFigures", "Result", "run"]

RECOVERY_SECONDS = 4
"""The recovery figures cover this many whole seconds after the overload ends."""

ArmLike = Union[str, Policy, SimArm]
"""An arm name, a package Policy, or a SimArm."""


@dataclass(frozen=True)
class PhaseGoodput:
    """Goodput over one phase of a scenario, from ``settle_s`` after the phase mark to its end."""

    label: str
    start_s: float
    end_s: float
    goodput_per_s: float
    capacity_per_s: float
    """The servers' mean capacity over the same buckets (inf: unlimited)."""
    offered_per_s: float
    """Arrivals per second over the same buckets."""

    @property
    def of_capacity(self) -> Optional[float]:
        """Goodput as a fraction of capacity (None when the capacity is unlimited or 0)."""
        if not 0 < self.capacity_per_s < math.inf:
            return None
        return self.goodput_per_s / self.capacity_per_s


@dataclass(frozen=True)
class ArmResult:
    """One arm's run of one scenario."""

    name: str
    description: str
    ops: int
    """Operations the application wanted (arrivals), skipped ones included."""
    app_errors: int
    """Operations that failed (raised, timed out, refused locally, skipped or unfinished)."""
    physical_min_errors: int
    """The fewest app errors any arm could have had on this run's arrivals (the oracle)."""
    physical_exact: bool
    """Whether ``physical_min_errors`` is exact (else a floor: see the oracle)."""
    server_attempts: int
    """Requests the servers received (admitted or rejected)."""
    attempts_per_op: float
    """``server_attempts`` per operation (as the benchmark counts it: skipped ones included)."""
    goodput_per_s: float
    """Successful operations per second of the scenario's arrival window."""
    p50_ms: Optional[float]
    """Median latency of successful operations (from when they were sent)."""
    p99_ms: Optional[float]
    """99th percentile latency of successful operations."""
    issued: int
    """Operations sent (ops minus skipped)."""
    server_rejected: int
    """Requests the servers' limiters rejected."""
    server_work: float
    """Server work in admitted-operation units (rejections cost ``rejection_cost`` each)."""
    connections_refused: int
    """Connections the connection-establishment limiters refused."""
    local_waits: int
    """Attempts an adaptive arm held locally before sending."""
    error_reasons: Mapping[str, int]
    """App errors by reason."""
    timeline: Mapping[str, Sequence[float]]
    """Per bucket: ``t``, ``offered``, ``goodput``, ``errors``, ``received``, ``rejected``,
    ``capacity`` (per second)."""
    recovery_s: Optional[float]
    """Seconds from the end of the overload until the last bucket with app errors has passed
    (0: no errors after it; None: the scenario marks no overload end)."""
    wall_s: float
    """Real seconds the simulation took."""
    floor_fraction: Optional[float] = None
    """Closed loops: the arm-independent error floor ``max(0, 1 - C * D / N)`` over the
    arrival window; ``physical_min_errors`` is then ``max(0, N / D - C)`` summed over it."""
    client_successes: tuple[int, ...] = ()
    """Successful operations per client process."""
    phase_goodput: tuple[PhaseGoodput, ...] = ()
    """Goodput per phase mark of the scenario."""
    local_refusals: int = 0
    """Operations the arm refused locally (never sent)."""
    duration_s: float = 0.0
    """The scenario's arrival window, seconds."""
    critical_ops: int = 0
    """Operations run as critical, when the scenario marks some sheddable (else 0)."""
    critical_errors: int = 0
    """App errors of the critical operations."""
    sheddable_ops: int = 0
    """Operations run as sheddable (``ClientGroup.sheddable_fraction``)."""
    sheddable_errors: int = 0
    """App errors of the sheddable operations."""

    @property
    def error_fraction(self) -> float:
        """App errors per operation."""
        return self.app_errors / self.ops if self.ops else 0.0

    @property
    def jain(self) -> Optional[float]:
        """Jain's fairness index over the clients' successes (None with one client)."""
        return jain_index(self.client_successes)

    @property
    def refusals_per_s(self) -> float:
        """Local refusals per second of the arrival window."""
        return self.local_refusals / self.duration_s if self.duration_s else 0.0

    def summary(self) -> dict[str, Any]:
        """The JSON entry other tools read (exactly the issue's keys)."""
        return {
            "ops": self.ops,
            "app_errors": self.app_errors,
            "physical_min_errors": self.physical_min_errors,
            "server_attempts": self.server_attempts,
            "attempts_per_op": round(self.attempts_per_op, 4),
            "goodput_per_s": round(self.goodput_per_s, 3),
            "p99_ms": None if self.p99_ms is None else round(self.p99_ms, 3),
        }

    def details(self) -> dict[str, Any]:
        """Everything else, for the JSON's ``details`` section."""
        return {
            "description": self.description,
            "physical_exact": self.physical_exact,
            "issued": self.issued,
            "p50_ms": None if self.p50_ms is None else round(self.p50_ms, 3),
            "server_rejected": self.server_rejected,
            "server_work": round(self.server_work, 3),
            "connections_refused": self.connections_refused,
            "local_waits": self.local_waits,
            "error_reasons": dict(self.error_reasons),
            "recovery_s": self.recovery_s,
            "wall_s": round(self.wall_s, 3),
            "floor_fraction": self.floor_fraction,
            "jain": None if self.jain is None else round(self.jain, 4),
            "local_refusals": self.local_refusals,
            "critical_ops": self.critical_ops,
            "critical_errors": self.critical_errors,
            "sheddable_ops": self.sheddable_ops,
            "sheddable_errors": self.sheddable_errors,
            "phase_goodput": [
                {
                    "label": phase.label,
                    "start_s": phase.start_s,
                    "end_s": phase.end_s,
                    "goodput_per_s": round(phase.goodput_per_s, 3),
                    "capacity_per_s": phase.capacity_per_s,
                    "offered_per_s": round(phase.offered_per_s, 3),
                }
                for phase in self.phase_goodput
            ],
            "timeline": {k: list(v) for k, v in self.timeline.items()},
        }


@dataclass(frozen=True)
class RecoveryFigures:
    """One arm's goodput in the seconds after the overload ends (``Result.recovery``)."""

    demand_share: tuple[float, ...]
    """Successes in each whole second after the end, as a share of the demand."""
    successes_1_to_4: int
    """Successes from 1 s to 4 s after the end."""
    versus_default: Optional[float]
    """``successes_1_to_4`` as a share of the default arm's (None without its run)."""
    errors_after: int
    """App errors in the buckets that start at or after the end."""


@dataclass(frozen=True)
class Result:
    """A scenario's runs, one per arm, in the order given."""

    scenario: str
    seed: int
    duration_s: float
    arms: Mapping[str, ArmResult]
    phases: tuple[tuple[float, str], ...] = ()
    overload_end_s: Optional[float] = None
    """When the scenario's overload ends (None: it marks no end)."""

    def demand_per_s(self) -> Optional[float]:
        """The demand after the overload: the highest goodput any arm of the run has over
        the arrival window's last 2 s (with no limit left, every arm serves all of it; None
        without an end, or when the buckets do not fit whole seconds)."""
        if self.overload_end_s is None:
            return None
        best = 0.0
        for arm in self.arms.values():
            width, per_second = _bucket_seconds(arm)
            if not per_second:
                return None
            end = round(self.duration_s / width)  # the arrival window's last bucket, exclusive
            tail = arm.timeline["goodput"][max(0, end - 2 * per_second) : end]
            best = max(best, sum(tail) / len(tail)) if tail else best
        return best or None

    def recovery(self, name: str) -> Optional[RecoveryFigures]:
        """``name``'s goodput in each of the first seconds after the overload ends, as a share
        of :meth:`demand_per_s`, its successes from 1 s to 4 s against the default's, and its
        errors after the end (None when the scenario marks no end)."""
        demand = self.demand_per_s()
        if demand is None or self.overload_end_s is None:
            return None
        from backpressure.sim.arms import default_name

        def seconds(arm: ArmResult) -> tuple[list[float], int]:
            width, per_second = _bucket_seconds(arm)
            first = round(self.overload_end_s / width) if self.overload_end_s else 0
            goodput, errors = arm.timeline["goodput"], arm.timeline["errors"]
            each = [
                sum(goodput[first + k * per_second : first + (k + 1) * per_second]) * width
                for k in range(RECOVERY_SECONDS)
            ]
            return each, round(sum(errors[first:]) * width)

        each, errors_after = seconds(self.arms[name])
        later = round(sum(each[1:]))
        default = self.arms.get(default_name())
        base = round(sum(seconds(default)[0][1:])) if default is not None else 0
        return RecoveryFigures(
            tuple(second / demand for second in each),
            later,
            later / base if base else None,
            errors_after,
        )

    def to_json(self) -> dict[str, Any]:
        """``{"scenario", "seed", ARMS_KEY: {NAME: {...}}, "details": {NAME: {...}}}``
        (:data:`~backpressure.workload.arms.ARMS_KEY`)."""
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            ARMS_KEY: {name: arm.summary() for name, arm in self.arms.items()},
            "details": {name: arm.details() for name, arm in self.arms.items()},
        }


def _bucket_seconds(arm: ArmResult) -> tuple[float, int]:
    """The timeline's bucket width and how many buckets make one second (0: not whole)."""
    times = arm.timeline["t"]
    width = times[1] - times[0] if len(times) > 1 else 1.0
    per_second = round(1.0 / width)
    return width, per_second if abs(per_second * width - 1.0) < 1e-9 else 0


def phase_goodput(
    scenario: Scenario, timeline: Mapping[str, Sequence[float]]
) -> tuple[PhaseGoodput, ...]:
    """Goodput per phase mark, from ``scenario.settle_s`` after the mark to the next one."""
    width = scenario.bucket_s
    marks = list(scenario.phases)
    phases = []
    goodput, capacity, offered = timeline["goodput"], timeline["capacity"], timeline["offered"]
    for number, (start, label) in enumerate(marks):
        end = marks[number + 1][0] if number + 1 < len(marks) else scenario.duration_s
        begin = start + scenario.settle_s if start + scenario.settle_s < end else start
        first = math.ceil(begin / width - 1e-9)
        last = math.floor(end / width + 1e-9)  # exclusive
        chosen = range(first, min(last, len(goodput)))
        if not chosen:
            continue
        count = len(chosen)
        phases.append(
            PhaseGoodput(
                label=label,
                start_s=round(first * width, 6),
                end_s=round(chosen[-1] * width + width, 6),
                goodput_per_s=sum(goodput[i] for i in chosen) / count,
                capacity_per_s=sum(capacity[i] for i in chosen) / count,
                offered_per_s=sum(offered[i] for i in chosen) / count,
            )
        )
    return tuple(phases)


def run_one(
    scenario: Scenario,
    arm: SimArm,
    seed: int,
    progress: Optional[Callable[[float], None]] = None,
) -> ArmResult:
    """Simulate ``scenario`` under one arm and summarise it."""
    started = time.perf_counter()
    data = simulate(scenario, arm, seed, progress)
    wall = time.perf_counter() - started
    width = scenario.bucket_s
    timeline = {
        "t": [round(i * width, 6) for i in range(len(data.timeline_ok))],
        "offered": [n / width for n in data.timeline_offered],
        "goodput": [n / width for n in data.timeline_ok],
        "errors": [n / width for n in data.timeline_errors],
        "received": [n / width for n in data.timeline_received],
        "rejected": [n / width for n in data.timeline_rejected],
        "capacity": list(data.capacity),
    }
    skipped = data.ops - data.issued
    recovery: Optional[float] = None
    if scenario.overload_end_s is not None:
        end = scenario.overload_end_s
        last_error = max(
            (i for i, n in enumerate(data.timeline_errors) if n and (i + 1) * width > end),
            default=None,
        )
        recovery = 0.0 if last_error is None else round((last_error + 1) * width - end, 6)
    return ArmResult(
        name=arm.name,
        description=arm.description,
        ops=data.ops,
        app_errors=data.errors,
        physical_min_errors=data.physical_min_errors,
        physical_exact=data.physical_exact,
        server_attempts=data.server_attempts,
        attempts_per_op=data.server_attempts / data.ops if data.ops else 0.0,
        goodput_per_s=data.successes / scenario.duration_s,
        p50_ms=percentile(data.latencies_ms, 50),
        p99_ms=percentile(data.latencies_ms, 99),
        issued=data.ops - skipped,
        server_rejected=data.server_rejected,
        server_work=data.server_work,
        connections_refused=data.connections_refused,
        local_waits=data.local_waits,
        error_reasons=dict(sorted(data.error_reasons.items())),
        timeline=timeline,
        recovery_s=recovery,
        wall_s=wall,
        floor_fraction=data.floor_fraction,
        client_successes=tuple(data.client_successes),
        phase_goodput=phase_goodput(scenario, timeline),
        local_refusals=data.error_reasons.get(REFUSED, 0),
        duration_s=scenario.duration_s,
        critical_ops=data.critical_ops,
        critical_errors=data.critical_errors,
        sheddable_ops=data.sheddable_ops,
        sheddable_errors=data.sheddable_errors,
    )


def run(
    scenario: Union[Scenario, str],
    arms: Sequence[ArmLike] = ("no-retries", "current", "draft"),
    seed: int = 0,
    *,
    progress: Optional[Callable[[float], None]] = None,
) -> Result:
    """Run ``scenario`` (a Scenario or a scenario name) once per arm, with ``seed``.

    Every arm sees the same arrivals (same seed).  ``progress(simulated_seconds)`` is called
    as the runs advance.  Deterministic: the same arguments give the same result.

    Raises:
        ValueError: an unknown scenario or arm name, or duplicate arm names.
    """
    if isinstance(scenario, str):
        from backpressure.sim.scenarios import scenario as named

        scenario = named(scenario)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    resolved = resolve_all(arms)
    results = {arm.name: run_one(scenario, arm, seed, progress) for arm in resolved}
    return Result(
        scenario=scenario.name,
        seed=seed,
        duration_s=scenario.duration_s,
        arms=results,
        phases=scenario.phases,
        overload_end_s=scenario.overload_end_s,
    )
