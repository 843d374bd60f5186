"""How firm the competing mode's "peers" verdict is: all-adaptive fleets with one option varied.

``python -m backpressure.sim.sensitivity`` runs the simulated all-adaptive fleets (8 x 8, 4 x 16
and the recovery fleet) over ``--seeds`` seeds, with one pacing option (``--option``, by default
``adaptive_quiet``) set to each of ``--values``, and counts the runs in which a pacer competed.
The option may also be the servers' (``burst_seconds``: the rate limiter's burst allowance, which
mongod's operators set and no client can see): it changes the fleet for every arm, so each
value has the default's row and then ``adaptive``'s.
Every neighbour in these fleets backs off, so every competing spell is a false verdict: the
neighbour test read a joint cut that did not drain the pushback as "neighbours that do not
cut".  Each row gives those runs, the spells, and the fleet's errors, attempts per operation
and Jain index over the runs.  The default's row (``current``, which has no pacing, so nothing
in it competes) comes first in each fleet, as in every table here.

The same seeds with the preset's own value show whether "no pacer ever competes among peers"
holds only at that value or around it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from backpressure.cli import (
    add_seeds_arguments,
    comma_list,
    name_list,
    positive_float,
    run_cli,
    seed_span,
    swept_seeds,
)
from backpressure.core.extras import require
from backpressure.core.policy import InvalidPolicyError
from backpressure.sim.arms import SimArm, resolve
from backpressure.sim.model import Scenario
from backpressure.sim.scenarios import BenchShape, closed_fleet, recovery_fleet
from backpressure.workload.arms import from_file, to_file

__all__ = [
    "FLEETS",
    "OPTIONS",
    "SERVER_OPTIONS",
    "SensitivityRow",
    "fleet_scenario",
    "main",
    "render",
    "run_sensitivity",
]

FLEETS: dict[str, Callable[[BenchShape], Scenario]] = {
    "8x8": lambda shape: closed_fleet(shape=shape),
    "4x16": lambda shape: closed_fleet(4, 16, shape=shape),
    "recovery-fleet": recovery_fleet,
}
"""The all-adaptive fleets, by name: the yardsticks' 8 x 8 and 4 x 16 closed fleets
(capacity 200 -> 100 -> 300/s) and the recovery fleet (4 x 8, 100/s for 10 s, then no limit)."""

OPTIONS: tuple[str, ...] = (
    "adaptive_quiet",
    "adaptive_increase",
    "adaptive_decrease",
    "adaptive_window",
)
"""The pacing options ``--option`` may vary."""

SERVER_OPTIONS: tuple[str, ...] = ("burst_seconds",)
"""The servers' options ``--option`` may vary: ``burst_seconds``, the request limiter's bucket in
seconds of its rate (1 in every fleet here; mongod's
``ingressRequestAdmissionBurstCapacitySecs``)."""

DEFAULT_VALUES: tuple[float, ...] = (0.8, 0.9, 1.0, 1.1, 1.2, 1.3)
"""``--values`` by default: ``adaptive_quiet`` from 0.8 s to 1.3 s (the preset has 1 s)."""

DEFAULT_POLICY = "current"
"""The package's default preset: its row comes first in each fleet."""


@dataclass(frozen=True)
class SensitivityRow:
    """One fleet under one arm (and one value of the varied option), over the seeds."""

    fleet: str
    arm: str
    option: Optional[str]
    """The varied option (None for the default's row of a pacing option)."""
    value: Optional[float]
    """Its value in these runs (None for the default's row of a pacing option)."""
    runs: int
    competing_runs: int
    """Runs in which at least one pacer competed."""
    spells: int
    """Competing spells started over the runs (all clients, all servers)."""
    errors: float
    """App errors per operation over the runs."""
    attempts_per_op: float
    """Attempts the server received per operation over the runs."""
    jain_mean: float
    """The mean of the runs' Jain indexes of per-process successes."""
    jain_min: float
    """The lowest of them."""


def _arm(arm: str, option: Optional[str], value: Optional[float]) -> SimArm:
    """``arm``; for ``adaptive``, with a pacing ``option`` set to ``value``."""
    base = resolve(arm)
    if option not in OPTIONS or value is None:
        return base
    assert base.policy is not None  # the adaptive preset is a core arm
    changed = base.policy.replace(**{option: value})
    return SimArm(base.name, f"{base.description}, {option}={value:g}", base.kind, changed)


def fleet_scenario(
    fleet: str, option: Optional[str] = None, value: Optional[float] = None
) -> Scenario:
    """The scenario of ``fleet``, with a server ``option`` set to ``value`` on every limiter.

    Raises:
        ValueError: an invalid value (the limiter's check names the field and its range).
    """
    if option in SERVER_OPTIONS and value is not None:
        return FLEETS[fleet](BenchShape(burst_seconds=value))
    return FLEETS[fleet](BenchShape())


def _run_one(
    job: tuple[str, str, Optional[str], Optional[float], int],
) -> tuple[int, int, int, int, float]:
    """Run one fleet and seed: (ops, errors, attempts, spells, Jain) (a process pool's task)."""
    from backpressure.sim.engine import simulate
    from backpressure.workload.metrics import jain_index

    fleet, arm, option, value, seed = job
    data = simulate(fleet_scenario(fleet, option, value), _arm(arm, option, value), seed)
    ops = data.successes + data.errors
    jain = jain_index(data.client_successes)
    return (
        ops,
        data.errors,
        data.server_attempts,
        sum(data.client_competing_spells),
        1.0 if jain is None else jain,
    )


def run_sensitivity(
    fleets: Sequence[str] = tuple(FLEETS),
    option: str = "adaptive_quiet",
    values: Sequence[float] = DEFAULT_VALUES,
    seeds: Sequence[int] = tuple(range(1, 25)),
    jobs: int = 1,
) -> list[SensitivityRow]:
    """Run every fleet for every seed: the default's row, then ``adaptive`` at each value.

    A server option changes the fleet for every arm: each value gets the default's row, then
    ``adaptive``'s.

    Raises:
        InvalidPolicyError: a value outside a pacing option's range (the message names both).
        ValueError: an unknown fleet or option, or a server option's invalid value.
    """
    require("simpy", "sim", "the simulator")
    unknown = [fleet for fleet in fleets if fleet not in FLEETS]
    if unknown:
        raise ValueError(f"unknown fleet {', '.join(unknown)}; choose from {', '.join(FLEETS)}")
    if option not in OPTIONS + SERVER_OPTIONS:
        known = ", ".join(OPTIONS + SERVER_OPTIONS)
        raise ValueError(f"unknown option {option!r}; choose from {known}")
    for checked in values:
        # A bad value raises here, naming the option and its range.
        _arm("adaptive", option, checked)
        fleet_scenario(fleets[0] if fleets else "8x8", option, checked)
    cells: list[tuple[str, str, Optional[str], Optional[float]]] = []
    for fleet in fleets:
        if option in SERVER_OPTIONS:
            for setting in values:
                cells.append((fleet, DEFAULT_POLICY, option, setting))
                cells.append((fleet, "adaptive", option, setting))
        else:
            cells.append((fleet, DEFAULT_POLICY, None, None))
            cells.extend((fleet, "adaptive", option, setting) for setting in values)
    jobs_list = [(*cell, seed) for cell in cells for seed in seeds]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_run_one, jobs_list))
    else:
        results = [_run_one(job) for job in jobs_list]
    rows = []
    per_cell = len(seeds)
    for index, (fleet, arm, name, value) in enumerate(cells):
        runs = results[index * per_cell : (index + 1) * per_cell]
        ops = sum(r[0] for r in runs)
        jains = [r[4] for r in runs]
        rows.append(
            SensitivityRow(
                fleet=fleet,
                arm=arm,
                option=name,
                value=value,
                runs=len(runs),
                competing_runs=sum(1 for r in runs if r[3]),
                spells=sum(r[3] for r in runs),
                errors=sum(r[1] for r in runs) / ops if ops else 0.0,
                attempts_per_op=sum(r[2] for r in runs) / ops if ops else 0.0,
                jain_mean=statistics.mean(jains),
                jain_min=min(jains),
            )
        )
    return rows


def render(rows: Sequence[SensitivityRow]) -> str:
    """A Markdown table: per fleet, the default's row, then ``adaptive`` at each value (a server
    option: the default's row and ``adaptive``'s at each value)."""
    lines = [
        "| fleet | arm | option value | runs | runs with a pacer competing | spells | "
        "errors | attempts/op | Jain mean | Jain min |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        setting = "-" if row.option is None else f"`{row.option}={row.value:g}`"
        lines.append(
            f"| {row.fleet} | {row.arm} | {setting} | {row.runs} | {row.competing_runs} | "
            f"{row.spells} | {row.errors:.2%} | {row.attempts_per_op:.3f} | "
            f"{row.jain_mean:.3f} | {row.jain_min:.3f} |"
        )
    return "\n".join(lines) + "\n"


def render_markdown(rows: Sequence[SensitivityRow], seeds: Sequence[int], command: str) -> str:
    """The results page: what was run, then the table."""
    span = seed_span(seeds)
    server = any(row.option in SERVER_OPTIONS for row in rows)
    kind = "server" if server else "pacing"
    lines = [
        f"# Simulated all-adaptive fleets with one {kind} option varied ({span})\n",
        "Every neighbour in these fleets backs off, so a pacer that competes read a joint "
        'cut that did not drain the pushback as "neighbours that do not cut": every spell '
        f"is a false verdict. `{command}`.\n",
    ]
    if server:
        lines.append(
            "The servers' option changes the fleet for every arm, so each value has the "
            "default's row, then `adaptive`'s.\n"
        )
    lines.append(render(rows))
    return "\n".join(lines)


def load_rows(rows: Sequence[dict[str, Any]]) -> list[SensitivityRow]:
    """The rows of a ``--json`` file."""
    return [SensitivityRow(**from_file(row)) for row in rows]


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv``, run the fleets, print (and optionally write) the table."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.sim.sensitivity",
        description="Competing spells among polite peers, with one pacing or server option varied.",
    )
    parser.add_argument(
        "--fleet",
        type=name_list(FLEETS),
        default=list(FLEETS),
        help=f"fleets, comma-separated (default: {','.join(FLEETS)})",
    )
    parser.add_argument(
        "--option",
        choices=OPTIONS + SERVER_OPTIONS,
        default="adaptive_quiet",
        help="the pacing (or server) option to vary (default: adaptive_quiet)",
    )
    parser.add_argument(
        "--values",
        type=comma_list(positive_float),
        default=DEFAULT_VALUES,
        help="its values, comma-separated (default: "
        + ",".join(f"{v:g}" for v in DEFAULT_VALUES)
        + ")",
    )
    add_seeds_arguments(parser, seeds=24)
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the rows as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the results page")
    args = parser.parse_args(argv)
    seeds = swept_seeds(parser, args)
    try:
        rows = run_sensitivity(args.fleet, args.option, args.values, seeds, args.jobs)
    except (InvalidPolicyError, ValueError) as error:  # checked before any run starts
        parser.error(f"argument --values: {error}")
    sys.stdout.write(render(rows))
    if args.json is not None:
        args.json.write_text(
            json.dumps([to_file(asdict(row)) for row in rows], indent=1) + "\n", encoding="utf-8"
        )
    if args.markdown is not None:
        command = (
            f"python -m backpressure.sim.sensitivity --fleet {','.join(args.fleet)} "
            f"--option {args.option} --values {','.join(f'{v:g}' for v in args.values)} "
            f"--seed {args.seed} --seeds {args.seeds}"
        )
        args.markdown.write_text(render_markdown(rows, seeds, command), encoding="utf-8")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.sim.sensitivity``: exit status 0, 1 without SimPy, 2 on usage
    errors."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
