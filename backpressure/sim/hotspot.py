"""``python -m backpressure.sim.hotspot``: one hot server among several, in the simulator.

Runs the server-choice scenarios with one seed, every arm with stock pymongo beside it (the
default's row first), and writes one Markdown page with a table per scenario and each goal of
the default marked met or not:

* ``hot-router`` (3 mongos, one admits 50/s) and ``hot-secondary`` (reads
  ``secondaryPreferred``, one secondary admits 50/s), 4 x 8 closed-loop workers: successes
  >= 1.8x stock's, <= 1.02 attempts/op, p99 <= 25 ms, app errors <= stock's;
* ``hot-member`` (reads from any member, one admits a quarter): 0 app errors, <= 1.02
  attempts/op, p99 <= 25 ms;
* ``hot-then-cool`` (3 mongos at 300/s, 700/s of demand, mongos0 at 50/s for 10 s): successes
  during the hot phase >= stock's, in the first second after it >= 90 % of stock's, from 1 s to
  4 s after it >= 98 %.

The floor column is the oracle's (:mod:`backpressure.sim.oracle`): the fewest app errors any
client could have had.  Virtual time: the figures do not depend on the machine's load, and the
same seed gives the same page (a test regenerates it and compares).

Example::

    python -m backpressure.sim.hotspot --seed 1 --md bench/results/sim-hotspot.md
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from backpressure.cli import add_seed_argument, run_cli
from backpressure.core.extras import require
from backpressure.sim.scenarios import scenario

if TYPE_CHECKING:  # the runner needs SimPy: imported where it runs
    from backpressure.sim.runner import ArmResult, Result

__all__ = ["ARMS", "SCENARIOS", "Goal", "goals_for", "main", "render", "run_hotspot"]

ARMS: tuple[str, ...] = ("current", "stock", "adaptive", "draft", "no-retries")
"""The arms of every table, the default (``current``) first."""

SCENARIOS: tuple[str, ...] = ("hot-router", "hot-secondary", "hot-member", "hot-then-cool")
"""The scenarios of the page, in order."""

DEFAULT = "current"
STOCK = "stock"
HOT_END_S = 10.0
"""When ``hot-then-cool``'s hot phase ends."""


@dataclass(frozen=True)
class Goal:
    """One goal of the default in one scenario."""

    name: str
    met: bool
    figure: str


def _successes(arm: ArmResult) -> int:
    return arm.ops - arm.app_errors


def _window(arm: ArmResult, start: float, end: float) -> float:
    """Successes between ``start`` and ``end`` seconds (whole buckets)."""
    times, goodput = arm.timeline["t"], arm.timeline["goodput"]
    width = times[1] - times[0] if len(times) > 1 else 1.0
    return sum(g * width for t, g in zip(times, goodput) if start - 1e-9 <= t < end - 1e-9)


def goals_for(name: str, result: Result) -> list[Goal]:
    """The default's goals in scenario ``name`` (see the module), judged on ``result``."""
    mine = result.arms[DEFAULT]
    stock = result.arms[STOCK]
    p99 = mine.p99_ms if mine.p99_ms is not None else float("inf")
    attempts = Goal(
        "<= 1.02 attempts/op", mine.attempts_per_op <= 1.02, f"{mine.attempts_per_op:.2f}"
    )
    latency = Goal("p99 <= 25 ms", p99 <= 25.0, f"{p99:.0f} ms")
    if name in ("hot-router", "hot-secondary"):
        ratio = _successes(mine) / max(1, _successes(stock))
        return [
            Goal(">= 1.8x stock's successes", ratio >= 1.8, f"{ratio:.2f}x"),
            attempts,
            latency,
            Goal(
                "app errors <= stock's",
                mine.app_errors <= stock.app_errors,
                f"{mine.app_errors} vs {stock.app_errors}",
            ),
        ]
    if name == "hot-member":
        return [Goal("0 app errors", mine.app_errors == 0, str(mine.app_errors)), attempts, latency]
    hot = _window(mine, 0.0, HOT_END_S) / max(1.0, _window(stock, 0.0, HOT_END_S))
    first = _window(mine, HOT_END_S, HOT_END_S + 1) / max(
        1.0, _window(stock, HOT_END_S, HOT_END_S + 1)
    )
    later = _window(mine, HOT_END_S + 1, HOT_END_S + 4) / max(
        1.0, _window(stock, HOT_END_S + 1, HOT_END_S + 4)
    )
    return [
        Goal("hot phase >= stock's", hot >= 1.0, f"{100 * hot:.0f}% of stock's"),
        Goal("1st s after >= 90% of stock's", first >= 0.9, f"{100 * first:.0f}%"),
        Goal("1-4 s after >= 98% of stock's", later >= 0.98, f"{100 * later:.0f}%"),
    ]


def run_hotspot(seed: int = 1) -> dict[str, Result]:
    """Run every scenario of :data:`SCENARIOS` with every arm of :data:`ARMS`."""
    require("simpy", "sim", "the simulator")
    from backpressure.sim.runner import run

    return {name: run(name, ARMS, seed) for name in SCENARIOS}


def _row(name: str, arm: ArmResult, result: Result) -> str:
    label = f"{name} (default)" if name == DEFAULT else name
    p99 = "-" if arm.p99_ms is None else f"{arm.p99_ms:.0f}"
    cells = [
        label,
        f"{_successes(arm):,}",
        f"{arm.app_errors:,}",
        f"{arm.physical_min_errors:,}",
        f"{arm.attempts_per_op:.2f}",
        f"{arm.goodput_per_s:,.0f}",
        p99,
    ]
    if result.scenario == "hot-then-cool":
        cells += [
            f"{_window(arm, 0.0, HOT_END_S):,.0f}",
            f"{_window(arm, HOT_END_S, HOT_END_S + 1):,.0f}",
            f"{_window(arm, HOT_END_S + 1, HOT_END_S + 4):,.0f}",
        ]
    return "| " + " | ".join(cells) + " |"


def render(results: dict[str, Result], seed: int) -> str:
    """The Markdown page of ``results`` (the runs of :func:`run_hotspot`)."""
    lines = [
        "# Simulator: one hot server among several",
        "",
        f"`python -m backpressure.sim.hotspot --seed {seed}`; every arm's row, the default's "
        "(`current`, with server choice) first, `stock` is stock pymongo >= 4.17 (the current "
        "spec's retries, pymongo's own choice of server). SimPy model with the package's real "
        "decision core; virtual time, so the figures do not depend on the machine's load.",
        "",
        "Columns: successes, app errors, the floor no arm can beat (the oracle; `>=` marks "
        "a lower bound), attempts the servers received per operation, goodput, p99 of "
        "successful operations.",
    ]
    for name, result in results.items():
        header = "| arm | ok | app errors | floor | att/op | goodput/s | p99 ms |"
        rule = "|---|---|---|---|---|---|---|"
        if name == "hot-then-cool":
            header += " ok hot phase | ok 1st s after | ok 1-4 s after |"
            rule += "---|---|---|"
        described = scenario(name).description
        lines += [
            "",
            f"## {name}",
            "",
            described[0].upper() + described[1:] + ".",
            "",
            header,
            rule,
        ]
        for arm_name in ARMS:
            lines.append(_row(arm_name, result.arms[arm_name], result))
        goals = goals_for(name, result)
        lines += [
            "",
            "Goals of the default: "
            + "; ".join(
                f"{goal.name}: {goal.figure} ({'met' if goal.met else 'missed'})" for goal in goals
            )
            + ".",
        ]
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.sim.hotspot",
        description="Run the simulator's hot-server scenarios with every arm and write the "
        "results page.",
    )
    add_seed_argument(parser)
    parser.add_argument("--md", type=Path, metavar="PATH", help="write the page to PATH")
    return parser


def _main(argv: Optional[Sequence[str]]) -> int:
    args = _parser().parse_args(argv)
    page = render(run_hotspot(args.seed), args.seed)
    if args.md:
        args.md.write_text(page, encoding="utf-8")
    print(page, end="")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line (see the module)."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
