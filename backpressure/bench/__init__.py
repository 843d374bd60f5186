"""``python -m backpressure.bench``: overhead, decision-core cost, overload and server benchmarks.

Writes ``bench/results/latest.json`` and ``bench/results/latest.md`` (a short Markdown report with
the machine, the versions, the date and, per goal, whether it was met) and prints the tables.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, TextIO

from backpressure.bench.core_cost import CoreCost, measure_core_cost
from backpressure.bench.overhead import OPERATIONS, OverheadResult, measure_overhead
from backpressure.bench.overload import (
    Goal,
    OverloadPlan,
    OverloadRun,
    evaluate_goals,
    run_overload,
)
from backpressure.workload import POLICIES, POLICY_NAMES, WorkloadConfig
from backpressure.workload.report import (
    fmt,
    format_table,
    machine_info,
    quiet_backpressure_logs,
    write_json,
)
from backpressure.workload.server import ServerFactory, embedded_server

__all__ = ["build_parser", "main", "render_markdown", "run_bench"]

OVERHEAD_GOAL = 1.01
"""Target for the median enabled/plain time ratio."""


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench",
        description="Benchmarks of pymongo-backpressure against the embedded replica set.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--output", type=Path, default=Path("bench/results"), help="report dir")
    parser.add_argument("--members", type=int, default=3, help="replica set members")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    group = parser.add_argument_group("overhead (no overload)")
    group.add_argument("--rounds", type=int, default=25, help="interleaved rounds per operation")
    group.add_argument("--block", type=int, default=200, help="operations per block")
    group = parser.add_argument_group("decision core")
    group.add_argument("--core-iterations", type=int, default=100_000, help="ops per measurement")
    group.add_argument("--core-threads", type=int, default=8, help="threads of the threaded run")
    group = parser.add_argument_group("overload")
    group.add_argument("--capacity", type=float, default=100.0, help="server rate limit C, ops/s")
    group.add_argument("--burst-seconds", type=float, default=1.0, help="limiter burst, s")
    group.add_argument("--threads", type=int, default=256, help="client worker threads")
    group.add_argument("--loads", default="1.5,3,10", help="overload levels, x C")
    group.add_argument("--warmup", type=float, default=1.0, help="seconds below C first")
    group.add_argument("--sustained", type=float, default=5.0, help="sustained overload, s")
    group.add_argument("--burst", type=float, default=3.0, help="burst, s")
    group.add_argument("--recovery", type=float, default=4.0, help="recovery after the burst, s")
    group.add_argument(
        "--policies", default=",".join(POLICY_NAMES), help="comma-separated policies"
    )
    group = parser.add_argument_group("sections")
    for name in ("overhead", "core", "overload", "roundtrips"):
        group.add_argument(f"--skip-{name}", action="store_true", help=f"skip the {name} section")
    return parser


def _parse_list(value: str, what: str) -> list[str]:
    """Split a comma-separated option."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items:
        raise SystemExit(f"--{what} needs at least one value")
    return items


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


def run_bench(
    args: argparse.Namespace,
    *,
    server_factory: Optional[ServerFactory] = None,
    out: TextIO = sys.stdout,
) -> dict[str, Any]:
    """Run the selected sections; print the report, write JSON and Markdown, return the data."""
    names = _parse_list(args.policies, "policies")
    unknown = [name for name in names if name not in POLICIES]
    if unknown:
        raise SystemExit(f"unknown policies {unknown}; choose from {', '.join(POLICY_NAMES)}")
    unavailable = {n: r for n in names if (r := POLICIES[n].unavailable()) is not None}
    runnable = [name for name in names if name not in unavailable]
    loads = tuple(float(x) for x in _parse_list(args.loads, "loads"))
    plan = OverloadPlan(
        loads=loads,
        warmup=args.warmup,
        sustained=args.sustained,
        burst=args.burst,
        recovery=args.recovery,
    )
    config = WorkloadConfig(
        capacity=args.capacity,
        burst_seconds=args.burst_seconds,
        threads=args.threads,
        database="backpressure_bench",
    )
    factory = server_factory or (lambda: embedded_server(members=args.members))
    started = time.perf_counter()
    report: dict[str, Any] = {
        "tool": "backpressure.bench",
        "machine": machine_info(),
        "config": {
            "server": f"embedded replica set, {args.members} members, subprocess",
            "overhead": {"rounds": args.rounds, "block": args.block},
            "core": {"iterations": args.core_iterations, "threads": [1, args.core_threads]},
            "overload": {
                "capacity": args.capacity,
                "burst_seconds": args.burst_seconds,
                "threads": args.threads,
                **asdict(plan),
                "policies": runnable,
                "unavailable": unavailable,
            },
        },
    }
    total = 0.0
    if not args.skip_overhead:
        total += args.rounds * len(OPERATIONS)
    if not args.skip_overload:
        total += plan.seconds_per_policy() * len(runnable)
    bar = _progress_bar(total, disabled=args.no_progress)
    try:
        with quiet_backpressure_logs():
            if not args.skip_core:
                bar.set_postfix_str("decision core")
                core = measure_core_cost(args.core_iterations, (1, args.core_threads))
                report["core"] = [asdict(c) for c in core]
            if not (args.skip_overhead and args.skip_overload):
                with factory() as server:
                    if not args.skip_overhead:
                        bar.set_postfix_str("overhead")
                        overhead, integration = measure_overhead(
                            server.uri, rounds=args.rounds, block=args.block, progress=bar.update
                        )
                        report["overhead"] = {
                            "enabled_client": integration,
                            "goal_ratio": OVERHEAD_GOAL,
                            "operations": [asdict(o) for o in overhead],
                        }
                    if not args.skip_overload:
                        bar.set_postfix_str("overload")
                        runs = run_overload(server, runnable, plan, config, progress=bar.update)
                        goals = evaluate_goals(runs, args.capacity)
                        report["overload"] = {
                            "runs": [_run_dict(r) for r in runs],
                            "goals": [g.to_dict() for g in goals],
                        }
        if not args.skip_roundtrips:
            bar.set_postfix_str("server round trips")
            report["server_roundtrips"] = _roundtrips()
    finally:
        bar.close()
    report["wall_seconds"] = time.perf_counter() - started

    markdown = render_markdown(report)
    out_dir: Path = args.output
    write_json(out_dir / "latest.json", report)
    (out_dir / "latest.md").write_text(markdown)
    print(markdown, file=out)
    print(f"JSON:     {out_dir / 'latest.json'}", file=out)
    print(f"Markdown: {out_dir / 'latest.md'}", file=out)
    return report


def _run_dict(run: OverloadRun) -> dict[str, Any]:
    """An overload run as JSON-ready data (full run result included)."""
    data = asdict(run)
    data["result"] = run.result.to_dict()
    return data


def _progress_bar(total: float, *, disabled: bool) -> Any:
    """A tqdm bar on stderr (units: overhead rounds and seconds of load)."""
    from tqdm import tqdm

    return tqdm(
        total=round(total, 1),
        desc="bench",
        file=sys.stderr,
        disable=disabled,
        mininterval=0.5,
        bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}] {postfix}",
    )


def render_markdown(report: dict[str, Any]) -> str:
    """Render the report as a short Markdown document."""
    m = report["machine"]
    lines = [
        "# pymongo-backpressure benchmark results",
        "",
        f"{m['date']} · {m['cpu_count']} CPUs · {m['platform']} · Python {m['python']} · "
        f"pymongo {m['pymongo']} (C extensions: {m['pymongo_c_extensions']}) · "
        f"motor {m['motor'] or '-'} · backpressure {m['backpressure']}. "
        f"Server: {report['config']['server']}. The machine may be shared: expect noise.",
        "",
    ]
    if "overhead" in report:
        lines += _overhead_md(report["overhead"])
    if "core" in report:
        lines += _core_md(report["core"])
    if "overload" in report:
        lines += _overload_md(report["overload"], report["config"]["overload"])
    if "server_roundtrips" in report:
        lines += ["## Server round trips", "", *_generic_md(report["server_roundtrips"]), ""]
    lines.append(f"Total wall time {report.get('wall_seconds', 0.0):.0f} s.")
    return "\n".join(lines) + "\n"


def _overhead_md(section: dict[str, Any]) -> list[str]:
    """The overhead section."""
    ops = [OverheadResult(**o) for o in section["operations"]]
    rows = [
        [
            o.operation,
            fmt(o.plain_us),
            fmt(o.enabled_us),
            f"{o.ratio_median:.3f}",
            f"{o.ratio_iqr:.3f} ({o.ratio_p25:.3f}-{o.ratio_p75:.3f})",
            "met" if o.ratio_median <= section["goal_ratio"] else "NOT met",
            f"{fmt(o.plain_cpu_us)} / {fmt(o.enabled_cpu_us)}",
            f"{o.cpu_ratio_median:.3f} ({o.cpu_ratio_p25:.3f}-{o.cpu_ratio_p75:.3f})",
        ]
        for o in ops
    ]
    headers = ["operation", "plain µs/op", "enabled µs/op", "ratio median", "IQR (p25-p75)"]
    headers += [
        f"goal <= {section['goal_ratio']}",
        "client CPU µs/op plain / enabled",
        "CPU ratio median (p25-p75)",
    ]
    block = ops[0].block if ops else 0
    rounds = ops[0].rounds if ops else 0
    return [
        "## Overhead without overload",
        "",
        f"Stock `pymongo.MongoClient` vs `{section['enabled_client']}` (draft preset) on the same "
        f"server; {rounds} interleaved rounds of {block} operations each; ratio = enabled/plain "
        "wall time per operation per round (the goal); client CPU = the calling thread's CPU "
        "time (`time.thread_time`), which leaves out waiting for the server.",
        "",
        format_table(headers, rows, markdown=True),
        "",
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
        "Success path: `OperationRetries(...)` + `attempt_started` + `succeeded()`. Retry path: "
        "one overload failure (`failed()` and its decision) then success on the retry. CPU time "
        "per operation summed over threads (`time.thread_time`); threads share one controller.",
        "",
        format_table(["path", "threads", "CPU µs/op", "ops/s (wall)"], rows, markdown=True),
        "",
    ]


def _overload_md(section: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The overload section with the goals."""
    rows = []
    for run in section["runs"]:
        refused = run["refused"]
        rows.append(
            [
                run["policy"],
                f"{run['load']:g}x",
                run["shape"],
                fmt(run["goodput"]),
                f"{run['goodput_vs_capacity']:.0%}",
                f"{run['app_errors']:,}"
                + (f" ({run['skipped']:,} skipped)" if run["skipped"] else ""),
                fmt(run["amplification"], 2),
                fmt(run["attempts_per_op"], 2),
                fmt(run["steady_attempts_per_op"], 2),
                fmt(run["latency_p99_ms"]),
                "-" if refused is None else f"{refused:,}",
            ]
        )
    headers = [
        "policy",
        "load",
        "shape",
        "goodput/s",
        "of C",
        "app errors",
        "attempts/success",
        "attempts/op",
        "steady attempts/op",
        "p99 ms",
        "budget refused",
    ]
    goals = [Goal(**g) for g in section["goals"]]
    goal_rows = [
        [g.goal, g.measured, "not measured" if g.met is None else ("met" if g.met else "NOT met")]
        for g in goals
    ]
    unavailable = "".join(
        f" {name} not run: {reason}." for name, reason in config["unavailable"].items()
    )
    return [
        "## Overload",
        "",
        f"C = {config['capacity']:g} ops/s (limiter burst {config['burst_seconds']:g} s), "
        f"{config['threads']} client threads, open-loop arrivals, 50% find_one / 25% update_one "
        f"/ 25% insert_one. Sustained: {config['warmup']:g} s at {config['base_load']:g}x C then "
        f"{config['sustained']:g} s at the load. Bursty: {config['warmup']:g} s at "
        f"{config['base_load']:g}x C, {config['burst']:g} s at the load, {config['recovery']:g} s "
        f"at {config['base_load']:g}x C. Goodput: successes/s in the overload (burst) phase after "
        "its first second. App errors: operations that raised plus arrivals never sent "
        "(skipped: every worker busy > 1 s). Attempts = workload commands the server received "
        "(its counters); steady attempts/op: client-counted attempts per operation sent after "
        f"the overload's (burst's) first {config['steady_skip']:g} s.{unavailable}",
        "",
        format_table(headers, rows, markdown=True),
        "",
        "### Goals (default preset)",
        "",
        format_table(["goal", "measured", "result"], goal_rows, markdown=True),
        "",
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
    """Command-line entry point."""
    run_bench(build_parser().parse_args(argv))
    return 0
