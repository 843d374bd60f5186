"""Hedged reads against the embedded replica set: latency percentiles and the extra reads they cost.

Run with ``python -m backpressure.bench.hedging [--reads 600] [--delay-ms 20] [--slow-ms 200]
[--runs 2] [--out bench/results/hedging]``. The replica set runs in a subprocess; one sync client
thread reads ``find_one`` with ``nearest`` (every member in the latency window). Two scenarios:

* one slow member: every find on one secondary is held ``--slow-ms``;
* slow tails: every member holds 5 % of its finds for ``--slow-ms`` (``activationProbability``).

Each scenario reads with the default preset (no hedging), with stock pymongo, and with the default
preset plus ``hedge_delay``; ``--runs`` repeats the whole set. Per read: p50, p90, p99 and max
latency, and the finds the servers received per read (1.00 without hedging; the excess is the
hedges' extra server load). ``--out PATH`` writes ``PATH.json`` (the raw figures) and ``PATH.md``
(:func:`render_markdown` of it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import pymongo
from pymongo import monitoring

import backpressure
from backpressure.cli import add_progress_argument, positive_int, progress_enabled, run_cli
from backpressure.core import policy as _presets
from backpressure.testing.server.embedded import EmbeddedServer
from backpressure.workload.arms import ARM_KEY, arm_label, default_policy_name
from backpressure.workload.metrics import percentile

__all__ = ["SCENARIOS", "main", "measure", "render_markdown", "run"]

SCENARIOS = ("one slow secondary", "5% slow finds on every member")
"""The scenarios, in table order."""

STOCK = "stock pymongo"
"""The row label of a plain ``pymongo.MongoClient``."""


class _FindCounter(monitoring.CommandListener):
    """Counts the find commands the client sent."""

    def __init__(self) -> None:
        """Start at zero."""
        self.lock = threading.Lock()
        self.finds = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Count a find."""
        if event.command_name == "find":
            with self.lock:
                self.finds += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Ignore."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Ignore."""


def _slow_finds(block_ms: int, probability: Optional[float] = None) -> dict[str, Any]:
    """A fail point holding finds ``block_ms`` (each with ``probability``, or every one)."""
    mode: Any = "alwaysOn" if probability is None else {"activationProbability": probability}
    return {
        "configureFailPoint": "failCommand",
        "mode": mode,
        "data": {"failCommands": ["find"], "blockConnection": True, "blockTimeMS": block_ms},
    }


def _rows(delay_ms: int) -> list[tuple[str, Any]]:
    """(row label, ``backpressure=`` setting; None: a plain pymongo client), the default first."""
    default = arm_label(default_policy_name())
    hedged = _presets.DEFAULT_POLICY.replace(hedge_delay=delay_ms / 1000)
    return [
        (f"{default}, no hedging", _presets.DEFAULT_POLICY),
        (STOCK, None),
        (f"{default} + hedge_delay {delay_ms} ms", hedged),
    ]


def _readable_members(client: Any) -> int:
    """How many members the client's monitors know as a primary or a secondary."""
    descriptions = client.topology_description.server_descriptions().values()
    return sum(d.server_type_name in ("RSPrimary", "RSSecondary") for d in descriptions)


def measure(uri: str, setting: Any, reads: int) -> dict[str, float]:
    """Read ``reads`` times with a fresh client (``setting`` None: a plain pymongo client).

    Returns p50/p90/p99/max latency in milliseconds and the finds sent per read.
    """
    counter = _FindCounter()
    options: dict[str, Any] = {
        "readPreference": "nearest",
        "localThresholdMS": 60_000,
        "event_listeners": [counter],
    }
    client: Any = (
        pymongo.MongoClient(uri, **options)
        if setting is None
        else backpressure.MongoClient(uri, backpressure=setting, **options)
    )
    try:
        # Every member known as readable before the first measured read.
        deadline = time.monotonic() + 30
        while _readable_members(client) < 3 or client.db.coll.find_one({"_id": 1}) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the replica set's members were not discovered in 30 s")
            time.sleep(0.01)
        counter.finds = 0
        latencies = []
        for _ in range(reads):
            start = time.perf_counter()
            client.db.coll.find_one({"_id": 1})
            latencies.append(time.perf_counter() - start)
        # A loser still in flight was sent before its read returned: it is counted.
        finds_per_read = counter.finds / reads
    finally:
        client.close()
    # Nearest rank, as in every latency table; ``reads`` >= 1, so none is None.
    p50, p90, p99 = (percentile(latencies, q) or 0.0 for q in (50, 90, 99))
    return {
        "p50_ms": p50 * 1000,
        "p90_ms": p90 * 1000,
        "p99_ms": p99 * 1000,
        "max_ms": max(latencies) * 1000,
        "finds_per_read": finds_per_read,
    }


def run(
    reads: int, delay_ms: int, slow_ms: int, runs: int, progress: bool = False
) -> dict[str, Any]:
    """Measure every scenario and row ``runs`` times; return the report (JSON-ready).

    ``progress``: name each row on stderr as it starts (stdout is the table's).
    """
    load_before = os.getloadavg()[0]
    rows = _rows(delay_ms)
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    with EmbeddedServer("replicaset", subprocess=True) as server:
        seed: Any = pymongo.MongoClient(server.uri)
        seed.db.coll.insert_one({"_id": 1})
        seed.close()
        fail_points = {
            SCENARIOS[0]: [(_slow_finds(slow_ms), 1)],
            SCENARIOS[1]: [(_slow_finds(slow_ms, 0.05), member) for member in range(3)],
        }
        for number in range(runs):
            for scenario in SCENARIOS:
                for fail_point, member in fail_points[scenario]:
                    server.configure_fail_point(fail_point, member=member)
                for label, setting in rows:
                    if progress:
                        print(
                            f"run {number + 1}/{runs}: {scenario}: {label}",
                            file=sys.stderr,
                            flush=True,
                        )
                    result = measure(server.uri, setting, reads)
                    figures.setdefault((scenario, label), []).append(result)
                server.disable_fail_points()
    return {
        "benchmark": "hedging",
        "date": datetime.date.today().isoformat(),
        "pymongo": pymongo.version,
        "cpus": os.cpu_count(),
        "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "reads": reads,
        "hedge_delay_ms": delay_ms,
        "slow_ms": slow_ms,
        "runs": runs,
        "rows": [
            {"scenario": scenario, ARM_KEY: label, "runs": figures[(scenario, label)]}
            for scenario in SCENARIOS
            for label, _setting in rows
        ],
    }


_COLUMNS = (
    ("p50_ms", 1, " ms"),
    ("p90_ms", 1, " ms"),
    ("p99_ms", 1, " ms"),
    ("max_ms", 1, " ms"),
    ("finds_per_read", 2, ""),
)
"""The measured columns: report key, decimals, unit."""


def _cell(values: list[float], digits: int, unit: str) -> str:
    """The first run's figure, then the others in brackets: ``3.6 (3.9) ms``."""
    first, *others = (f"{value:.{digits}f}" for value in values)
    rest = f" ({', '.join(others)})" if others else ""
    return f"{first}{rest}{unit}"


def render_markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown page: the conditions, then one table row per scenario and row."""
    runs = report["runs"]
    lines = [
        "# Hedged reads benchmark",
        "",
        f"`python -m backpressure.bench.hedging` on {report['date']}: pymongo "
        f"{report['pymongo']}, {report['cpus']} CPUs, load average "
        f"{report['load_average'][0]} before and {report['load_average'][1]} after. An embedded "
        f"3-member replica set in a subprocess; one sync thread, {report['reads']} `find_one` "
        f"per row with `nearest`; finds held {report['slow_ms']} ms by a fail point; hedged "
        f"reads with `hedge_delay` {report['hedge_delay_ms']} ms.",
        "",
        f"{runs} run{'s' if runs > 1 else ''}"
        + (": each cell gives run 1, then the others in brackets." if runs > 1 else "."),
        "",
        "| scenario | client | p50 | p90 | p99 | max | finds the servers received per read |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        cells = [
            _cell([figures[key] for figures in row["runs"]], digits, unit)
            for key, digits, unit in _COLUMNS
        ]
        lines.append(f"| {row['scenario']} | {row[ARM_KEY]} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def _main(argv: Optional[Sequence[str]]) -> int:
    """The command line, without the missing-extra and Ctrl-C handling of :func:`main`."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench.hedging",
        description=(__doc__ or "").splitlines()[0],
    )
    parser.add_argument("--reads", type=positive_int, default=600, help="reads per row")
    parser.add_argument(
        "--delay-ms", type=positive_int, default=20, help="hedge_delay in milliseconds"
    )
    parser.add_argument(
        "--slow-ms", type=positive_int, default=200, help="how long a slow find is held"
    )
    parser.add_argument("--runs", type=positive_int, default=2, help="repetitions of the set")
    parser.add_argument(
        "--out", type=Path, metavar="PATH", help="write PATH.json and PATH.md as well"
    )
    add_progress_argument(parser)
    args = parser.parse_args(argv)
    if args.delay_ms > _presets.HEDGE_DELAY_LIMIT * 1000:
        parser.error(f"argument --delay-ms: at most {int(_presets.HEDGE_DELAY_LIMIT * 1000)}")
    report = run(
        args.reads, args.delay_ms, args.slow_ms, args.runs, progress_enabled(args.progress)
    )
    text = render_markdown(report)
    print(text, end="")
    if args.out is not None:
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point: 0 after a run, 1 without a needed extra, 2 on a usage error."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
