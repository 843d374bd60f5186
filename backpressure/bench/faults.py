"""The fault soak: many writers under a seeded random fault schedule, every acked write checked.

``python -m backpressure.bench.faults`` runs 32 writers (4 client processes x 8 threads by
default) for ``--seconds`` (120 by default) against the embedded replica set (its own process,
real TCP), whose ingress limiter admits ``capacity`` (2,000 ops/s).  Each writer writes
documents with ids of its own, each written once by the application: most operations are one
``update_one({_id}, {$inc: {n: 1}}, upsert=True)``, one in ten a transaction upserting two such
documents in the writer's own collection (``with_transaction``); every operation runs under
``pymongo.timeout(1)``.  Each writer records what was acknowledged.

From this process, every 1-3 s one fault drawn from ``random.Random(seed)``, the five kinds
equally likely: the next 1-20 writes' connections closed; the next 1-20 writes blocked for
100-800 ms; every write rejected (code 462 with the overload labels) for 0.3-1.5 s or, one time
in three, 3-8 s (an overload burst); the rate limit dropped to 20-200/s for 0.5-2 s; the next
1-5 ``commitTransaction`` closed or rejected.  Fail points and limits are set at run time over
the server's control connection.

At the end the collection is read back: acked (documents acknowledged), errors (operations that
raised), duplicated (a document whose ``n`` is above 1: a write applied twice), lost (acked but
absent).  The policies run one after another on the same seeded schedule, the default's row
first, stock pymongo beside it.  Goals for ``adaptive``: acked >= 98 % of ``current``'s, errors
<= ``current``'s; for every policy, 0 duplicated and 0 lost.
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import multiprocessing
import random
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pymongo
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from backpressure.bench.fleet import _await_ready, _wait_until, fleet_policies
from backpressure.bench.publish import publish_run
from backpressure.cli import positive_float, positive_int, run_cli
from backpressure.workload import POLICIES
from backpressure.workload.arms import default_policy_name, policy_label
from backpressure.workload.driver import received_commands
from backpressure.workload.report import run_line

__all__ = [
    "FAULT_GOALS",
    "QUICK_FAULTS",
    "Fault",
    "FaultPlan",
    "FaultRun",
    "audit",
    "fault_schedule",
    "faults_report",
    "judge",
    "main",
    "render_faults_markdown",
    "render_faults_report",
    "run_faults",
    "run_policy_faults",
]

DATABASE = "faults"
COLLECTION = "docs"
TRANSACTION_PREFIX = "txn-"
OVERLOAD_LABELS = ["RetryableError", "SystemOverloadedError"]
"""The labels of an overload rejection (code 462)."""

FAULT_GOALS: tuple[str, ...] = (
    "acked >= 98% of current's",
    "errors <= current's",
    "0 duplicated",
    "0 lost",
)

KEY_SPACE = 10**9
"""Ids: ``process * KEY_SPACE + thread * (KEY_SPACE // 1000) + n``."""


@dataclass(frozen=True)
class FaultPlan:
    """The shape of one soak."""

    processes: int = 4
    threads: int = 8
    seconds: float = 120.0
    seed: int = 1
    capacity: float = 2000.0
    """The limiter's rate outside the tight-limit faults, ops/s."""
    deadline_s: float = 1.0
    """``pymongo.timeout`` of every operation."""
    transaction_share: float = 0.1
    """Share of the operations that are a two-document transaction."""
    bin_s: float = 0.25
    start_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        """Validate the numbers."""
        if self.processes < 1 or self.threads < 1 or self.threads >= 1000:
            raise ValueError(
                f"FaultPlan needs processes >= 1 and threads in 1..999, got "
                f"{self.processes} and {self.threads}"
            )
        for name in ("seconds", "capacity", "deadline_s", "bin_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"FaultPlan.{name} must be a finite number > 0, got {value!r}")
        if not 0.0 <= self.transaction_share <= 1.0:
            raise ValueError(
                f"FaultPlan.transaction_share must be in 0..1, got {self.transaction_share!r}"
            )


QUICK_FAULTS = FaultPlan(processes=2, threads=2, seconds=4.0, capacity=500.0)
"""A soak of a few seconds for the tests."""


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule: from ``at`` to ``end`` seconds after the start."""

    at: float
    end: float
    kind: str
    """``close``, ``block``, ``overload``, ``limit`` or ``commit``."""
    label: str
    fail_point: Optional[dict[str, Any]] = None
    """The ``failCommand`` configuration to set at ``at`` (switched off at ``end``)."""
    rate: Optional[float] = None
    """The rate limit from ``at`` to ``end`` (``limit`` faults)."""


def fault_schedule(seed: int, seconds: float) -> list[Fault]:
    """Every 1-3 s one fault drawn from ``random.Random(seed)`` (the module's docstring)."""
    rng = random.Random(f"soak:{seed}")
    faults: list[Fault] = []
    t = 1.0 + rng.uniform(0.0, 2.0)
    while t < seconds - 1.0:
        kind = ("close", "block", "overload", "limit", "commit")[rng.randrange(5)]
        at = round(t, 3)
        end = at
        fail_point: Optional[dict[str, Any]] = None
        rate: Optional[float] = None
        if kind == "close":
            count = rng.randint(1, 20)
            fail_point = _fail_point({"times": count}, ["update"], closeConnection=True)
            label = f"{count} closed"
        elif kind == "block":
            count, block_ms = rng.randint(1, 20), rng.randint(100, 800)
            fail_point = _fail_point(
                {"times": count}, ["update"], blockConnection=True, blockTimeMS=block_ms
            )
            label = f"{count} blocked {block_ms} ms"
        elif kind == "overload":
            length = rng.uniform(3.0, 8.0) if rng.random() < 1 / 3 else rng.uniform(0.3, 1.5)
            end = round(min(at + length, seconds), 3)
            fail_point = _fail_point(
                "alwaysOn", ["update"], errorCode=462, errorLabels=OVERLOAD_LABELS
            )
            label = f"all rejected {end - at:.1f} s"
        elif kind == "limit":
            rate = float(rng.randint(20, 200))
            end = round(min(at + rng.uniform(0.5, 2.0), seconds), 3)
            label = f"{rate:g}/s for {end - at:.1f} s"
        else:
            count = rng.randint(1, 5)
            if rng.random() < 0.5:
                extra: dict[str, Any] = {"closeConnection": True}
                how = "closed"
            else:
                extra = {"errorCode": 462, "errorLabels": OVERLOAD_LABELS}
                how = "rejected"
            fail_point = _fail_point({"times": count}, ["commitTransaction"], **extra)
            label = f"{count} commits {how}"
        faults.append(Fault(at, end, kind, label, fail_point, rate))
        t = end + rng.uniform(1.0, 3.0)
    return faults


def _fail_point(mode: Any, commands: list[str], **data: Any) -> dict[str, Any]:
    """A ``failCommand`` configuration."""
    return {
        "configureFailPoint": "failCommand",
        "mode": mode,
        "data": {"failCommands": commands, **data},
    }


# -- the writer processes ---------------------------------------------------------------------


def _writer_process(
    index: int,
    uri: str,
    policy_name: str,
    plan: FaultPlan,
    ready: Any,
    go: Any,
    start_at: Any,
    results: Any,
) -> None:
    """One client process: T writer threads, each recording the ids acknowledged."""
    logging.getLogger("backpressure").setLevel(logging.ERROR)
    client = POLICIES[policy_name].open(uri, maxPoolSize=plan.threads + 10, appname=f"soak-{index}")
    try:
        collection = client.client[DATABASE][COLLECTION]
        collection.find_one({"_id": -1})  # connect and discover before the clock starts
        ready.put(index)
        if not go.wait(plan.start_timeout_s * 2):
            return
        t0 = float(start_at.value)
        end = t0 + plan.seconds
        slots = int(plan.seconds / plan.bin_s) + 2
        acked: list[int] = []
        ok_bins = [0] * slots
        error_bins = [0] * slots
        kinds: dict[str, int] = {}
        counts = {"ops": 0, "errors": 0, "transactions": 0}
        lock = threading.Lock()

        def upsert(key: int, target: Any = collection, session: Any = None) -> None:
            target.update_one({"_id": key}, {"$inc": {"n": 1}}, upsert=True, session=session)

        def both(first: int, target: Any, session: Any) -> None:
            upsert(first, target, session)
            upsert(first + 1, target, session)

        def transaction(first: int, target: Any) -> None:
            with client.client.start_session() as session:
                session.with_transaction(functools.partial(both, first, target))

        def writer(number: int) -> None:
            rng = random.Random(f"{plan.seed}:{index}:{number}")
            key = index * KEY_SPACE + number * (KEY_SPACE // 1000)
            own_acked: list[int] = []
            own_collection = client.client[DATABASE][transaction_collection(index, number)]
            own_kinds: dict[str, int] = {}
            ops = errors = transactions = 0
            _wait_until(t0)
            while time.time() < end:
                ops += 1
                in_transaction = rng.random() < plan.transaction_share
                keys = [key, key + 1] if in_transaction else [key]
                key += len(keys)
                transactions += in_transaction
                try:
                    with pymongo.timeout(plan.deadline_s):
                        if in_transaction:
                            client.call(functools.partial(transaction, keys[0], own_collection))
                        else:
                            client.call(functools.partial(upsert, keys[0]))
                except PyMongoError as exc:
                    errors += 1
                    name = type(exc).__name__
                    own_kinds[name] = own_kinds.get(name, 0) + 1
                    slot = int((time.time() - t0) / plan.bin_s)
                    with lock:
                        error_bins[min(slot, slots - 1)] += 1
                    continue
                own_acked.extend(keys)
                slot = int((time.time() - t0) / plan.bin_s)
                with lock:
                    ok_bins[min(slot, slots - 1)] += len(keys)
            with lock:
                acked.extend(own_acked)
                counts["ops"] += ops
                counts["errors"] += errors
                counts["transactions"] += transactions
                for name, n in own_kinds.items():
                    kinds[name] = kinds.get(name, 0) + n

        threads = [
            threading.Thread(target=writer, args=(n,), daemon=True) for n in range(plan.threads)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        results.put(
            {
                "index": index,
                **counts,
                "acked": acked,
                "ok_bins": ok_bins,
                "error_bins": error_bins,
                "error_kinds": kinds,
            }
        )
    finally:
        client.close()


# -- one policy's soak ------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultRun:
    """One policy's soak, summarised."""

    policy: str
    operations: int
    transactions: int
    errors: int
    acked: int
    """Documents acknowledged to the writers."""
    stored: int
    """Documents in the collection at the end (acked or not)."""
    duplicated: int
    """Documents whose ``n`` is above 1: a write applied twice."""
    lost: int
    """Acked documents absent at the end."""
    server_received: int
    """``update`` and ``commitTransaction`` commands the servers received."""
    faults: int
    error_kinds: dict[str, int] = field(default_factory=dict)
    ok_bins: tuple[int, ...] = ()
    """Acked documents per ``bin_s`` from the start."""
    error_bins: tuple[int, ...] = ()
    """Errors per ``bin_s`` from the start."""
    bin_s: float = 0.25

    @property
    def error_rate(self) -> float:
        """Errors per operation."""
        return self.errors / self.operations if self.operations else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {**asdict(self), "error_rate": self.error_rate}


class _Controller:
    """Applies the fault schedule from this process, in time order."""

    def __init__(self, target: Any, plan: FaultPlan, faults: Sequence[Fault]) -> None:
        """Remember what to apply."""
        self.target = target
        self.plan = plan
        self.events: list[tuple[float, int, Fault, bool]] = sorted(
            [(f.at, 1, f, True) for f in faults] + [(f.end, 0, f, False) for f in faults],
            key=lambda e: (e[0], e[1]),
        )

    def run(self, t0: float) -> None:
        """Apply every event at its instant until the soak ends."""
        for at, _, fault, starting in self.events:
            _wait_until(t0 + at)
            if starting:
                self._start(fault)
            else:
                self._stop(fault)

    def _start(self, fault: Fault) -> None:
        if fault.fail_point is not None:
            self.target.configure_fail_point(fault.fail_point, member=0)
        if fault.rate is not None:
            self.target.set_rate_limit(fault.rate)

    def _stop(self, fault: Fault) -> None:
        if fault.kind == "overload":  # the others stop by themselves ({times: n})
            self.target.configure_fail_point(
                {"configureFailPoint": "failCommand", "mode": "off"}, member=0
            )
        if fault.rate is not None:
            self.target.set_rate_limit(self.plan.capacity)


def transaction_collection(process: int, thread: int) -> str:
    """The collection one writer's transactions write to.

    The embedded server runs a transaction on a copy of each collection it touches (a
    copy-on-touch workspace), so a transaction on one shared, growing collection would cost
    the server time in proportion to the documents every writer has written; one small
    collection per writer keeps each copy small.
    """
    return f"{TRANSACTION_PREFIX}{process}-{thread}"


def _read_back(uri: str) -> dict[int, int]:
    """Every document's ``n`` by id (the shared collection and every writer's own)."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    try:
        database = client[DATABASE]
        own = [n for n in database.list_collection_names() if n.startswith(TRANSACTION_PREFIX)]
        names = [COLLECTION, *sorted(own)]
        return {
            int(doc["_id"]): int(doc.get("n", 0))
            for name in names
            for doc in database[name].find({}, {"n": 1})
        }
    finally:
        client.close()


def audit(acked: Sequence[int], stored: Mapping[int, int]) -> tuple[int, int]:
    """(duplicated, lost): documents stored with ``n`` above 1, and acked ids not stored."""
    return sum(1 for n in stored.values() if n > 1), sum(1 for key in acked if key not in stored)


def run_policy_faults(
    target: Any, policy: str, plan: FaultPlan, faults: Optional[Sequence[Fault]] = None
) -> FaultRun:
    """Run the soak once under ``policy`` and check every acked write; ``faults`` defaults
    to the plan's seeded schedule."""
    if faults is None:
        faults = fault_schedule(plan.seed, plan.seconds)
    context = multiprocessing.get_context("spawn")
    ready: Any = context.Queue()
    results: Any = context.Queue()
    go = context.Event()
    start_at = context.Value("d", 0.0)
    target.reset()
    target.disable_rate_limit()
    seed_client: MongoClient[dict[str, Any]] = MongoClient(target.uri)
    try:
        seed_client.drop_database(DATABASE)
        seed_client[DATABASE].create_collection(COLLECTION)
        for writer_process in range(plan.processes):  # transactions write to existing ones
            for writer_thread in range(plan.threads):
                name = transaction_collection(writer_process, writer_thread)
                seed_client[DATABASE].create_collection(name)
    finally:
        seed_client.close()
    processes = [
        context.Process(
            target=_writer_process,
            args=(index, target.uri, policy, plan, ready, go, start_at, results),
            name=f"soak-{policy}-{index}",
            daemon=True,
        )
        for index in range(plan.processes)
    ]
    for process in processes:
        process.start()
    reports: list[dict[str, Any]] = []
    try:
        _await_ready(ready, processes, plan.start_timeout_s)
        target.set_rate_limit(plan.capacity)
        target.stats(reset=True)
        t0 = time.time() + 0.2
        start_at.value = t0
        go.set()
        _Controller(target, plan, faults).run(t0)
        _wait_until(t0 + plan.seconds)
        for _ in processes:
            reports.append(results.get(timeout=plan.deadline_s + 60.0))
        stats = target.stats()
    finally:
        go.set()
        for process in processes:
            process.join(timeout=30.0)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5.0)
        target.disable_fail_points()
        target.disable_rate_limit()
    stored = _read_back(target.uri)
    acked = [key for report in reports for key in report["acked"]]
    kinds: dict[str, int] = {}
    for report in reports:
        for name, n in report["error_kinds"].items():
            kinds[name] = kinds.get(name, 0) + int(n)
    duplicated, lost = audit(acked, stored)
    slots = max(len(r["ok_bins"]) for r in reports)
    return FaultRun(
        policy=policy,
        operations=sum(int(r["ops"]) for r in reports),
        transactions=sum(int(r["transactions"]) for r in reports),
        errors=sum(int(r["errors"]) for r in reports),
        acked=len(acked),
        stored=len(stored),
        duplicated=duplicated,
        lost=lost,
        server_received=received_commands(stats, ("update", "commitTransaction")),
        faults=len(faults),
        error_kinds=dict(sorted(kinds.items())),
        ok_bins=tuple(sum(r["ok_bins"][i] for r in reports) for i in range(slots)),
        error_bins=tuple(sum(r["error_bins"][i] for r in reports) for i in range(slots)),
        bin_s=plan.bin_s,
    )


def run_faults(
    target: Any,
    policies: Optional[Sequence[str]] = None,
    plan: FaultPlan = FaultPlan(),
    *,
    progress: Optional[Callable[[str], None]] = None,
) -> list[FaultRun]:
    """Run every policy (the default's first) through the same seeded schedule."""
    runs = []
    for policy in fleet_policies(policies):
        if progress is not None:
            progress(f"faults: {policy}")
        runs.append(run_policy_faults(target, policy, plan))
    return runs


# -- the report -------------------------------------------------------------------------------


def judge(run: FaultRun, current: Optional[FaultRun]) -> dict[str, Optional[bool]]:
    """Each of :data:`FAULT_GOALS` (the first two against ``current``'s run; None without)."""
    return {
        FAULT_GOALS[0]: None if current is None else run.acked >= 0.98 * current.acked,
        FAULT_GOALS[1]: None if current is None else run.errors <= current.errors,
        FAULT_GOALS[2]: run.duplicated == 0,
        FAULT_GOALS[3]: run.lost == 0,
    }


def _current(runs: Sequence[FaultRun]) -> Optional[FaultRun]:
    return next((run for run in runs if run.policy == "current"), None)


def _verdict(met: Optional[bool]) -> str:
    return "-" if met is None else ("met" if met else "NOT met")


def render_faults_markdown(runs: Sequence[FaultRun], plan: FaultPlan) -> str:
    """The table (every policy, the default's first) and each goal per policy."""
    runs = sorted(runs, key=lambda run: run.policy != default_policy_name())
    current = _current(runs)
    faults = fault_schedule(plan.seed, plan.seconds)
    by_kind: dict[str, int] = {}
    for fault in faults:
        by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
    header = [
        "policy",
        "acked",
        "vs current",
        "errors",
        "error rate",
        "duplicated",
        "lost",
        "operations",
        "transactions",
        "stored",
        "attempts/op",
    ]
    lines = [
        f"{plan.processes} processes x {plan.threads} writers, {plan.seconds:g} s, deadline "
        f"{plan.deadline_s:g} s, capacity {plan.capacity:g} ops/s, "
        f"{100 * plan.transaction_share:g}% two-document transactions; fault schedule "
        f"{plan.seed}: {len(faults)} faults ("
        + ", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items()))
        + "). Policies one after another on the same schedule.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for run in runs:
        ratio = "-" if current is None or not current.acked else f"{run.acked / current.acked:.3f}"
        attempts = run.server_received / run.operations if run.operations else 0.0
        cells = [
            policy_label(run.policy),
            f"{run.acked:,}",
            ratio,
            f"{run.errors:,}",
            f"{100 * run.error_rate:.2f}%",
            f"{run.duplicated:,}",
            f"{run.lost:,}",
            f"{run.operations:,}",
            f"{run.transactions:,}",
            f"{run.stored:,}",
            f"{attempts:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Errors by kind:", ""]
    for run in runs:
        kinds = ", ".join(f"{name} {n:,}" for name, n in run.error_kinds.items()) or "none"
        lines.append(f"- **{policy_label(run.policy)}**: {kinds}")
    lines += ["", "Goals:", ""]
    for run in runs:
        verdicts = ", ".join(
            f"{goal}: {_verdict(met)}" for goal, met in judge(run, current).items()
        )
        lines.append(f"- **{policy_label(run.policy)}**: {verdicts}")
    return "\n".join(lines) + "\n"


def faults_report(
    runs: Sequence[FaultRun],
    plan: FaultPlan,
    info: dict[str, Any],
    load: Sequence[float],
    wall_s: float,
    commit: str,
) -> dict[str, Any]:
    """The raw data of one soak of every policy, as written to JSON."""
    current = _current(runs)
    return {
        "machine": info,
        "load_average": [round(x, 2) for x in load],
        "wall_s": round(wall_s, 1),
        "commit": commit,
        "plan": asdict(plan),
        "schedule": [asdict(fault) for fault in fault_schedule(plan.seed, plan.seconds)],
        "runs": [{**run.to_dict(), "goals": judge(run, current)} for run in runs],
    }


def render_faults_report(data: dict[str, Any]) -> str:
    """The Markdown page of :func:`faults_report`'s data: the run's line, then the table."""
    plan = FaultPlan(**data["plan"])
    names = set(FaultRun.__dataclass_fields__)
    runs = []
    for entry in data["runs"]:
        values = {k: v for k, v in entry.items() if k in names}
        values["ok_bins"] = tuple(values.get("ok_bins", ()))
        values["error_bins"] = tuple(values.get("error_bins", ()))
        runs.append(FaultRun(**values))
    line = run_line(data["machine"], data["load_average"], data["wall_s"], data["commit"])
    return line + "\n\n" + render_faults_markdown(runs, plan)


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv`` and soak every policy once on one embedded replica set."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench.faults",
        description="Writers under a seeded fault schedule; every acked write checked.",
    )
    parser.add_argument("--policies", help="comma-separated (default: every available policy)")
    parser.add_argument("--seconds", type=positive_float, default=120.0, help="soak length")
    parser.add_argument("--processes", type=positive_int, default=4, help="client processes")
    parser.add_argument("--threads", type=positive_int, default=8, help="writers per process")
    parser.add_argument("--seed", type=int, default=1, help="the fault schedule's seed")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the table")
    args = parser.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p] if args.policies else None
    plan = FaultPlan(
        processes=args.processes, threads=args.threads, seconds=args.seconds, seed=args.seed
    )

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    publish_run(
        lambda server: run_faults(server, policies, plan, progress=progress),
        lambda runs, info, load, wall_s, commit: faults_report(
            runs, plan, info, load, wall_s, commit
        ),
        render_faults_report,
        markdown=args.markdown,
        json_path=args.json,
    )
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.bench.faults``: 0, or 2 on a usage error."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
