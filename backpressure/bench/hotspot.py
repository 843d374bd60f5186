"""The hotspot benchmark: one server of several pushes back, with real processes.

``python -m backpressure.bench.hotspot`` (or ``python -m backpressure.bench hotspot``) runs
fleets of real client processes (``multiprocessing``, spawn; 4 processes x 8 threads by
default), each with its own client, against the embedded server in its own process over TCP,
in the shapes where a selection has a choice of server:

* **hot router**: a sharded deployment with 3 mongos; mongos 0's ingress limiter admits 50/s,
  the others 1,000/s (room to spare); half ``find_one`` by ``_id``, half ``insert_one``;
* **hot secondary**: a 3-member replica set, reads only with ``secondaryPreferred``; secondary 1
  admits 50/s, the other members 1,000/s;
* **hot then cool**: 3 mongos at 300/s each and an open loop of 700 ops/s (evenly spaced
  arrivals, spread over the processes); mongos 0 admits 50/s for 10 s, then 300/s again;
* the first two again with the **9.0 request queue** (``ingressRequestAdmissionMaxQueueDepth``,
  25 by default): the hot server queues before it rejects, so it turns slow first;
* **rollout**: the first two with half the processes on stock pymongo and half on the default,
  each half on its own row, beside the all-stock run's successes per process.

Every thread of a closed loop pauses 20 ms after each operation; every operation runs under
``pymongo.timeout(1)`` (an open loop's under what is left of 1 s from its arrival).  The
arms run one after another on the same server, the default's row first: the default, stock
pymongo (a plain ``pymongo.MongoClient``), ``adaptive`` and the default with server choice off
(``routeAroundOverload=false``).

Per row: successes, errors (operations that raised, plus open-loop arrivals no thread was free
to send before their deadline), attempts per operation (workload commands the servers received,
from their own counters, per operation; for a rollout's halves, the commands the half's clients
started, from command monitoring), p50/p99 latency of successes, and the share of first
attempts that went to the hot server (command monitoring in every process, stock ones
included: the server of each operation's first started command) and of all commands the hot
server received (its own counters).

The physical limit beside each closed-loop shape is a run of the same shape with no server
limited (stock pymongo): a perfect chooser sends the hot server no more than its capacity and
the rest to the servers with room, so it can at best reach that run's successes and the quiet
path's latency; its errors are 0 and its attempts per operation 1.  Beside hot then cool, the
physical-limit oracle (:mod:`backpressure.sim.oracle`) on the run's own arrivals: the most any
schedule could admit in each window, each window starting with full buckets.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import multiprocessing
import os
import random
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import pymongo
from pymongo import MongoClient, monitoring
from pymongo.errors import PyMongoError

from backpressure.bench.fleet import _await_ready, _wait_until
from backpressure.cli import (
    bounded_float,
    name_list,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    run_cli,
)
from backpressure.sim.oracle import Capacity, physical_limit
from backpressure.workload import ARMS
from backpressure.workload.arms import (
    NO_ROUTE_AROUND,
    STOCK,
    arm_label,
    default_first,
    default_policy_name,
    from_file,
    to_file,
)
from backpressure.workload.metrics import percentile
from backpressure.workload.report import code_revision, machine_info, run_line

__all__ = [
    "HOTSPOT_ARMS",
    "QUICK_HOTSPOT",
    "SHAPES",
    "HotspotPlan",
    "Row",
    "hotspot_arms",
    "hotspot_section",
    "main",
    "render_chart",
    "render_hotspot_report",
    "run_hotspot",
]

DATABASE = "hotspot"
COLLECTION = "ops"
COMMANDS = ("find", "insert")
"""The workload's commands (hellos, monitoring and admin commands are not counted)."""

ROUTER = "router"
SECONDARY = "secondary"
COOL = "cool"
ROUTER_QUEUE = "router-queue"
SECONDARY_QUEUE = "secondary-queue"
ROLLOUT_ROUTER = "rollout-router"
ROLLOUT_SECONDARY = "rollout-secondary"
SHAPES: tuple[str, ...] = (
    ROUTER,
    SECONDARY,
    COOL,
    ROUTER_QUEUE,
    SECONDARY_QUEUE,
    ROLLOUT_ROUTER,
    ROLLOUT_SECONDARY,
)
"""Every shape, in the page's order (``--shapes`` names a subset)."""

TITLES = {
    ROUTER: "Hot router",
    SECONDARY: "Hot secondary",
    COOL: "Hot then cool",
    ROUTER_QUEUE: "Hot router, the server queueing",
    SECONDARY_QUEUE: "Hot secondary, the server queueing",
    ROLLOUT_ROUTER: "Rollout, hot router",
    ROLLOUT_SECONDARY: "Rollout, hot secondary",
}

HOTSPOT_ARMS: tuple[str, ...] = ("current", STOCK, "adaptive", NO_ROUTE_AROUND)
"""The arms of every shape (those this pymongo runs), the default's first."""

QUIET = "quiet"
"""The row kind of the physical-limit run: the same shape with no server limited."""

HOT_INDEX = {ROUTER: 0, SECONDARY: 1}
"""The hot member of each topology: mongos 0; secondary 1 (the primary is member 0)."""


def hotspot_arms(names: Optional[Sequence[str]] = None) -> list[str]:
    """``names`` (default: :data:`HOTSPOT_ARMS` that run here), the default's first.

    Raises:
        ValueError: a name is no arm of the benchmarks.
    """
    if names is None:
        names = [n for n in HOTSPOT_ARMS if n in ARMS and ARMS[n].unavailable() is None]
    unknown = [name for name in names if name not in ARMS]
    if unknown:
        raise ValueError(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    return default_first(list(dict.fromkeys(names)))


@dataclass(frozen=True)
class HotspotPlan:
    """Every number of the benchmark."""

    processes: int = 4
    threads: int = 8
    """Threads per process of a closed loop."""
    think_s: float = 0.02
    """Pause of a closed-loop thread after each operation."""
    deadline_s: float = 1.0
    """``pymongo.timeout`` of every operation (open loop: from its arrival)."""
    seconds: float = 10.0
    """Length of a closed-loop run."""
    hot_rate: int = 50
    """The hot server's admissions per second."""
    room_rate: int = 1000
    """The other servers' admissions per second (room to spare)."""
    read_fraction: float = 0.5
    """Share of ``find_one`` in the router shapes (the rest ``insert_one``); reads only in
    the secondary shapes."""
    burst_seconds: float = 1.0
    """Every limiter's bucket, seconds of its rate."""
    queue_depth: int = 25
    """The queueing shapes' request queue (``ingressRequestAdmissionMaxQueueDepth``)."""
    routers: int = 3
    """mongos routers of the sharded deployment."""
    members: int = 3
    """Members of the replica set."""
    cool_rate: int = 300
    """Hot then cool: every router's admissions per second (the hot one's after its hot phase)."""
    cool_demand: float = 700.0
    """Hot then cool: the open loop's arrivals per second, over all processes."""
    cool_hot_s: float = 10.0
    """Hot then cool: seconds router 0 admits ``hot_rate``."""
    cool_after_s: float = 4.0
    """Hot then cool: seconds of load after the hot phase."""
    cool_threads: int = 32
    """Hot then cool: threads per process serving the arrivals."""
    keys: int = 500
    """Documents preloaded for ``find_one``."""
    bin_s: float = 0.1
    """Width of the success-time histogram each process returns."""
    start_timeout_s: float = 120.0
    """How long the client processes may take to start and connect."""

    def __post_init__(self) -> None:
        """Validate the numbers."""
        for name in ("processes", "threads", "routers", "members", "cool_threads", "keys"):
            if getattr(self, name) < 1:
                raise ValueError(f"HotspotPlan.{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("hot_rate", "room_rate", "cool_rate"):
            if getattr(self, name) < 1:
                raise ValueError(f"HotspotPlan.{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("deadline_s", "seconds", "burst_seconds", "cool_demand", "cool_hot_s"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"HotspotPlan.{name} must be a finite number > 0, got {value!r}")
        for name in ("think_s", "cool_after_s"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"HotspotPlan.{name} must be a finite number >= 0, got {value!r}")
        if not 0.0 <= self.read_fraction <= 1.0:
            raise ValueError(f"HotspotPlan.read_fraction must be in 0..1, got {self.read_fraction}")
        if self.queue_depth < 0:
            raise ValueError(f"HotspotPlan.queue_depth must be >= 0, got {self.queue_depth}")
        if self.routers < 2 or self.members < 3:
            raise ValueError("HotspotPlan needs >= 2 routers and >= 3 members (a choice)")
        if not 0 < self.bin_s <= 1.0 or round(1.0 / self.bin_s) * self.bin_s != 1.0:
            raise ValueError(f"HotspotPlan.bin_s must divide 1 s, got {self.bin_s!r}")


QUICK_HOTSPOT = HotspotPlan(
    processes=2,
    threads=2,
    seconds=1.5,
    hot_rate=10,
    cool_rate=30,
    cool_demand=60.0,
    cool_hot_s=1.5,
    cool_after_s=2.0,
    cool_threads=4,
    queue_depth=3,
    keys=50,
)
"""A run of seconds per shape and arm, for the tests."""


# -- one fleet's load -------------------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """What every client process of one run does."""

    threads: int
    duration_s: float
    deadline_s: float
    think_s: float
    read_fraction: float
    read_preference: Optional[str]
    keys: int
    bin_s: float
    start_timeout_s: float
    open_rate: float = 0.0
    """Arrivals per second of one process (0: a closed loop)."""
    processes: int = 1
    """Processes of the run (an open loop spreads its arrivals over them)."""

    def arrivals(self, index: int) -> list[float]:
        """Process ``index``'s arrival offsets, seconds from the start (open loop): evenly
        spaced, the processes' interleaved."""
        if not self.open_rate:
            return []
        count = int(self.open_rate * self.duration_s)
        shift = (index + 0.5) / self.processes
        return [(j + shift) / self.open_rate for j in range(count)]


class _FirstAttempts(monitoring.CommandListener):
    """Counts the workload commands started per server, and each operation's first one."""

    def __init__(self) -> None:
        """Start at zero."""
        self._lock = threading.Lock()
        self._local = threading.local()
        self.first: dict[str, int] = {}
        self.attempts: dict[str, int] = {}

    def begin(self) -> None:
        """The calling thread starts an operation: its next workload command is a first one."""
        self._local.sent = False

    def reset(self) -> None:
        """Forget every count (the warm-up's)."""
        with self._lock:
            self.first.clear()
            self.attempts.clear()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Count a workload command on its server; the operation's first on ``first`` too."""
        if event.command_name not in COMMANDS:
            return
        host, port = event.connection_id[0], event.connection_id[1]
        address = f"{host}:{port}"
        first = not getattr(self._local, "sent", True)
        self._local.sent = True
        with self._lock:
            self.attempts[address] = self.attempts.get(address, 0) + 1
            if first:
                self.first[address] = self.first.get(address, 0) + 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Ignore."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Ignore."""


def _hotspot_process(
    index: int,
    uri: str,
    arm_name: str,
    load: Load,
    ready: Any,
    go: Any,
    start_at: Any,
    results: Any,
) -> None:
    """One client process: open the arm's client, wait for ``go``, run the load."""
    cpu_start = time.process_time()
    logging.getLogger("backpressure").setLevel(logging.ERROR)  # one line per give-up is noise
    counter = _FirstAttempts()
    options: dict[str, Any] = {
        "maxPoolSize": load.threads + 10,
        "appname": f"hotspot-{index}",
        "event_listeners": [counter],
    }
    if load.read_preference is not None:
        options["readPreference"] = load.read_preference
    client = ARMS[arm_name].open(uri, **options)
    try:
        collection = client.client[DATABASE][COLLECTION]
        collection.find_one({"_id": -1})  # connect and discover before the clock starts
        schedule = load.arrivals(index)
        ready.put(index)
        if not go.wait(load.start_timeout_s * 2):
            return
        counter.reset()
        t0 = float(start_at.value)
        end = t0 + load.duration_s
        slots = int(load.duration_s / load.bin_s) + int(load.deadline_s / load.bin_s) + 2
        lock = threading.Lock()
        outcomes: list[tuple[float, float, str]] = []  # (latency ms, done offset, error name)
        cursor = [0]

        def operation(rng: random.Random, number: int) -> None:
            if rng.random() < load.read_fraction:
                collection.find_one({"_id": rng.randrange(load.keys)})
            else:
                collection.insert_one({"w": number})

        def attempt(rng: random.Random, number: int, since: float, budget: float) -> None:
            counter.begin()
            error = ""
            try:
                with pymongo.timeout(budget):
                    client.call(functools.partial(operation, rng, number))
            except PyMongoError as exc:
                error = type(exc).__name__
            done = time.time()
            with lock:
                outcomes.append(((done - since) * 1000.0, done - t0, error))

        def closed(number: int) -> None:
            rng = random.Random(f"{index}:{number}")
            pause = threading.Event()  # never set: waits of think_s
            _wait_until(t0)  # the same start instant in every process
            while time.time() < end:
                attempt(rng, number, time.time(), load.deadline_s)
                if load.think_s:
                    pause.wait(load.think_s)

        def open_loop(number: int) -> None:
            rng = random.Random(f"{index}:{number}")
            while True:
                with lock:
                    position = cursor[0]
                    cursor[0] += 1
                if position >= len(schedule):
                    return
                due = t0 + schedule[position]
                _wait_until(due)
                remaining = due + load.deadline_s - time.time()
                if remaining <= 0:  # no thread was free before its deadline
                    with lock:
                        outcomes.append((0.0, schedule[position] + load.deadline_s, "NotSent"))
                    continue
                attempt(rng, position, due, remaining)

        body = open_loop if load.open_rate else closed
        threads = [
            threading.Thread(target=body, args=(n,), daemon=True) for n in range(load.threads)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        success_bins = [0] * slots
        error_bins = [0] * slots
        kinds: dict[str, int] = {}
        latencies = []
        for latency, done, error in outcomes:
            slot = min(slots - 1, max(0, int(done / load.bin_s)))
            if error:
                error_bins[slot] += 1
                kinds[error] = kinds.get(error, 0) + 1
            else:
                success_bins[slot] += 1
                latencies.append(round(latency, 3))
        results.put(
            {
                "index": index,
                "arm": arm_name,
                "ops": len(outcomes),
                "errors": sum(kinds.values()),
                "successes": len(latencies),
                "not_sent": kinds.get("NotSent", 0),
                "success_bins": success_bins,
                "error_bins": error_bins,
                "latencies_ms": latencies,
                "error_kinds": kinds,
                "first_by_server": dict(counter.first),
                "attempts_by_server": dict(counter.attempts),
                "cpu_s": round(time.process_time() - cpu_start, 3),
            }
        )
    finally:
        client.close()


Limits = dict[int, list[tuple[float, int]]]
"""Per member index, ``(seconds from the start, rate)`` steps; members not named: no limit."""


def _preload(uri: str, keys: int) -> None:
    """Drop the collection and insert the documents ``find_one`` reads (limiters off)."""
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    try:
        collection = client[DATABASE][COLLECTION]
        collection.drop()
        collection.insert_many([{"_id": key} for key in range(keys)])
    finally:
        client.close()


def run_processes(
    server: Any,
    arms: Sequence[str],
    load: Load,
    limits: Limits,
    plan: HotspotPlan,
    queue_depth: int = 0,
) -> tuple[list[dict[str, Any]], list[int]]:
    """Run ``load`` once, process ``i`` under ``arms[i]``, with the members' ``limits``.

    Returns every process's report, in process order, and the workload commands each member
    received (its own counters).
    """
    context = multiprocessing.get_context("spawn")
    ready: Any = context.Queue()
    results: Any = context.Queue()
    go = context.Event()
    start_at = context.Value("d", 0.0)
    server.reset()
    server.disable_rate_limit()
    _preload(server.uri, load.keys)
    processes = [
        context.Process(
            target=_hotspot_process,
            args=(index, server.uri, arm, load, ready, go, start_at, results),
            name=f"hotspot-{arm}-{index}",
            daemon=True,
        )
        for index, arm in enumerate(arms)
    ]
    for process in processes:
        process.start()

    def apply(member: int, rate: int) -> None:
        server.set_rate_limit(
            rate, burst_seconds=plan.burst_seconds, queue_depth=queue_depth, member=member
        )

    collected: list[dict[str, Any]] = []
    try:
        _await_ready(ready, processes, load.start_timeout_s)
        for member, steps in limits.items():
            apply(member, steps[0][1])
        server.stats(reset=True)
        t0 = time.time() + 0.2
        start_at.value = t0
        go.set()
        changes = sorted(
            (at, member, rate) for member, steps in limits.items() for at, rate in steps[1:]
        )
        for at, member, rate in changes:
            _wait_until(t0 + at)
            apply(member, rate)
        _wait_until(t0 + load.duration_s)
        for _ in processes:
            collected.append(results.get(timeout=load.deadline_s + 60.0))
        received = [
            sum(
                int(server.stats(member=m)["commands"].get(name, {}).get("received", 0))
                for name in COMMANDS
            )
            for m in range(len(server.addresses))
        ]
    finally:
        go.set()
        for process in processes:
            process.join(timeout=30.0)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5.0)
        server.disable_rate_limit()
    collected.sort(key=lambda r: int(r["index"]))
    return collected, received


# -- rows -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One arm's run of one shape (or one half of a rollout run), summarised."""

    shape: str
    arm: str
    kind: str
    """``run`` (every process under ``arm``), ``half`` (a rollout's half) or ``quiet``
    (the physical-limit run: no server limited)."""
    processes: int
    operations: int
    errors: int
    not_sent: int
    """Open loop: arrivals no thread was free to send before their deadline (in ``errors``)."""
    attempts: int
    """Workload commands: the servers received (``run``, ``quiet``) or the clients started
    (``half``)."""
    hot_received: int
    """Workload commands the hot server received (0 for a half: the servers' counters cannot
    tell the halves apart)."""
    first_attempts: int
    first_to_hot: int
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    per_process_successes: tuple[int, ...]
    success_bins: tuple[int, ...]
    error_kinds: dict[str, int]
    client_cpu_s: float
    bin_s: float = 0.1

    @property
    def successes(self) -> int:
        """Operations that succeeded."""
        return self.operations - self.errors

    @property
    def error_fraction(self) -> float:
        """Errors per operation."""
        return self.errors / self.operations if self.operations else 0.0

    @property
    def attempts_per_op(self) -> float:
        """Workload commands per operation."""
        return self.attempts / self.operations if self.operations else 0.0

    @property
    def hot_first_share(self) -> float:
        """The share of first attempts that went to the hot server."""
        return self.first_to_hot / self.first_attempts if self.first_attempts else 0.0

    @property
    def hot_received_share(self) -> Optional[float]:
        """The hot server's share of the workload commands the servers received (None for a
        half)."""
        if self.kind == "half" or not self.attempts:
            return None
        return self.hot_received / self.attempts

    @property
    def per_process(self) -> float:
        """Mean successes of one process."""
        return self.successes / self.processes if self.processes else 0.0

    def successes_between(self, begin_s: float, end_s: float) -> int:
        """Successes completed from ``begin_s`` to ``end_s`` after the start (whole bins)."""
        first, last = round(begin_s / self.bin_s), round(end_s / self.bin_s)
        return sum(self.success_bins[first:last])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data, the derived figures included."""
        data = asdict(self)
        data.update(
            successes=self.successes,
            error_fraction=self.error_fraction,
            attempts_per_op=self.attempts_per_op,
            hot_first_share=self.hot_first_share,
            hot_received_share=self.hot_received_share,
        )
        return to_file(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        """The row :meth:`to_dict` described."""
        names = set(cls.__dataclass_fields__)
        values = {k: v for k, v in from_file(data).items() if k in names}
        values["per_process_successes"] = tuple(values["per_process_successes"])
        values["success_bins"] = tuple(values["success_bins"])
        return cls(**values)


def summarize(
    shape: str,
    arm: str,
    kind: str,
    reports: Sequence[dict[str, Any]],
    hot_address: str,
    received: Optional[Sequence[int]],
    hot_index: int,
    bin_s: float,
) -> Row:
    """Add up the processes' reports (``received``: each member's count; None for a half,
    whose attempts are the commands its clients started)."""
    latencies = [x for report in reports for x in report["latencies_ms"]]
    bins = [0] * max(len(r["success_bins"]) for r in reports)
    kinds: dict[str, int] = {}
    first = attempts_started = first_hot = 0
    for report in reports:
        for slot, n in enumerate(report["success_bins"]):
            bins[slot] += n
        for name, n in report["error_kinds"].items():
            kinds[name] = kinds.get(name, 0) + n
        first += sum(report["first_by_server"].values())
        first_hot += report["first_by_server"].get(hot_address, 0)
        attempts_started += sum(report["attempts_by_server"].values())
    return Row(
        shape=shape,
        arm=arm,
        kind=kind,
        processes=len(reports),
        operations=sum(int(r["ops"]) for r in reports),
        errors=sum(int(r["errors"]) for r in reports),
        not_sent=sum(int(r["not_sent"]) for r in reports),
        attempts=attempts_started if received is None else sum(received),
        hot_received=0 if received is None else received[hot_index],
        first_attempts=first,
        first_to_hot=first_hot,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        per_process_successes=tuple(int(r["successes"]) for r in reports),
        success_bins=tuple(bins),
        error_kinds=dict(sorted(kinds.items())),
        client_cpu_s=round(sum(float(r["cpu_s"]) for r in reports), 2),
        bin_s=bin_s,
    )


# -- the shapes -------------------------------------------------------------------------------


def _base(shape: str) -> str:
    """The topology of a shape: ``router`` (the sharded deployment: the router shapes and hot
    then cool) or ``secondary`` (the replica set)."""
    return ROUTER if shape == COOL or ROUTER in shape else SECONDARY


def _closed_load(plan: HotspotPlan, shape: str) -> Load:
    """The closed loop of a hot router or hot secondary shape."""
    secondary = _base(shape) == SECONDARY
    return Load(
        threads=plan.threads,
        duration_s=plan.seconds,
        deadline_s=plan.deadline_s,
        think_s=plan.think_s,
        read_fraction=1.0 if secondary else plan.read_fraction,
        read_preference="secondaryPreferred" if secondary else None,
        keys=plan.keys,
        bin_s=plan.bin_s,
        start_timeout_s=plan.start_timeout_s,
        processes=plan.processes,
    )


def _cool_load(plan: HotspotPlan) -> Load:
    """The open loop of hot then cool."""
    return Load(
        threads=plan.cool_threads,
        duration_s=plan.cool_hot_s + plan.cool_after_s,
        deadline_s=plan.deadline_s,
        think_s=0.0,
        read_fraction=plan.read_fraction,
        read_preference=None,
        keys=plan.keys,
        bin_s=plan.bin_s,
        start_timeout_s=plan.start_timeout_s,
        open_rate=plan.cool_demand / plan.processes,
        processes=plan.processes,
    )


def _hot_limits(plan: HotspotPlan, shape: str, quiet: bool = False) -> Limits:
    """Every member at ``room_rate``, the hot one at ``hot_rate`` (``quiet``: not it either)."""
    count = plan.routers if _base(shape) == ROUTER else plan.members
    hot = HOT_INDEX[_base(shape)]
    return {
        member: [(0.0, plan.room_rate if quiet or member != hot else plan.hot_rate)]
        for member in range(count)
    }


def _cool_limits(plan: HotspotPlan) -> Limits:
    """Every router at ``cool_rate``; router 0 at ``hot_rate`` for ``cool_hot_s`` first."""
    limits: Limits = {m: [(0.0, plan.cool_rate)] for m in range(1, plan.routers)}
    limits[0] = [(0.0, plan.hot_rate), (plan.cool_hot_s, plan.cool_rate)]
    return limits


def cool_windows(plan: HotspotPlan) -> dict[str, tuple[float, float]]:
    """Hot then cool's windows, seconds from the start: the hot phase, the first second after
    it, and seconds 1-4 after it (cut at the end of the run)."""
    hot, end = plan.cool_hot_s, plan.cool_hot_s + plan.cool_after_s
    return {
        "hot": (0.0, hot),
        "first second after": (hot, min(end, hot + 1.0)),
        "seconds 1-4 after": (min(end, hot + 1.0), min(end, hot + 4.0)),
    }


def cool_oracle(plan: HotspotPlan) -> dict[str, int]:
    """The most any schedule admits of each window's arrivals (each window from full buckets)."""
    load = _cool_load(plan)
    arrivals = sorted(t for index in range(plan.processes) for t in load.arrivals(index))
    limits: dict[str, int] = {}
    for name, (begin, end) in cool_windows(plan).items():
        mine = [t - begin for t in arrivals if begin <= t < end]
        rates = [plan.cool_rate] * plan.routers
        if name == "hot":
            rates[0] = plan.hot_rate
        capacities = [Capacity.constant(rate, plan.burst_seconds) for rate in rates]
        limits[name] = physical_limit(mine, plan.deadline_s, capacities).admitted if mine else 0
    return limits


@dataclass
class _Servers:
    """The embedded deployments of one invocation, started when first needed."""

    plan: HotspotPlan
    open: dict[tuple[str, bool], Any] = field(default_factory=dict)

    def get(self, base: str, queueing: bool) -> Any:
        """The sharded deployment (``router``) or the replica set (``secondary``); the 9.0
        profile's when ``queueing`` (its request queue), the default profile's otherwise."""
        key = (base, queueing)
        if key not in self.open:
            from backpressure.testing.server.embedded import EmbeddedServer

            options: dict[str, Any] = {"subprocess": True}
            if queueing:
                options["server_version"] = "9.0"
            if base == ROUTER:
                server = EmbeddedServer("sharded", members=self.plan.routers, **options)
            else:
                server = EmbeddedServer("replicaset", members=self.plan.members, **options)
            self.open[key] = server.start()
        return self.open[key]

    def close(self) -> None:
        """Stop every deployment."""
        for server in self.open.values():
            server.stop()
        self.open.clear()


def _address(server: Any, index: int) -> str:
    """``host:port`` of member ``index``."""
    host, port = server.addresses[index]
    return f"{host}:{port}"


def run_hotspot(
    plan: HotspotPlan,
    shapes: Sequence[str] = SHAPES,
    arms: Optional[Sequence[str]] = None,
    *,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Row]:
    """Run every shape of ``shapes`` with every arm (the default's first), each on its own
    embedded deployment, and return the rows in the page's order."""
    names = hotspot_arms(arms)
    unknown = [shape for shape in shapes if shape not in SHAPES]
    if unknown:
        raise ValueError(f"unknown shapes {unknown}; choose from {', '.join(SHAPES)}")
    servers = _Servers(plan)
    rows: list[Row] = []
    # Grouped by deployment, so each starts once; the page puts the shapes back in order.
    order = sorted(
        (s for s in SHAPES if s in shapes), key=lambda s: ("queue" in s, _base(s), SHAPES.index(s))
    )
    try:
        for shape in order:
            base = _base(shape)
            server = servers.get(base, "queue" in shape)
            hot = HOT_INDEX[base]
            hot_address = _address(server, hot)

            if shape == COOL:
                load = _cool_load(plan)
                for arm in names:
                    progress(f"{shape}: {arm}")
                    reports, received = run_processes(
                        server, [arm] * plan.processes, load, _cool_limits(plan), plan
                    )
                    rows.append(
                        summarize(shape, arm, "run", reports, hot_address, received, 0, plan.bin_s)
                    )
                continue
            load = _closed_load(plan, shape)
            if shape.startswith("rollout"):
                rows += _rollout(shape, plan, rows, server, load, hot_address, hot)
                continue
            queue_depth = plan.queue_depth if "queue" in shape else 0
            for arm in names:
                progress(f"{shape}: {arm}")
                reports, received = run_processes(
                    server,
                    [arm] * plan.processes,
                    load,
                    _hot_limits(plan, shape),
                    plan,
                    queue_depth,
                )
                rows.append(
                    summarize(shape, arm, "run", reports, hot_address, received, hot, plan.bin_s)
                )
            if "queue" not in shape:
                progress(f"{shape}: no server limited")
                reports, received = run_processes(
                    server,
                    [STOCK] * plan.processes,
                    load,
                    _hot_limits(plan, shape, quiet=True),
                    plan,
                )
                rows.append(
                    summarize(shape, STOCK, QUIET, reports, hot_address, received, hot, plan.bin_s)
                )
    finally:
        servers.close()
    return sorted(rows, key=lambda row: SHAPES.index(row.shape))


def _rollout(
    shape: str,
    plan: HotspotPlan,
    rows: Sequence[Row],
    server: Any,
    load: Load,
    hot_address: str,
    hot: int,
) -> list[Row]:
    """Half the processes on stock pymongo, half on the default: a row per half, and the
    all-stock run (the base shape's stock row when it ran, else one run here)."""
    default = default_policy_name()
    stock_count = plan.processes // 2
    arms_of = [STOCK] * stock_count + [default] * (plan.processes - stock_count)
    limits = _hot_limits(plan, shape)
    reports, _ = run_processes(server, arms_of, load, limits, plan)
    out = [
        summarize(shape, STOCK, "half", reports[:stock_count], hot_address, None, hot, plan.bin_s),
        summarize(
            shape, default, "half", reports[stock_count:], hot_address, None, hot, plan.bin_s
        ),
    ]
    base = _base(shape)
    stock_runs = [r for r in rows if r.shape == base and r.arm == STOCK and r.kind == "run"]
    if stock_runs:
        out.append(replace(stock_runs[0], shape=shape, kind="all-stock"))
    else:
        reports, received = run_processes(server, [STOCK] * plan.processes, load, limits, plan)
        out.append(
            summarize(shape, STOCK, "all-stock", reports, hot_address, received, hot, plan.bin_s)
        )
    return out


# -- goals ------------------------------------------------------------------------------------

HOT_GOALS: tuple[str, ...] = (
    "successes >= 1.8x stock's",
    "attempts/op <= 1.02",
    "p99 <= 25 ms",
    "errors <= stock's",
    "first attempts to the hot server <= 10%",
)
"""Issue 48's goals for the default in the hot router and hot secondary shapes."""

COOL_GOALS: tuple[str, ...] = (
    "hot phase >= stock's",
    "first second after >= 90% of stock's",
    "seconds 1-4 after >= 98% of stock's",
)
"""Issue 48's goals for the default in hot then cool."""

ROLLOUT_GOALS: tuple[str, ...] = (
    "stock processes >= an all-stock run's (3% noise)",
    "the default's processes >= the stock ones",
)
"""Issue 48's goals for a rollout in the hot shapes."""


def _find(rows: Sequence[Row], shape: str, arm: str, kind: str = "run") -> Optional[Row]:
    """The row of ``arm`` (of ``kind``) in ``shape``, or None."""
    return next((r for r in rows if r.shape == shape and r.arm == arm and r.kind == kind), None)


def judge(rows: Sequence[Row], shape: str, plan: HotspotPlan) -> dict[str, Optional[bool]]:
    """The default's goals in ``shape`` (None: a row the goal needs did not run)."""
    default = default_policy_name()
    if shape.startswith("rollout"):
        stock, mine = _find(rows, shape, STOCK, "half"), _find(rows, shape, default, "half")
        alone = _find(rows, shape, STOCK, "all-stock")
        if stock is None or mine is None or alone is None:
            return dict.fromkeys(ROLLOUT_GOALS)
        return dict(
            zip(
                ROLLOUT_GOALS,
                (
                    stock.per_process >= 0.97 * alone.per_process,
                    mine.per_process >= stock.per_process,
                ),
            )
        )
    run, stock = _find(rows, shape, default), _find(rows, shape, STOCK)
    if shape == COOL:
        if run is None or stock is None:
            return dict.fromkeys(COOL_GOALS)
        windows = list(cool_windows(plan).values())
        shares = (1.0, 0.9, 0.98)
        return {
            goal: run.successes_between(*window) >= share * stock.successes_between(*window)
            for goal, window, share in zip(COOL_GOALS, windows, shares)
        }
    if run is None or stock is None:
        return dict.fromkeys(HOT_GOALS)
    return dict(
        zip(
            HOT_GOALS,
            (
                run.successes >= 1.8 * stock.successes,
                run.attempts_per_op <= 1.02,
                run.p99_ms is not None and run.p99_ms <= 25.0,
                run.error_fraction <= stock.error_fraction,
                run.hot_first_share <= 0.10,
            ),
        )
    )


# -- the page ---------------------------------------------------------------------------------


def _ms(value: Optional[float]) -> str:
    """Milliseconds for a table (``-`` for None)."""
    if value is None:
        return "-"
    return f"{value:,.1f}" if value < 10 else f"{value:,.0f}"


def _pct(value: Optional[float]) -> str:
    """A share as a percentage (``-`` for None)."""
    return "-" if value is None else f"{100 * value:.1f}%"


def _verdict(met: Optional[bool]) -> str:
    """A goal's verdict."""
    return "not judged" if met is None else ("met" if met else "missed")


def _ordered(rows: Sequence[Row]) -> list[Row]:
    """Rows in the page's order: by shape, then the arms' order (the default's first)."""
    names = default_first(list(dict.fromkeys(r.arm for r in rows if r.kind == "run")))
    rank = {name: i for i, name in enumerate(names)}
    return sorted(rows, key=lambda r: (SHAPES.index(r.shape), r.kind != "run", rank.get(r.arm, 99)))


def _hot_table(
    rows: Sequence[Row], shape: str, plan: HotspotPlan, all_rows: Sequence[Row]
) -> list[str]:
    """A hot router or hot secondary table, with the physical limit's row."""
    header = (
        "| arm | successes | errors | attempts/op | p50 ms | p99 ms | first attempts to the hot "
        "server | hot server's share of commands received |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row.kind != "run":
            continue
        lines.append(
            f"| {arm_label(row.arm)} | {row.successes:,} | {_pct(row.error_fraction)} "
            f"({row.errors:,}) | {row.attempts_per_op:.3f} | {_ms(row.p50_ms)} | "
            f"{_ms(row.p99_ms)} | {_pct(row.hot_first_share)} | {_pct(row.hot_received_share)} |"
        )
    quiet = _find(all_rows, _base(shape), STOCK, QUIET)
    if quiet is not None:
        bound = plan.hot_rate * (plan.seconds + plan.burst_seconds) / max(1, quiet.operations)
        lines.append(
            f"| **physical limit** | <= {quiet.successes:,} | 0 | 1.000 | {_ms(quiet.p50_ms)} | "
            f"{_ms(quiet.p99_ms)} | <= {_pct(bound)} | <= {_pct(bound)} |"
        )
    return lines


def _cool_table(rows: Sequence[Row], plan: HotspotPlan, oracle: dict[str, int]) -> list[str]:
    """Hot then cool: successes in each window, per arm, and the oracle's."""
    windows = cool_windows(plan)
    stock = _find(rows, COOL, STOCK)
    header = (
        f"| arm | hot phase ({plan.cool_hot_s:g} s) | first second after | "
        "seconds 1-4 after | errors | attempts/op | p99 ms | first attempts to the hot server |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        cells = []
        for begin, end in windows.values():
            count = row.successes_between(begin, end)
            base = stock.successes_between(begin, end) if stock is not None else 0
            ratio = f" ({count / base:.0%} of stock's)" if base and row is not stock else ""
            cells.append(f"{count:,}{ratio}")
        lines.append(
            f"| {arm_label(row.arm)} | {' | '.join(cells)} | {_pct(row.error_fraction)} "
            f"({row.errors:,}) | {row.attempts_per_op:.3f} | {_ms(row.p99_ms)} | "
            f"{_pct(row.hot_first_share)} |"
        )
    demand = [round(plan.cool_demand * (end - begin)) for begin, end in windows.values()]
    lines.append(
        "| **physical limit** (oracle) | "
        + " | ".join(
            f"{oracle.get(name, 0):,} of {n:,} arrivals" for name, n in zip(windows, demand)
        )
        + " | - | 1.000 | - | - |"
    )
    return lines


def _rollout_table(rows: Sequence[Row]) -> list[str]:
    """A rollout: each half's row, then the all-stock run's."""
    header = (
        "| processes | arm | successes / process | errors | attempts/op | p99 ms | "
        "first attempts to the hot server |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    alone = next((r for r in rows if r.kind == "all-stock"), None)
    for row in sorted(rows, key=lambda r: (r.kind == "all-stock", r.arm != STOCK)):
        what = "all stock" if row.kind == "all-stock" else "half"
        share = ""
        if alone is not None and row is not alone and alone.per_process:
            share = f" ({row.per_process / alone.per_process:.0%} of an all-stock process's)"
        lines.append(
            f"| {row.processes} ({what}) | {arm_label(row.arm)} | "
            f"{row.per_process:,.0f}{share} | {_pct(row.error_fraction)} ({row.errors:,}) | "
            f"{row.attempts_per_op:.3f} | {_ms(row.p99_ms)} | {_pct(row.hot_first_share)} |"
        )
    return lines


def hotspot_section(data: dict[str, Any]) -> str:
    """The short summary (issue 48's format): per hot shape, each arm's successes, errors,
    attempts per operation, p99 and first attempts to the hot server, the default's column
    first."""
    rows = [Row.from_dict(r) for r in data["rows"]]
    names = default_first(list(dict.fromkeys(r.arm for r in rows if r.kind == "run")))
    lines = [
        "| shape | " + " | ".join(arm_label(n) for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for shape in (ROUTER, SECONDARY, ROUTER_QUEUE, SECONDARY_QUEUE):
        found = [_find(rows, shape, name) for name in names]
        if not any(found):
            continue
        cells = [
            "-"
            if row is None
            else (
                f"{row.successes:,} ok, {_pct(row.error_fraction)} errors, "
                f"{row.attempts_per_op:.2f} attempts/op, p99 {_ms(row.p99_ms)} ms, "
                f"{_pct(row.hot_first_share)} to the hot server"
            )
            for row in found
        ]
        lines.append(f"| {TITLES[shape].lower()} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_hotspot_report(data: dict[str, Any]) -> str:
    """The Markdown page of :func:`hotspot_report`'s data."""
    plan = HotspotPlan(**data["plan"])
    rows = _ordered([Row.from_dict(r) for r in data["rows"]])
    shapes = [s for s in SHAPES if any(r.shape == s for r in rows)]
    chart = data.get("chart")
    lines = [
        "# Hotspot: one server of several pushes back",
        "",
        run_line(data["machine"], data["load_average"], data["wall_s"], data["commit"]),
        "",
        f"Real processes: {plan.processes} client processes (spawn), each its own client; "
        f"closed loops of {plan.threads} threads per process pausing {plan.think_s * 1000:g} ms "
        f"after each operation, every operation under `pymongo.timeout({plan.deadline_s:g})`, "
        f"{plan.seconds:g} s per run. The embedded server runs in its own process (real TCP). "
        f"Hot router: a sharded deployment with {plan.routers} mongos, mongos 0 admitting "
        f"{plan.hot_rate}/s and the others {plan.room_rate:,}/s, {plan.read_fraction:.0%} "
        "find_one by _id and the rest insert_one. Hot secondary: a "
        f"{plan.members}-member replica set, reads only with `secondaryPreferred`, secondary 1 "
        f"admitting {plan.hot_rate}/s and the other members {plan.room_rate:,}/s. Limiter bursts "
        f"{plan.burst_seconds:g} s. The queueing shapes run the 9.0 profile with a request queue "
        f"of {plan.queue_depth} (`ingressRequestAdmissionMaxQueueDepth`) on every member. "
        "The arms ran one after another on the same deployment, the default's row first; "
        "stock pymongo is a plain `pymongo.MongoClient`.",
        "",
        "Errors: operations that raised (open loop: and arrivals no thread was free to send "
        "before their deadline). Attempts/op: find and insert commands the servers received "
        "(their own counters) per operation. p50/p99: successful operations. First attempts to "
        "the hot server: each operation's first started command, by its server (command "
        "monitoring in every process). Physical limit: a run of the same shape with no server "
        "limited (stock pymongo): a perfect chooser sends the hot server no more than its "
        "capacity, so its successes can at best be that run's, its latency the quiet path's, its "
        "errors 0 and its attempts/op 1; its share of the hot server at most the hot server's "
        "capacity (and burst) over that run's operations.",
        "",
        "## Summary",
        "",
        hotspot_section(data).rstrip("\n"),
        "",
    ]
    oracle = data.get("cool_oracle", {})
    for shape in shapes:
        mine = [r for r in rows if r.shape == shape]
        lines += [f"## {TITLES[shape]}", ""]
        if shape == COOL:
            lines += [
                f"{plan.routers} mongos admitting {plan.cool_rate}/s each; an open loop of "
                f"{plan.cool_demand:g} arrivals/s, evenly spaced and spread over the processes "
                f"({plan.cool_threads} threads each), {plan.read_fraction:.0%} find_one; mongos 0 "
                f"admits {plan.hot_rate}/s for the first {plan.cool_hot_s:g} s, then "
                f"{plan.cool_rate}/s again, and the load runs {plan.cool_after_s:g} s more. "
                "Successes by the second they completed in. Physical limit: the oracle's "
                "admissions of each window's arrivals, each window from full buckets.",
                "",
                *_cool_table(mine, plan, oracle),
            ]
        elif shape.startswith("rollout"):
            lines += [
                f"{TITLES[_base(shape)]}, half the processes on stock pymongo and half on the "
                "default, in one run; each half's row, then the all-stock run of the same shape "
                "(its stock row above). Attempts/op of a half: the commands its clients started "
                "(command monitoring), as the servers' counters cannot tell the halves apart.",
                "",
                *_rollout_table(mine),
            ]
        else:
            if "queue" in shape:
                lines += [
                    f"{TITLES[_base(shape)]} with every member queueing up to "
                    f"{plan.queue_depth} requests before it rejects (9.0 profile); physical "
                    "limit: the rejecting shape's run with no server limited.",
                    "",
                ]
            lines += _hot_table(mine, shape, plan, rows)
        verdicts = judge(rows, shape, plan)
        lines += [
            "",
            "Goals of the default: "
            + "; ".join(f"{goal}: {_verdict(met)}" for goal, met in verdicts.items())
            + ".",
            "",
        ]
    kinds = [
        f"{TITLES[r.shape].lower()}, {arm_label(r.arm)}: "
        + ", ".join(f"{name} {n:,}" for name, n in r.error_kinds.items())
        for r in rows
        if r.error_kinds and r.kind in ("run", "half")
    ]
    lines += ["Errors by kind: " + ("; ".join(kinds) if kinds else "none") + ".", ""]
    if chart:
        lines += [f"![successes per second, every shape and arm]({chart})", ""]
    return "\n".join(lines)


def hotspot_report(
    rows: Sequence[Row],
    plan: HotspotPlan,
    info: dict[str, Any],
    load: Sequence[float],
    wall_s: float,
    commit: str,
    chart: Optional[str] = None,
) -> dict[str, Any]:
    """The raw data of one invocation, as written to JSON."""
    return {
        "machine": info,
        "load_average": [round(x, 2) for x in load],
        "wall_s": round(wall_s, 1),
        "commit": commit,
        "plan": asdict(plan),
        "cool_oracle": cool_oracle(plan) if any(r.shape == COOL for r in rows) else {},
        "chart": chart,
        "rows": [row.to_dict() for row in rows],
    }


# -- the chart --------------------------------------------------------------------------------

CHART_SHAPES = (ROUTER, SECONDARY, COOL, ROUTER_QUEUE, SECONDARY_QUEUE)


def render_chart(data: dict[str, Any], path: Path) -> None:
    """Successes per half second of every arm in each shape, and the share of first
    attempts that went to the hot server, in one PNG."""
    from backpressure.core.extras import require

    matplotlib = require("matplotlib", "demo", "The hotspot chart")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan = HotspotPlan(**data["plan"])
    rows = _ordered([Row.from_dict(r) for r in data["rows"]])
    shapes = [s for s in CHART_SHAPES if any(r.shape == s for r in rows)]
    names = default_first(list(dict.fromkeys(r.arm for r in rows if r.kind == "run")))
    colours = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(names)}
    panels = len(shapes) + 1
    columns = 2
    figure, axes = plt.subplots(
        math.ceil(panels / columns), columns, figsize=(12, 3.2 * math.ceil(panels / columns))
    )
    flat = list(axes.flat)
    step = 0.5
    per = round(step / plan.bin_s)
    for ax, shape in zip(flat, shapes):
        for row in (r for r in rows if r.shape == shape):
            bins = row.success_bins
            horizon = plan.cool_hot_s + plan.cool_after_s if shape == COOL else plan.seconds
            count = int(horizon / step)
            values = [sum(bins[i * per : (i + 1) * per]) / step for i in range(count)]
            times = [(i + 0.5) * step for i in range(count)]
            if row.kind == QUIET:
                ax.plot(times, values, color="0.5", linestyle="--", label="no server limited")
            else:
                ax.plot(times, values, color=colours[row.arm], label=arm_label(row.arm))
        if shape == COOL:
            ax.axhline(plan.cool_demand, color="0.5", linestyle=":", linewidth=1)
            ax.axvspan(0, plan.cool_hot_s, color="0.92", zorder=0)
            ax.annotate(
                f"mongos 0 at {plan.hot_rate}/s; dotted: the demand",
                (0.2, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(0, -12),
                textcoords="offset points",
                fontsize=8,
                color="0.35",
            )
        ax.set_title(TITLES[shape], fontsize=10)
        ax.set_ylabel("successes/s")
        ax.set_xlabel("seconds")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    bar_ax = flat[len(shapes)]
    bar_shapes = [s for s in shapes if s != COOL]
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        shares = []
        for shape in bar_shapes:
            found = _find(rows, shape, name)
            shares.append(100 * found.hot_first_share if found is not None else 0.0)
        positions = [j + (i - (len(names) - 1) / 2) * width for j in range(len(bar_shapes))]
        bar_ax.bar(positions, shares, width, color=colours[name], label=arm_label(name))
    bar_ax.set_xticks(range(len(bar_shapes)))
    bar_ax.set_xticklabels(
        [TITLES[s].replace(", the server", "\n") for s in bar_shapes], fontsize=8
    )
    bar_ax.set_ylabel("% of first attempts")
    bar_ax.set_title("First attempts to the hot server", fontsize=10)
    bar_ax.grid(alpha=0.3, axis="y")
    for ax in flat[panels:]:
        ax.set_visible(False)
    handles, labels = flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    figure.suptitle("Hotspot: successes per second with one hot server (real processes)")
    figure.tight_layout(rect=(0, 0.04, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


# -- the command line -------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser."""
    plan = HotspotPlan()
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.bench.hotspot",
        description="One server of several pushes back: every arm, real processes.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="seconds per run: 2 processes x 2 threads (tests)"
    )
    parser.add_argument(
        "--shapes", type=name_list(SHAPES), default=",".join(SHAPES), help="comma-separated"
    )
    parser.add_argument(
        "--arms",
        type=name_list(ARMS),
        default=",".join(HOTSPOT_ARMS),
        help="comma-separated arms (the default's rows come first)",
    )
    parser.add_argument("--processes", type=positive_int, default=plan.processes)
    parser.add_argument("--threads", type=positive_int, default=plan.threads)
    parser.add_argument("--think-ms", type=non_negative_float, default=plan.think_s * 1000)
    parser.add_argument("--deadline", type=positive_float, default=plan.deadline_s, help="s")
    parser.add_argument("--seconds", type=positive_float, default=plan.seconds, help="per run")
    parser.add_argument("--hot-rate", type=positive_int, default=plan.hot_rate, help="ops/s")
    parser.add_argument("--room-rate", type=positive_int, default=plan.room_rate, help="ops/s")
    parser.add_argument("--read-fraction", type=bounded_float(0.0, 1.0), default=plan.read_fraction)
    parser.add_argument("--burst-seconds", type=positive_float, default=plan.burst_seconds)
    parser.add_argument("--queue-depth", type=non_negative_int, default=plan.queue_depth)
    parser.add_argument("--cool-rate", type=positive_int, default=plan.cool_rate, help="ops/s")
    parser.add_argument("--cool-demand", type=positive_float, default=plan.cool_demand)
    parser.add_argument("--cool-hot-seconds", type=positive_float, default=plan.cool_hot_s)
    parser.add_argument("--cool-after-seconds", type=positive_float, default=plan.cool_after_s)
    parser.add_argument("--cool-threads", type=positive_int, default=plan.cool_threads)
    parser.add_argument(
        "--out",
        type=Path,
        metavar="PATH",
        help="write PATH.json, PATH.md and PATH.png (e.g. bench/results/hotspot)",
    )
    parser.add_argument(
        "--section",
        type=Path,
        metavar="JSON",
        help="print the summary table of a results file and exit (nothing runs)",
    )
    return parser


def plan_from_args(args: argparse.Namespace) -> HotspotPlan:
    """The plan of the command line (``--quick``: :data:`QUICK_HOTSPOT`)."""
    if args.quick:
        return QUICK_HOTSPOT
    return HotspotPlan(
        processes=args.processes,
        threads=args.threads,
        think_s=args.think_ms / 1000.0,
        deadline_s=args.deadline,
        seconds=args.seconds,
        hot_rate=args.hot_rate,
        room_rate=args.room_rate,
        read_fraction=args.read_fraction,
        burst_seconds=args.burst_seconds,
        queue_depth=args.queue_depth,
        cool_rate=args.cool_rate,
        cool_demand=args.cool_demand,
        cool_hot_s=args.cool_hot_seconds,
        cool_after_s=args.cool_after_seconds,
        cool_threads=args.cool_threads,
    )


@contextmanager
def _timed() -> Iterator[list[float]]:
    """The 1-minute load average before and after, and the wall time, appended on exit."""
    load = [os.getloadavg()[0]]
    started = time.monotonic()
    yield load
    load.append(os.getloadavg()[0])
    load.append(time.monotonic() - started)


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv``, run the shapes, publish the page."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.section is not None:
        sys.stdout.write(hotspot_section(json.loads(args.section.read_text(encoding="utf-8"))))
        return 0
    try:
        plan = plan_from_args(args)
        arms = hotspot_arms(args.arms)
    except ValueError as exc:
        parser.error(str(exc))
    info, commit = machine_info(), code_revision()

    def progress(text: str) -> None:
        print(f"hotspot {text} ...", file=sys.stderr, flush=True)

    with _timed() as measured:
        rows = run_hotspot(plan, args.shapes, arms, progress=progress)
    load, wall_s = measured[:2], measured[2]
    chart = None if args.out is None else args.out.with_suffix(".png")
    data = hotspot_report(
        rows, plan, info, load, wall_s, commit, chart.name if chart is not None else None
    )
    text = render_hotspot_report(data)
    sys.stdout.write(text)
    if args.out is not None and chart is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(
            json.dumps(data, indent=1) + "\n", encoding="utf-8"
        )
        args.out.with_suffix(".md").write_text(text, encoding="utf-8")
        render_chart(data, chart)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.bench.hotspot``: 0, or 2 on a usage error."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
