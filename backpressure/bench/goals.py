"""Where ``adaptive`` stands against the goals it must meet to become the default.

``python -m backpressure.bench.goals`` reads the committed real runs in
``bench/results/adaptive-default/`` (the latest two of each benchmark: fleets and their
transients, a rollout beside stock processes, recovery after an overload, the fault soak,
criticality) and renders one table:
per goal and run, the figures and the verdict of the default, stock pymongo and ``adaptive``,
the default's column first.  The verdicts are the ones each benchmark recorded in its JSON when
it ran; nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from backpressure.cli import run_cli
from backpressure.workload.arms import ARM_KEY, STOCK, arm_label, default_policy_name

__all__ = ["GOALS", "Goal", "goals_markdown", "latest_runs", "main", "run_numbers"]

Cell = tuple[str, Optional[bool]]
"""An arm's figures in one run, and whether it met the goal (None: not judged)."""


@dataclass(frozen=True)
class Goal:
    """One goal: what it asks, the benchmark's result files, and how to read an arm's row."""

    name: str
    asks: str
    stem: str
    """The results' file names: ``<stem><N>.json``."""
    read: Callable[[dict[str, Any], str], Optional[Cell]]
    """An arm's cell in one run's data (None: the arm did not run)."""


def _percent(value: float, digits: int = 1) -> str:
    return f"{100 * value:.{digits}f} %"


def _fleet(data: dict[str, Any], arm: str) -> Optional[Cell]:
    """Each shape's errors, attempts per operation and Jain; met when every fleet goal is."""
    parts, verdicts = [], []
    for shape in data["fleet"]:
        for run in shape["runs"]:
            if run[ARM_KEY] == arm:
                parts.append(
                    f"{run['shape']}: {_percent(run['error_fraction'])} at "
                    f"{run['attempts_per_op']:.2f}, Jain {run['jain']:.3f}"
                )
                verdicts += list(run["goals"].values())
    return ("; ".join(parts), all(verdicts)) if parts else None


def _transients(data: dict[str, Any], arm: str) -> Optional[Cell]:
    """Each transient's goodput after the rise against stock's; met when every transient goal
    is (:func:`backpressure.bench.transient.judge`)."""
    from backpressure.bench.transient import TransientRun, judge

    parts, verdicts = [], []
    for transient in data.get("transient", ()):
        runs = {run[ARM_KEY]: TransientRun.from_dict(run) for run in transient["runs"]}
        run, stock = runs.get(arm), runs.get(STOCK)
        if run is None or stock is None:
            continue
        share = run.goodput / stock.goodput if stock.goodput else 0.0
        parts.append(
            f"{run.rejections} rejection{'s' if run.rejections != 1 else ''}: "
            f"{_percent(share)} of stock's"
        )
        verdicts += list(judge(run, stock).values())
    if not parts:
        return None
    return "; ".join(parts), None if None in verdicts else all(verdicts)


def _rollout(data: dict[str, Any], arm: str) -> Optional[Cell]:
    """An upgraded process's share of a stock process's successes at each stock count."""
    if arm == STOCK:
        return ("the reference", None)
    runs = [run for run in data["runs"] if run["upgraded"][ARM_KEY] == arm]
    if not runs:
        return None
    shares = " / ".join(f"{100 * run['share']:.0f}" for run in runs)
    counts = " / ".join(str(run["stock_processes"]) for run in runs)
    return (f"{shares} % (at {counts} stock of {data['processes']})", all(r["met"] for r in runs))


def _row(data: dict[str, Any], arm: str) -> Optional[dict[str, Any]]:
    return next((run for run in data["runs"] if run[ARM_KEY] == arm), None)


def _recovery(data: dict[str, Any], arm: str) -> Optional[Cell]:
    """The first second's share of the demand, 1-4 s against stock, errors after the end."""
    run = _row(data, arm)
    if run is None:
        return None
    ratio = run["ratio_to_stock"]
    text = (
        f"{_percent(run['shares'][0], 0)} in the 1st s, "
        f"{'-' if ratio is None else f'{ratio:.2f}'} of stock's 1-4 s, "
        f"{run['errors_started_after']} errors after"
    )
    return text, all(met for met in run["goals"].values() if met is not None)


def _faults(data: dict[str, Any], arm: str) -> Optional[Cell]:
    """Acks per round against the default's, errors, duplicated and lost writes."""
    run = _row(data, arm)
    if run is None:
        return None
    audit = f"{run['errors']:,} errors, {run['duplicated']} duplicated, {run['lost']} lost"
    if arm == "current":
        return f"the reference: {audit}", None
    text = (
        f"{run['ratio_mean']:.3f} ({run['ratio_low']:.3f}-{run['ratio_high']:.3f}) of "
        f"`current`'s acks, {audit}"
    )
    verdicts = list(run["goals"].values())
    if "NOT met" in verdicts:
        return text, False
    return text, None if "not decided" in verdicts else True


def _criticality(data: dict[str, Any], arm: str) -> Optional[Cell]:
    """Errors of the critical and of the sheddable operations."""
    run = _row(data, arm)
    if run is None:
        return None
    text = (
        f"{_percent(run['critical_error_rate'])} critical, "
        f"{_percent(run['sheddable_error_rate'], 0)} sheddable errors"
    )
    return text, all(run["goals"].values())


GOALS: tuple[Goal, ...] = (
    Goal(
        "fleets",
        "every process on the arm (8 x 8 and 4 x 16, capacity 200 -> 100 -> 300 ops/s): "
        "app errors <= 1 %, <= 1.1 attempts per operation, Jain >= 0.95, goodput >= 95 % of "
        "the capacity",
        "fleet-run",
        _fleet,
    ),
    Goal(
        "transients",
        "1 or 3 rejections at low load, then 4 x the demand: goodput after the rise >= 98 % of "
        "stock's, its p99 within 20 ms of stock's, no local refusals",
        "fleet-run",
        _transients,
    ),
    Goal(
        "rollout",
        "1, 4 or 7 of the 8 x 8 fleet's processes still stock: an upgraded process gets >= 95 % "
        "of a stock process's successes at an error rate no higher than theirs",
        "mixed-fleet-run",
        _rollout,
    ),
    Goal(
        "recovery",
        "after an overload ends: >= 90 % of the demand within 1 s, >= 95 % of stock's "
        "successes from 1 s to 4 s, no errors after the end",
        "recovery-run",
        _recovery,
    ),
    Goal(
        "faults",
        "a fault soak: acked >= 98 % of `current`'s writes (95 % interval), errors <= "
        "`current`'s, 0 duplicated, 0 lost",
        "faults-run",
        _faults,
    ),
    Goal(
        "criticality",
        "8 open-loop processes at twice the capacity, half the operations sheddable: "
        "critical errors <= 1 %",
        "criticality-run",
        _criticality,
    ),
)
"""The goals, in the order the table gives them."""


def run_numbers(folder: Path, stem: str) -> list[int]:
    """The numbers ``N`` of the ``<stem><N>.json`` files in ``folder``, in increasing order."""
    pattern = re.compile(re.escape(stem) + r"(\d+)\.json")
    return sorted(
        int(match.group(1))
        for path in folder.iterdir()
        if (match := pattern.fullmatch(path.name)) is not None
    )


def latest_runs(folder: Path, stem: str, count: int = 2) -> list[tuple[int, dict[str, Any]]]:
    """The ``count`` highest-numbered ``<stem><N>.json`` in ``folder``, oldest first."""
    return [
        (number, json.loads((folder / f"{stem}{number}.json").read_text(encoding="utf-8")))
        for number in run_numbers(folder, stem)[-count:]
    ]


def _verdict(met: Optional[bool]) -> str:
    return "" if met is None else (" **met**" if met else " missed")


def goals_markdown(folder: Path, goals: Sequence[Goal] = GOALS) -> str:
    """The goals table over the latest two runs of each goal's benchmark in ``folder``."""
    arms = [default_policy_name(), STOCK, "adaptive"]
    arms = list(dict.fromkeys(arms))  # the default may be one of the others
    header = ["goal", "run", *(arm_label(arm) for arm in arms)]
    lines = [f"- **{goal.name}**: {goal.asks}" for goal in goals]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    both = []
    for goal in goals:
        runs = latest_runs(folder, goal.stem)
        met_in: list[Optional[bool]] = []
        for number, data in runs:
            cells = []
            for arm in arms:
                cell = goal.read(data, arm)
                if cell is None:
                    cells.append("-")
                    continue
                text, met = cell
                cells.append(text + _verdict(met))
                if arm == "adaptive":
                    met_in.append(met)
            lines.append(f"| {goal.name} | `{goal.stem}{number}` | " + " | ".join(cells) + " |")
        if met_in and all(met_in):
            both.append(goal.name)
    met_text = ", ".join(both) if both else "none"
    lines += [
        "",
        f"Goals `adaptive` met in both of their latest runs: {met_text} (of {len(goals)}).",
    ]
    return "\n".join(lines) + "\n"


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv``, render the table, print it and write it if asked."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench.goals",
        description="The adaptive preset's goals, judged on the committed real runs.",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=Path("bench/results/adaptive-default"),
        help="the folder of the runs (default: bench/results/adaptive-default)",
    )
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the table")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"argument --results: no such folder: {args.results}")
    text = goals_markdown(args.results)
    sys.stdout.write(text)
    if args.markdown is not None:
        args.markdown.write_text(text, encoding="utf-8")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.bench.goals``: 0, or 2 on a usage error."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
