"""``python -m backpressure.sim``: run a named scenario under several arms.

Usage::

    python -m backpressure.sim --list
    python -m backpressure.sim fleet --seed 1 --json fleet.json --png fleet.png
    python -m backpressure.sim sustained-3x --arms no-retries,current,draft

``--list`` works without the ``sim`` extra; a run without SimPy prints the ``MissingExtraError``
message and exits 1. Usage errors (an unknown scenario or arm) exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional

from backpressure.cli import (
    add_progress_argument,
    add_seed_argument,
    name_list,
    progress_enabled,
    run_cli,
)
from backpressure.core.extras import require
from backpressure.sim.arms import available_arms, default_first
from backpressure.sim.scenarios import SCENARIOS, scenario

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.sim",
        description=(
            "Simulate MongoDB clients under overload with the package's real decision core, "
            "and compare the arms with the physical limit."
        ),
    )
    parser.add_argument("scenario", nargs="?", help="a scenario name (see --list)")
    parser.add_argument("--list", action="store_true", help="list scenarios and arms")
    parser.add_argument(
        "--arms",
        type=name_list(available_arms()),
        default=",".join(default_first(list(available_arms()))),
        help="comma-separated arm names (default: all: %(default)s)",
    )
    add_seed_argument(parser)
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--png", type=Path, metavar="PATH", help="draw the chart to a PNG")
    add_progress_argument(parser)
    return parser


def _listing() -> str:
    """Scenarios and arms, one per line."""
    lines = ["scenarios:"]
    for name, factory in SCENARIOS.items():
        lines.append(f"  {name:<22} {factory().description}")
    lines.append("arms:")
    for name, arm in available_arms().items():
        lines.append(f"  {name:<22} {arm.description}")
    return "\n".join(lines)


def _progress_bar(total: float, enabled: bool) -> tuple[Optional[Callable[[float], None]], Any]:
    """A tqdm bar over simulated seconds, or nothing."""
    if not enabled:
        return None, None
    tqdm = require("tqdm", "sim", "The simulator's progress bar").tqdm
    bar = tqdm(total=round(total, 1), unit="sim s", leave=False, dynamic_ncols=True)

    def advance(seconds: float) -> None:
        bar.update(round(seconds, 3))

    return advance, bar


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; return the exit status (1 without SimPy, 2 on a usage error)."""
    return run_cli(_main, argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    """The command line, without the missing-extra and Ctrl-C handling of :func:`main`."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        print(_listing())
        return 0
    if not args.scenario:
        parser.error("name a scenario (see --list)")
    try:
        chosen = scenario(args.scenario)
    except ValueError as exc:
        parser.error(f"argument scenario: {exc}")
    names: list[str] = args.arms
    require("simpy", "sim", "The simulator")
    from backpressure.sim.report import format_table, write_chart, write_json
    from backpressure.sim.runner import run

    show = progress_enabled(args.progress)
    total = (chosen.duration_s + chosen.drain_s) * len(names)
    advance, bar = _progress_bar(total, show)
    try:
        result = run(chosen, names, args.seed, progress=advance)
    finally:
        if bar is not None:
            bar.close()
    print(f"{chosen.name}: {chosen.description} (seed {args.seed})")
    print(format_table(result))
    if args.json is not None:
        write_json(result, args.json)
        print(f"JSON written to {args.json}")
    if args.png is not None:
        write_chart(result, args.png, title=f"{chosen.name}: {chosen.description}")
        print(f"chart written to {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
