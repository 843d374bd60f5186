"""The transient benchmark: a few rejections at low load, then a demand rise under capacity.

One client (in this process) with 16 threads serving evenly spaced arrivals at ``base_rate``
(100/s): half ``find_one`` by ``_id``, half ``insert_one``, each under ``pymongo.timeout``
counted from its due time.  The embedded replica set (its own process, real TCP) admits
``capacity`` (2,000/s).  At ``blip_s`` a ``failCommand`` fail point in ``{times: n}`` mode makes
the primary reject the next ``rejections`` workload commands with code 462 and the overload
labels; at ``rise_s`` demand rises ``rise`` x (to 400/s), still far below capacity.

Per arm: successes per second in the ``after_s`` seconds after the rise, their p99 latency
(from the due time), local refusals and app errors.  Goals, against stock pymongo in the same
run: goodput >= 98% of stock's, p99 <= stock's + 20 ms, no local refusal.
"""

from __future__ import annotations

import functools
import math
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

import pymongo
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from backpressure.bench.fleet import default_policy_name, fleet_arms
from backpressure.workload import ARMS
from backpressure.workload.arms import STOCK, arm_label, from_file, to_file
from backpressure.workload.driver import LocalEventCounter
from backpressure.workload.metrics import percentile

__all__ = [
    "QUICK_TRANSIENT",
    "STOCK",
    "TRANSIENT_GOALS",
    "TransientPlan",
    "TransientRun",
    "render_transient_markdown",
    "run_transient",
]

TRANSIENT_GOALS: tuple[str, ...] = (
    "goodput >= 98% of stock's",
    "p99 <= stock's + 20 ms",
    "0 local refusals",
)

DATABASE = "transient"
COLLECTION = "ops"


@dataclass(frozen=True)
class TransientPlan:
    """The shape of one transient run."""

    threads: int = 16
    base_rate: float = 100.0
    rise: float = 4.0
    capacity: float = 2000.0
    blip_s: float = 3.0
    rise_s: float = 4.0
    after_s: float = 6.0
    rejections: int = 3
    deadline_s: float = 1.0
    keys: int = 500

    @property
    def duration_s(self) -> float:
        """Seconds of load."""
        return self.rise_s + self.after_s

    def arrivals(self) -> list[float]:
        """Due offsets of every arrival: evenly spaced, ``base_rate`` then ``rise`` x."""
        due = [(i + 0.5) / self.base_rate for i in range(round(self.rise_s * self.base_rate))]
        fast = self.base_rate * self.rise
        due += [self.rise_s + (i + 0.5) / fast for i in range(round(self.after_s * fast))]
        return due


QUICK_TRANSIENT = TransientPlan(
    threads=4, base_rate=40.0, blip_s=0.5, rise_s=1.0, after_s=1.0, rejections=1, keys=50
)
"""A run of a few seconds for the tests."""


@dataclass(frozen=True)
class TransientRun:
    """One arm's transient run."""

    arm: str
    rejections: int
    operations: int
    app_errors: int
    after_successes: int
    """Successes of the operations due after the rise."""
    after_s: float
    after_p99_ms: Optional[float]
    local_refusals: Optional[int]
    server_rejected: int
    """Commands the fail point rejected (from the server's counters)."""

    @property
    def goodput(self) -> float:
        """Successes per second after the rise."""
        return self.after_successes / self.after_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return to_file({**asdict(self), "goodput": self.goodput})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransientRun:
        """The run :meth:`to_dict` described."""
        return cls(**{k: v for k, v in from_file(data).items() if k in cls.__dataclass_fields__})


def _wait_until(instant: float) -> None:
    """Block until ``time.perf_counter()`` reaches ``instant``."""
    remaining = instant - time.perf_counter()
    if remaining > 0:
        threading.Event().wait(remaining)


def _rejected(stats: dict[str, Any]) -> int:
    """Fail-point rejections of the workload commands in the server's counters."""
    commands = stats.get("commands", {})
    total = 0
    for name in ("find", "insert"):
        counters = commands.get(name, {})
        total += int(counters.get("failed", counters.get("errors", 0)) or 0)
    return total


def run_arm_transient(target: Any, arm: str, plan: TransientPlan) -> TransientRun:
    """Run ``plan`` once under ``arm`` and summarise it."""
    target.reset()
    target.disable_rate_limit()
    plain: MongoClient[dict[str, Any]] = MongoClient(target.uri)
    try:
        plain[DATABASE][COLLECTION].drop()
        plain[DATABASE][COLLECTION].insert_many([{"_id": k} for k in range(plan.keys)])
    finally:
        plain.close()
    events = LocalEventCounter()
    client = ARMS[arm].open(target.uri, local_listener=events, maxPoolSize=plan.threads + 10)
    due = plan.arrivals()
    outcomes: list[tuple[float, bool, float]] = []  # (due offset, ok, latency ms)
    lock = threading.Lock()
    try:
        collection = client.client[DATABASE][COLLECTION]
        collection.find_one({"_id": -1})  # connect before the clock starts
        target.set_rate_limit(plan.capacity)
        target.stats(reset=True)
        t0 = time.perf_counter() + 0.2

        def worker(number: int) -> None:
            rng = random.Random(number)
            mine = []
            for offset in due[number :: plan.threads]:
                _wait_until(t0 + offset)
                remaining = t0 + offset + plan.deadline_s - time.perf_counter()
                ok = False
                if remaining > 0:
                    try:
                        with pymongo.timeout(remaining):
                            if rng.random() < 0.5:
                                key = rng.randrange(plan.keys)
                                client.call(functools.partial(collection.find_one, {"_id": key}))
                            else:
                                client.call(functools.partial(collection.insert_one, {"w": 1}))
                        ok = True
                    except PyMongoError:
                        ok = False
                latency = (time.perf_counter() - t0 - offset) * 1000.0
                mine.append((offset, ok, latency))
            with lock:
                outcomes.extend(mine)

        threads = [
            threading.Thread(target=worker, args=(n,), daemon=True) for n in range(plan.threads)
        ]
        for thread in threads:
            thread.start()
        _wait_until(t0 + plan.blip_s)
        target.configure_fail_point(
            {
                "mode": {"times": plan.rejections},
                "data": {
                    "failCommands": ["find", "insert"],
                    "errorCode": 462,
                    "errorLabels": ["SystemOverloadedError", "RetryableError"],
                },
            },
            member=0,
        )
        for thread in threads:
            thread.join()
        stats = target.stats()
    finally:
        client.close()
        target.disable_fail_points()
        target.disable_rate_limit()
    after = [(ok, latency) for offset, ok, latency in outcomes if offset >= plan.rise_s]
    return TransientRun(
        arm=arm,
        rejections=plan.rejections,
        operations=len(outcomes),
        app_errors=sum(1 for _, ok, _ in outcomes if not ok),
        after_successes=sum(1 for ok, _ in after if ok),
        after_s=plan.after_s,
        after_p99_ms=percentile([latency for ok, latency in after if ok], 99),
        local_refusals=events.refusals if events.reported else None,
        server_rejected=_rejected(stats),
    )


def run_transient(
    target: Any,
    arms: Optional[Sequence[str]] = None,
    plan: TransientPlan = TransientPlan(),
    *,
    progress: Optional[Callable[[str], None]] = None,
) -> list[TransientRun]:
    """Run every arm (the default's first) through ``plan``."""
    runs = []
    for arm in fleet_arms(arms):
        if progress is not None:
            progress(f"transient {plan.rejections}: {arm}")
        runs.append(run_arm_transient(target, arm, plan))
    return runs


def judge(run: TransientRun, stock: Optional[TransientRun]) -> dict[str, Optional[bool]]:
    """The transient goals against ``stock`` (None: no stock run to compare with)."""
    refusals = run.local_refusals or 0
    if stock is None:
        return {
            TRANSIENT_GOALS[0]: None,
            TRANSIENT_GOALS[1]: None,
            TRANSIENT_GOALS[2]: refusals == 0,
        }
    p99, stock_p99 = run.after_p99_ms or math.inf, stock.after_p99_ms or 0.0
    return {
        TRANSIENT_GOALS[0]: run.goodput >= 0.98 * stock.goodput,
        TRANSIENT_GOALS[1]: p99 <= stock_p99 + 20.0,
        TRANSIENT_GOALS[2]: refusals == 0,
    }


def render_transient_markdown(runs: Sequence[TransientRun], plan: TransientPlan) -> str:
    """One table (every arm, the default's first) and the goals."""
    runs = sorted(runs, key=lambda run: run.arm != default_policy_name())
    stock = next((r for r in runs if r.arm == STOCK), None)
    stock = stock or next((r for r in runs if r.arm == "current"), None)
    header = [
        "arm",
        "ops",
        "app errors",
        "server rejections",
        f"goodput after the rise, ops/s (offered {plan.base_rate * plan.rise:g})",
        "vs stock",
        "p99 after the rise, ms",
        "local refusals",
    ]
    lines = [
        f"### {plan.rejections} rejection(s), then x{plan.rise:g} demand",
        "",
        f"{plan.threads} threads at {plan.base_rate:g} ops/s against {plan.capacity:g}/s; at "
        f"{plan.blip_s:g} s the primary rejects the next {plan.rejections} workload "
        f"command(s) (fail point, code 462); from {plan.rise_s:g} s demand is "
        f"{plan.base_rate * plan.rise:g}/s for {plan.after_s:g} s. Latency from the due time.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for run in runs:
        ratio = "-" if stock is None or not stock.goodput else f"{run.goodput / stock.goodput:.1%}"
        p99 = "-" if run.after_p99_ms is None else f"{run.after_p99_ms:,.1f}"
        refusals = "-" if run.local_refusals is None else f"{run.local_refusals:,}"
        lines.append(
            f"| {arm_label(run.arm)} | {run.operations:,} | {run.app_errors:,} | "
            f"{run.server_rejected:,} | {run.goodput:,.1f} | {ratio} | {p99} | {refusals} |"
        )
    lines += ["", "Goals:", ""]
    for run in runs:
        verdicts = ", ".join(
            f"{goal}: {'-' if met is None else ('met' if met else 'NOT met')}"
            for goal, met in judge(run, stock).items()
        )
        lines.append(f"- **{arm_label(run.arm)}**: {verdicts}")
    return "\n".join(lines) + "\n"
