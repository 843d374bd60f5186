"""A rollout in progress: each half of a mixed fleet, measured apart, in one simulated run.

``python -m backpressure.sim.mixed`` runs :func:`~backpressure.sim.scenarios.mixed_fleet` with
1, 4 and 7 of its 8 processes on stock pymongo's loop (``current``) and the others on the policy
under test (``adaptive`` by default), and prints one row per half: its processes, the mean
successes of one of its processes, its error rate, and the upgraded half's successes per process
as a share of the stock half's (the coexistence goal: >= 95 %, with an error rate <= the stock
half's).  The stock half's row comes first (``current`` is the default).  A fleet's total hides
a starved half, so each half is reported on its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from backpressure.cli import add_seed_argument, run_cli
from backpressure.core.extras import require
from backpressure.sim.arms import resolve
from backpressure.sim.scenarios import mixed_fleet
from backpressure.workload.metrics import coexists

__all__ = ["HalfResult", "MixedResult", "main", "run_mixed"]

STOCK_SHARES: tuple[int, ...] = (1, 4, 7)
"""Processes of 8 on stock pymongo in the three runs: f = 1/8, 1/2, 7/8."""


@dataclass(frozen=True)
class HalfResult:
    """One half of a mixed fleet in one run."""

    policy: str
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
    stock: int, policy: str = "adaptive", *, seed: int = 1, stock_policy: str = "current"
) -> MixedResult:
    """Run the 8 x 8 mixed fleet with ``stock`` processes on ``stock_policy``, the rest on
    ``policy``; return each half's figures."""
    require("simpy", "sim", "the simulator")
    from backpressure.sim.engine import simulate
    from backpressure.sim.runner import jain_index

    scenario = mixed_fleet(stock, stock_policy=stock_policy)
    data = simulate(scenario, resolve(policy), seed)
    halves = []
    start = 0
    for group, name in zip(scenario.clients, (stock_policy, policy)):
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
                f"| {share} | {half.policy} | {half.processes} | {half.ops:,} | "
                f"{half.error_rate:.1%} | {half.successes_per_process:,.0f} | "
                f"{f'{result.success_share:.0%}' if upgraded else '-'} | "
                f"{('met' if result.goal_met else 'missed') if upgraded else '-'} |"
            )
    return "\n".join(lines) + "\n"


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv``, run the three mixed fleets, print (and optionally write) the halves."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.sim.mixed",
        description="Each half of a mixed fleet (stock pymongo and a policy), simulated.",
    )
    parser.add_argument("--policy", default="adaptive", help="the upgraded half's policy")
    add_seed_argument(parser)
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    args = parser.parse_args(argv)
    results = [run_mixed(stock, args.policy, seed=args.seed) for stock in STOCK_SHARES]
    sys.stdout.write(render(results))
    if args.json is not None:
        rows = [
            {**asdict(result), "success_share": result.success_share, "met": result.goal_met}
            for result in results
        ]
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.sim.mixed``: exit status 0, 1 without SimPy, 2 on usage errors."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
