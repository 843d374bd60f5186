"""``python -m backpressure.demo``: backpressure at work against a rate-limited replica set.

The embedded replica set runs in a subprocess with its ingress request rate limiter at C ops/s.
The same open-loop workload (find_one by _id, update_one, insert_one) runs once per client policy:
a steady phase below C, a short burst well above C, a recovery phase and a sustained overload.
Per policy the demo reports goodput, errors the application saw, attempts the server received per
successful operation, latency and retries refused by the budget; it writes a JSON report and a
PNG chart of goodput and amplification over time.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, TextIO

from backpressure.workload import (
    POLICIES,
    POLICY_NAMES,
    Phase,
    RunResult,
    WorkloadConfig,
    run_policy,
)
from backpressure.workload.report import (
    draw_timelines,
    fmt,
    format_table,
    machine_info,
    progress_bar,
    quiet_backpressure_logs,
    write_json,
)
from backpressure.workload.server import ServerFactory, embedded_server

__all__ = ["build_parser", "demo_phases", "main", "result_rows", "run_demo"]

TABLE_HEADERS = (
    "policy",
    "ok/s",
    "burst lost",
    "overload lost",
    "lost",
    "unsent",
    "att/op",
    "p50 ms",
    "p99 ms",
    "refused",
)
TABLE_WIDTH = 100
"""The printed table fits in this many columns."""


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
        description="Compare client retry policies against a rate-limited embedded replica set.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--capacity", type=float, default=200.0, help="server rate limit C, ops/s")
    parser.add_argument(
        "--burst-seconds", type=float, default=1.0, help="limiter burst capacity, s"
    )
    parser.add_argument("--threads", type=int, default=256, help="client worker threads")
    parser.add_argument("--steady", type=float, default=4.0, help="steady phase, s")
    parser.add_argument("--steady-load", type=float, default=0.4, help="steady load, x C")
    parser.add_argument("--burst", type=float, default=2.0, help="burst phase, s")
    parser.add_argument("--burst-load", type=float, default=2.0, help="burst load, x C")
    parser.add_argument(
        "--recovery", type=float, default=4.0, help="recovery phase (steady load), s"
    )
    parser.add_argument("--overload", type=float, default=5.0, help="sustained overload phase, s")
    parser.add_argument("--overload-load", type=float, default=5.0, help="overload load, x C")
    parser.add_argument(
        "--policies",
        default=",".join(POLICY_NAMES),
        help=f"comma-separated subset of {','.join(POLICY_NAMES)}",
    )
    parser.add_argument("--members", type=int, default=3, help="replica set members")
    parser.add_argument("--read-fraction", type=float, default=0.5, help="share of find_one")
    parser.add_argument("--seed", type=int, default=1, help="seed of the operation mix")
    parser.add_argument(
        "--output", type=Path, default=Path("demo-results"), help="output directory"
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (there is none either when stdout is not a terminal)",
    )
    return parser


def _policies(value: str) -> list[str]:
    """Parse and validate the ``--policies`` list."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in POLICIES]
    if unknown or not names:
        raise SystemExit(f"unknown policies {unknown}; choose from {', '.join(POLICY_NAMES)}")
    return names


def result_rows(results: Sequence[RunResult]) -> list[list[str]]:
    """Turn run results into table rows (TABLE_HEADERS order)."""
    rows = []
    for r in results:
        rows.append(
            [
                r.policy,
                fmt(r.goodput),
                _phase_errors(r, "burst"),
                _phase_errors(r, "overload"),
                f"{r.app_errors:,}",
                f"{r.skipped + r.never_sent:,}",
                fmt(r.attempts_per_issued, 2),
                fmt(r.latency_p50_ms),
                fmt(r.latency_p99_ms),
                "-" if r.refused is None else f"{r.refused:,}",
            ]
        )
    return rows


def _phase_errors(result: RunResult, name: str) -> str:
    """Failed operations among a phase's arrivals (``-`` when the run has no such phase)."""
    try:
        phase = result.phase(name)
    except KeyError:
        return "-"
    return f"{phase.failed + phase.skipped:,} / {phase.offered:,}"


def run_demo(
    args: argparse.Namespace,
    *,
    server_factory: Optional[ServerFactory] = None,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    """Run the demo as configured by ``args``; print the table and return the JSON report."""
    names = _policies(args.policies)
    phases = demo_phases(args)
    config = WorkloadConfig(
        capacity=args.capacity,
        burst_seconds=args.burst_seconds,
        threads=args.threads,
        read_fraction=args.read_fraction,
        seed=args.seed,
        database="backpressure_demo",
    )
    factory = server_factory or (lambda: embedded_server(members=args.members))
    runnable = [name for name in names if POLICIES[name].unavailable() is None]
    skipped = {name: POLICIES[name].unavailable() for name in names if name not in runnable}
    results: list[RunResult] = []
    started = time.perf_counter()
    planned = sum(phase.duration for phase in phases) * len(runnable)
    bar = progress_bar(
        planned,
        desc="demo",
        disabled=args.no_progress or not sys.stdout.isatty(),
        counter="{n:.0f}/{total:.0f} s ",
    )
    try:
        with quiet_backpressure_logs(), factory() as server:
            for name in runnable:
                bar.set_postfix_str(name)
                results.append(
                    run_policy(server, POLICIES[name], phases, config, progress=bar.update)
                )
    finally:
        bar.close()
    elapsed = time.perf_counter() - started

    out_dir: Path = args.output
    chart = draw_timelines(results, phases, args.capacity, out_dir / "demo.png")
    report: dict[str, Any] = {
        "tool": "backpressure.demo",
        "machine": machine_info(),
        "wall_seconds": elapsed,
        "config": {
            "capacity": args.capacity,
            "burst_seconds": args.burst_seconds,
            "threads": args.threads,
            "read_fraction": args.read_fraction,
            "members": args.members,
            "seed": args.seed,
        },
        "phases": [
            {"name": p.name, "load": p.load, "duration": p.duration, "rate": p.load * args.capacity}
            for p in phases
        ],
        "policies": {r.policy: r.to_dict() for r in results},
        "unavailable": skipped,
        "chart": str(chart),
    }
    json_path = out_dir / "demo.json"
    write_json(json_path, report)

    import textwrap

    print(textwrap.fill(_describe(phases, config), width=TABLE_WIDTH), file=out)
    print(format_table(TABLE_HEADERS, result_rows(results)), file=out)
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
    import textwrap

    return textwrap.fill(
        "ok/s: successful ops per second over all phases (goodput). burst/overload lost: "
        "arrivals of that phase the application lost (an error raised, or never sent) / "
        "arrivals. lost: all app errors. unsent: lost without reaching the server (no worker "
        "free before the deadline, or refused locally). att/op: workload commands the server "
        "received per operation sent. p50/p99: latency of successful ops. refused: retries "
        "the retry budget refused (- = no budget).",
        width=TABLE_WIDTH,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point."""
    args = build_parser().parse_args(argv)
    run_demo(args)
    return 0
