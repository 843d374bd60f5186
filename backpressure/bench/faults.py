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
absent).

The arms run in interleaved rounds (``--rounds``): the schedule is cut into that many
slices of ``seconds / rounds``, and each round replays its slice under every arm, in the
default-first order in the first round, the reverse order in the second, and so on, so that a
slow stretch of a shared machine falls on every arm alike.  Each arm's acked writes are
compared with ``current``'s round by round (the same slice, a minute or two apart): the mean of
those paired ratios and its 95 % confidence interval over the rounds (Student's t).  The client
processes' CPU seconds and the machine's busy share during each soak tell a client-cost
difference from an overload-control one.  The default's row comes first, stock pymongo beside
it.  Goals for ``adaptive``: acked >= 98 % of ``current``'s (met when the interval's low end is
at or above 0.98, missed when its high end is below), errors <= ``current``'s; for every
arm, 0 duplicated and 0 lost.

``--topology sharded`` runs the same writers and the same schedule against an embedded sharded
cluster of ``--routers`` mongos (3 by default) over one shard, the URI naming every router, so
that each selection has a choice of router.  Every mongos's ingress limiter admits ``capacity``
ops/s; every fault hits mongos 0 alone (its fail points, and its limiter for the tight limits)
while the other routers stay healthy.  The page then also gives each arm's acked writes
against stock pymongo's (paired by round, as against ``current``'s), the share of the writes
and commits that mongos 0 received, and one more goal for every arm but stock: acked (all
rounds added up) >= stock pymongo's.

An arm name may carry client options after ``+``: ``current+routeAroundOverload=false`` is
the ``current`` preset with its server choice off (options for this package's presets only;
each value is passed to the client as written, which validates it).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import math
import multiprocessing
import os
import random
import statistics
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

from backpressure.bench.fleet import _await_ready, _wait_until, fleet_arms
from backpressure.bench.publish import publish_run
from backpressure.cli import positive_float, positive_int, run_cli
from backpressure.workload import ARMS
from backpressure.workload.arms import (
    ARM_KEY,
    STOCK,
    arm_label,
    default_first,
    default_policy_name,
    from_file,
    to_file,
)
from backpressure.workload.driver import received_commands
from backpressure.workload.metrics import AFTER_FAULT_S, counts_by_fault
from backpressure.workload.report import run_line

__all__ = [
    "FAULTY_MEMBER",
    "FAULT_GOALS",
    "OPTION_SEPARATOR",
    "QUICK_FAULTS",
    "ROUNDS_PER_TABLE",
    "STOCK_GOAL",
    "TOPOLOGIES",
    "Fault",
    "FaultPlan",
    "FaultRound",
    "FaultRun",
    "acked_by_kind",
    "audit",
    "fault_schedule",
    "faults_report",
    "judge",
    "judge_rounds",
    "judge_stock",
    "kind_ratios",
    "main",
    "mean_interval",
    "paired_ratios",
    "render_faults_markdown",
    "render_faults_report",
    "round_faults",
    "round_order",
    "rounds_from_report",
    "run_arm_faults",
    "run_faults",
    "soak_arms",
    "split_arm",
    "total_run",
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

STOCK_GOAL = "acked >= stock pymongo's"
"""The sharded soak's goal for every arm but stock: its acked writes, all rounds added up,
at least stock pymongo's."""

TOPOLOGIES: tuple[str, ...] = ("replicaset", "sharded")
"""The deployments the soak runs against."""

FAULTY_MEMBER = 0
"""The member every fault hits: the primary of the replica set, the first mongos of the
sharded cluster."""

OPTION_SEPARATOR = "+"
"""Between an arm's name and each client option it carries:
``current+routeAroundOverload=false``."""

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
    rounds: int = 6
    """Interleaved rounds: each replays its ``seconds / rounds`` slice of the schedule under
    every arm (the module's docstring)."""
    topology: str = "replicaset"
    """``replicaset`` (faults on the primary) or ``sharded`` (faults on mongos 0)."""
    routers: int = 3
    """The mongos routers of the sharded topology (at least 2: a choice of router)."""

    def __post_init__(self) -> None:
        """Validate the numbers."""
        if self.topology not in TOPOLOGIES:
            raise ValueError(
                f"FaultPlan.topology must be one of {', '.join(TOPOLOGIES)}, got {self.topology!r}"
            )
        if isinstance(self.routers, bool) or not isinstance(self.routers, int) or self.routers < 2:
            raise ValueError(f"FaultPlan.routers must be an int >= 2, got {self.routers!r}")
        if self.processes < 1 or self.threads < 1 or self.threads >= 1000:
            raise ValueError(
                f"FaultPlan needs processes >= 1 and threads in 1..999, got "
                f"{self.processes} and {self.threads}"
            )
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise ValueError(f"FaultPlan.rounds must be an int >= 1, got {self.rounds!r}")
        for name in ("seconds", "capacity", "deadline_s", "bin_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"FaultPlan.{name} must be a finite number > 0, got {value!r}")
        if not 0.0 <= self.transaction_share <= 1.0:
            raise ValueError(
                f"FaultPlan.transaction_share must be in 0..1, got {self.transaction_share!r}"
            )

    @property
    def round_s(self) -> float:
        """The length of one round's slice of the schedule, in seconds."""
        return self.seconds / self.rounds

    @property
    def sharded(self) -> bool:
        """Whether the soak runs against the sharded cluster."""
        return self.topology == "sharded"

    @property
    def members(self) -> Optional[int]:
        """The deployment's members: the routers of the sharded cluster, None (the embedded
        server's default, 3) for the replica set."""
        return self.routers if self.sharded else None


QUICK_FAULTS = FaultPlan(processes=2, threads=2, seconds=4.0, capacity=500.0, rounds=2)
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


MIN_WINDOW_S = 0.1
"""An all-reject window or a tight limit cut shorter than this by a round's end is left out."""

ROUNDS_PER_TABLE = 8
"""The page's table of acked writes per round has at most this many rounds (more: more tables)."""


def round_faults(faults: Sequence[Fault], plan: FaultPlan, index: int) -> list[Fault]:
    """The faults of round ``index``: those starting in its slice of the schedule (``index *
    plan.round_s`` onwards), shifted to start at 0 and cut at the slice's end.

    A window (all-reject or tight limit) that the cut would leave shorter than
    :data:`MIN_WINDOW_S` is left out.
    """
    if not 0 <= index < plan.rounds:
        raise ValueError(f"round index must be in 0..{plan.rounds - 1}, got {index!r}")
    start = index * plan.round_s
    stop = start + plan.round_s
    chosen = []
    for fault in faults:
        if not start <= fault.at < stop:
            continue
        at, end = round(fault.at - start, 3), round(min(fault.end, stop) - start, 3)
        if fault.end > fault.at and end - at < MIN_WINDOW_S:
            continue
        chosen.append(dataclasses.replace(fault, at=at, end=end))
    return chosen


def _fail_point(mode: Any, commands: list[str], **data: Any) -> dict[str, Any]:
    """A ``failCommand`` configuration."""
    return {
        "configureFailPoint": "failCommand",
        "mode": mode,
        "data": {"failCommands": commands, **data},
    }


# -- the arms ---------------------------------------------------------------------------------


def split_arm(name: str) -> tuple[str, dict[str, str]]:
    """An arm name and the client options it carries: ``current+routeAroundOverload=false``
    is ``("current", {"routeAroundOverload": "false"})``; ValueError for an option without a
    value, for an unknown arm, or for options on an arm that is not one of this
    package's presets."""
    base, *items = name.split(OPTION_SEPARATOR)
    if base not in ARMS:
        raise ValueError(f"unknown arm {base!r}; choose from {', '.join(ARMS)}")
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"arm {name!r}: expected OPTION=VALUE after +, got {item!r}")
        options[key] = value
    if options and ARMS[base].kind != "ours":
        raise ValueError(f"arm {name!r}: client options need one of this package's presets")
    return base, options


def soak_arms(names: Optional[Sequence[str]] = None) -> list[str]:
    """The soak's arms, the default's first: ``names`` (each as :func:`split_arm` reads
    it), or the fleet's arms (:func:`~backpressure.bench.fleet.fleet_arms`)."""
    if names is None:
        return fleet_arms()
    for name in names:
        split_arm(name)
    return default_first(names)


def _open(arm: str, uri: str, **kwargs: Any) -> Any:
    """Open ``arm``'s client for ``uri``, with the options its name carries."""
    base, options = split_arm(arm)
    return ARMS[base].open(uri, **kwargs, **options)


# -- the writer processes ---------------------------------------------------------------------


def _writer_process(
    index: int,
    uri: str,
    arm_name: str,
    plan: FaultPlan,
    ready: Any,
    go: Any,
    start_at: Any,
    results: Any,
) -> None:
    """One client process: T writer threads, each recording the ids acknowledged."""
    logging.getLogger("backpressure").setLevel(logging.ERROR)
    client = _open(arm_name, uri, maxPoolSize=plan.threads + 10, appname=f"soak-{index}")
    try:
        collection = client.client[DATABASE][COLLECTION]
        collection.find_one({"_id": -1})  # connect and discover before the clock starts
        ready.put(index)
        if not go.wait(plan.start_timeout_s * 2):
            return
        cpu_start = time.process_time()
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
                "cpu_s": time.process_time() - cpu_start,
                **counts,
                "acked": acked,
                "ok_bins": ok_bins,
                "error_bins": error_bins,
                "error_kinds": kinds,
            }
        )
    finally:
        client.close()


# -- one arm's soak ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultRun:
    """One arm's soak, summarised."""

    arm: str
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
    seconds: float = 0.0
    """The soak's length (0: not recorded)."""
    cpu_s: float = 0.0
    """CPU seconds the client processes used during the soak (all their threads)."""
    machine_busy: Optional[float] = None
    """Share of the machine's CPU time busy during the soak, every process counted (None:
    not measured)."""
    faulty_received: Optional[int] = None
    """The ``update`` and ``commitTransaction`` commands the member every fault hits received
    (:data:`FAULTY_MEMBER`; None: not counted)."""

    @property
    def faulty_share(self) -> Optional[float]:
        """The share of the servers' ``update`` and ``commitTransaction`` commands that the
        member every fault hits received (None: not counted)."""
        if self.faulty_received is None or not self.server_received:
            return None
        return self.faulty_received / self.server_received

    @property
    def error_rate(self) -> float:
        """Errors per operation."""
        return self.errors / self.operations if self.operations else 0.0

    @property
    def cpu_ms_per_ack(self) -> float:
        """Client CPU milliseconds per acknowledged document (0 without acks)."""
        return 1000.0 * self.cpu_s / self.acked if self.acked else 0.0

    @property
    def cpu_cores(self) -> float:
        """The client processes' CPU as cores kept busy on average (0 without a length)."""
        return self.cpu_s / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return to_file(
            {
                **asdict(self),
                "error_rate": self.error_rate,
                "cpu_ms_per_ack": round(self.cpu_ms_per_ack, 4),
                "cpu_cores": round(self.cpu_cores, 4),
            }
        )


class _Controller:
    """Applies the fault schedule from this process, in time order.

    Fail points go to :data:`FAULTY_MEMBER`. A tight limit goes to every member of the replica
    set (only its primary takes writes) and to mongos 0 alone in the sharded cluster.
    """

    def __init__(self, target: Any, plan: FaultPlan, faults: Sequence[Fault]) -> None:
        """Remember what to apply."""
        self.target = target
        self.plan = plan
        self.rate_member = FAULTY_MEMBER if plan.sharded else None
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
            self.target.configure_fail_point(fault.fail_point, member=FAULTY_MEMBER)
        if fault.rate is not None:
            self._set_rate_limit(fault.rate)

    def _stop(self, fault: Fault) -> None:
        if fault.kind == "overload":  # the others stop by themselves ({times: n})
            self.target.configure_fail_point(
                {"configureFailPoint": "failCommand", "mode": "off"}, member=FAULTY_MEMBER
            )
        if fault.rate is not None:
            self._set_rate_limit(self.plan.capacity)

    def _set_rate_limit(self, rate: float) -> None:
        if self.rate_member is None:
            self.target.set_rate_limit(rate)
        else:
            self.target.set_rate_limit(rate, member=self.rate_member)


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


def _cpu_times() -> Optional[tuple[float, float]]:
    """(busy, total) CPU ticks of the whole machine from ``/proc/stat`` (None elsewhere)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [float(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = sum(fields[3:5])  # idle and iowait
    total = sum(fields[:8])  # up to steal; guest time is already counted in user
    return total - idle, total


def _busy_share(
    before: Optional[tuple[float, float]], after: Optional[tuple[float, float]]
) -> Optional[float]:
    """The machine's busy share between two :func:`_cpu_times` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 4)


def audit(acked: Sequence[int], stored: Mapping[int, int]) -> tuple[int, int]:
    """(duplicated, lost): documents stored with ``n`` above 1, and acked ids not stored."""
    return sum(1 for n in stored.values() if n > 1), sum(1 for key in acked if key not in stored)


def run_arm_faults(
    target: Any, arm: str, plan: FaultPlan, faults: Optional[Sequence[Fault]] = None
) -> FaultRun:
    """Run the soak once under ``arm`` and check every acked write; ``faults`` defaults
    to the plan's seeded schedule. ``target`` is an embedded server of the plan's topology."""
    topology = getattr(target, "topology", None)
    if topology != plan.topology:
        raise ValueError(f"the plan's topology is {plan.topology}, the server's {topology}")
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
            args=(index, target.uri, arm, plan, ready, go, start_at, results),
            name=f"soak-{arm}-{index}",
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
        _wait_until(t0)
        machine_before = _cpu_times()
        _Controller(target, plan, faults).run(t0)
        _wait_until(t0 + plan.seconds)
        machine_after = _cpu_times()
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
    counted = ("update", "commitTransaction")
    faulty = stats["members"][FAULTY_MEMBER] if "members" in stats else stats
    return FaultRun(
        arm=arm,
        operations=sum(int(r["ops"]) for r in reports),
        transactions=sum(int(r["transactions"]) for r in reports),
        errors=sum(int(r["errors"]) for r in reports),
        acked=len(acked),
        stored=len(stored),
        duplicated=duplicated,
        lost=lost,
        server_received=received_commands(stats, counted),
        faults=len(faults),
        error_kinds=dict(sorted(kinds.items())),
        ok_bins=tuple(sum(r["ok_bins"][i] for r in reports) for i in range(slots)),
        error_bins=tuple(sum(r["error_bins"][i] for r in reports) for i in range(slots)),
        bin_s=plan.bin_s,
        seconds=plan.seconds,
        cpu_s=round(sum(float(r["cpu_s"]) for r in reports), 3),
        machine_busy=_busy_share(machine_before, machine_after),
        faulty_received=received_commands(faulty, counted),
    )


@dataclass(frozen=True)
class FaultRound:
    """One round: its slice of the schedule run under every arm, one after another."""

    index: int
    order: tuple[str, ...]
    """The arms in the order they ran."""
    faults: tuple[Fault, ...]
    """The round's slice of the schedule (:func:`round_faults`)."""
    runs: tuple[FaultRun, ...]
    """One per arm, in ``order``."""
    load: Optional[float] = None
    """The machine's 1-minute load average when the round started."""

    def run_of(self, arm: str) -> FaultRun:
        """The run of ``arm`` in this round (KeyError if it did not run)."""
        for run in self.runs:
            if run.arm == arm:
                return run
        raise KeyError(arm)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready round."""
        return {
            "index": self.index,
            "order": list(self.order),
            "load": self.load,
            "schedule": [asdict(fault) for fault in self.faults],
            "runs": [run.to_dict() for run in self.runs],
        }


Runner = Callable[[Any, str, FaultPlan, Sequence[Fault]], FaultRun]
"""Runs one arm's soak: ``(target, arm, plan, faults)`` (:func:`run_arm_faults`)."""


def round_order(arms: Sequence[str], index: int) -> list[str]:
    """The order of round ``index``: ``arms`` as given in even rounds, reversed in odd ones."""
    return list(arms) if index % 2 == 0 else list(reversed(arms))


def run_faults(
    target: Any,
    arms: Optional[Sequence[str]] = None,
    plan: FaultPlan = FaultPlan(),
    *,
    progress: Optional[Callable[[str], None]] = None,
    runner: Runner = run_arm_faults,
) -> list[FaultRound]:
    """Run every arm (the default's first) through the seeded schedule in ``plan.rounds``
    interleaved rounds: round ``r`` runs its slice of the schedule under every arm, in
    :func:`round_order`."""
    names = soak_arms(arms)
    schedule = fault_schedule(plan.seed, plan.seconds)
    one = dataclasses.replace(plan, seconds=plan.round_s, rounds=1)
    rounds = []
    for index in range(plan.rounds):
        faults = round_faults(schedule, plan, index)
        order = round_order(names, index)
        load = round(os.getloadavg()[0], 2)
        runs = []
        for arm in order:
            if progress is not None:
                progress(f"faults: round {index + 1} of {plan.rounds}, {arm}")
            runs.append(runner(target, arm, one, faults))
        rounds.append(FaultRound(index, tuple(order), tuple(faults), tuple(runs), load))
    return rounds


def total_run(runs: Sequence[FaultRun]) -> FaultRun:
    """One arm's runs added up (their bins left out; the machine's busy share averaged)."""
    if not runs or len({run.arm for run in runs}) != 1:
        raise ValueError("total_run needs one or more runs of one arm")
    kinds: dict[str, int] = {}
    for run in runs:
        for name, n in run.error_kinds.items():
            kinds[name] = kinds.get(name, 0) + n
    busy = [run.machine_busy for run in runs if run.machine_busy is not None]
    faulty = [run.faulty_received for run in runs]
    return FaultRun(
        arm=runs[0].arm,
        operations=sum(run.operations for run in runs),
        transactions=sum(run.transactions for run in runs),
        errors=sum(run.errors for run in runs),
        acked=sum(run.acked for run in runs),
        stored=sum(run.stored for run in runs),
        duplicated=sum(run.duplicated for run in runs),
        lost=sum(run.lost for run in runs),
        server_received=sum(run.server_received for run in runs),
        faults=sum(run.faults for run in runs),
        error_kinds=dict(sorted(kinds.items())),
        bin_s=runs[0].bin_s,
        seconds=round(sum(run.seconds for run in runs), 3),
        cpu_s=round(sum(run.cpu_s for run in runs), 3),
        machine_busy=round(statistics.fmean(busy), 4) if busy else None,
        faulty_received=None if None in faulty else sum(n or 0 for n in faulty),
    )


def paired_ratios(rounds: Sequence[FaultRound], arm: str, base: str = "current") -> list[float]:
    """``arm``'s acked documents over ``base``'s, round by round (rounds where ``base``
    acked nothing are left out)."""
    ratios = []
    for one in rounds:
        acked = one.run_of(base).acked
        if acked:
            ratios.append(one.run_of(arm).acked / acked)
    return ratios


T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
"""Student's t at 0.975 for 1 to 30 degrees of freedom (two-sided 95 %)."""


def _t_975(df: int) -> float:
    """Student's t at 0.975 for ``df`` degrees of freedom (above 30: a first-order expansion
    around the normal's 1.96)."""
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df)


def mean_interval(values: Sequence[float]) -> tuple[float, Optional[float], Optional[float]]:
    """The mean of ``values`` and its 95 % confidence interval, ``(mean, low, high)``
    (Student's t over the values; no interval, None, for a single value)."""
    if not values:
        raise ValueError("mean_interval needs at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    half = _t_975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def acked_by_kind(run: FaultRun, faults: Sequence[Fault]) -> dict[str, int]:
    """Acked documents from each fault's start to :data:`AFTER_FAULT_S` after its end, added
    up by kind; the rest of the run under ``"none"`` (whole bins of ``run.bin_s``)."""
    return counts_by_fault(
        run.ok_bins, run.bin_s, ((fault.at, fault.end, fault.kind) for fault in faults)
    )


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
    return next((run for run in runs if run.arm == "current"), None)


def _verdict(met: Optional[bool]) -> str:
    return "-" if met is None else ("met" if met else "NOT met")


def render_faults_markdown(runs: Sequence[FaultRun], plan: FaultPlan) -> str:
    """The table (every arm, the default's first) and each goal per arm."""
    runs = sorted(runs, key=lambda run: run.arm != default_policy_name())
    current = _current(runs)
    faults = fault_schedule(plan.seed, plan.seconds)
    by_kind: dict[str, int] = {}
    for fault in faults:
        by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
    header = [
        "arm",
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
        + "). Arms one after another on the same schedule.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for run in runs:
        ratio = "-" if current is None or not current.acked else f"{run.acked / current.acked:.3f}"
        attempts = run.server_received / run.operations if run.operations else 0.0
        cells = [
            arm_label(run.arm),
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
        lines.append(f"- **{arm_label(run.arm)}**: {kinds}")
    lines += ["", "Goals:", ""]
    for run in runs:
        verdicts = ", ".join(
            f"{goal}: {_verdict(met)}" for goal, met in judge(run, current).items()
        )
        lines.append(f"- **{arm_label(run.arm)}**: {verdicts}")
    return "\n".join(lines) + "\n"


def judge_rounds(
    total: FaultRun, ratios: Sequence[float], current: Optional[FaultRun]
) -> dict[str, str]:
    """Each of :data:`FAULT_GOALS` for interleaved rounds: the acked goal is ``met`` when the
    95 % interval of the paired ratios lies at or above 0.98, ``NOT met`` when it lies below,
    and ``not decided`` when it holds 0.98 (or there is one round); ``-`` without ``current``."""
    acked = "-"
    if current is not None and ratios:
        _, low, high = mean_interval(ratios)
        if low is None or high is None:
            acked = "not decided"
        elif low >= 0.98:
            acked = "met"
        elif high < 0.98:
            acked = "NOT met"
        else:
            acked = "not decided"
    errors = "-" if current is None else _verdict(total.errors <= current.errors)
    return {
        FAULT_GOALS[0]: acked,
        FAULT_GOALS[1]: errors,
        FAULT_GOALS[2]: _verdict(total.duplicated == 0),
        FAULT_GOALS[3]: _verdict(total.lost == 0),
    }


def _arms(rounds: Sequence[FaultRound]) -> list[str]:
    """The arms of the rounds, the default's first (the first round's order otherwise)."""
    return sorted(rounds[0].order, key=lambda name: name != default_policy_name())


def _rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 4)


def judge_stock(total: FaultRun, stock: Optional[FaultRun]) -> str:
    """:data:`STOCK_GOAL`: ``met`` when ``total``'s acked writes (all rounds) are at least
    stock pymongo's, ``NOT met`` otherwise, ``-`` without stock's run."""
    return "-" if stock is None else _verdict(total.acked >= stock.acked)


def _summary(
    rounds: Sequence[FaultRound], plan: Optional[FaultPlan] = None
) -> list[dict[str, Any]]:
    """Each arm's totals over the rounds, its paired ratios and goals, the default's first.

    For the sharded soak, also the paired ratios against stock pymongo and :data:`STOCK_GOAL`
    (every arm but stock)."""
    arms = _arms(rounds)
    totals = {name: total_run([one.run_of(name) for one in rounds]) for name in arms}
    current = totals.get("current")
    stock = totals.get(STOCK)
    sharded = plan is not None and plan.sharded
    rows = []
    for name in arms:
        total = totals[name]
        ratios = paired_ratios(rounds, name) if current is not None else []
        mean, low, high = mean_interval(ratios) if ratios else (None, None, None)
        row = {
            **total.to_dict(),
            "ratios": [round(r, 4) for r in ratios],
            "ratio_mean": _rounded(mean),
            "ratio_low": _rounded(low),
            "ratio_high": _rounded(high),
            "goals": judge_rounds(total, ratios, current),
        }
        if sharded:
            versus = paired_ratios(rounds, name, STOCK) if stock is not None else []
            mean, low, high = mean_interval(versus) if versus else (None, None, None)
            row.update(
                stock_ratios=[round(r, 4) for r in versus],
                stock_ratio_mean=_rounded(mean),
                stock_ratio_low=_rounded(low),
                stock_ratio_high=_rounded(high),
            )
            if name != STOCK:
                row["goals"][STOCK_GOAL] = judge_stock(total, stock)
        rows.append(row)
    return rows


def _figure(value: Optional[float], digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _round_list(items: Sequence[int]) -> str:
    """``1, 3 and 5``."""
    words = [str(n) for n in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def render_rounds_markdown(rounds: Sequence[FaultRound], plan: FaultPlan) -> str:
    """The interleaved soak's tables (every arm, the default's first) and goals."""
    rows = _summary(rounds, plan)
    arms = [row[ARM_KEY] for row in rows]
    totals = {name: total_run([one.run_of(name) for one in rounds]) for name in arms}
    schedule = fault_schedule(plan.seed, plan.seconds)
    by_kind: dict[str, int] = {}
    for fault in schedule:
        by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1
    forward = [one.index + 1 for one in rounds if one.index % 2 == 0]
    backward = [one.index + 1 for one in rounds if one.index % 2 == 1]
    order = f"in round{'s' if len(forward) > 1 else ''} {_round_list(forward)}"
    if backward:
        order += f" and the reverse in {_round_list(backward)}"
    loads = ", ".join(_figure(one.load, 1) for one in rounds)
    lines = _sharded_intro(plan)
    lines += [
        f"{plan.processes} processes x {plan.threads} writers, deadline {plan.deadline_s:g} s, "
        f"capacity {plan.capacity:g} ops/s, {100 * plan.transaction_share:g}% two-document "
        f"transactions; fault schedule {plan.seed}: {plan.seconds:g} s, {len(schedule)} faults ("
        + ", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items()))
        + f"), cut into {plan.rounds} rounds of {plan.round_s:g} s. Each round replays its "
        f"slice under every arm, one after another, in the order of the table {order}. "
        f"Load average at each round's start: {loads}.",
        "",
        "`vs current`: the mean over the rounds of the arm's acked writes divided by "
        "`current`'s in the same round, with its 95% confidence interval. Client CPU: the "
        "client processes' CPU time (all threads) per acked write, and in cores kept busy; "
        "machine busy: the share of the machine's CPU time in use during the soaks, every "
        "process counted."
        + (
            " `vs stock`: the same against stock pymongo's acked writes. To mongos 0: the share "
            "of the `update` and `commitTransaction` commands the routers received that went to "
            "mongos 0, the router the faults hit."
            if plan.sharded
            else ""
        ),
        "",
    ]
    header = ["arm", "acked", "vs current", "95% CI"]
    if plan.sharded:
        header += ["vs stock", "95% CI (stock)"]
    header += ["errors", "error rate", "duplicated", "lost"]
    costs = [
        "arm",
        "operations",
        "transactions",
        "attempts/op",
        "client CPU ms/ack",
        "client CPU, cores",
        "machine busy",
    ]
    if plan.sharded:
        costs.append("to mongos 0")
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    cost_lines = ["| " + " | ".join(costs) + " |", "|" + "---|" * len(costs)]
    for row in rows:
        total = totals[row[ARM_KEY]]
        interval = (
            "-" if row["ratio_low"] is None else f"{row['ratio_low']:.3f}-{row['ratio_high']:.3f}"
        )
        attempts = total.server_received / total.operations if total.operations else 0.0
        busy = "-" if total.machine_busy is None else f"{100 * total.machine_busy:.0f}%"
        cells = [
            arm_label(total.arm),
            f"{total.acked:,}",
            _figure(row["ratio_mean"]),
            interval,
        ]
        if plan.sharded:
            cells += [_figure(row.get("stock_ratio_mean")), _interval(row, "stock_ratio")]
        cells += [
            f"{total.errors:,}",
            f"{100 * total.error_rate:.2f}%",
            f"{total.duplicated:,}",
            f"{total.lost:,}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
        cells = [
            arm_label(total.arm),
            f"{total.operations:,}",
            f"{total.transactions:,}",
            f"{attempts:.2f}",
            f"{total.cpu_ms_per_ack:.2f}",
            f"{total.cpu_cores:.2f}",
            busy,
        ]
        if plan.sharded:
            share = total.faulty_share
            cells.append("-" if share is None else f"{100 * share:.1f}%")
        cost_lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Operations and the client's CPU:", "", *cost_lines]
    lines += ["", "Acked writes per round (`vs current` in that round):"]
    for first in range(0, len(rounds), ROUNDS_PER_TABLE):  # tables that fit the page
        chunk = rounds[first : first + ROUNDS_PER_TABLE]
        lines += [
            "",
            "| arm | " + " | ".join(f"round {one.index + 1}" for one in chunk) + " |",
            "|" + "---|" * (len(chunk) + 1),
        ]
        for name in arms:
            cells = []
            for one in chunk:
                acked, base = one.run_of(name).acked, one.run_of(arms[0]).acked
                if "current" in arms:
                    base = one.run_of("current").acked
                cells.append(f"{acked:,} ({acked / base:.3f})" if base else f"{acked:,}")
            lines.append(f"| {arm_label(name)} | " + " | ".join(cells) + " |")
    kinds = sorted({fault.kind for one in rounds for fault in one.faults})
    counted = {
        name: _kind_totals([acked_by_kind(one.run_of(name), one.faults) for one in rounds])
        for name in arms
    }
    base_kinds = counted.get("current")
    lines += [
        "",
        f"Acked writes by fault kind, from each fault's start to {AFTER_FAULT_S:g} s after its "
        "end, all rounds (`vs current`); `no fault`: the rest of the time:",
        "",
        "| arm | " + " | ".join([*kinds, "no fault"]) + " |",
        "|" + "---|" * (len(kinds) + 2),
    ]
    for name in arms:
        cells = []
        for kind in [*kinds, "none"]:
            acked = counted[name].get(kind, 0)
            base = 0 if base_kinds is None else base_kinds.get(kind, 0)
            cells.append(f"{acked:,} ({acked / base:.3f})" if base else f"{acked:,}")
        lines.append(f"| {arm_label(name)} | " + " | ".join(cells) + " |")
    lines += ["", "Errors by kind:", ""]
    for name in arms:
        listed = ", ".join(f"{k} {n:,}" for k, n in totals[name].error_kinds.items()) or "none"
        lines.append(f"- **{arm_label(name)}**: {listed}")
    lines += ["", "Goals:", ""]
    for row in rows:
        verdicts = ", ".join(f"{goal}: {met}" for goal, met in row["goals"].items())
        lines.append(f"- **{arm_label(row[ARM_KEY])}**: {verdicts}")
    return "\n".join(lines) + "\n"


def _interval(row: Mapping[str, Any], key: str) -> str:
    """``low-high`` of a row's ``<key>_low`` and ``<key>_high`` (``-`` without an interval)."""
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    return "-" if low is None or high is None else f"{low:.3f}-{high:.3f}"


def _sharded_intro(plan: FaultPlan) -> list[str]:
    """The sharded soak's first paragraph (none for the replica set's)."""
    if not plan.sharded:
        return []
    return [
        f"Sharded cluster: {plan.routers} mongos routers over one shard (one embedded process, "
        f"its own), the URI naming every router; each router's ingress limiter admits "
        f"{plan.capacity:g} ops/s. Every fault of the schedule hits mongos 0 alone (its fail "
        "points; the tight limits are its limiter's); the other routers stay healthy.",
        "",
    ]


def _kind_totals(counts: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """Per-kind counts added up."""
    total: dict[str, int] = {}
    for one in counts:
        for kind, n in one.items():
            total[kind] = total.get(kind, 0) + n
    return total


def faults_report(
    rounds: Sequence[FaultRound],
    plan: FaultPlan,
    info: dict[str, Any],
    load: Sequence[float],
    wall_s: float,
    commit: str,
) -> dict[str, Any]:
    """The raw data of one interleaved soak of every arm, as written to JSON: each round's
    runs, and each arm's totals, paired ratios and goals (``runs``, the default's first)."""
    return {
        "machine": info,
        "load_average": [round(x, 2) for x in load],
        "wall_s": round(wall_s, 1),
        "commit": commit,
        "plan": asdict(plan),
        "schedule": [asdict(fault) for fault in fault_schedule(plan.seed, plan.seconds)],
        "rounds": [one.to_dict() for one in rounds],
        "runs": _summary(rounds, plan),
    }


def _fault_run(entry: Mapping[str, Any]) -> FaultRun:
    """A :class:`FaultRun` from its JSON (derived figures left out)."""
    names = set(FaultRun.__dataclass_fields__)
    values = {k: v for k, v in from_file(entry).items() if k in names}
    values["ok_bins"] = tuple(values.get("ok_bins", ()))
    values["error_bins"] = tuple(values.get("error_bins", ()))
    return FaultRun(**values)


def _fault(entry: Mapping[str, Any]) -> Fault:
    """A :class:`Fault` from its JSON."""
    return Fault(**entry)


def rounds_from_report(data: Mapping[str, Any]) -> list[FaultRound]:
    """The rounds of :func:`faults_report`'s data (KeyError for a soak without rounds)."""
    return [
        FaultRound(
            index=int(entry["index"]),
            order=tuple(entry["order"]),
            faults=tuple(_fault(fault) for fault in entry["schedule"]),
            runs=tuple(_fault_run(run) for run in entry["runs"]),
            load=entry.get("load"),
        )
        for entry in data["rounds"]
    ]


def kind_ratios(rounds: Sequence[FaultRound], arm: str, base: str = "current") -> dict[str, float]:
    """``arm``'s acked writes by fault kind (:func:`acked_by_kind`, all rounds) over
    ``base``'s; kinds where ``base`` acked nothing are left out."""
    mine = _kind_totals([acked_by_kind(one.run_of(arm), one.faults) for one in rounds])
    theirs = _kind_totals([acked_by_kind(one.run_of(base), one.faults) for one in rounds])
    return {kind: mine.get(kind, 0) / n for kind, n in theirs.items() if n}


def render_faults_report(data: dict[str, Any]) -> str:
    """The Markdown page of :func:`faults_report`'s data: the run's line, then the tables.

    Data without ``rounds`` (the soaks before the interleaved rounds: the arms one after
    another over the whole schedule) renders as :func:`render_faults_markdown` does.
    """
    plan = FaultPlan(**data["plan"])
    line = run_line(data["machine"], data["load_average"], data["wall_s"], data["commit"])
    if "rounds" not in data:
        runs = [_fault_run(entry) for entry in data["runs"]]
        return line + "\n\n" + render_faults_markdown(runs, plan)
    return line + "\n\n" + render_rounds_markdown(rounds_from_report(data), plan)


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv`` and soak every arm in interleaved rounds on one embedded deployment
    (a replica set, or a sharded cluster with ``--topology sharded``)."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench.faults",
        description="Writers under a seeded fault schedule; every acked write checked.",
    )
    parser.add_argument(
        "--arms",
        help=(
            "comma-separated (default: every available arm); a preset may carry client "
            "options: current+routeAroundOverload=false"
        ),
    )
    parser.add_argument(
        "--topology",
        choices=TOPOLOGIES,
        default="replicaset",
        help="faults on the replica set's primary, or on one mongos of a sharded cluster",
    )
    parser.add_argument(
        "--routers",
        type=positive_int,
        default=3,
        help="mongos routers of the sharded cluster (faults on the first; at least 2)",
    )
    parser.add_argument(
        "--seconds", type=positive_float, default=120.0, help="the fault schedule's length"
    )
    parser.add_argument(
        "--rounds",
        type=positive_int,
        default=6,
        help="interleaved rounds, each replaying its slice of the schedule under every arm",
    )
    parser.add_argument("--processes", type=positive_int, default=4, help="client processes")
    parser.add_argument("--threads", type=positive_int, default=8, help="writers per process")
    parser.add_argument("--seed", type=int, default=1, help="the fault schedule's seed")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the table")
    args = parser.parse_args(argv)
    arms = [p for p in args.arms.split(",") if p] if args.arms else None
    try:
        soak_arms(arms)
        plan = FaultPlan(
            processes=args.processes,
            threads=args.threads,
            seconds=args.seconds,
            seed=args.seed,
            rounds=args.rounds,
            topology=args.topology,
            routers=args.routers,
        )
    except ValueError as exc:
        parser.error(str(exc))

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    publish_run(
        lambda server: run_faults(server, arms, plan, progress=progress),
        lambda runs, info, load, wall_s, commit: faults_report(
            runs, plan, info, load, wall_s, commit
        ),
        render_faults_report,
        markdown=args.markdown,
        json_path=args.json,
        topology=plan.topology,
        members=plan.members,
    )
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.bench.faults``: 0, or 2 on a usage error."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
