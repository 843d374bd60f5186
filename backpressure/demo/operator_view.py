"""What an operator sees during an overload: the pacing metrics, stats and log lines over time.

One client with the ``adaptive`` preset and ``threads`` threads sends evenly spaced operations
(half ``find_one`` by ``_id``, half ``insert_one``, each under ``pymongo.timeout``) at ``demand``
operations per second to the embedded server (its own process, real TCP).  After ``before_s``
seconds the server's ingress limiter admits only ``capacity`` requests per second for
``overload_s`` seconds; then the limit is lifted for ``after_s`` seconds.  Every ``sample_s``
seconds the Prometheus exporter is scraped (as Prometheus would) and ``backpressure.stats`` is
read; the ``backpressure`` logger's lines are kept with their time.  The samples, the log lines
and the plan go to a JSON file, the chart to a PNG::

    python -m backpressure.demo.operator_view --json bench/results/operator-view.json \\
        --png bench/results/operator-view.png
"""

from __future__ import annotations

import argparse
import itertools
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

__all__ = ["OperatorViewPlan", "draw_operator_view", "run_operator_view", "transition_lines"]

_PACING = (
    "backpressure_pacing_paced",
    "backpressure_pacing_rate_per_second",
    "backpressure_pacing_waiting",
    "backpressure_pacing_backlog_seconds",
    "backpressure_pacing_pushbacks_total",
    "backpressure_pacing_competing",
)
"""The pacing samples read from each scrape (one server, one client)."""

PACED_LINE = "pacing attempts to "
"""What the INFO line of a server becoming paced starts with."""
REOPENED_LINE = "no longer pacing attempts to "
"""What the INFO line of a server reopening starts with."""


@dataclass(frozen=True)
class OperatorViewPlan:
    """The run: demand, the overload's capacity and timing, and how often it is sampled."""

    threads: int = 12
    demand: float = 600.0
    """Operations per second offered by all the threads together (evenly spaced)."""
    capacity: int = 300
    """Requests per second the server admits during the overload."""
    before_s: float = 3.0
    overload_s: float = 4.0
    after_s: float = 5.0
    sample_s: float = 0.2
    timeout_s: float = 2.0
    """Each operation's ``pymongo.timeout``."""

    def __post_init__(self) -> None:
        """Check the plan's ranges."""
        if not 1 <= self.threads <= 64:
            raise ValueError(f"threads must be 1..64, got {self.threads!r}")
        if not 1 <= self.capacity < self.demand:
            raise ValueError(
                f"capacity must be >= 1 and below demand ({self.demand}), got {self.capacity!r}"
            )
        for name in ("before_s", "overload_s", "after_s", "sample_s", "timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")

    @property
    def total_s(self) -> float:
        """Length of the run in seconds."""
        return self.before_s + self.overload_s + self.after_s


class _LogKeeper(logging.Handler):
    """Keeps the ``backpressure`` logger's lines with their time from the run's start."""

    def __init__(self, start: float) -> None:
        """Time the lines from ``start`` (``time.monotonic``)."""
        super().__init__(logging.INFO)
        self._start = start
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep one line."""
        self.lines.append(
            {
                "t": round(time.monotonic() - self._start, 3),
                "level": record.levelname,
                "message": record.getMessage(),
            }
        )


class _Outcomes:
    """Operations the threads finished, succeeded or raised (counted under a lock)."""

    def __init__(self) -> None:
        """Start at zero."""
        self.lock = threading.Lock()
        self.succeeded = 0
        self.failed = 0

    def add(self, ok: bool) -> None:
        """Count one operation."""
        with self.lock:
            if ok:
                self.succeeded += 1
            else:
                self.failed += 1


def _worker(
    client: Any,
    plan: OperatorViewPlan,
    index: int,
    start: float,
    stop: float,
    outcomes: _Outcomes,
) -> None:
    """Send this thread's share of the evenly spaced operations until ``stop``."""
    import pymongo
    from pymongo.errors import PyMongoError

    interval = plan.threads / plan.demand
    collection = client.bp_operator_view.items
    for number in itertools.count():
        due = start + (number + index / plan.threads) * interval
        if due >= stop:
            return
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        key = index * 10_000_000 + number
        try:
            with pymongo.timeout(plan.timeout_s):
                if number % 2:
                    collection.insert_one({"_id": key})
                else:
                    collection.find_one({"_id": key - 1})
        except PyMongoError:
            outcomes.add(False)
        else:
            outcomes.add(True)


def _scrape(registry: Any) -> dict[str, float]:
    """The pacing samples of one scrape (summed over servers: the run has one)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name in _PACING or sample.name in (
                "backpressure_local_waits_total",
                "backpressure_local_refusals_total",
            ):
                found[sample.name] = found.get(sample.name, 0.0) + float(sample.value)
    return found


def run_operator_view(plan: OperatorViewPlan) -> dict[str, Any]:
    """Run ``plan`` against the embedded server; return the plan, samples and log lines."""
    from prometheus_client import CollectorRegistry
    from pymongo import MongoClient

    import backpressure
    import backpressure.metrics
    from backpressure.testing import EmbeddedServer
    from backpressure.workload.report import machine_info

    logger = logging.getLogger("backpressure")
    with EmbeddedServer(topology="standalone", subprocess=True) as server:
        client: Any = MongoClient(server.uri, maxPoolSize=plan.threads + 4)
        backpressure.enable(client, backpressure.ADAPTIVE)
        registry = CollectorRegistry()
        metrics = backpressure.metrics.enable_prometheus(registry, clients=[client])
        client.bp_operator_view.items.find_one({})  # connect before the clock starts
        outcomes = _Outcomes()
        start = time.monotonic() + 0.2
        keeper = _LogKeeper(start)
        previous_level = logger.level
        logger.addHandler(keeper)
        logger.setLevel(logging.INFO)
        stop = start + plan.total_s
        threads = [
            threading.Thread(
                target=_worker,
                args=(client, plan, index, start, stop, outcomes),
                name=f"operator-view-{index}",
                daemon=True,
            )
            for index in range(plan.threads)
        ]
        for thread in threads:
            thread.start()
        samples: list[dict[str, Any]] = []
        phases: list[tuple[float, Optional[int]]] = [
            (start + plan.before_s, plan.capacity),  # lower the capacity
            (start + plan.before_s + plan.overload_s, None),  # lift the limit
        ]
        changes: list[float] = []
        try:
            for number in itertools.count(1):
                due = start + number * plan.sample_s
                if due > stop + plan.sample_s / 2:
                    break
                while phases and phases[0][0] <= due:
                    at, capacity = phases.pop(0)
                    time.sleep(max(0.0, at - time.monotonic()))
                    if capacity is None:
                        server.disable_rate_limit()
                    else:
                        server.set_rate_limit(capacity, 0.1)
                    changes.append(round(time.monotonic() - start, 3))
                time.sleep(max(0.0, due - time.monotonic()))
                now = time.monotonic()
                row: dict[str, Any] = {"t": round(now - start, 3)}
                row.update(_scrape(registry))
                stats = backpressure.stats(client)
                pacing = list(stats.pacing.values())
                row["stats_paced"] = any(snapshot.paced for snapshot in pacing)
                with outcomes.lock:
                    row["succeeded"] = outcomes.succeeded
                    row["failed"] = outcomes.failed
                row["stats_attempts"] = stats.attempts
                samples.append(row)
            for thread in threads:
                thread.join(timeout=plan.timeout_s + 5.0)
        finally:
            logger.removeHandler(keeper)
            logger.setLevel(previous_level)
            metrics.close()
            client.close()
    return {
        "plan": asdict(plan),
        "machine": machine_info(),
        "capacity_changes_s": changes,
        "samples": samples,
        "log": keeper.lines,
        "summary": summarize(plan, samples, keeper.lines),
    }


def transition_lines(log: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The log lines of servers becoming paced or reopening, in order."""
    return [line for line in log if str(line["message"]).startswith((PACED_LINE, REOPENED_LINE))]


def _rates(samples: Sequence[Mapping[str, Any]], key: str) -> list[tuple[float, float]]:
    """``(t, per second)`` of a cumulative ``key`` between consecutive samples."""
    rates = []
    for before, after in zip(samples, samples[1:]):
        span = after["t"] - before["t"]
        if span > 0:
            rates.append((after["t"], (after.get(key, 0.0) - before.get(key, 0.0)) / span))
    return rates


def summarize(
    plan: OperatorViewPlan,
    samples: Sequence[Mapping[str, Any]],
    log: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The figures the docs quote: when the pacing closed and reopened, when its rate passed
    the demand again after the overload, its lowest rate, the most attempts waiting and the
    longest backlog, the pushbacks, and the operations."""
    lines = transition_lines(log)
    paced = [line["t"] for line in lines if str(line["message"]).startswith(PACED_LINE)]
    reopened = [line["t"] for line in lines if str(line["message"]).startswith(REOPENED_LINE)]
    rates = [
        s["backpressure_pacing_rate_per_second"]
        for s in samples
        if s.get("backpressure_pacing_rate_per_second")
    ]
    last = samples[-1] if samples else {}
    overload_end = plan.before_s + plan.overload_s
    return {
        "first_paced_s": paced[0] if paced else None,
        "last_reopened_s": reopened[-1] if reopened else None,
        "paced_after_overload_start_s": (round(paced[0] - plan.before_s, 2) if paced else None),
        "reopened_after_overload_end_s": (
            round(reopened[-1] - overload_end, 2) if reopened else None
        ),
        "rate_above_demand_after_overload_end_s": next(
            (
                round(sample["t"] - overload_end, 2)
                for sample in samples
                if sample["t"] > overload_end
                and (sample.get("backpressure_pacing_rate_per_second") or 0.0) > plan.demand
            ),
            None,
        ),
        "transition_lines": len(lines),
        "lowest_rate": round(min(rates), 1) if rates else None,
        "highest_rate": round(max(rates), 1) if rates else None,
        "most_waiting": max(
            (s.get("backpressure_pacing_waiting", 0.0) for s in samples), default=0
        ),
        "longest_backlog_s": round(
            max((s.get("backpressure_pacing_backlog_seconds", 0.0) for s in samples), default=0),
            3,
        ),
        "pushbacks": int(last.get("backpressure_pacing_pushbacks_total", 0)),
        "local_refusals": int(last.get("backpressure_local_refusals_total", 0)),
        "succeeded": last.get("succeeded", 0),
        "failed": last.get("failed", 0),
    }


def draw_operator_view(report: Mapping[str, Any], path: Path) -> None:
    """Draw the run's metrics over time into ``path`` (a PNG)."""
    from backpressure.core.extras import require

    matplotlib = require("matplotlib", "demo", "the operator view's chart")
    matplotlib.use("Agg")
    pyplot = require("matplotlib.pyplot", "demo", "the operator view's chart")

    plan = OperatorViewPlan(**report["plan"])
    samples = report["samples"]
    times = [s["t"] for s in samples]
    figure, axes = pyplot.subplots(4, 1, sharex=True, figsize=(10, 10), constrained_layout=True)
    low, high = plan.before_s, plan.before_s + plan.overload_s
    for axis in axes:
        axis.axvspan(low, high, color="0.9", zorder=0)
        for line in transition_lines(report["log"]):
            opened = str(line["message"]).startswith(REOPENED_LINE)
            axis.axvline(line["t"], color="tab:green" if opened else "tab:red", ls="--", lw=1)
        axis.grid(alpha=0.3)

    ops, failed = _rates(samples, "succeeded"), _rates(samples, "failed")
    axes[0].plot([t for t, _ in ops], [v for _, v in ops], label="operations succeeded/s")
    axes[0].plot([t for t, _ in failed], [v for _, v in failed], label="operations failed/s")
    axes[0].axhline(plan.demand, color="0.4", ls=":", label="offered")
    axes[0].hlines(
        plan.capacity, low, high, color="k", ls="-.", label="server capacity during the overload"
    )
    axes[0].set_ylabel("ops/s")
    axes[0].set_title(
        f"{plan.threads} threads, {plan.demand:g} ops/s offered; the server admits "
        f"{plan.capacity}/s from {low:g} s to {high:g} s (shaded); dashed: the INFO lines "
        "(red paced, green reopened)",
        fontsize=9,
    )

    rate = [s.get("backpressure_pacing_rate_per_second") for s in samples]
    axes[1].plot(times, [float("nan") if r is None else r for r in rate], label="paced rate")
    axes[1].fill_between(
        times,
        0,
        1,
        where=[bool(s.get("backpressure_pacing_paced")) for s in samples],
        step="post",
        color="tab:orange",
        alpha=0.25,
        transform=axes[1].get_xaxis_transform(),
        label="paced = 1",
    )
    axes[1].axhline(plan.capacity, color="k", ls="-.", lw=0.8)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("attempts/s (log)")
    axes[2].plot(
        times, [s.get("backpressure_pacing_waiting", 0.0) for s in samples], label="waiting"
    )
    axes[2].set_ylabel("attempts waiting")
    backlog_axis = axes[2].twinx()
    backlog_axis.plot(
        times,
        [s.get("backpressure_pacing_backlog_seconds", 0.0) for s in samples],
        color="tab:purple",
        label="backlog (s, right)",
    )
    backlog_axis.set_ylabel("backlog s")

    pushbacks = _rates(samples, "backpressure_pacing_pushbacks_total")
    refusals = _rates(samples, "backpressure_local_refusals_total")
    axes[3].plot([t for t, _ in pushbacks], [v for _, v in pushbacks], label="pushbacks/s")
    axes[3].plot([t for t, _ in refusals], [v for _, v in refusals], label="local refusals/s")
    axes[3].set_ylabel("per second")
    axes[3].set_xlabel("seconds")
    for axis in (*axes, backlog_axis):
        if axis.get_legend_handles_labels()[0]:
            axis.legend(
                loc="upper right" if axis is not backlog_axis else "center right", fontsize=8
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the operator view and write its JSON and chart."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.demo.operator_view",
        description="Run one client through a short overload of the embedded server and record "
        "what an operator sees: the pacing metrics, backpressure.stats and the log lines.",
    )
    defaults = OperatorViewPlan()
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--demand", type=float, default=defaults.demand, help="ops/s offered")
    parser.add_argument("--capacity", type=int, default=defaults.capacity, help="admitted/s")
    parser.add_argument("--overload-s", type=float, default=defaults.overload_s)
    parser.add_argument("--json", type=Path, default=Path("operator-view.json"))
    parser.add_argument("--png", type=Path, default=Path("operator-view.png"))
    parser.add_argument(
        "--chart-only", action="store_true", help="redraw the chart from --json, run nothing"
    )
    args = parser.parse_args(argv)
    import json

    if args.chart_only:
        report = json.loads(args.json.read_text(encoding="utf-8"))
    else:
        plan = OperatorViewPlan(
            threads=args.threads,
            demand=args.demand,
            capacity=args.capacity,
            overload_s=args.overload_s,
        )
        report = run_operator_view(plan)
        from backpressure.workload.report import write_json

        write_json(args.json, report)
    draw_operator_view(report, args.png)
    print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
