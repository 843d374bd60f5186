"""A rollout in progress on real processes: each half of a mixed fleet, measured apart.

``python -m backpressure.bench.mixed_fleet`` runs the fleet benchmark's plan (8 processes x 8
threads, capacity 200 -> 100 -> 300 ops/s, 1 s deadline; :mod:`backpressure.bench.fleet`) with
a share of the processes on stock pymongo (``pymongo-native``, pymongo's own overload retries)
and the rest on one of this package's arms, in one run per share (1, 4 and 7 of 8 by default) and
arm (``--arms``: the default preset, ``current``, then ``adaptive``), each ``--runs``
times.  Every row is one half of one run: its processes, its
operations and error rate, the mean successes of one of its processes and, for the upgraded
half, that as a share of a stock process's (the coexistence goal: >= 95 %, at an error rate no
higher than the stock half's).  The stock half's row comes first in every run, and the default
arm's runs come first.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from backpressure.bench.fleet import FleetPlan, run_processes
from backpressure.bench.publish import publish_run
from backpressure.cli import positive_float, positive_int, run_cli
from backpressure.workload.arms import (
    ARM_NAMES,
    STOCK,
    arm_label,
    default_first,
    default_policy_name,
    from_file,
    to_file,
)
from backpressure.workload.metrics import coexists
from backpressure.workload.report import run_line

__all__ = [
    "Half",
    "MixedRun",
    "main",
    "mixed_report",
    "render",
    "render_mixed_report",
    "run_mixed",
    "upgraded_arms",
]


DEFAULT_BURST_SECONDS = FleetPlan().burst_seconds
"""The limiter's burst allowance unless ``--burst-seconds`` says otherwise (the fleet plan's)."""


@dataclass(frozen=True)
class Half:
    """One half of a mixed fleet in one run."""

    arm: str
    processes: int
    operations: int
    errors: int
    successes: int
    competed_s: Optional[float] = None
    """Seconds its processes' pacers competed, summed (None: its arm does not pace, or the
    run predates the count)."""

    @property
    def error_rate(self) -> float:
        """App errors per operation (0 when none ran)."""
        return self.errors / self.operations if self.operations else 0.0

    @property
    def per_process(self) -> float:
        """Mean successes of one of its processes."""
        return self.successes / self.processes


@dataclass(frozen=True)
class MixedRun:
    """Both halves of one run, and the workload commands the server received."""

    stock: Half
    upgraded: Half
    server_received: int

    @property
    def share(self) -> float:
        """An upgraded process's successes over a stock process's."""
        base = self.stock.per_process
        return self.upgraded.per_process / base if base else 0.0

    @property
    def met(self) -> bool:
        """>= 95 % of a stock process's successes, at an error rate no higher than theirs."""
        return coexists(self.share, self.upgraded.error_rate, self.stock.error_rate)


def _half(arm: str, reports: Sequence[dict[str, Any]]) -> Half:
    """Add up the reports of one half's processes."""
    return Half(
        arm,
        len(reports),
        sum(int(r["ops"]) for r in reports),
        sum(int(r["errors"]) for r in reports),
        sum(int(r["successes"]) for r in reports),
        _competed(reports),
    )


def _competed(reports: Sequence[dict[str, Any]]) -> Optional[float]:
    """The processes' competing seconds, summed; None when none of them paces."""
    seconds = [float(r["competed_s"]) for r in reports if r.get("competed_s") is not None]
    return round(sum(seconds), 3) if seconds else None


def run_mixed(target: Any, stock: int, arm: str, plan: FleetPlan) -> MixedRun:
    """Run ``plan`` with the first ``stock`` processes on stock pymongo, the rest on ``arm``."""
    if not 0 < stock < plan.processes:
        raise ValueError(f"stock must be in 1..{plan.processes - 1}, got {stock}")
    arms = [STOCK] * stock + [arm] * (plan.processes - stock)
    reports, received = run_processes(target, arms, plan)
    return MixedRun(_half(STOCK, reports[:stock]), _half(arm, reports[stock:]), received)


def render(runs: Sequence[tuple[int, MixedRun]], processes: int) -> str:
    """A Markdown table, one row per half (the stock half's first in every run)."""
    lines = [
        "| stock processes | half | processes | operations | errors | successes / process | "
        "of a stock process's | goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stock, run in runs:
        for half in (run.stock, run.upgraded):
            upgraded = half is run.upgraded
            lines.append(
                f"| {stock} of {processes} | {arm_label(half.arm)} | {half.processes} | "
                f"{half.operations:,} | {half.error_rate:.1%} | {half.per_process:,.0f} | "
                f"{f'{run.share:.0%}' if upgraded else '-'} | "
                f"{('met' if run.met else 'missed') if upgraded else '-'} |"
            )
    competed = [
        f"{arm_label(run.upgraded.arm)} at {stock} of {processes}: {run.upgraded.competed_s:.1f}"
        for stock, run in runs
        if run.upgraded.competed_s is not None
    ]
    if competed:
        lines += [
            "",
            "Seconds competing (the neighbour test's mode), summed over the upgraded half's "
            f"processes: {'; '.join(competed)}.",
        ]
    return "\n".join(lines) + "\n"


def mixed_report(
    runs: Sequence[tuple[int, MixedRun]],
    plan: FleetPlan,
    info: dict[str, Any],
    load: Sequence[float],
    wall_s: float,
    commit: str,
) -> dict[str, Any]:
    """The raw data of one invocation (every share and arm), as written to JSON."""
    return {
        "machine": info,
        "load_average": [round(x, 2) for x in load],
        "wall_s": round(wall_s, 1),
        "commit": commit,
        "processes": plan.processes,
        "burst_seconds": plan.burst_seconds,
        "runs": [
            {
                "stock_processes": stock,
                "stock": to_file(asdict(run.stock)),
                "upgraded": to_file(asdict(run.upgraded)),
                "server_received": run.server_received,
                "share": run.share,
                "met": run.met,
            }
            for stock, run in runs
        ],
    }


def render_mixed_report(data: dict[str, Any]) -> str:
    """The Markdown page of :func:`mixed_report`'s data: the run's line, then the table."""
    runs = [
        (
            int(entry["stock_processes"]),
            MixedRun(
                Half(**from_file(entry["stock"])),
                Half(**from_file(entry["upgraded"])),
                entry["server_received"],
            ),
        )
        for entry in data["runs"]
    ]
    line = run_line(data["machine"], data["load_average"], data["wall_s"], data["commit"])
    burst = float(data.get("burst_seconds", DEFAULT_BURST_SECONDS))
    if burst != DEFAULT_BURST_SECONDS:
        line += (
            f"\n\nThe server's bucket holds {burst:g} s of its rate (`--burst-seconds`; "
            f"{DEFAULT_BURST_SECONDS:g} s otherwise)."
        )
    return line + "\n\n" + render(runs, int(data["processes"]))


def upgraded_arms(spec: str) -> list[str]:
    """The comma-separated arms of ``--arms``, the default preset's first.

    Raises:
        ValueError: a name is not an arm of the benchmarks, or none is given.
    """
    names = [part.strip() for part in spec.split(",") if part.strip()]
    if not names:
        raise ValueError("--arms: give at least one arm")
    for name in names:
        if name not in ARM_NAMES or name == STOCK:
            known = ", ".join(n for n in ARM_NAMES if n != STOCK)
            raise ValueError(f"--arms: {name!r} is not one of this package's arms (known: {known})")
    return default_first(list(dict.fromkeys(names)))


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv``, run every share ``--runs`` times on one embedded replica set."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench.mixed_fleet",
        description="Each half of a mixed fleet: stock pymongo processes beside upgraded ones.",
    )
    parser.add_argument(
        "--arms",
        default=f"{default_policy_name()},adaptive",
        help="the upgraded processes' arms, comma-separated (the default's runs come first)",
    )
    parser.add_argument(
        "--stock", default="1,4,7", help="stock processes per run, comma-separated (of 8)"
    )
    parser.add_argument("--runs", type=positive_int, default=1, help="repetitions of the set")
    parser.add_argument(
        "--burst-seconds",
        type=positive_float,
        default=DEFAULT_BURST_SECONDS,
        metavar="S",
        help=f"the limiter's bucket, seconds of its rate (default: {DEFAULT_BURST_SECONDS:g})",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the page")
    args = parser.parse_args(argv)
    shares = [int(part) for part in args.stock.split(",") if part]
    try:
        arms = upgraded_arms(args.arms)
    except ValueError as exc:
        parser.error(str(exc))
    plan = FleetPlan(burst_seconds=args.burst_seconds)

    def run(server: Any) -> list[tuple[int, MixedRun]]:
        runs = []
        for arm in arms:
            for _ in range(args.runs):
                for stock in shares:
                    print(
                        f"{arm}: stock {stock} of {plan.processes} ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    runs.append((stock, run_mixed(server, stock, arm, plan)))
        return runs

    publish_run(
        run,
        lambda runs, info, load, wall_s, commit: mixed_report(
            runs, plan, info, load, wall_s, commit
        ),
        render_mixed_report,
        markdown=args.markdown,
        json_path=args.json,
    )
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.bench.mixed_fleet``: 0, or 2 on a usage error."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
