"""A rollout in progress: each half of a mixed fleet, measured apart, in one simulated run.

``python -m backpressure.sim.mixed`` runs :func:`~backpressure.sim.scenarios.mixed_fleet` with
1, 4 and 7 of its 8 processes on stock pymongo's loop (``current``) and the others on the arm
under test (``adaptive`` by default), and prints one row per half: its processes, the mean
successes of one of its processes, its error rate, and the upgraded half's successes per process
as a share of the stock half's (the coexistence goal: >= 95 %, with an error rate <= the stock
half's).  The stock half's row comes first (``current`` is the default).  A fleet's total hides
a starved half, so each half is reported on its own.  One run's share moves by tens of points
from seed to seed: ``--seeds N`` runs N seeds from ``--seed`` and adds a table of each share's
mean and range, and how many runs met the goal.  ``--arms`` takes a list (the default's runs
first, as every table here); ``--json`` and ``--markdown`` write the runs and the results page.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from backpressure.cli import (
    add_seeds_arguments,
    name_list,
    positive_float,
    run_cli,
    seed_span,
    swept_seeds,
)
from backpressure.core.extras import require
from backpressure.sim.arms import available_arms, resolve
from backpressure.sim.scenarios import BenchShape, mixed_fleet
from backpressure.workload.arms import from_file, to_file
from backpressure.workload.metrics import coexists

__all__ = [
    "HalfResult",
    "MixedResult",
    "load_runs",
    "main",
    "render_markdown",
    "render_seeds",
    "run_mixed",
]

STOCK_SHARES: tuple[int, ...] = (1, 4, 7)
"""Processes of 8 on stock pymongo in the three runs: f = 1/8, 1/2, 7/8."""

DEFAULT_BURST_SECONDS = BenchShape().burst_seconds
"""The server's burst allowance unless ``--burst-seconds`` says otherwise (the benchmarks')."""


@dataclass(frozen=True)
class HalfResult:
    """One half of a mixed fleet in one run."""

    arm: str
    processes: int
    ops: int
    errors: int
    successes_per_process: float

    @property
    def error_rate(self) -> float:
        """App errors per operation (0 when it ran none)."""
        return self.errors / self.ops if self.ops else 0.0


@dataclass(frozen=True)
class MixedResult:
    """Both halves of one mixed-fleet run."""

    stock_processes: int
    processes: int
    stock: HalfResult
    upgraded: HalfResult
    jain: Optional[float]

    @property
    def success_share(self) -> float:
        """An upgraded process's successes as a share of a stock process's."""
        base = self.stock.successes_per_process
        return self.upgraded.successes_per_process / base if base else 0.0

    @property
    def goal_met(self) -> bool:
        """>= 95 % of a stock process's successes, at an error rate no higher than theirs."""
        return coexists(self.success_share, self.upgraded.error_rate, self.stock.error_rate)


def run_mixed(
    stock: int,
    arm: str = "adaptive",
    *,
    seed: int = 1,
    stock_arm: str = "current",
    burst_seconds: float = DEFAULT_BURST_SECONDS,
) -> MixedResult:
    """Run the 8 x 8 mixed fleet with ``stock`` processes on ``stock_arm``, the rest on
    ``arm``, the server's bucket holding ``burst_seconds`` of its rate; return each half's
    figures."""
    require("simpy", "sim", "the simulator")
    from backpressure.sim.engine import simulate
    from backpressure.workload.metrics import jain_index

    scenario = mixed_fleet(
        stock, stock_arm=stock_arm, shape=BenchShape(burst_seconds=burst_seconds)
    )
    data = simulate(scenario, resolve(arm), seed)
    halves = []
    start = 0
    for group, name in zip(scenario.clients, (stock_arm, arm)):
        successes = data.client_successes[start : start + group.count]
        errors = data.client_errors[start : start + group.count]
        start += group.count
        halves.append(
            HalfResult(
                name,
                group.count,
                sum(successes) + sum(errors),
                sum(errors),
                sum(successes) / group.count,
            )
        )
    return MixedResult(
        stock,
        start,
        halves[0],
        halves[1],
        jain_index(data.client_successes),
    )


def render(results: Sequence[MixedResult]) -> str:
    """A Markdown table: per run, the stock half's row, then the upgraded half's."""
    lines = [
        "| stock share | half | processes | ops | errors | successes / process | "
        "of stock's | goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        share = f"{result.stock_processes}/{result.processes}"
        for half in (result.stock, result.upgraded):
            upgraded = half is result.upgraded
            lines.append(
                f"| {share} | {half.arm} | {half.processes} | {half.ops:,} | "
                f"{half.error_rate:.1%} | {half.successes_per_process:,.0f} | "
                f"{f'{result.success_share:.0%}' if upgraded else '-'} | "
                f"{('met' if result.goal_met else 'missed') if upgraded else '-'} |"
            )
    return "\n".join(lines) + "\n"


def render_seeds(*arms: Sequence[Sequence[MixedResult]]) -> str:
    """A Markdown table over several seeds' runs: for each arm (its seeds' runs, each a run
    per stock share in the same order) and stock share, the upgraded half's mean share of a
    stock process's successes with its range, the mean difference of the error rates, and the
    runs that met the goal."""
    lines = [
        "| stock share | upgraded | runs | of stock's: mean | range | errors minus stock's | "
        "goal met |",
        "|---|---|---|---|---|---|---|",
    ]
    for runs in arms:
        for column in zip(*runs):
            first = column[0]
            shares = [result.success_share for result in column]
            gaps = [result.upgraded.error_rate - result.stock.error_rate for result in column]
            met = sum(result.goal_met for result in column)
            lines.append(
                f"| {first.stock_processes}/{first.processes} | {first.upgraded.arm} | "
                f"{len(column)} | {sum(shares) / len(shares):.0%} | "
                f"{min(shares):.0%}-{max(shares):.0%} | "
                f"{sum(gaps) / len(gaps) * 100:+.1f} points | {met} of {len(column)} |"
            )
    return "\n".join(lines) + "\n"


def load_runs(rows: Sequence[dict[str, Any]]) -> dict[str, list[list[MixedResult]]]:
    """The runs of a ``--json`` file, by upgraded arm, then by seed (in the file's order)."""
    by_arm: dict[str, dict[int, list[MixedResult]]] = {}
    for row in rows:
        result = MixedResult(
            row["stock_processes"],
            row["processes"],
            HalfResult(**from_file(row["stock"])),
            HalfResult(**from_file(row["upgraded"])),
            row["jain"],
        )
        seeds = by_arm.setdefault(result.upgraded.arm, {})
        seeds.setdefault(row.get("seed", 0), []).append(result)
    return {arm: list(seeds.values()) for arm, seeds in by_arm.items()}


def render_markdown(
    runs: dict[str, list[list[MixedResult]]],
    seeds: Sequence[int],
    burst_seconds: float = DEFAULT_BURST_SECONDS,
) -> str:
    """The results page: the table over the seeds, then each arm's run of each seed."""
    span = seed_span(seeds)
    burst = bucket = ""
    if burst_seconds != DEFAULT_BURST_SECONDS:
        burst = f" --burst-seconds {burst_seconds:g}"
        bucket = (
            f" The server's bucket holds {burst_seconds:g} s of its rate (the benchmarks': "
            f"{DEFAULT_BURST_SECONDS:g} s)."
        )
    parts = [
        f"# Simulated mixed fleets ({span}): 8 x 8, a share of the processes on stock "
        "pymongo's loop\n",
        "In the simulator, stock pymongo >= 4.17's loop is the `current` preset, so the stock "
        "half's rows are labelled `current`. `python -m backpressure.sim.mixed --arms "
        f"{','.join(runs)}{burst} --seed {seeds[0]} --seeds {len(seeds)}`.{bucket}\n",
        f"## Over {span}\n",
        render_seeds(*runs.values()),
    ]
    for arm, arm_runs in runs.items():
        for seed, results in zip(seeds, arm_runs):
            parts.append(f"## `{arm}` as the upgraded half, seed {seed}\n")
            parts.append(render(results))
    return "\n".join(parts)


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv``, run the three mixed fleets, print (and optionally write) the halves."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.sim.mixed",
        description="Each half of a mixed fleet (stock pymongo and an arm), simulated.",
    )
    parser.add_argument(
        "--arms",
        type=name_list(available_arms()),
        default="adaptive",
        help="the upgraded half's arms, comma-separated (default: adaptive)",
    )
    parser.add_argument(
        "--burst-seconds",
        type=positive_float,
        default=DEFAULT_BURST_SECONDS,
        metavar="S",
        help="the server's bucket, in seconds of its rate "
        f"(default: {DEFAULT_BURST_SECONDS:g}, the benchmarks')",
    )
    add_seeds_arguments(parser, seeds=1, jobs=False, what="and add a table over them")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the results page")
    args = parser.parse_args(argv)
    seeds = swept_seeds(parser, args)
    runs = {
        arm: [
            [
                run_mixed(stock, arm, seed=seed, burst_seconds=args.burst_seconds)
                for stock in STOCK_SHARES
            ]
            for seed in seeds
        ]
        for arm in args.arms
    }
    for arm, arm_runs in runs.items():
        for seed, results in zip(seeds, arm_runs):
            sys.stdout.write(f"\n{arm}, seed {seed}\n\n" + render(results))
    sys.stdout.write("\n" + render_seeds(*runs.values()))
    if args.json is not None:
        rows = [
            {
                "seed": seed,
                **asdict(result),
                "stock": to_file(asdict(result.stock)),
                "upgraded": to_file(asdict(result.upgraded)),
                "success_share": result.success_share,
                "met": result.goal_met,
            }
            for arm_runs in runs.values()
            for seed, results in zip(seeds, arm_runs)
            for result in results
        ]
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    if args.markdown is not None:
        args.markdown.write_text(render_markdown(runs, seeds, args.burst_seconds), encoding="utf-8")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.sim.mixed``: exit status 0, 1 without SimPy, 2 on usage errors."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
