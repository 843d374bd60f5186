"""Check the simulator against real runs on the embedded server, side by side.

``python -m backpressure.bench.agreement`` runs the benchmark's overload scenarios (its plan,
:mod:`backpressure.workload.plan`: closed loop with 32, 128 and 512 workers, open loop at 1.5x,
3x and 10x C, a burst, one hot member) with real pymongo clients against the embedded replica
set (in a subprocess), then the same scenarios in the simulator, and prints app errors and
server attempts per operation of both.

The simulator's client model needs one figure from the real machine: the client time per
attempt when the client is the bottleneck (the workload's threads share one GIL).  It is measured
first, with 32 threads on the same server, with the limiter off (successful attempts) and at
1 op/s (rejected attempts), and the mean of the two is used.  Needs the ``server`` and ``sim``
extras.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from backpressure.bench.fleet import FleetRun
from backpressure.sim.model import Scenario
from backpressure.sim.runner import run
from backpressure.sim.scenarios import (
    BenchShape,
    bench_closed,
    bench_hot_member,
    bench_open,
)
from backpressure.sim.scenarios import scenario as sim_scenario
from backpressure.workload import ARMS, RunResult, WorkloadConfig, run_arm
from backpressure.workload.arms import ARM_KEY, arm_label, has_native_backpressure, to_file
from backpressure.workload.driver import LoadTarget, run_closed_loop
from backpressure.workload.plan import HOT_MEMBER, OverloadPlan

__all__ = [
    "Agreement",
    "compare",
    "criticality_agreement_markdown",
    "format_agreement",
    "main",
    "measure_client_cpu",
]

ARM_NAMES: tuple[str, ...] = ("no-retries", "current", "draft")


@dataclass(frozen=True)
class Agreement:
    """One (scenario, arm): the real run and the simulated one."""

    scenario: str
    arm: str
    operations_real: int
    operations_sim: int
    real_app_errors: int
    sim_app_errors: int
    real_attempts_per_op: float
    sim_attempts_per_op: float

    @property
    def real_error_fraction(self) -> float:
        """Real app errors per operation."""
        return self.real_app_errors / self.operations_real if self.operations_real else 0.0

    @property
    def sim_error_fraction(self) -> float:
        """Simulated app errors per operation."""
        return self.sim_app_errors / self.operations_sim if self.operations_sim else 0.0

    @property
    def errors_difference(self) -> Optional[float]:
        """(sim - real) / real app errors per operation (None when real had none)."""
        if self.real_app_errors == 0:
            return None
        return (self.sim_error_fraction - self.real_error_fraction) / self.real_error_fraction

    @property
    def attempts_difference(self) -> Optional[float]:
        """(sim - real) / real attempts per operation."""
        if self.real_attempts_per_op == 0:
            return None
        return (self.sim_attempts_per_op - self.real_attempts_per_op) / self.real_attempts_per_op


def shape_of(plan: OverloadPlan, cpu_ms_per_attempt: float) -> BenchShape:
    """The simulator's model of the benchmark ``plan`` on this machine."""
    return BenchShape(
        capacity=plan.capacity,
        open_capacity=plan.open_capacity,
        open_threads=plan.open_threads,
        warmup=plan.warmup,
        sustained=plan.sustained,
        burst_load=plan.burst_load,
        burst=plan.burst,
        recovery=plan.recovery,
        base_load=plan.base_load,
        closed_seconds=plan.closed_seconds,
        hot_capacity=plan.hot_capacity,
        hot_workers=plan.hot_workers,
        hot_seconds=plan.hot_seconds,
        allowed_wait=plan.allowed_wait,
        burst_seconds=plan.burst_seconds,
        cpu_ms_per_attempt=cpu_ms_per_attempt,
    )


def measure_client_cpu(
    target: LoadTarget, operations: int = 2000, threads: int = 32
) -> tuple[float, float]:
    """Client time per attempt in ms when the client is the bottleneck: (admitted, rejected).

    ``threads`` threads of this process share ``operations`` operations (half find_one, half
    update_one) with the limiter off, then with it at 1 op/s (nearly every attempt rejected).
    Wall time per attempt is what the simulator's serialised client CPU stands for: the work of
    one attempt plus the GIL hand-offs between threads.
    """
    options: dict[str, Any] = {"maxAdaptiveRetries": 0} if has_native_backpressure() else {}
    client: MongoClient[dict[str, Any]] = MongoClient(target.uri, maxPoolSize=threads, **options)

    def timed() -> float:
        collection = client.backpressure_calibration.ops
        counter = iter(range(operations))
        lock = threading.Lock()

        def worker() -> None:
            while True:
                with lock:
                    index = next(counter, None)
                if index is None:
                    return
                with contextlib.suppress(PyMongoError):
                    if index % 2:
                        collection.find_one({"_id": 0})
                    else:
                        collection.update_one({"_id": 0}, {"$inc": {"n": 1}})

        workers = [threading.Thread(target=worker) for _ in range(threads)]
        started = time.perf_counter()
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        return (time.perf_counter() - started) / operations * 1000.0

    try:
        collection = client.backpressure_calibration.ops
        collection.drop()
        collection.insert_one({"_id": 0, "n": 0})
        target.disable_rate_limit()
        for _ in range(50):  # warm-up: connections, caches
            collection.find_one({"_id": 0})
        admitted = timed()
        target.set_rate_limit(1.0, burst_seconds=1.0)
        rejected = timed()
    finally:
        target.disable_rate_limit()
        client.close()
    return admitted, rejected


def _real(target: LoadTarget, plan: OverloadPlan, name: str, arm: str) -> RunResult:
    """Run one benchmark scenario for real, exactly as ``run_overload`` does."""

    def config(capacity: float, threads: int, read_fraction: float = 0.5) -> WorkloadConfig:
        return WorkloadConfig(
            capacity=capacity,
            threads=threads,
            read_fraction=read_fraction,
            burst_seconds=plan.burst_seconds,
            allowed_wait=plan.allowed_wait,
        )

    chosen = ARMS[arm]
    if name.startswith("bench-closed-"):
        workers = int(name.removeprefix("bench-closed-").removesuffix("w"))
        return run_closed_loop(
            target, chosen, workers, plan.closed_seconds, config(plan.capacity, workers)
        )
    if name == "bench-hot-member":
        return run_closed_loop(
            target,
            chosen,
            plan.hot_workers,
            plan.hot_seconds,
            config(plan.hot_capacity, plan.hot_workers, read_fraction=1.0),
            read_preference="secondary",
            limited_member=HOT_MEMBER,
        )
    shapes = plan.open_shapes()
    if name.startswith("bench-burst-"):
        phases = shapes[f"burst {plan.burst_load:g}x {plan.burst:g}s"]
    else:
        load = float(name.removeprefix("bench-open-").removesuffix("x"))
        phases = shapes[f"open {load:g}x"]
    return run_arm(target, chosen, phases, config(plan.open_capacity, plan.open_threads))


def simulated_scenarios(shape: BenchShape, plan: OverloadPlan) -> list[Scenario]:
    """The simulator's version of every benchmark scenario."""
    built = [bench_closed(workers, shape) for workers in plan.closed_workers]
    built.extend(bench_open(load, shape) for load in plan.open_loads)
    built.append(bench_open(plan.burst_load, shape, burst=True))
    built.append(bench_hot_member(shape))
    return built


def compare(
    target: LoadTarget,
    *,
    plan: Optional[OverloadPlan] = None,
    arms: Sequence[str] = ARM_NAMES,
    scenarios: Optional[Sequence[str]] = None,
    seed: int = 1,
    cpu_ms_per_attempt: Optional[float] = None,
) -> list[Agreement]:
    """Run each benchmark scenario (or those named) for real and in the simulator."""
    plan = OverloadPlan() if plan is None else plan
    if cpu_ms_per_attempt is None:
        admitted, rejected = measure_client_cpu(target)
        cpu_ms_per_attempt = (admitted + rejected) / 2
    shape = shape_of(plan, cpu_ms_per_attempt)
    results: list[Agreement] = []
    for scenario in simulated_scenarios(shape, plan):
        if scenarios is not None and scenario.name not in scenarios:
            continue
        simulated = run(scenario, list(arms), seed=seed)
        for name in arms:
            real = _real(target, plan, scenario.name, name)
            sim = simulated.arms[name]
            results.append(
                Agreement(
                    scenario=scenario.name,
                    arm=name,
                    operations_real=real.offered,
                    operations_sim=sim.ops,
                    real_app_errors=real.app_errors,
                    sim_app_errors=sim.app_errors,
                    real_attempts_per_op=real.server_received / real.offered
                    if real.offered
                    else 0.0,
                    sim_attempts_per_op=sim.attempts_per_op,
                )
            )
    return results


def _percent(value: Optional[float]) -> str:
    """A signed percentage cell."""
    return "-" if value is None else f"{value * 100:+.1f}%"


def format_agreement(rows: Sequence[Agreement]) -> str:
    """A markdown table: real and simulated figures side by side."""
    lines = [
        "| scenario | arm | ops real / sim | app errors real / sim | diff "
        "| attempts/op real / sim | diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.scenario} | {row.arm} | {row.operations_real:,} / {row.operations_sim:,} | "
            f"{row.real_error_fraction:.1%} / {row.sim_error_fraction:.1%} | "
            f"{_percent(row.errors_difference)} | "
            f"{row.real_attempts_per_op:.2f} / {row.sim_attempts_per_op:.2f} | "
            f"{_percent(row.attempts_difference)} |"
        )
    return "\n".join(lines)


FLEET_SCENARIOS = {"8x8": "closed-fleet", "4x16": "closed-fleet-4x16"}
"""The simulator's closed-loop fleet scenario of each real fleet shape."""


def _sim_arm(real: str) -> str:
    """The simulated arm standing for a real one (stock pymongo's loop is ``current``)."""
    return "current" if real == "pymongo-native" else real


def _relative(sim: float, real: float) -> str:
    """(sim - real) / real as a signed percentage cell ("-" when real is 0)."""
    return "-" if real == 0 else f"{(sim - real) / real * 100:+.0f}%"


def fleet_agreement_markdown(fleet_report: dict[str, Any], seed: int = 1) -> str:
    """The real fleet benchmark (``fleet.json``) beside the simulator's closed-loop fleets.

    Runs the simulator's ``closed-fleet`` scenario of every shape in ``fleet_report`` with
    ``seed`` and returns a Markdown table: app errors, attempts per operation and Jain's index,
    real and simulated, for every arm of the real run in its order (the default's first).

    """
    lines = [
        "| shape | arm (real) | app errors real / sim | diff | attempts/op real / sim | diff "
        "| Jain real / sim |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape in fleet_report["fleet"]:
        runs = [FleetRun.from_dict(run) for run in shape["runs"]]
        if not runs:
            continue
        name = runs[0].shape
        wanted = sorted({_sim_arm(run.arm) for run in runs})
        result = run(sim_scenario(FLEET_SCENARIOS[name]), wanted, seed)
        for real in runs:
            sim = result.arms[_sim_arm(real.arm)]
            sim_jain = sim.jain
            lines.append(
                f"| {name} | {arm_label(real.arm)} | {real.error_fraction:.1%} / "
                f"{sim.error_fraction:.1%} | {_relative(sim.error_fraction, real.error_fraction)} "
                f"| {real.attempts_per_op:.2f} / {sim.attempts_per_op:.2f} | "
                f"{_relative(sim.attempts_per_op, real.attempts_per_op)} | "
                f"{real.jain:.3f} / {'-' if sim_jain is None else f'{sim_jain:.3f}'} |"
            )
    return "\n".join(lines)


def criticality_agreement_markdown(
    reports: Sequence[dict[str, Any]], seeds: Sequence[int] = (1, 2)
) -> str:
    """The real criticality runs (``criticality-run<N>.json``) beside the simulator's.

    Simulates the reports' plan (:func:`backpressure.bench.criticality.simulated`; the plans
    must be the same) with every seed of ``seeds``, once per simulated arm, and returns a
    Markdown table, one row per arm of the first report in its order (the default's first):
    critical errors, sheddable errors and attempts per operation of every real run, then of
    every simulated seed.
    """
    from backpressure.bench.criticality import plan_from_dict, simulated

    plans = [plan_from_dict(report["plan"]) for report in reports]
    if any(plan != plans[0] for plan in plans):
        raise ValueError("the criticality reports ran different plans")
    scenario = simulated(plans[0])
    runs = [{row[ARM_KEY]: row for row in report["runs"]} for report in reports]
    names = [row[ARM_KEY] for row in reports[0]["runs"]]
    simulated_runs = {
        arm: [run(scenario, [arm], seed).arms[arm] for seed in seeds]
        for arm in dict.fromkeys(_sim_arm(name) for name in names)
    }

    def cell(real: list[float], sim: list[float], fmt: str) -> str:
        return (
            ", ".join(format(v, fmt) for v in real) + " / " + ", ".join(format(v, fmt) for v in sim)
        )

    lines = [
        "| arm (real) | critical errors real / sim | sheddable errors real / sim "
        "| attempts/op real / sim |",
        "|---|---|---|---|",
    ]
    for name in names:
        real = [rows[name] for rows in runs]
        sim = simulated_runs[_sim_arm(name)]
        cells = [
            cell(
                [r["critical_error_rate"] for r in real],
                [p.critical_errors / p.critical_ops for p in sim],
                ".1%",
            ),
            cell(
                [r["sheddable_error_rate"] for r in real],
                [p.sheddable_errors / p.sheddable_ops for p in sim],
                ".0%",
            ),
            cell([r["attempts_per_op"] for r in real], [p.attempts_per_op for p in sim], ".2f"),
        ]
        lines.append(f"| {arm_label(name)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the comparison and print it (and write it as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench.agreement",
        description="Simulator vs real runs on the embedded server, side by side.",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--arms", default=",".join(ARM_NAMES))
    parser.add_argument("--scenarios", help="comma-separated bench-* names (default: all)")
    parser.add_argument("--cpu-ms", type=float, help="client CPU per attempt (default: measure)")
    parser.add_argument("--json", type=Path, metavar="PATH")
    parser.add_argument(
        "--fleet",
        type=Path,
        metavar="FLEET_JSON",
        help="print the real fleet benchmark's results (fleet.json) beside the simulator's "
        "closed-loop fleets instead (no server needed)",
    )
    parser.add_argument(
        "--criticality",
        type=Path,
        nargs="+",
        metavar="CRITICALITY_JSON",
        help="print the real criticality runs (criticality-run<N>.json) beside the simulator's "
        "runs of their plan, seeds --seed and the ones after it, one per run (no server needed)",
    )
    args = parser.parse_args(argv)
    if args.criticality is not None:
        missing = [str(path) for path in args.criticality if not path.is_file()]
        if missing:
            parser.error(f"argument --criticality: no such file: {', '.join(missing)}")
        reports = [json.loads(path.read_text(encoding="utf-8")) for path in args.criticality]
        seeds = [args.seed + n for n in range(len(reports))]
        print(criticality_agreement_markdown(reports, seeds))
        return 0
    if args.fleet is not None:
        if not args.fleet.is_file():
            parser.error(f"argument --fleet: no such file: {args.fleet}")
        report = json.loads(args.fleet.read_text(encoding="utf-8"))
        print(fleet_agreement_markdown(report, seed=args.seed))
        return 0
    from backpressure.workload.server import embedded_server

    load_before = os.getloadavg()[0]
    with embedded_server() as target:
        if args.cpu_ms is None:
            admitted, rejected = measure_client_cpu(target)
            cpu = (admitted + rejected) / 2
            print(
                f"client CPU per attempt: {admitted:.3f} ms admitted, {rejected:.3f} ms rejected; "
                f"model uses {cpu:.3f} ms"
            )
        else:
            cpu = args.cpu_ms
        rows = compare(
            target,
            arms=[p.strip() for p in args.arms.split(",")],
            scenarios=None if args.scenarios is None else args.scenarios.split(","),
            seed=args.seed,
            cpu_ms_per_attempt=cpu,
        )
    print(format_agreement(rows))
    load_after = os.getloadavg()[0]
    print(f"load average (1 min): {load_before:.1f} before, {load_after:.1f} after")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "cpu_ms_per_attempt": cpu,
                    "load_average": [load_before, load_after],
                    "rows": [to_file(asdict(r)) for r in rows],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
