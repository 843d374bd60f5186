"""Overload benchmark: goodput, amplification and app-visible errors per policy and load level.

Each (policy, load) pair runs two shapes with the demo's workload driver: *sustained* (a short
warm-up below C, then ``load x C`` for a few seconds) and *bursty* (below C, a ~3 s burst at
``load x C``, then a recovery below C).  Goodput of a sustained run is measured after the
overload's (or burst's) first second, when the limiter's burst allowance is spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

from backpressure.workload import POLICIES, Phase, RunResult, WorkloadConfig, run_policy
from backpressure.workload.driver import LoadTarget
from backpressure.workload.metrics import amplification, rate_per_second

__all__ = [
    "Goal",
    "OverloadPlan",
    "OverloadRun",
    "evaluate_goals",
    "run_overload",
    "steady_goodput",
]


@dataclass(frozen=True)
class OverloadPlan:
    """Durations and loads of the overload benchmark."""

    loads: tuple[float, ...] = (1.5, 3.0, 10.0)
    warmup: float = 1.0
    """Seconds below C before the sustained overload and the burst."""
    sustained: float = 5.0
    burst: float = 3.0
    recovery: float = 4.0
    base_load: float = 0.5
    """Load of the warm-up and recovery phases, x C."""
    steady_skip: float = 2.0
    """Seconds at the start of the overload left out of the steady-state ratios."""

    def shapes(self, load: float) -> dict[str, list[Phase]]:
        """The phases of each shape at ``load``."""
        return {
            "sustained": [
                Phase("warmup", self.base_load, self.warmup),
                Phase("overload", load, self.sustained),
            ],
            "bursty": [
                Phase("steady", self.base_load, self.warmup),
                Phase("burst", load, self.burst),
                Phase("recovery", self.base_load, self.recovery),
            ],
        }

    def seconds_per_policy(self) -> float:
        """Planned seconds of load per policy."""
        per_load = sum(phase.duration for phases in self.shapes(1.0).values() for phase in phases)
        return per_load * len(self.loads)


@dataclass(frozen=True)
class OverloadRun:
    """One (policy, load, shape) run, summarised."""

    policy: str
    load: float
    shape: str
    offered_rate: float
    """Arrivals per second scheduled in the overload/burst phase."""
    goodput: float
    """Successes per second in the overload (or burst) phase after its first second."""
    goodput_vs_capacity: float
    app_errors: int
    """Operations that raised plus arrivals skipped (never sent), over the whole run."""
    raised: int
    skipped: int
    amplification: Optional[float]
    """Workload commands the server received per successful operation."""
    attempts_per_op: Optional[float]
    """Workload commands the server received per operation sent."""
    steady_amplification: Optional[float]
    """Attempts per success after the first ``steady_skip`` seconds of the overload (burst)."""
    steady_attempts_per_op: Optional[float]
    """Attempts per operation sent after the first ``steady_skip`` seconds of the overload."""
    latency_p99_ms: Optional[float]
    refused: Optional[int]
    result: RunResult


def _window(result: RunResult, phase: str, skip: float) -> list[int]:
    """Indexes of the timeline buckets inside ``phase`` after its first ``skip`` seconds."""
    window = result.phase(phase)
    lo = window.start + skip
    hi = window.start + window.duration
    times: list[float] = result.timeline["t"]
    width = times[1] - times[0] if len(times) > 1 else 1.0
    return [i for i, t in enumerate(times) if t >= lo - 1e-9 and t + width <= hi + 1e-9]


def steady_goodput(result: RunResult, phase: str, skip: float = 1.0) -> float:
    """Successes per second inside ``phase`` after its first ``skip`` seconds (timeline buckets)."""
    picked = _window(result, phase, skip)
    if not picked:
        return result.phase(phase).goodput
    times: list[float] = result.timeline["t"]
    width = times[1] - times[0] if len(times) > 1 else 1.0
    successes = sum(result.timeline["successes"][i] for i in picked)
    return rate_per_second(successes, len(picked) * width)


def steady_ratio(
    result: RunResult, phase: str, numerator: str, denominator: str, skip: float
) -> Optional[float]:
    """Ratio of two timeline series summed over ``phase`` after its first ``skip`` seconds."""
    picked = _window(result, phase, skip)
    return (
        amplification(
            sum(result.timeline[numerator][i] for i in picked),
            sum(result.timeline[denominator][i] for i in picked),
        )
        if picked
        else None
    )


def _summarize(
    result: RunResult, load: float, shape: str, capacity: float, steady_skip: float
) -> OverloadRun:
    """Summarise one run."""
    phase = "overload" if shape == "sustained" else "burst"
    goodput = steady_goodput(result, phase)
    return OverloadRun(
        policy=result.policy,
        load=load,
        shape=shape,
        offered_rate=load * capacity,
        goodput=goodput,
        goodput_vs_capacity=goodput / capacity,
        app_errors=result.errors + result.skipped,
        raised=result.errors,
        skipped=result.skipped,
        amplification=result.amplification,
        attempts_per_op=result.attempts_per_issued,
        steady_amplification=steady_ratio(result, phase, "attempts", "successes", steady_skip),
        steady_attempts_per_op=steady_ratio(result, phase, "attempts", "issued", steady_skip),
        latency_p99_ms=result.latency_p99_ms,
        refused=result.refused,
        result=result,
    )


def run_overload(
    target: LoadTarget,
    policies: Sequence[str],
    plan: OverloadPlan,
    config: WorkloadConfig,
    *,
    progress: Callable[[float], None] = lambda _: None,
) -> list[OverloadRun]:
    """Run every (policy, load, shape) and return the summaries."""
    runs = []
    for name in policies:
        for load in plan.loads:
            for shape, phases in plan.shapes(load).items():
                result = run_policy(target, POLICIES[name], phases, config, progress=progress)
                runs.append(_summarize(result, load, shape, config.capacity, plan.steady_skip))
    return runs


@dataclass(frozen=True)
class Goal:
    """One benchmark goal, its measurement and whether it was met (None: not measured)."""

    goal: str
    measured: str
    met: Optional[bool]

    def to_dict(self) -> dict[str, Any]:
        """Render as JSON-ready data."""
        return {"goal": self.goal, "measured": self.measured, "met": self.met}


def _find(
    runs: Sequence[OverloadRun], policy: str, load: float, shape: str
) -> Optional[OverloadRun]:
    """The run of (policy, load, shape), if it was measured."""
    for run in runs:
        if run.policy == policy and run.load == load and run.shape == shape:
            return run
    return None


def _ratio(value: Optional[float]) -> str:
    """Format a ratio."""
    return "-" if value is None else f"{value:.2f}"


def evaluate_goals(runs: Sequence[OverloadRun], capacity: float, ours: str = "draft") -> list[Goal]:
    """Check the issue's goals for our default preset against the measured runs."""
    goals: list[Goal] = []
    sustained = sorted(
        (r for r in runs if r.policy == ours and r.shape == "sustained"), key=lambda r: r.load
    )
    if sustained:
        parts = ", ".join(
            f"{r.load:g}x: {r.goodput:,.1f}/s ({r.goodput_vs_capacity:.0%})" for r in sustained
        )
        goals.append(
            Goal(
                f"{ours}: goodput >= 95% of C ({capacity:g}/s) at every sustained overload level",
                parts,
                all(r.goodput_vs_capacity >= 0.95 for r in sustained),
            )
        )
    else:
        goals.append(Goal(f"{ours}: goodput >= 95% of C at every overload level", "not run", None))

    ten = _find(runs, ours, 10.0, "sustained")
    if ten is not None:
        goals.append(
            Goal(
                f"{ours}: amplification (server-received attempts per successful op) <= 1.1, "
                "sustained 10x",
                f"whole run {_ratio(ten.amplification)}, steady state "
                f"{_ratio(ten.steady_amplification)} (open-loop arrivals at 10x C make >= 10 "
                "first attempts per success whatever the client does)",
                ten.steady_amplification is not None and ten.steady_amplification <= 1.1,
            )
        )
        goals.append(
            Goal(
                f"{ours}: retry overhead (attempts per operation sent) <= 1.1, sustained 10x",
                f"steady state {_ratio(ten.steady_attempts_per_op)}; whole run "
                f"{_ratio(ten.attempts_per_op)} (includes spending the budget's initial tokens)",
                ten.steady_attempts_per_op is not None and ten.steady_attempts_per_op <= 1.1,
            )
        )
    else:
        goals.append(Goal(f"{ours}: amplification <= 1.1 under sustained 10x", "not run", None))

    ours_burst = _find(runs, ours, 3.0, "bursty")
    base_burst = _find(runs, "no-retries", 3.0, "bursty")
    if ours_burst is not None and base_burst is not None:
        if base_burst.app_errors:
            reduction = 1.0 - ours_burst.app_errors / base_burst.app_errors
            measured = (
                f"{ours_burst.app_errors:,} vs {base_burst.app_errors:,} app-visible errors: "
                f"{reduction:.1%} fewer"
            )
            met: Optional[bool] = reduction >= 0.99
        else:
            measured, met = "no-retries saw no errors (no overload reached the app)", None
        goals.append(
            Goal(
                f"{ours}: >= 99% fewer app-visible errors than no-retries, 3 s burst at 3x",
                measured,
                met,
            )
        )
    else:
        goals.append(
            Goal(f"{ours}: >= 99% fewer errors than no-retries, 3x burst", "not run", None)
        )

    native = _find(runs, "pymongo-native", 10.0, "sustained")
    if ten is not None and native is not None:
        goals.append(
            Goal(
                f"{ours}: better amplification than pymongo's native policy, sustained 10x",
                f"attempts/success {_ratio(ten.amplification)} vs {_ratio(native.amplification)}"
                f"; attempts/op {_ratio(ten.attempts_per_op)} vs "
                f"{_ratio(native.attempts_per_op)} (whole run)",
                ten.amplification is not None
                and native.amplification is not None
                and ten.amplification < native.amplification,
            )
        )
    else:
        goals.append(
            Goal(f"{ours}: better amplification than pymongo native at 10x", "not run", None)
        )
    return goals
