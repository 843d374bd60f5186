"""``python -m backpressure.demo``: backpressure at work against a rate-limited replica set.

The embedded replica set runs in a subprocess with its ingress request rate limiter on.

The default scenario, ``fleet`` (:mod:`backpressure.demo.fleet`), runs several client processes
in a closed loop while the capacity steps down and up, every arm one after another, the
default's first, next to the physical limit.

The ``single`` scenario (``--scenario single``) runs one client process at C ops/s: the same
open-loop workload (find_one by _id, update_one, insert_one) runs once per client arm:
a steady phase below C, a short burst well above C, a recovery phase and a sustained overload.
Per arm the demo reports the operations the application lost in each phase next to the fewest
any arm could lose (the physical-limit oracle on the same arrivals), the load the server
received as a multiple of C, attempts per operation, latency and retries refused by the budget;
it writes a JSON report and one PNG figure (:mod:`backpressure.demo.chart`).

``--uri URI`` runs the same client processes against a deployment you name instead of the
embedded server (a loopback address unless ``--allow-remote``); no server parameter changes
unless ``--set-limiter`` asks to set mongod's ingress request rate limiter at each capacity step
(:mod:`backpressure.workload.remote`, docs/own-cluster.md).

The command line follows the package's conventions (:mod:`backpressure.cli`): a bad value is a
usage error naming its flag (exit 2), ``--progress {auto,on,off}`` and ``--seed N``.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, TextIO

from backpressure.cli import (
    add_progress_argument,
    add_seed_argument,
    bounded_float,
    comma_list,
    name_list,
    non_negative_float,
    positive_float,
    positive_int,
    progress_enabled,
    run_cli,
)
from backpressure.core.extras import require
from backpressure.demo.chart import draw_demo_chart, phase_load, phase_spans
from backpressure.sim.oracle import Capacity, physical_min_errors
from backpressure.workload import (
    ARM_NAMES,
    ARMS,
    Phase,
    RunResult,
    WorkloadConfig,
    run_arm,
)
from backpressure.workload.arms import ARMS_KEY
from backpressure.workload.remote import (
    add_uri_arguments,
    check_uri_arguments,
    deployment_factory,
    deployment_label,
    untouched_note,
)
from backpressure.workload.report import (
    fmt,
    format_table,
    machine_info,
    progress_bar,
    quiet_backpressure_logs,
    write_json,
)
from backpressure.workload.server import ServerFactory, embedded_server

__all__ = [
    "ARRIVALS",
    "DEMO_ARMS",
    "FEWEST",
    "SCENARIOS",
    "TABLE_HEADERS",
    "TABLE_WIDTH",
    "build_parser",
    "demo_phases",
    "fewest_errors",
    "main",
    "result_rows",
    "run_demo",
]

SCENARIOS = ("fleet", "single")
"""The demo's scenarios, the default first."""

DEMO_ARMS: tuple[str, ...] = tuple(
    name
    for name in ("no-retries", "pymongo-native", "current", "draft", "adaptive")
    if name in ARMS
)
"""The arms the demo compares by default, as the overload bench does (others on request)."""

TABLE_HEADERS = (
    "arm",
    "burst lost",
    "overload lost",
    "lost",
    "unsent",
    "ovl xC",
    "att/op",
    "p50 ms",
    "p99 ms",
    "refused",
)
TABLE_WIDTH = 100
"""The printed table fits in this many columns."""

FEWEST = "physical limit"
"""The table row of the physical limit (the oracle's fewest lost operations)."""

ARRIVALS = "operations"
"""The table row of the operations that arrived (the same for every arm)."""


def demo_phases(args: argparse.Namespace) -> list[Phase]:
    """Build the phases from the command line."""
    return [
        Phase("steady", args.steady_load, args.steady),
        Phase("burst", args.burst_load, args.burst),
        Phase("recovery", args.steady_load, args.recovery),
        Phase("overload", args.overload_load, args.overload),
    ]


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.demo",
        description="Compare client arms against a rate-limited embedded replica set.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default=SCENARIOS[0],
        help="fleet: several client processes, closed loop, capacity steps; "
        "single: one client process, open loop, phases at multiples of C",
    )
    fleet = parser.add_argument_group("fleet scenario")
    fleet.add_argument("--processes", type=positive_int, default=4, help="client processes")
    fleet.add_argument(
        "--quick",
        action="store_true",
        help="a run of a few seconds: the fleet benchmark's quick plan (2 processes x 2 "
        "threads, capacity 60 -> 30 ops/s, 1.5 s steps) instead of the options above",
    )
    fleet.add_argument(
        "--rates",
        type=comma_list(positive_float),
        default="100,50,150",
        help="capacity of each step, ops/s, comma-separated",
    )
    fleet.add_argument("--step", type=positive_float, default=4.0, help="seconds per capacity step")
    fleet.add_argument(
        "--deadline", type=positive_float, default=1.0, help="pymongo.timeout of every operation, s"
    )
    fleet.add_argument(
        "--settle",
        type=non_negative_float,
        default=1.0,
        help="seconds after a step left out of its goodput (less than --step)",
    )
    single = parser.add_argument_group("single scenario")
    single.add_argument(
        "--capacity", type=positive_float, default=100.0, help="server rate limit C, ops/s"
    )
    single.add_argument(
        "--burst-seconds", type=positive_float, default=1.0, help="limiter burst capacity, s"
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="client threads: per process in the fleet scenario (default 8), in all in the "
        "single scenario (default 256)",
    )
    single.add_argument("--steady", type=positive_float, default=1.5, help="steady phase, s")
    single.add_argument(
        "--steady-load", type=non_negative_float, default=0.4, help="steady load, x C"
    )
    single.add_argument("--burst", type=positive_float, default=2.0, help="burst phase, s")
    single.add_argument(
        "--burst-load", type=non_negative_float, default=2.0, help="burst load, x C"
    )
    single.add_argument(
        "--recovery", type=positive_float, default=2.0, help="recovery phase (steady load), s"
    )
    single.add_argument(
        "--overload", type=positive_float, default=3.0, help="sustained overload phase, s"
    )
    single.add_argument(
        "--overload-load", type=non_negative_float, default=5.0, help="overload load, x C"
    )
    single.add_argument(
        "--bucket", type=positive_float, default=0.5, help="time resolution of the figure, s"
    )
    parser.add_argument(
        "--arms",
        type=name_list(ARM_NAMES),
        default=",".join(DEMO_ARMS),
        help=f"comma-separated subset of {','.join(ARM_NAMES)}",
    )
    parser.add_argument("--members", type=positive_int, default=3, help="replica set members")
    single.add_argument(
        "--read-fraction", type=bounded_float(0.0, 1.0), default=0.5, help="share of find_one"
    )
    add_seed_argument(single, scope="the operation mix of the single scenario")
    parser.add_argument(
        "--output", type=Path, default=Path("demo-results"), help="output directory"
    )
    add_uri_arguments(parser)
    add_progress_argument(parser)
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors that need several values, before any server starts."""
    check_uri_arguments(parser, args)
    if args.scenario == "fleet" and not args.quick:
        if args.settle >= args.step:
            parser.error(f"argument --settle: must be less than --step ({args.step:g})")
        from backpressure.demo.fleet import fleet_plan

        try:
            fleet_plan(args)
        except ValueError as exc:
            parser.error(str(exc))


def fewest_errors(
    arrivals: Sequence[float], phases: Sequence[Phase], config: WorkloadConfig
) -> dict[str, int]:
    """The fewest operations any arm could lose: per phase (by arrival) and for the run.

    The physical-limit oracle schedules arrivals (seconds from the start) against the server's
    limiter (``config.capacity``, ``config.burst_seconds``), each operation allowed
    ``config.allowed_wait``. A phase's figure is for its own arrivals alone, the limiter's bucket
    full at its start: no arm can lose fewer of them, whatever it did before. The phases'
    figures need not add up to the run's: an arm may lose operations in one phase to keep
    capacity for the next.
    """
    capacity = Capacity.constant(config.capacity, config.burst_seconds)
    fewest: dict[str, int] = {}
    start = 0.0
    for index, phase in enumerate(phases):
        end = start + phase.duration
        last = index == len(phases) - 1
        mine = [t for t in arrivals if start <= t and (last or t < end)]
        fewest[phase.name] = physical_min_errors(mine, config.allowed_wait, capacity) if mine else 0
        start = end
    fewest["run"] = (
        physical_min_errors(list(arrivals), config.allowed_wait, capacity) if arrivals else 0
    )
    return fewest


def result_rows(
    results: Sequence[RunResult],
    phases: Sequence[Phase],
    fewest: Optional[dict[str, int]] = None,
) -> list[list[str]]:
    """Turn run results into table rows (TABLE_HEADERS order).

    After the arms come two reference rows: the fewest lost operations any arm could
    have (when ``fewest`` is given) and the operations that arrived (the same for every arm).
    """
    spans = {span.name: span for span in phase_spans(phases)}
    overload = spans.get("overload")
    rows = []
    for r in results:
        rows.append(
            [
                r.arm,
                _phase_count(r, "burst", lost=True),
                _phase_count(r, "overload", lost=True),
                f"{r.app_errors:,}",
                f"{r.skipped + r.never_sent:,}",
                "-" if overload is None else f"{phase_load(r, overload, r.capacity):.1f}xC",
                fmt(r.server_received / r.offered if r.offered else None, 2),
                fmt(r.latency_p50_ms, 0),
                fmt(r.latency_p99_ms, 0),
                "-" if r.refused is None else f"{r.refused:,}",
            ]
        )
    if not results:
        return rows
    first = results[0]
    if fewest is not None:
        rows.append(
            [
                FEWEST,
                *(f"{fewest[name]:,}" if name in fewest else "-" for name in ("burst", "overload")),
                f"{fewest.get('run', 0):,}",
                "-",
                "<=1xC",
                *("-" * 4),
            ]
        )
    rows.append(
        [
            ARRIVALS,
            _phase_count(first, "burst", lost=False),
            _phase_count(first, "overload", lost=False),
            f"{first.offered:,}",
            *("-" * 6),
        ]
    )
    return rows


def _phase_count(result: RunResult, name: str, *, lost: bool) -> str:
    """A phase's lost operations (``lost``) or arrivals; ``-`` when the run has no such phase."""
    try:
        phase = result.phase(name)
    except KeyError:
        return "-"
    return f"{phase.failed + phase.skipped if lost else phase.offered:,}"


def run_demo(
    args: argparse.Namespace,
    *,
    server_factory: Optional[ServerFactory] = None,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    """Run the demo as configured by ``args``; print the table and return the JSON report."""
    names: list[str] = list(args.arms)
    show_bar = progress_enabled(args.progress)
    note = untouched_note(args)
    if note is not None:
        print(textwrap.fill(note, width=TABLE_WIDTH), file=out)
    if args.scenario == "fleet":
        from backpressure.demo.fleet import run_fleet_demo

        return run_fleet_demo(
            args,
            names,
            server_factory=server_factory,
            out=out,
            show_bar=show_bar,
        )
    phases = demo_phases(args)
    config = WorkloadConfig(
        capacity=args.capacity,
        burst_seconds=args.burst_seconds,
        threads=256 if args.threads is None else args.threads,
        read_fraction=args.read_fraction,
        seed=args.seed,
        bucket_width=args.bucket,
        database="backpressure_demo",
    )
    factory = server_factory or deployment_factory(
        args, lambda: embedded_server(members=args.members)
    )
    runnable = [name for name in names if ARMS[name].unavailable() is None]
    skipped = {name: ARMS[name].unavailable() for name in names if name not in runnable}
    results: list[RunResult] = []
    started = time.perf_counter()
    planned = sum(phase.duration for phase in phases) * len(runnable)
    bar = progress_bar(
        planned,
        desc="demo",
        disabled=not show_bar,
        counter="{n:.0f}/{total:.0f} s ",
    )
    try:
        with quiet_backpressure_logs(), factory() as server:
            for name in runnable:
                bar.set_postfix_str(name)
                results.append(run_arm(server, ARMS[name], phases, config, progress=bar.update))
    finally:
        bar.close()
    elapsed = time.perf_counter() - started
    fewest = fewest_errors(results[0].arrivals, phases, config) if results else {}

    out_dir: Path = args.output
    chart = draw_demo_chart(results, phases, args.capacity, fewest, out_dir / "demo.png")
    report: dict[str, Any] = {
        "tool": "backpressure.demo",
        "deployment": deployment_label(args),
        "machine": machine_info(),
        "wall_seconds": elapsed,
        "config": {
            "capacity": args.capacity,
            "burst_seconds": args.burst_seconds,
            "threads": config.threads,
            "read_fraction": args.read_fraction,
            "allowed_wait": config.allowed_wait,
            "bucket_seconds": args.bucket,
            "members": args.members,
            "seed": args.seed,
        },
        "phases": [
            {"name": p.name, "load": p.load, "duration": p.duration, "rate": p.load * args.capacity}
            for p in phases
        ],
        "fewest_errors": fewest,
        ARMS_KEY: {r.arm: r.to_dict() for r in results},
        "server_load_x_capacity": {
            r.arm: {
                span.name: round(phase_load(r, span, args.capacity), 3)
                for span in phase_spans(phases)
            }
            for r in results
        },
        "unavailable": skipped,
        "chart": str(chart),
    }
    json_path = out_dir / "demo.json"
    write_json(json_path, report)

    print(textwrap.fill(_describe(phases, config), width=TABLE_WIDTH), file=out)
    print(format_table(TABLE_HEADERS, result_rows(results, phases, fewest)), file=out)
    for name, reason in skipped.items():
        print(f"{name}: not run ({reason})", file=out)
    print(_legend(), file=out)
    print(f"JSON:  {json_path}", file=out)
    print(f"chart: {chart}", file=out)
    print(f"wall time {elapsed:.1f} s", file=out)
    return report


def _describe(phases: Sequence[Phase], config: WorkloadConfig) -> str:
    """One paragraph describing the run."""
    plan = ", ".join(
        f"{p.name} {p.duration:g} s at {p.load:g}xC ({p.load * config.capacity:,.0f} ops/s)"
        for p in phases
    )
    return (
        f"Rate-limited replica set, C = {config.capacity:g} ops/s "
        f"(burst {config.burst_seconds:g} s), {config.threads} client threads, each operation "
        f"allowed {config.allowed_wait:g} s, open-loop load: {plan}."
    )


def _legend() -> str:
    """Explain the columns (wrapped to the table's width)."""
    return textwrap.fill(
        "burst/overload lost: "
        "operations arriving in that phase the application lost (an error raised, or never "
        "sent). lost: all app errors of the run. unsent: lost without reaching the server "
        "(no worker or connection free before the deadline, or refused locally). ovl xC: "
        "attempts sent per second during the overload phase, as a multiple of C. att/op: "
        "workload commands the server received per operation, whole run. p50/p99: latency of "
        "successful ops. refused: retries the retry budget refused (- = no budget). "
        f"{FEWEST}: the fewest lost operations any arm could have on these arrivals "
        "(physical-limit oracle); the server admits at most C ops/s. "
        f"{ARRIVALS}: the operations that arrived, in each phase and in all.",
        width=TABLE_WIDTH,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point: 0 after a run, 1 without a needed extra, 2 on a usage error."""
    return run_cli(_main, argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    """The command line, without the missing-extra and Ctrl-C handling of :func:`main`."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    # Name a missing extra now, not after the runs: the progress bar and the chart need them.
    require("tqdm", "demo", "The demo's progress bar")
    require("matplotlib", "demo", "The demo's chart")
    run_demo(args)
    return 0
