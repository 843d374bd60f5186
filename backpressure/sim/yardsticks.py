"""``python -m backpressure.sim.yardsticks``: the lab's fleet, transient and fault scenarios.

Runs every arm (the default's first) through the simulator's yardstick scenarios with one
seed, and writes one Markdown file with a table per scenario and each goal marked met or not:

* ``closed-fleet`` (8 x 8) and ``closed-fleet-4x16``: capacity 200 -> 100 -> 300/s every 10 s,
  1 s deadline; goals: app errors <= 1%, <= 1.1 attempts/op, Jain >= 0.95, goodput >= 95% of
  capacity in every phase (from 2 s after each step);
* ``transient`` (3 rejections) and ``transient-1``: goodput after the x4 rise >= 98% of stock's
  (``current``), p99 <= stock's + 20 ms, no local refusal;
* ``faults`` (the real soak's schedule and shape): acked writes >= 98 % of ``current``'s and
  app errors <= ``current``'s on the same seeded fault schedule;
* ``fleet`` (10,000 sparse clients): <= 1.1 attempts/op, app errors <= 1.1 x the floor;
* ``retry-storm`` (800 closed-loop workers): errors against the closed-loop floor, refusals/s.

Example::

    python -m backpressure.sim.yardsticks --seed 1 --md bench/results/sim-fleet.md

Without SimPy (the ``sim`` extra) the command prints the ``MissingExtraError`` message and exits 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from backpressure.cli import add_seed_argument, name_list, run_cli
from backpressure.core.extras import require
from backpressure.sim.arms import available_arms, default_first, default_name, display_name
from backpressure.sim.model import ClosedLoop, Scenario
from backpressure.sim.scenarios import fault_schedule, scenario
from backpressure.workload.metrics import AFTER_FAULT_S, counts_by_fault

if TYPE_CHECKING:  # the runner needs SimPy: imported where it runs, so that --help needs none
    from backpressure.sim.runner import ArmResult, Result

__all__ = ["YARDSTICKS", "Goal", "acked_by_kind", "goals_for", "main", "run_yardsticks"]

STOCK = "current"
"""The arm that behaves as stock pymongo (>= 4.17) in the simulator."""


@dataclass(frozen=True)
class Goal:
    """One goal of one arm in one scenario."""

    name: str
    met: bool
    figure: str


GoalCheck = Callable[["ArmResult", "Result"], "list[Goal]"]


def _fleet_goals(arm: ArmResult, _result: Result) -> list[Goal]:
    """The closed-loop fleet's four goals."""
    goals = [
        Goal("errors <= 1%", arm.error_fraction <= 0.01, f"{100 * arm.error_fraction:.1f}%"),
        Goal("<= 1.1 attempts/op", arm.attempts_per_op <= 1.1, f"{arm.attempts_per_op:.2f}"),
    ]
    jain = arm.jain
    goals.append(Goal("Jain >= 0.95", jain is not None and jain >= 0.95, f"{jain or 0:.3f}"))
    shares = [phase.of_capacity or 0.0 for phase in arm.phase_goodput]
    worst = min(shares) if shares else 0.0
    goals.append(Goal("goodput >= 95% of C", worst >= 0.95, f"worst phase {100 * worst:.1f}%"))
    return goals


def _transient_goals(arm: ArmResult, result: Result) -> list[Goal]:
    """Against stock: goodput after the rise, p99, no refusal."""
    stock = result.arms.get(STOCK)
    if stock is None or not arm.phase_goodput or not stock.phase_goodput:
        return []
    mine, theirs = arm.phase_goodput[-1].goodput_per_s, stock.phase_goodput[-1].goodput_per_s
    share = mine / theirs if theirs else 0.0
    p99, stock_p99 = arm.p99_ms or 0.0, stock.p99_ms or 0.0
    return [
        Goal(">= 98% of stock's goodput after the rise", share >= 0.98, f"{100 * share:.1f}%"),
        Goal("p99 <= stock's + 20 ms", p99 <= stock_p99 + 20.0, f"{p99:.0f} vs {stock_p99:.0f}"),
        Goal("0 local refusals", arm.local_refusals == 0, f"{arm.local_refusals:,}"),
    ]


def _fault_goals(arm: ArmResult, result: Result) -> list[Goal]:
    """Acked writes >= 98 % of ``current``'s, app errors no worse than its."""
    stock = result.arms.get(STOCK)
    if stock is None:
        return []
    acked, stock_acked = arm.ops - arm.app_errors, stock.ops - stock.app_errors
    share = acked / stock_acked if stock_acked else 1.0
    return [
        Goal("acked >= 98% of current's", share >= 0.98, f"{share:.3f}"),
        Goal(
            "errors <= current's",
            arm.error_fraction <= stock.error_fraction,
            f"{100 * arm.error_fraction:.1f}% vs {100 * stock.error_fraction:.1f}%",
        ),
    ]


def _sparse_goals(arm: ArmResult, _result: Result) -> list[Goal]:
    """The sparse fleet: attempts/op and errors against the oracle's floor."""
    floor = arm.physical_min_errors
    ratio = arm.app_errors / floor if floor else (0.0 if arm.app_errors == 0 else 99.0)
    return [
        Goal("<= 1.1 attempts/op", arm.attempts_per_op <= 1.1, f"{arm.attempts_per_op:.2f}"),
        Goal("errors <= 1.1 x floor", ratio <= 1.1, f"{ratio:.2f}x"),
    ]


def acked_by_kind(
    goodput_per_s: Sequence[float], bucket_s: float, faults: Sequence[tuple[float, float, str, str]]
) -> dict[str, float]:
    """Successes from each fault's start to :data:`AFTER_FAULT_S` after its end, added up by
    kind, and the rest under ``"none"`` (whole buckets; ``faults`` as
    ``FaultSchedule.faults``)."""
    acked = [rate * bucket_s for rate in goodput_per_s]
    return counts_by_fault(acked, bucket_s, ((start, end, kind) for start, end, kind, _ in faults))


def _fault_kinds(result: Result, built: Scenario) -> list[str]:
    """The acks by fault kind of every arm against ``current``'s (the real soak's table)."""
    from backpressure.sim.report import ordered

    schedule = fault_schedule()
    kinds = sorted({kind for _, _, kind, _ in schedule.faults})
    counted = {
        arm.name: acked_by_kind(arm.timeline["goodput"], built.bucket_s, schedule.faults)
        for arm in ordered(result)
    }
    base = counted.get(STOCK)
    lines = [
        "",
        f"Successes by fault kind, from each fault's start to {AFTER_FAULT_S:g} s after its end "
        f"(`vs current`); `no fault`: the rest of the time. Closes, blocks and closed commits "
        "are not simulated (a network error is no pushback): their stretches run as no fault.",
        "",
        "| arm | " + " | ".join([*kinds, "no fault"]) + " |",
        "|" + "---|" * (len(kinds) + 2),
    ]
    for name, counts in counted.items():
        cells = []
        for kind in [*kinds, "none"]:
            value, reference = counts.get(kind, 0.0), 0.0 if base is None else base.get(kind, 0.0)
            ratio = f" ({value / reference:.3f})" if reference else ""
            cells.append(f"{value:,.0f}{ratio}")
        lines.append(f"| {display_name(name)} | " + " | ".join(cells) + " |")
    return lines


@dataclass(frozen=True)
class Yardstick:
    """A scenario of the lab, how its goodput is shown, and its goals."""

    name: str
    goodput_as: str
    goals: Optional[GoalCheck]
    note: str = ""
    table: Optional[Callable[[Result, Scenario], list[str]]] = None
    """More lines after the scenario's table (None: none)."""


YARDSTICKS: tuple[Yardstick, ...] = (
    Yardstick("closed-fleet", "capacity", _fleet_goals),
    Yardstick("closed-fleet-4x16", "capacity", _fleet_goals),
    Yardstick(
        "transient",
        "rate",
        _transient_goals,
        "Goodput in ops/s; the last column is the 6 s after the x4 rise (offered 400/s).",
    ),
    Yardstick("transient-1", "rate", _transient_goals),
    Yardstick(
        "faults",
        "rate",
        _fault_goals,
        "Goodput in ops/s per 12 s stretch, the real soak's rounds (each holds several faults).",
        _fault_kinds,
    ),
    Yardstick(
        "fleet",
        "capacity",
        _sparse_goals,
        "Open loop: the floor is the oracle's on the arrivals (the same for every arm).",
    ),
    Yardstick("retry-storm", "capacity", None),
)
"""The scenarios, in report order."""


def goals_for(yardstick: Yardstick, result: Result) -> dict[str, list[Goal]]:
    """Each arm's goals in ``result`` (empty when the scenario has none)."""
    if yardstick.goals is None:
        return {}
    return {name: yardstick.goals(arm, result) for name, arm in result.arms.items()}


def _goal_lines(yardstick: Yardstick, result: Result) -> list[str]:
    """One line per arm: every goal met or not."""
    from backpressure.sim.report import ordered

    goals = goals_for(yardstick, result)
    if not goals:
        return []
    lines = ["", "Goals:", ""]
    for arm in ordered(result):
        marks = ", ".join(
            f"{goal.name}: {'met' if goal.met else 'NOT met'} ({goal.figure})"
            for goal in goals[arm.name]
        )
        lines.append(f"- **{display_name(arm.name)}**: {marks}")
    return lines


def run_yardsticks(
    names: Sequence[str],
    arms: Sequence[str],
    seed: int,
    *,
    chart_dir: Optional[Path] = None,
    echo: Callable[[str], None] = print,
) -> str:
    """Run the yardsticks ``names`` under ``arms`` and return the Markdown report.

    Raises:
        MissingExtraError: SimPy (the ``sim`` extra) is not installed.
    """
    require("simpy", "sim", "The simulator")
    from backpressure.sim.report import format_fleet_markdown, write_chart
    from backpressure.sim.runner import run

    chosen = [y for y in YARDSTICKS if y.name in names]
    ordered_arms = default_first(list(arms))
    out = [
        "# Simulator yardsticks: fleets, transients, faults",
        "",
        f"`python -m backpressure.sim.yardsticks --seed {seed}`; every arm's row, the "
        f"default's (`{default_name()}`) first. `current` is what stock pymongo >= 4.17 does. "
        "SimPy model with the package's real decision core; virtual time, so the figures do "
        "not depend on the machine's load.",
        "",
        "Columns: app errors (count) and the floor no arm can beat (closed loops: "
        "max(0, 1 - C*D/N) per bucket, with N workers, deadline D, capacity C, so the same for "
        "every arm; open loops: the oracle on the arrivals); attempts the server received "
        "per operation; Jain's index over the client processes' successes; goodput per phase "
        "from 2 s after each step (closed-fleet) or over the whole phase; p99 of successful "
        "operations; operations refused locally per second.",
    ]
    for yardstick in chosen:
        built = scenario(yardstick.name)
        started = time.process_time()
        result = run(built, ordered_arms, seed)
        cpu = time.process_time() - started
        echo(f"{yardstick.name}: {cpu:.1f} s CPU")
        out += ["", f"## `{yardstick.name}`", "", f"{built.description} (seed {seed}).", ""]
        out.append(format_fleet_markdown(result, goodput_as=yardstick.goodput_as))
        if yardstick.note:
            out += ["", yardstick.note]
        if yardstick.table is not None:
            out += yardstick.table(result, built)
        out += _goal_lines(yardstick, result)
        out += ["", f"CPU for all arms: {cpu:.0f} s."]
        if chart_dir is not None:
            path = chart_dir / f"sim-{yardstick.name}.png"
            closed = all(isinstance(group.workload, ClosedLoop) for group in built.clients)
            write_chart(
                result,
                path,
                title=f"{built.name}: {built.description}",
                show_offered=not closed,
                log_scale=True,
            )
            out += ["", f"![{yardstick.name}]({path.name})"]
    return "\n".join(out) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; return the exit status (1 without SimPy, 2 on a usage error)."""
    return run_cli(_main, argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    """The command line, without the missing-extra and Ctrl-C handling of :func:`main`."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.sim.yardsticks",
        description="Run the simulator's yardstick scenarios under every arm; write one "
        "Markdown report with each goal met or not.",
    )
    add_seed_argument(parser)
    parser.add_argument(
        "--scenarios",
        type=name_list(y.name for y in YARDSTICKS),
        default=",".join(y.name for y in YARDSTICKS),
        help="comma-separated (default: all: %(default)s)",
    )
    parser.add_argument(
        "--arms",
        type=name_list(available_arms()),
        default=",".join(default_first(list(available_arms()))),
        help="comma-separated arm names (default: all, the default's first)",
    )
    parser.add_argument("--md", type=Path, help="write the Markdown report here")
    parser.add_argument("--charts", type=Path, help="draw one PNG per scenario in this folder")
    args = parser.parse_args(argv)
    report = run_yardsticks(args.scenarios, args.arms, args.seed, chart_dir=args.charts)
    if args.md is not None:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(report, encoding="utf-8")
        print(f"written to {args.md}")
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
