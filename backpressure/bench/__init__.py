"""``python -m backpressure.bench``: overhead, decision-core cost, overload and server benchmarks.

``python -m backpressure.bench hotspot [options]`` runs the hotspot benchmark instead
(:mod:`backpressure.bench.hotspot`).

Writes ``latest.json`` and ``latest.md`` (the machine, the versions, the date, the load average
and, per goal, whether it was met, with its figures) into ``--output`` (by default the untracked
``bench-results/``) and prints the report.  The committed results in ``bench/results/`` are
refreshed on purpose with ``--output bench/results``. A bad option value is a usage error naming
the flag (exit 2); ``--progress {auto,on,off}`` as in every command line of the package.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, TextIO

from backpressure.bench.core_cost import CoreCost, measure_core_cost
from backpressure.bench.fleet import (
    QUICK,
    FleetPlan,
    FleetRun,
    fleet_arms,
    parse_shape,
    plan_from_dict,
    render_fleet_markdown,
    run_fleet,
)
from backpressure.bench.overhead import (
    INSTRUCTION_GOALS,
    OPERATIONS,
    WRAPPERS,
    measure_instructions,
    measure_overhead,
    verdict,
)
from backpressure.bench.overload import (
    BASELINE,
    Goal,
    OverloadPlan,
    evaluate_goals,
    run_overload,
)
from backpressure.bench.transient import (
    QUICK_TRANSIENT,
    TransientPlan,
    TransientRun,
    render_transient_markdown,
    run_transient,
)
from backpressure.cli import (
    add_progress_argument,
    comma_list,
    name_list,
    non_negative_float,
    positive_float,
    positive_int,
    progress_enabled,
    run_cli,
)
from backpressure.workload import ARMS
from backpressure.workload.arms import ARM_KEY, ARMS_KEY, default_first
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

__all__ = ["build_parser", "main", "render_markdown", "run_bench"]

OVERHEAD_GOAL = 1.01
"""Target for the upper bound of the 95 % CI of enabled/stock client CPU per operation."""

DEFAULT_ARMS: tuple[str, ...] = tuple(
    name
    for name in ("no-retries", "pymongo-native", "current", "draft", "adaptive")
    if name in ARMS
)
"""The arms compared by default (``hand-written`` on request)."""


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    plan = OverloadPlan()
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench",
        description="Benchmarks of pymongo-backpressure against the embedded replica set.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--output", type=Path, default=Path("bench-results"), help="report dir (untracked)"
    )
    parser.add_argument("--members", type=positive_int, default=3, help="replica set members")
    add_progress_argument(parser)
    group = parser.add_argument_group("overhead (no overload)")
    group.add_argument(
        "--pairs", type=positive_int, default=4000, help="paired samples per operation"
    )
    group.add_argument(
        "--block", type=positive_int, default=1, help="operations per half of a pair"
    )
    group.add_argument(
        "--count-ops", type=positive_int, default=20, help="operations traced per count"
    )
    group.add_argument(
        "--wrappers",
        choices=WRAPPERS,
        default="auto",
        help="the native wrappers the enabled client gets: its signature's, or forwarding",
    )
    group.add_argument(
        "--instructions",
        action="store_true",
        help=(
            "count instructions per operation under valgrind's callgrind instead of timing "
            "CPU (deterministic; runs the overhead section only, writes instructions.*)"
        ),
    )
    group.add_argument(
        "--instruction-ops",
        type=comma_list(positive_int),
        default="100,400",
        help="with --instructions: the operations of the two counted segments, LOW,HIGH",
    )
    group = parser.add_argument_group("decision core")
    group.add_argument(
        "--core-iterations", type=positive_int, default=100_000, help="ops per measurement"
    )
    group.add_argument(
        "--core-threads", type=positive_int, default=8, help="threads of the threaded run"
    )
    group = parser.add_argument_group("overload")
    positive, non_negative = positive_float, non_negative_float
    group.add_argument("--capacity", type=positive, default=plan.capacity, help="closed loop C")
    group.add_argument(
        "--workers",
        type=comma_list(positive_int),
        default=",".join(map(str, plan.closed_workers)),
        help="closed-loop workers",
    )
    group.add_argument("--closed-seconds", type=positive, default=plan.closed_seconds)
    group.add_argument("--open-capacity", type=positive, default=plan.open_capacity, help="open C")
    group.add_argument(
        "--loads",
        type=comma_list(non_negative),
        default=",".join(f"{x:g}" for x in plan.open_loads),
        help="open loads, x C",
    )
    group.add_argument("--open-threads", type=positive_int, default=plan.open_threads)
    group.add_argument("--warmup", type=positive, default=plan.warmup, help="s below C first")
    group.add_argument("--sustained", type=positive, default=plan.sustained, help="s at the load")
    group.add_argument("--burst-load", type=non_negative, default=plan.burst_load, help="x C")
    group.add_argument("--burst", type=positive, default=plan.burst, help="burst, s")
    group.add_argument("--recovery", type=positive, default=plan.recovery, help="after it, s")
    group.add_argument("--hot-capacity", type=positive, default=plan.hot_capacity)
    group.add_argument("--hot-workers", type=positive_int, default=plan.hot_workers)
    group.add_argument("--hot-seconds", type=positive, default=plan.hot_seconds)
    group.add_argument(
        "--allowed-wait", type=positive, default=plan.allowed_wait, help="deadline per op, s"
    )
    group.add_argument(
        "--burst-seconds", type=positive, default=plan.burst_seconds, help="limiter burst, s"
    )
    group.add_argument(
        "--arms",
        type=name_list(ARMS),
        default=",".join(DEFAULT_ARMS),
        help="comma-separated arms",
    )
    group = parser.add_argument_group("fleet (K client processes x T threads)")
    group.add_argument(
        "--fleet-shapes", default="8x8,4x16", help="comma-separated PROCESSESxTHREADS"
    )
    group.add_argument(
        "--fleet-step",
        type=positive_float,
        default=FleetPlan().step_s,
        help="seconds per capacity step",
    )
    group.add_argument(
        "--fleet-quick",
        action="store_true",
        help="a few seconds: 2 processes x 2 threads, 2 short steps (for tests)",
    )
    group.add_argument(
        "--transient-rejections",
        type=comma_list(positive_int),
        default="1,3",
        help="the transient scenario's rejection counts, comma-separated (with the fleet)",
    )
    group = parser.add_argument_group("sections")
    for name in ("overhead", "core", "overload", "roundtrips", "fleet", "transient"):
        group.add_argument(f"--skip-{name}", action="store_true", help=f"skip the {name} section")
    group.add_argument(
        "--only",
        choices=("fleet",),
        help=(
            "run only this section (with the transient scenario); writes fleet.json and "
            "fleet.md instead of latest.*"
        ),
    )
    add_uri_arguments(parser)
    return parser


def transient_plans(args: argparse.Namespace) -> list[TransientPlan]:
    """The transient runs from the command line (``--fleet-quick``: the quick one only)."""
    if args.fleet_quick:
        return [QUICK_TRANSIENT]
    return [TransientPlan(rejections=count) for count in args.transient_rejections]


def fleet_plans(args: argparse.Namespace) -> list[FleetPlan]:
    """The fleet shapes from the command line (``--fleet-quick``: the quick plan only)."""
    if args.fleet_quick:
        return [QUICK]
    plans = []
    for text in _parse_list(args.fleet_shapes, "fleet-shapes"):
        processes, threads = parse_shape(text)
        plans.append(FleetPlan(processes=processes, threads=threads, step_s=args.fleet_step))
    return plans


def _parse_list(value: str, what: str) -> list[str]:
    """Split a comma-separated option (ValueError when it holds none)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise ValueError(f"expected at least one value, got {value!r}")
    return items


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors the parser cannot see alone: plans built from several options."""
    check_uri_arguments(parser, args)
    if args.instructions:
        import shutil

        if shutil.which("valgrind") is None:
            parser.error("argument --instructions: valgrind is not installed (not on the PATH)")
        if args.uri is not None:
            parser.error("argument --instructions: runs against the embedded server only")
    low_high = args.instruction_ops
    if len(low_high) != 2 or not low_high[0] < low_high[1]:
        parser.error(f"argument --instruction-ops: expected LOW,HIGH, LOW < HIGH; got {low_high}")
    if args.uri is not None and args.only != "fleet":
        parser.error(
            "argument --uri: only the fleet benchmark runs against a deployment: add --only fleet"
        )
    try:
        fleet_plans(args)
    except ValueError as exc:
        parser.error(f"argument --fleet-shapes: {exc}")
    for flag, build in (("--transient-rejections", transient_plans), (None, _plan)):
        try:
            build(args)
        except ValueError as exc:
            parser.error(f"argument {flag}: {exc}" if flag else str(exc))


def _roundtrips() -> dict[str, Any]:
    """Run the server round-trip benchmark when it is installed."""
    try:
        module = importlib.import_module("backpressure.bench.server_roundtrips")
    except ImportError as exc:
        return {"skipped": f"backpressure.bench.server_roundtrips is not available ({exc})"}
    run = getattr(module, "run", None)
    if not callable(run):
        return {"skipped": "backpressure.bench.server_roundtrips has no run()"}
    result = run()
    return result if isinstance(result, dict) else {"result": result}


def _plan(args: argparse.Namespace) -> OverloadPlan:
    """The overload plan from the command line."""
    return OverloadPlan(
        capacity=args.capacity,
        closed_workers=tuple(args.workers),
        closed_seconds=args.closed_seconds,
        open_capacity=args.open_capacity,
        open_loads=tuple(args.loads),
        open_threads=args.open_threads,
        warmup=args.warmup,
        sustained=args.sustained,
        burst_load=args.burst_load,
        burst=args.burst,
        recovery=args.recovery,
        hot_capacity=args.hot_capacity,
        hot_workers=args.hot_workers,
        hot_seconds=args.hot_seconds,
        allowed_wait=args.allowed_wait,
        burst_seconds=args.burst_seconds,
    )


def _load_average() -> Optional[list[float]]:
    """The 1, 5 and 15 minute load averages (None where the platform has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def run_bench(
    args: argparse.Namespace,
    *,
    server_factory: Optional[ServerFactory] = None,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    """Run the selected sections; print the report, write JSON and Markdown, return the data."""
    names: list[str] = list(args.arms)
    unavailable = {n: r for n in names if (r := ARMS[n].unavailable()) is not None}
    runnable = [name for name in names if name not in unavailable]
    plan = _plan(args)
    if args.only == "fleet":
        for name in ("overhead", "core", "overload", "roundtrips"):
            setattr(args, f"skip_{name}", True)
    if args.instructions:
        for name in ("core", "overload", "roundtrips", "fleet", "transient"):
            setattr(args, f"skip_{name}", True)
    plans = [] if args.skip_fleet else fleet_plans(args)
    # The transient scenario injects rejections with fail points: the embedded server's alone.
    remote = getattr(args, "uri", None) is not None
    transients = [] if args.skip_transient or remote else transient_plans(args)
    factory = server_factory or deployment_factory(
        args, lambda: embedded_server(members=args.members)
    )
    started = time.perf_counter()
    report: dict[str, Any] = {
        "tool": "backpressure.bench",
        "machine": machine_info(),
        "load_average_start": _load_average(),
        "config": {
            "server": (
                f"embedded replica set, {args.members} members, subprocess"
                if not remote
                else f"{deployment_label(args)}, limiter set: {bool(args.set_limiter)}"
            ),
            "overhead": {
                "pairs": args.pairs,
                "block": args.block,
                "count_ops": args.count_ops,
                "wrappers": args.wrappers,
                "instructions": list(args.instruction_ops) if args.instructions else None,
            },
            "core": {"iterations": args.core_iterations, "threads": [1, args.core_threads]},
            "overload": {
                **asdict(plan),
                ARMS_KEY: runnable,
                "unavailable": unavailable,
            },
        },
    }
    total = 0.0
    if not args.skip_overhead and not args.instructions:
        total += args.pairs * len(OPERATIONS)
    if not args.skip_overload:
        total += plan.seconds_per_arm() * len(runnable)
    if plans:
        report["config"]["fleet"] = {
            "plans": [asdict(p) for p in plans],
            ARMS_KEY: fleet_arms(runnable),
        }
    note = untouched_note(args)
    if note is not None:
        print(note, file=out)
    bar = progress_bar(total, desc="bench", disabled=not progress_enabled(args.progress))
    try:
        with quiet_backpressure_logs():
            if not args.skip_core:
                bar.set_postfix_str("decision core")
                core = measure_core_cost(args.core_iterations, (1, args.core_threads))
                report["core"] = [asdict(c) for c in core]
            if not (args.skip_overhead and args.skip_overload and not plans and not transients):
                with factory() as server:
                    if not args.skip_overhead:
                        bar.set_postfix_str("overhead")
                        if args.instructions:
                            low, high = args.instruction_ops
                            overhead = measure_instructions(
                                server.uri, low_ops=low, high_ops=high, wrappers=args.wrappers
                            )
                        else:
                            overhead = measure_overhead(
                                server.uri,
                                pairs=args.pairs,
                                block=args.block,
                                count_operations=args.count_ops,
                                progress=bar.update,
                                wrappers=args.wrappers,
                            )
                        report["overhead"] = {**overhead, "goal_ratio": OVERHEAD_GOAL}
                    if not args.skip_overload:
                        bar.set_postfix_str("overload")
                        runs = run_overload(server, runnable, plan, progress=bar.update)
                        goals = evaluate_goals(runs, plan)
                        report["overload"] = {
                            "runs": [r.to_dict() for r in runs],
                            "goals": [g.to_dict() for g in goals],
                        }
                    if plans:
                        report["fleet"] = [
                            {
                                "plan": asdict(fleet_plan),
                                "runs": [
                                    r.to_dict()
                                    for r in run_fleet(
                                        server,
                                        runnable,
                                        fleet_plan,
                                        progress=bar.set_postfix_str,
                                    )
                                ],
                            }
                            for fleet_plan in plans
                        ]
                    if transients:
                        report["transient"] = [
                            {
                                "plan": asdict(transient_plan),
                                "runs": [
                                    r.to_dict()
                                    for r in run_transient(
                                        server,
                                        runnable,
                                        transient_plan,
                                        progress=bar.set_postfix_str,
                                    )
                                ],
                            }
                            for transient_plan in transients
                        ]
        if not args.skip_roundtrips:
            bar.set_postfix_str("server round trips")
            report["server_roundtrips"] = _roundtrips()
    finally:
        bar.close()
    report["wall_seconds"] = time.perf_counter() - started
    report["load_average_end"] = _load_average()

    markdown = render_markdown(report)
    out_dir: Path = args.output
    stem = "fleet" if args.only == "fleet" else "instructions" if args.instructions else "latest"
    write_json(out_dir / f"{stem}.json", report)
    (out_dir / f"{stem}.md").write_text(markdown)
    print(markdown, file=out)
    print(f"JSON:     {out_dir / f'{stem}.json'}", file=out)
    print(f"Markdown: {out_dir / f'{stem}.md'}", file=out)
    return report


def render_markdown(report: dict[str, Any]) -> str:
    """Render the report as a Markdown document."""
    m = report["machine"]
    loads = [report.get("load_average_start"), report.get("load_average_end")]
    load_text = " → ".join("/".join(f"{x:g}" for x in la) for la in loads if la)
    lines = [
        "# pymongo-backpressure benchmark results",
        "",
        f"{m['date']} · {m['cpu_count']} CPUs · {m['platform']} · Python {m['python']} · "
        f"pymongo {m['pymongo']} (C extensions: {m['pymongo_c_extensions']}) · "
        f"motor {m['motor'] or '-'} · backpressure {m['backpressure']}. "
        f"Server: {report['config']['server']}. Load average (1/5/15 min, start → end): "
        f"{load_text or 'unknown'}; the machine may be shared.",
        "",
    ]
    if "overhead" in report:
        lines += _overhead_md(report["overhead"])
    if "core" in report:
        lines += _core_md(report["core"])
    if "overload" in report:
        lines += _overload_md(report["overload"], report["config"]["overload"])
    if "server_roundtrips" in report:
        lines += ["## Server round trips", "", *_roundtrips_md(report["server_roundtrips"]), ""]
    if "fleet" in report:
        lines += _fleet_md(report["fleet"], str(report.get("config", {}).get("server", "")))
    if "transient" in report:
        lines += ["## Transient: a few rejections at low load, then a demand rise", ""]
        for shape in report["transient"]:
            transient_plan = TransientPlan(**shape["plan"])
            runs = [TransientRun.from_dict(run) for run in shape["runs"]]
            lines += [render_transient_markdown(runs, transient_plan), ""]
    lines.append(f"Total wall time {report.get('wall_seconds', 0.0):.0f} s.")
    return "\n".join(lines) + "\n"


def _fleet_md(section: list[dict[str, Any]], server: str = "") -> list[str]:
    """The fleet section: one table per shape, every arm, the default's first (``server``:
    the report's server line, which names a deployment given with ``--uri``)."""
    target = (
        "the embedded replica set in its own process over TCP; the primary's rate limit steps "
        "during the run"
        if not server or server.startswith("embedded")
        else "the deployment named above (--uri); the primary's rate limit steps during the run "
        "only when the limiter was set (--set-limiter)"
    )
    lines = [
        "## Fleet: K client processes x T threads, capacity steps",
        "",
        "Real processes (spawn), each its own pymongo client and T threads in a closed loop "
        f"(50% find_one by _id, 50% insert_one, each under `pymongo.timeout`), against {target}. "
        "App errors: operations that raised. Attempts/op: find and insert "
        "commands the servers received per operation. Jain: fairness over the processes' "
        "successes. Goodput: successes per second as a share of the capacity, from the settle "
        "time after each step to the next step. Refusals/s: local refusals the package's "
        "listeners reported (- : the arm reports none). Every arm ran on the same "
        "server one after another; the machine is shared, so client CPU contention varies.",
        "",
    ]
    for shape in section:
        plan = plan_from_dict(shape["plan"])
        runs = [FleetRun.from_dict(run) for run in shape["runs"]]
        lines += [render_fleet_markdown(runs, plan), ""]
    return lines


def overhead_goals(section: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Per operation: (operation, met, figures) of the overhead goal."""
    goal = section["goal_ratio"]
    return [
        (
            c["operation"],
            c["ratio_ci_high"] <= goal,
            f"{c['ratio']:.4f} [{c['ratio_ci_low']:.4f}, {c['ratio_ci_high']:.4f}]",
        )
        for c in section["cpu"]
    ]


def _overhead_verdict(section: dict[str, Any], c: dict[str, Any]) -> str:
    """The overhead goal's verdict for one operation: met, NOT met or undecided."""
    return verdict(c["ratio_ci_low"], c["ratio_ci_high"], section["goal_ratio"])


def _overhead_preamble(section: dict[str, Any], suffix: str) -> list[str]:
    """The heading (``suffix`` after "Overhead without overload"), the run's note and the
    sentence naming the two clients of an overhead section, timed or counted in instructions."""
    note = section.get("note")
    return [
        f"## Overhead without overload{suffix}",
        "",
        *([str(note), ""] if note else []),
        f"Stock `pymongo.MongoClient` against `backpressure.MongoClient` with the default preset "
        f"(`{section['preset']}`), same server, no overload; pymongo "
        f"{section.get('pymongo', 'unknown')}, the native adapter's "
        f"{section.get('wrappers', 'unnamed')} wrappers.",
        "",
    ]


def _instructions_md(section: dict[str, Any]) -> list[str]:
    """The overhead section of the instruction mode: instructions per operation, stock against
    enabled, and the added instructions attributed to each wrapper."""
    rows = section["instructions"]
    ratio_rows = [
        [
            r["operation"],
            f"{r['stock']:,.0f}",
            f"{r['enabled']:,.0f}",
            f"{r['added']:+,.0f}",
            f"{r['ratio']:.4f}",
            f"<= {INSTRUCTION_GOALS[r['operation']]:g}",
            "met" if r["ratio"] <= INSTRUCTION_GOALS[r["operation"]] else "NOT met",
        ]
        for r in rows
    ]
    parts = list(rows[0]["attribution"]) if rows else []

    def cell(part: dict[str, Any]) -> str:
        us = part["us"]
        return f"{part['instructions']:+,.0f}" + (f" ({us:+.2f} µs)" if us is not None else "")

    attribution_rows = [
        [
            r["operation"],
            *(cell(r["attribution"][p]) for p in parts),
            f"{r['stock_cpu_us']:.1f} µs, {r['instructions_per_us']:,.0f}/µs"
            if r["instructions_per_us"]
            else "-",
        ]
        for r in rows
    ]
    counts = section["counts"][0] if section["counts"] else {"low_ops": 0, "high_ops": 0}
    return [
        *_overhead_preamble(section, ": instructions"),
        "Instructions per operation of the calling thread, counted by valgrind's callgrind "
        "(`--separate-threads=yes`: pymongo's monitor threads apart), one process, "
        "`PYTHONHASHSEED=0`, the collector paused in each segment: (instructions of "
        f"{counts['high_ops']} operations - those of {counts['low_ops']}) / "
        f"{counts['high_ops'] - counts['low_ops']}. Deterministic to a fraction of a percent, "
        "whatever the machine's load; the goal column applies the CPU goal to this ratio.",
        "",
        format_table(
            ["operation", "stock", "enabled", "added", "ratio", "goal", "verdict"],
            ratio_rows,
            markdown=True,
        ),
        "",
        "Where the added instructions go: the enabled client counted again with its instance "
        "wrappers taken off one at a time (`_process_response`, then `_select_server`, then "
        "`_retry_internal`); each column is the difference its removal made, `rest` what the "
        "enabled client still adds without them (pool, class-level hooks). In µs at the stock "
        "path's rate: instructions / (stock instructions / stock client CPU µs per operation, "
        "the minimum of 7 timed blocks of 60).",
        "",
        format_table(["operation", *parts, "stock CPU, rate"], attribution_rows, markdown=True),
        "",
    ]


def _overhead_md(section: dict[str, Any]) -> list[str]:
    """The overhead section: the work count, the CPU ratios with CIs, the goal."""
    if section.get("mode") == "instructions":
        return _instructions_md(section)
    work = {(w["operation"], w["client"]): w for w in section["work"]}
    work_rows = []
    for c in section["cpu"]:
        name = c["operation"]
        stock, enabled = work.get((name, "stock")), work.get((name, "enabled"))
        if stock is None or enabled is None:
            continue
        work_rows.append(
            [
                name,
                f"{stock['calls']:.1f}",
                f"{enabled['calls']:.1f}",
                f"{enabled['calls'] - stock['calls']:+.1f}",
                f"{enabled['our_calls']:.1f}",
                f"{enabled['our_lines']:.1f}",
            ]
        )
    verdicts = {op: (met, figures) for op, met, figures in overhead_goals(section)}
    cpu_rows = [
        [
            c["operation"],
            f"{c['stock_cpu_us']:.1f}",
            f"{c['enabled_cpu_us']:.1f}",
            verdicts[c["operation"]][1],
            f"{c['ratio_of_means']:.4f}",
            f"{c['stock_wall_us']:.0f} / {c['enabled_wall_us']:.0f}",
            _overhead_verdict(section, c),
        ]
        for c in section["cpu"]
    ]
    pairs = section["cpu"][0]["pairs"] if section["cpu"] else 0
    block = section["cpu"][0]["block"] if section["cpu"] else 0
    timer = section["cpu"][0].get("timer_ns", 0) if section["cpu"] else 0
    same = section.get("same_client_check")
    same_lines = (
        [
            "Same-method check (A/A): a second stock client against the first on find_one "
            f"gives {same['ratio']:.4f} [{same['ratio_ci_low']:.4f}, {same['ratio_ci_high']:.4f}]; "
            "the enabled client is always the one opened second, so a ratio below 1 here means "
            "the ratios above understate the overhead by about that much.",
            "",
        ]
        if same
        else []
    )
    return [
        *_overhead_preamble(section, ""),
        f"Work added per operation, counted with `{section['tracer']}` (deterministic: Python "
        "function calls of the whole client, and calls and line events of this package's code):",
        "",
        format_table(
            ["operation", "calls stock", "calls enabled", "added", "our calls", "our lines"],
            work_rows,
            markdown=True,
        ),
        "",
        f"Client CPU per operation (`time.thread_time_ns` of the calling thread, less the "
        f"timer's own cost of {timer} ns): {pairs} paired samples of {block} operation(s) per "
        "client, alternating order, GC paused inside a pair; "
        "ratio = median over the pairs of enabled/stock, with a 95 % bootstrap CI (pairs "
        f"resampled). Goal: the CI's upper bound <= {section['goal_ratio']} (undecided when the CI "
        "straddles it).",
        "",
        format_table(
            [
                "operation",
                "stock CPU µs",
                "enabled CPU µs",
                "ratio [95% CI]",
                "ratio of means",
                "wall µs stock / enabled",
                f"goal <= {section['goal_ratio']}",
            ],
            cpu_rows,
            markdown=True,
        ),
        "",
        *same_lines,
    ]


def _core_md(section: list[dict[str, Any]]) -> list[str]:
    """The decision-core section."""
    costs = [CoreCost(**c) for c in section]
    rows = [
        [c.path, str(c.threads), f"{c.cpu_ns_per_op / 1000:.2f}", f"{c.wall_ops_per_s:,.0f}"]
        for c in costs
    ]
    return [
        "## Decision-core cost",
        "",
        "Success path: `CycleRecord(...)` + `attempt_started` + `succeeded()`. Retry path: "
        "one overload failure (`failed()` and its decision) then success on the retry. CPU time "
        "per operation summed over threads (`time.thread_time`); threads share one controller.",
        "",
        format_table(["path", "threads", "CPU µs/op", "ops/s (wall)"], rows, markdown=True),
        "",
    ]


def _opt_int(value: Optional[int]) -> str:
    """Format an optional count."""
    return "-" if value is None else f"{value:,}"


def scenario_rows(runs: list[dict[str, Any]]) -> list[list[str]]:
    """Table rows of the overload runs (``SCENARIO_HEADERS`` order)."""
    rows = []
    scenarios = list(dict.fromkeys(r["scenario"] for r in runs))
    order = {name: rank for rank, name in enumerate(default_first([r[ARM_KEY] for r in runs]))}
    runs = sorted(runs, key=lambda r: (scenarios.index(r["scenario"]), order[r[ARM_KEY]]))
    for r in runs:
        rows.append(
            [
                r["scenario"],
                r[ARM_KEY],
                f"{r['operations']:,}",
                f"{r['app_errors']:,} ({r['error_fraction']:.1%})",
                _opt_int(r["physical_min"]),
                fmt(r["vs_min"], 2),
                fmt(r["attempts_per_op"], 2),
                fmt(r["goodput"]),
                fmt(r["p50_ms"]),
                fmt(r["p99_ms"]),
                _opt_int(r["local_waits"]),
                f"{r['never_sent']:,}",
                _opt_int(r["budget_refused"]),
            ]
        )
    return rows


SCENARIO_HEADERS = (
    "scenario",
    "arm",
    "ops",
    "app errors",
    "physical min",
    "x min",
    "attempts/op",
    "goodput/s",
    "p50 ms",
    "p99 ms",
    "local waits",
    "never sent",
    "budget refused",
)


def _overload_md(section: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The overload section with the goals."""
    unavailable = "".join(
        f" {name} not run: {reason}." for name, reason in config["unavailable"].items()
    )
    oracle = "the simulator's oracle (`backpressure.sim.oracle`) on the run's own arrival log"
    goal_rows = []
    dropped = []
    for g in (Goal(**g) for g in section["goals"]):
        verdict = ", ".join(
            f"{arm} {'-' if g.met[arm] is None else ('met' if g.met[arm] else 'NOT met')}"
            for arm in default_first(list(g.met))
        )
        if g.dropped:
            dropped.append(f"- {g.goal}: {verdict} ({BASELINE} meets it, so it is dropped)")
            continue
        figures = "; ".join(f"{arm}: {g.figures[arm]}" for arm in default_first(list(g.figures)))
        goal_rows.append([g.goal, verdict, figures])
    return [
        "## Overload",
        "",
        f"Closed loop: C = {config['capacity']:g} ops/s, {config['closed_seconds']:g} s per run, "
        f"workers {', '.join(map(str, config['closed_workers']))}. Open loop: C = "
        f"{config['open_capacity']:g} ops/s, {config['open_threads']} threads, "
        f"{config['warmup']:g} s at {config['base_load']:g}x C then {config['sustained']:g} s at "
        f"the load; burst: {config['warmup']:g} s at {config['base_load']:g}x, "
        f"{config['burst']:g} s at {config['burst_load']:g}x, {config['recovery']:g} s at "
        f"{config['base_load']:g}x. Hot member: reads with readPreference=secondary, "
        f"{config['hot_workers']} workers for {config['hot_seconds']:g} s, one secondary limited "
        f"to {config['hot_capacity']:g} ops/s, the others unlimited. Limiter burst "
        f"{config['burst_seconds']:g} s. Workload: 50% find_one / 25% update_one / 25% "
        f"insert_one (hot member: reads only); every operation may take "
        f"{config['allowed_wait']:g} s from its arrival (`pymongo.timeout`).",
        "",
        "App errors: operations that raised plus arrivals never sent (deadline passed before a "
        f"worker was free). Physical min: {oracle}; for a closed loop that log depends on the "
        "arm; the closed loop's error goal (<= 1%) applies only when N/C is below the wait "
        "an operation is allowed, and otherwise the arm-independent floor "
        "max(0, 1 - C·wait/N) is shown, not judged. Attempts/op: workload commands the "
        "server received per operation. Goodput: successes/s (open loop: in the overload or "
        "burst phase; closed loop: after the first second). p50/p99: successful operations. "
        "Local waits: the "
        "arm's local-wait events (- : it reports none). Never sent: operations that raised "
        "without any attempt reaching the network (refused locally). Budget refused: retries "
        f"the retry budget refused (- : no budget).{unavailable}",
        "",
        format_table(list(SCENARIO_HEADERS), scenario_rows(section["runs"]), markdown=True),
        "",
        "### Goals (all comparisons within this run)",
        "",
        format_table(["goal", "result per arm", "figures"], goal_rows, markdown=True),
        "",
        *(["Dropped goals:", "", *dropped, ""] if dropped else []),
    ]


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Flatten nested data into (dotted key, value) pairs."""
    if isinstance(data, dict):
        pairs: list[tuple[str, str]] = []
        for key, value in data.items():
            pairs += _flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return pairs
    if isinstance(data, float):
        return [(prefix, f"{data:,.3f}")]
    return [(prefix, str(data))]


_THREADS_KEY = re.compile(r"(\d+)_threads_(\w+)")
_ROUNDTRIP_HEADERS = {
    "ops_per_sec": "ops/s",
    "server_handler_us": "server handler µs",
    "server_process_us": "server process µs",
}


def _roundtrips_md(section: dict[str, Any]) -> list[str]:
    """The server round trips: one row per operation and thread count (narrow enough for the
    docs page), the run's settings above; a section of another shape renders generically."""
    operations = section.get("operations")
    if not isinstance(operations, dict) or not operations:
        return _generic_md(section)
    rows: list[list[str]] = []
    for name, entry in operations.items():
        by_threads: dict[str, dict[str, Any]] = {}
        for key, value in entry.items():
            match = _THREADS_KEY.fullmatch(key)
            if match is None or match[2] not in _ROUNDTRIP_HEADERS:
                return _generic_md(section)
            by_threads.setdefault(match[1], {})[match[2]] = value
        for threads, values in by_threads.items():
            rows.append([name, threads, *(_cell(values.get(m)) for m in _ROUNDTRIP_HEADERS)])
    settings = {key: value for key, value in section.items() if key != "operations"}
    headers = ["operation", "threads", *_ROUNDTRIP_HEADERS.values()]
    return [*_generic_md(settings), format_table(headers, rows, markdown=True), ""]


def _generic_md(data: Any) -> list[str]:
    """Render data of unknown shape: nested dicts of dicts as tables, the rest as key/value."""
    if not isinstance(data, dict):
        return [format_table(["key", "value"], [list(p) for p in _flatten(data)], markdown=True)]
    lines: list[str] = []
    scalars: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            headers: list[str] = []
            for row in value.values():
                headers += [h for h in row if h not in headers]
            body = [
                [str(name), *(_cell(row.get(h)) for h in headers)] for name, row in value.items()
            ]
            lines += [format_table([str(key), *headers], body, markdown=True), ""]
        else:
            scalars[key] = value
    if scalars:
        pairs = [list(p) for p in _flatten(scalars)]
        lines.insert(0, format_table(["key", "value"], pairs, markdown=True) + "\n")
    return lines


def _cell(value: Any) -> str:
    """Format one table cell."""
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point: 0 after a run, 1 without a needed extra, 2 on a usage error."""
    return run_cli(_main, argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    """The command line, without the missing-extra and Ctrl-C handling of :func:`main`;
    ``hotspot`` first runs that benchmark with the arguments after it
    (``python -m backpressure.bench.hotspot``)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["hotspot"]:
        from backpressure.bench import hotspot

        return hotspot.main(arguments[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    run_bench(args)
    return 0
