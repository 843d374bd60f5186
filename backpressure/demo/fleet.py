"""The demo's fleet scenario: K client processes share the rate-limited replica set.

It reuses the fleet benchmark (:mod:`backpressure.bench.fleet`): K spawned processes, each with
its own client and T threads in a closed loop (50% ``find_one``, 50% ``insert_one``, every
operation under ``pymongo.timeout``), while the primary's rate limit steps through the capacities.
Every arm runs the same plan on the same server, one after another, the default's first
(read when the demo runs). The table and the figure put each arm next to the physical limit:
a closed loop of N workers with deadline D against capacity C loses no operation while
N / C <= D, and loses at least 1 - C * D / N of them otherwise.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Optional, TextIO

from backpressure.bench.fleet import (
    QUICK,
    FleetPlan,
    FleetRun,
    default_policy_name,
    fleet_arms,
    run_arm_fleet,
)
from backpressure.workload import ARMS
from backpressure.workload.arms import ARMS_KEY, arm_label
from backpressure.workload.remote import deployment_factory, deployment_label
from backpressure.workload.report import (
    format_table,
    machine_info,
    progress_bar,
    quiet_backpressure_logs,
    write_json,
)
from backpressure.workload.server import ServerFactory, embedded_server

__all__ = [
    "FLEET_HEADERS",
    "PHYSICAL_LIMIT",
    "fleet_plan",
    "fleet_rows",
    "physical_limit",
    "run_fleet_demo",
]

FLEET_HEADERS = (
    "arm",
    "ops",
    "app errors",
    "att/op",
    "Jain",
    "goodput/C",
    "p99 ms",
    "refused/s",
)

PHYSICAL_LIMIT = "physical limit"
"""The table row of the best any arm could do."""


def fleet_plan(args: argparse.Namespace) -> FleetPlan:
    """The fleet plan from the command line; ``--quick``: the fleet benchmark's quick plan with
    ``--deadline``.

    Raises:
        ValueError: the options make no valid plan (the command line checks them first).
    """
    if args.quick:
        return replace(QUICK, deadline_s=args.deadline)
    return FleetPlan(
        processes=args.processes,
        threads=8 if args.threads is None else args.threads,
        rates=tuple(args.rates),
        step_s=args.step,
        deadline_s=args.deadline,
        settle_s=args.settle,
        keys=200,
    )


def physical_limit(plan: FleetPlan) -> dict[str, Any]:
    """The best any arm could do on ``plan``: per step, the fewest app errors a closed loop
    of N workers with deadline D can have against capacity C (none while N / C <= D), goodput
    equal to C, one attempt per operation."""
    workers = plan.processes * plan.threads
    floors = [max(0.0, 1.0 - rate * plan.deadline_s / workers) for rate in plan.rates]
    return {
        "error_fraction_by_step": floors,
        "error_fraction": max(floors),
        "attempts_per_op": 1.0,
        "goodput_share": 1.0,
        "workers_over_capacity_s": [workers / rate for rate in plan.rates],
    }


def _goodput(shares: Sequence[float]) -> str:
    """Goodput per step as a share of capacity: ``100/99/100%``."""
    return "/".join(f"{100 * share:.0f}" for share in shares) + "%"


def fleet_rows(runs: Sequence[FleetRun], plan: FleetPlan) -> list[list[str]]:
    """Table rows (FLEET_HEADERS order): the runs as given, then the physical limit."""
    rows = []
    for run in runs:
        refusals = run.refusals_per_s
        rows.append(
            [
                arm_label(run.arm),
                f"{run.operations:,}",
                f"{100 * run.error_fraction:.1f}% ({run.app_errors:,})",
                f"{run.attempts_per_op:.2f}",
                f"{run.jain:.2f}",
                _goodput([phase.share for phase in run.phases]),
                "-" if run.p99_ms is None else f"{run.p99_ms:,.0f}",
                "-" if refusals is None else f"{refusals:,.0f}",
            ]
        )
    limit = physical_limit(plan)
    rows.append(
        [
            PHYSICAL_LIMIT,
            "-",
            f"{100 * limit['error_fraction']:.1f}%",
            "1.00",
            "1.00",
            _goodput([1.0] * len(plan.rates)),
            f"<={1000 * plan.deadline_s:,.0f}",
            "-",
        ]
    )
    return rows


def run_fleet_demo(
    args: argparse.Namespace,
    names: Sequence[str],
    *,
    server_factory: Optional[ServerFactory] = None,
    out: TextIO = sys.stdout,
    show_bar: bool = False,
) -> dict[str, Any]:
    """Run every arm in ``names`` (the default's first) through the fleet plan; print the
    table, write ``demo.json`` and ``demo.png`` under ``args.output`` and return the report."""
    from backpressure.demo.chart import draw_fleet_chart

    plan = fleet_plan(args)
    runnable = fleet_arms([name for name in names if ARMS[name].unavailable() is None])
    skipped = {name: ARMS[name].unavailable() for name in names if name not in runnable}
    factory = server_factory or deployment_factory(
        args, lambda: embedded_server(members=args.members)
    )
    runs: list[FleetRun] = []
    started = time.perf_counter()
    bar = progress_bar(
        plan.duration_s * len(runnable),
        desc="demo",
        disabled=not show_bar,
        counter="{n:.0f}/{total:.0f} s ",
    )
    try:
        with quiet_backpressure_logs(), factory() as server:
            for name in runnable:
                bar.set_postfix_str(name)
                runs.append(run_arm_fleet(server, name, plan))
                bar.update(plan.duration_s)
    finally:
        bar.close()
    elapsed = time.perf_counter() - started

    out_dir: Path = args.output
    limit = physical_limit(plan)
    chart = draw_fleet_chart(runs, plan, limit, out_dir / "demo.png")
    report: dict[str, Any] = {
        "tool": "backpressure.demo",
        "scenario": "fleet",
        "deployment": deployment_label(args),
        "machine": machine_info(),
        "wall_seconds": elapsed,
        "default_policy": default_policy_name(),
        "plan": asdict(plan),
        "members": args.members,
        ARMS_KEY: [run.arm for run in runs],
        "runs": {run.arm: run.to_dict() for run in runs},
        "physical_limit": limit,
        "unavailable": skipped,
        "chart": str(chart),
    }
    json_path = out_dir / "demo.json"
    write_json(json_path, report)

    where = "the embedded replica set" if args.uri is None else deployment_label(args)
    print(textwrap.fill(_describe(plan, where), width=100), file=out)
    print(format_table(FLEET_HEADERS, fleet_rows(runs, plan)), file=out)
    for name, reason in skipped.items():
        print(f"{name}: not run ({reason})", file=out)
    print(textwrap.fill(_legend(plan), width=100), file=out)
    print(f"JSON:  {json_path}", file=out)
    print(f"chart: {chart}", file=out)
    print(f"wall time {elapsed:.1f} s", file=out)
    return report


def _describe(plan: FleetPlan, where: str = "the embedded replica set") -> str:
    """One paragraph describing the run (against ``where``)."""
    steps = " -> ".join(f"{rate:g}" for rate in plan.rates)
    workers = plan.processes * plan.threads
    return (
        f"Fleet: {plan.processes} client processes x {plan.threads} threads ({workers} closed "
        f"loops, each with its own client per process) share {where}; "
        f"50% find_one, 50% insert_one, each under pymongo.timeout({plan.deadline_s:g}). "
        f"Capacity {steps} ops/s, {plan.step_s:g} s per step. Every arm runs the same plan, "
        f"one after another; the default, {default_policy_name()}, runs first."
    )


def _legend(plan: FleetPlan) -> str:
    """Explain the columns."""
    workers = plan.processes * plan.threads
    return (
        "app errors: operations that raised (share of ops). att/op: workload commands the "
        "servers received per operation. Jain: fairness of the processes' successes (1 = "
        "equal). p99: latency of successful operations. goodput/C: successes per second "
        "over capacity in each step in turn, from "
        f"{plan.settle_s:g} s after it (above 100%: the limiter's burst). refused/s: local "
        f"refusals per second (- = the arm has none). {PHYSICAL_LIMIT}: the best any arm "
        f"could do: {workers} workers over the lowest capacity is "
        f"{workers / min(plan.rates):.2f} s against a {plan.deadline_s:g} s deadline, so at "
        f"least {100 * physical_limit(plan)['error_fraction']:.1f}% of the operations fail, "
        "at 1 attempt each and goodput = C."
    )
