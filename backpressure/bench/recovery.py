"""The recovery benchmark: how soon the goodput is the demand again once an overload ends.

``python -m backpressure.bench.recovery`` runs a fleet of real client processes (4 processes x
8 threads by default, :func:`backpressure.bench.fleet.run_processes`), each thread a closed loop
with a 60 ms pause after each operation (about 520 ops/s of demand on an idle machine), half
``find_one`` by ``_id`` and half ``insert_one``, every operation under ``pymongo.timeout(1)``.
The embedded replica set (its own process, real TCP) runs 10 s with no limit, admits 100 ops/s
for 10 s, then the limit is lifted at run time over the server's control connection and the
load runs 10 s more.

The arms run one after another on the same server with the same plan (the default's row
first; stock pymongo beside it): each arm gets the whole server, as its own deployment would.
Side by side in one server, the arms would share the limiter during the overload, so one arm's
backing off would hand capacity to the other and change the state each ends the overload in.

Per arm: successes in each of the 4 seconds after the end as a share of the demand (the
arm's own best one-second goodput while nothing limits it: from 2 s to 10 s before the overload
and from 5 s to 10 s after its end; on a loaded machine a second can only fall short of what the
fleet asks, so the best one is the closest to it), successes from
1 s to 4 s after the end against stock pymongo's (ratio), and the errors of operations started
after the end.  Goals: >= 90 % of the demand within 1 s; >= 95 % of stock's from 1 s to 4 s;
0 errors after the end.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from backpressure.bench.fleet import FleetPlan, fleet_arms, run_processes
from backpressure.bench.publish import publish_run
from backpressure.cli import positive_int, run_cli
from backpressure.workload.arms import STOCK, arm_label, default_policy_name, from_file, to_file
from backpressure.workload.driver import LoadTarget
from backpressure.workload.report import run_line

__all__ = [
    "RECOVERY_GOALS",
    "RECOVERY_PLAN",
    "STOCK",
    "RecoveryRun",
    "main",
    "recovery_plan",
    "recovery_report",
    "render_recovery_markdown",
    "render_recovery_report",
    "run_recovery",
    "summarize_recovery",
]

RECOVERY_GOALS: tuple[str, ...] = (
    ">= 90% of demand within 1 s",
    ">= 95% of stock's from 1-4 s",
    "0 errors after the end",
)

AFTER_SECONDS = 4
"""Seconds after the end reported one by one."""

STEADY_FROM_S = 5.0
"""The demand is taken from this many seconds after the end to the end of the run..."""

WARM_FROM_S = 2.0
"""... and from this many seconds after the start to the overload."""


def recovery_plan(
    processes: int = 4,
    threads: int = 8,
    capacity: float = 100.0,
    overload_s: float = 10.0,
    think_s: float = 0.06,
) -> FleetPlan:
    """The fleet plan: no limit, ``capacity`` ops/s, no limit, ``overload_s`` each."""
    return FleetPlan(
        processes=processes,
        threads=threads,
        rates=(math.inf, capacity, math.inf),
        step_s=overload_s,
        settle_s=0.0,
        think_s=think_s,
    )


RECOVERY_PLAN = recovery_plan()
"""4 x 8 threads, 60 ms think; no limit, 100 ops/s, no limit, 10 s each."""


@dataclass(frozen=True)
class RecoveryRun:
    """One arm's recovery run."""

    arm: str
    operations: int
    errors: int
    after_per_s: tuple[int, ...]
    """Successes in each of the first :data:`AFTER_SECONDS` seconds after the end."""
    demand_per_s: float
    """The best one-second goodput with no limit: from :data:`WARM_FROM_S` to the overload and
    from :data:`STEADY_FROM_S` after its end to the end of the run."""
    errors_started_after: int
    """Errors of operations started after the end."""
    errors_raised_after: int
    """Errors raised after the end (operations started before it included)."""
    overload_successes: int
    """Successes during the overload."""
    error_kinds: dict[str, int] = field(default_factory=dict)
    success_bins: tuple[int, ...] = ()
    """Successes per ``bin_s`` from the start (by completion)."""
    bin_s: float = 0.1

    @property
    def shares(self) -> tuple[float, ...]:
        """Each second after the end: successes over the demand."""
        return tuple(n / self.demand_per_s if self.demand_per_s else 0.0 for n in self.after_per_s)

    @property
    def one_to_four(self) -> int:
        """Successes from 1 s to 4 s after the end."""
        return sum(self.after_per_s[1:AFTER_SECONDS])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return to_file(
            {**asdict(self), "shares": list(self.shares), "one_to_four": self.one_to_four}
        )


def _per_second(bins: Sequence[int], begin_s: float, end_s: float, bin_s: float) -> list[int]:
    """Sums of ``bins`` over each whole second from ``begin_s`` to ``end_s``."""
    first = round(begin_s / bin_s)
    per = round(1.0 / bin_s)
    return [
        sum(bins[first + k * per : first + (k + 1) * per])
        for k in range(round((end_s - begin_s) / 1.0))
    ]


def _add(reports: Sequence[dict[str, Any]], key: str) -> list[int]:
    """Element-wise sum of one histogram over the processes' reports."""
    length = max(len(r[key]) for r in reports)
    total = [0] * length
    for report in reports:
        for slot, n in enumerate(report[key]):
            total[slot] += int(n)
    return total


def summarize_recovery(arm: str, plan: FleetPlan, reports: Sequence[dict[str, Any]]) -> RecoveryRun:
    """One arm's figures from its processes' reports."""
    end_s = plan.step_s * (len(plan.rates) - 1)
    begin_s = plan.step_s * (len(plan.rates) - 2)
    bins = _add(reports, "success_bins")
    after = _per_second(bins, end_s, end_s + AFTER_SECONDS, plan.bin_s)
    steady = _per_second(bins, WARM_FROM_S, begin_s, plan.bin_s)
    steady += _per_second(bins, end_s + STEADY_FROM_S, plan.duration_s, plan.bin_s)
    end_slot = round(end_s / plan.bin_s)
    begin_slot = round(begin_s / plan.bin_s)
    kinds: dict[str, int] = {}
    for report in reports:
        for name, n in report["error_kinds"].items():
            kinds[name] = kinds.get(name, 0) + int(n)
    return RecoveryRun(
        arm=arm,
        operations=sum(int(r["ops"]) for r in reports),
        errors=sum(int(r["errors"]) for r in reports),
        after_per_s=tuple(after),
        demand_per_s=float(max(steady, default=0)),
        errors_started_after=sum(_add(reports, "error_start_bins")[end_slot:]),
        errors_raised_after=sum(_add(reports, "error_bins")[end_slot:]),
        overload_successes=sum(bins[begin_slot:end_slot]),
        error_kinds=dict(sorted(kinds.items())),
        success_bins=tuple(bins),
        bin_s=plan.bin_s,
    )


def run_recovery(
    target: LoadTarget,
    arms: Optional[Sequence[str]] = None,
    plan: FleetPlan = RECOVERY_PLAN,
    *,
    progress: Optional[Callable[[str], None]] = None,
) -> list[RecoveryRun]:
    """Run every arm (the default's first) through ``plan``, one after another."""
    rates = plan.rates
    if (
        len(rates) != 3
        or not (math.isinf(rates[0]) and math.isinf(rates[2]))
        or math.isinf(rates[1])
    ):
        raise ValueError(
            f"a recovery plan's rates are (math.inf, capacity, math.inf), got {rates!r}"
        )
    if plan.step_s < STEADY_FROM_S + 1.0:
        raise ValueError(f"a recovery plan needs step_s >= {STEADY_FROM_S + 1.0:g}")
    runs = []
    for arm in fleet_arms(arms):
        if progress is not None:
            progress(f"recovery: {arm}")
        reports, _ = run_processes(target, [arm] * plan.processes, plan)
        runs.append(summarize_recovery(arm, plan, reports))
    return runs


def _stock(runs: Sequence[RecoveryRun]) -> Optional[RecoveryRun]:
    """Stock pymongo's run, if it ran."""
    return next((run for run in runs if run.arm == STOCK), None)


def judge(run: RecoveryRun, stock: Optional[RecoveryRun]) -> dict[str, Optional[bool]]:
    """Each of :data:`RECOVERY_GOALS`: met, not met, or None (no stock run to compare with)."""
    ratio = ratio_to_stock(run, stock)
    return {
        RECOVERY_GOALS[0]: bool(run.shares) and run.shares[0] >= 0.9,
        RECOVERY_GOALS[1]: None if ratio is None else ratio >= 0.95,
        RECOVERY_GOALS[2]: run.errors_started_after == 0,
    }


def ratio_to_stock(run: RecoveryRun, stock: Optional[RecoveryRun]) -> Optional[float]:
    """Successes from 1 s to 4 s after the end over stock pymongo's (None without stock)."""
    if stock is None or stock.one_to_four == 0:
        return None
    return run.one_to_four / stock.one_to_four


def _verdict(met: Optional[bool]) -> str:
    return "-" if met is None else ("met" if met else "NOT met")


def render_recovery_markdown(runs: Sequence[RecoveryRun], plan: FleetPlan) -> str:
    """The table (every arm, the default's first) and each goal per arm."""
    runs = sorted(runs, key=lambda run: run.arm != default_policy_name())
    stock = _stock(runs)
    header = [
        "arm",
        *(f"{k}-{k + 1} s" for k in range(AFTER_SECONDS)),
        "demand/s",
        "1-4 s ok",
        "vs stock",
        "errors after (raised)",
        "overload ok",
        "ops",
        "errors",
    ]
    lines = [
        f"{plan.processes} processes x {plan.threads} threads, {1000 * plan.think_s:g} ms think, "
        f"deadline {plan.deadline_s:g} s; no limit, capacity {plan.rates[1]:g} ops/s, no limit, "
        f"{plan.step_s:g} s each. Seconds after the end as a share of the demand (the arm's own "
        f"best one-second goodput with no limit: from {WARM_FROM_S:g} s to the overload and from "
        f"{STEADY_FROM_S:g} s after its end on). Errors after: of operations started after the "
        "end (raised after the end, any start, in brackets). Arms one after another on one "
        "server.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for run in runs:
        ratio = ratio_to_stock(run, stock)
        cells = [
            arm_label(run.arm),
            *(f"{100 * share:.0f}%" for share in run.shares),
            f"{run.demand_per_s:,.0f}",
            f"{run.one_to_four:,}",
            "-" if ratio is None else f"{ratio:.2f}",
            f"{run.errors_started_after:,} ({run.errors_raised_after:,})",
            f"{run.overload_successes:,}",
            f"{run.operations:,}",
            f"{run.errors:,}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Goals:", ""]
    for run in runs:
        verdicts = ", ".join(f"{goal}: {_verdict(met)}" for goal, met in judge(run, stock).items())
        lines.append(f"- **{arm_label(run.arm)}**: {verdicts}")
    return "\n".join(lines) + "\n"


def recovery_report(
    runs: Sequence[RecoveryRun],
    plan: FleetPlan,
    info: dict[str, Any],
    load: Sequence[float],
    wall_s: float,
    commit: str,
) -> dict[str, Any]:
    """The raw data of one run of every arm, as written to JSON."""
    stock = _stock(runs)
    return {
        "machine": info,
        "load_average": [round(x, 2) for x in load],
        "wall_s": round(wall_s, 1),
        "commit": commit,
        "plan": {**asdict(plan), "rates": [str(rate) for rate in plan.rates]},
        "runs": [
            {
                **run.to_dict(),
                "ratio_to_stock": ratio_to_stock(run, stock),
                "goals": judge(run, stock),
            }
            for run in runs
        ],
    }


def render_recovery_report(data: dict[str, Any]) -> str:
    """The Markdown page of :func:`recovery_report`'s data: the run's line, then the table."""
    plan = FleetPlan(**{**data["plan"], "rates": tuple(float(r) for r in data["plan"]["rates"])})
    names = set(RecoveryRun.__dataclass_fields__)
    runs = []
    for entry in data["runs"]:
        values = {k: v for k, v in from_file(entry).items() if k in names}
        values["after_per_s"] = tuple(values["after_per_s"])
        values["success_bins"] = tuple(values.get("success_bins", ()))
        runs.append(RecoveryRun(**values))
    line = run_line(data["machine"], data["load_average"], data["wall_s"], data["commit"])
    return line + "\n\n" + render_recovery_markdown(runs, plan)


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv`` and run every arm once on one embedded replica set."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench.recovery",
        description="How soon the goodput is the demand again once an overload ends.",
    )
    parser.add_argument("--arms", help="comma-separated (default: every available arm)")
    parser.add_argument("--processes", type=positive_int, default=4, help="client processes")
    parser.add_argument("--threads", type=positive_int, default=8, help="threads per process")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the table")
    args = parser.parse_args(argv)
    arms = [p for p in args.arms.split(",") if p] if args.arms else None
    plan = recovery_plan(args.processes, args.threads)

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    publish_run(
        lambda server: run_recovery(server, arms, plan, progress=progress),
        lambda runs, info, load, wall_s, commit: recovery_report(
            runs, plan, info, load, wall_s, commit
        ),
        render_recovery_report,
        markdown=args.markdown,
        json_path=args.json,
    )
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.bench.recovery``: 0, or 2 on a usage error."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
