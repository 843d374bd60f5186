"""An open-loop load generator: paced arrivals served by a pool of threads, per-second timelines.

Theory of operation: the phases are turned into one schedule of arrival times (evenly spaced at
``load * capacity`` arrivals per second inside each phase) and a seeded mix of operations.  Worker
threads take the next arrival from the shared schedule, sleep until its time and run it through the
policy's ``call``.  An arrival that is more than ``max_lag`` seconds overdue when a worker reaches
it (every worker was busy, e.g. sleeping in backoff) is counted as *skipped*, never run late, so
the offered load stays what the phases say.  Attempts are counted twice: on the client by a command
listener (for the per-second timeline) and on the server by its per-command ``received`` counters
(for the totals: load amplification = received workload commands / successful operations).
"""

from __future__ import annotations

import functools
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Protocol

from pymongo import monitoring
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from backpressure.workload.metrics import (
    amplification,
    bucket_counts,
    percentile,
    rate_per_second,
)
from backpressure.workload.policies import ClientPolicy, Document, PolicyClient

__all__ = [
    "WORKLOAD_COMMANDS",
    "LoadTarget",
    "Phase",
    "PhaseResult",
    "RunResult",
    "WorkloadConfig",
    "received_commands",
    "run_policy",
]

WORKLOAD_COMMANDS: tuple[str, ...] = ("find", "insert", "update")
"""The commands the workload sends (hello, monitoring and admin commands are not counted)."""

Clock = Callable[[], float]


class LoadTarget(Protocol):
    """The parts of ``backpressure.testing.EmbeddedServer`` the workload uses."""

    @property
    def uri(self) -> str:
        """Connection string of the deployment."""
        ...

    def set_rate_limit(self, rate: float, burst_seconds: float = 1.0) -> None:
        """Switch the ingress request rate limiter on at ``rate`` ops/s."""
        ...

    def disable_rate_limit(self) -> None:
        """Switch the ingress request rate limiter off."""
        ...

    def stats(self, member: Any = None, reset: bool = False) -> dict[str, Any]:
        """Per-command counters (``{"commands": {name: {"received": n, ...}}}``)."""
        ...

    def reset(self) -> None:
        """Data, fail points, limiters and statistics back to the start."""
        ...


@dataclass(frozen=True)
class Phase:
    """A stretch of constant offered load, as a multiple of the server's capacity."""

    name: str
    load: float
    duration: float

    def __post_init__(self) -> None:
        """Validate load and duration."""
        if not (self.load >= 0 and math.isfinite(self.load)):
            raise ValueError(f"phase {self.name!r}: load must be a finite number >= 0")
        if not (self.duration > 0 and math.isfinite(self.duration)):
            raise ValueError(f"phase {self.name!r}: duration must be a finite number > 0")


@dataclass(frozen=True)
class WorkloadConfig:
    """Everything about the load except the phases and the policy."""

    capacity: float = 200.0
    """Server ingress request rate limit C, in ops/s."""
    burst_seconds: float = 1.0
    """The limiter's burst capacity, in seconds of ``capacity``."""
    threads: int = 128
    """Worker threads serving the arrivals."""
    read_fraction: float = 0.5
    """Share of find_one by _id; the rest is split evenly between update_one and insert_one."""
    keys: int = 200
    """Documents preloaded for reads and updates."""
    max_lag: float = 1.0
    """An arrival this many seconds overdue is skipped (counted, not run)."""
    drain_timeout: float = 15.0
    """How long to wait for operations still running after the last arrival."""
    bucket_width: float = 1.0
    """Timeline resolution, in seconds."""
    seed: int = 1
    """Seed of the operation mix."""
    database: str = "backpressure_workload"
    """Database of the workload collection."""
    collection: str = "orders"
    """The workload collection."""

    def __post_init__(self) -> None:
        """Validate the numbers."""
        if not self.capacity > 0:
            raise ValueError(f"WorkloadConfig.capacity must be > 0, got {self.capacity!r}")
        if self.threads < 1:
            raise ValueError(f"WorkloadConfig.threads must be >= 1, got {self.threads!r}")
        if not 0.0 <= self.read_fraction <= 1.0:
            raise ValueError(
                f"WorkloadConfig.read_fraction must be in 0..1, got {self.read_fraction!r}"
            )
        if self.keys < 1:
            raise ValueError(f"WorkloadConfig.keys must be >= 1, got {self.keys!r}")


@dataclass(frozen=True)
class PhaseResult:
    """What happened inside one phase's time window."""

    name: str
    load: float
    start: float
    """Seconds from the start of the run."""
    duration: float
    offered: int
    """Arrivals scheduled in the phase."""
    issued: int
    """Arrivals of the phase actually run (offered - skipped)."""
    skipped: int
    """Arrivals of the phase not run because every worker was busy for > max_lag."""
    succeeded: int
    """Arrivals of the phase that succeeded (whenever they finished)."""
    failed: int
    """Arrivals of the phase whose operation raised (whenever they finished)."""
    completed_ok: int
    """Operations that succeeded inside the phase's time window (any arrival)."""
    goodput: float
    """completed_ok per second."""
    latency_p50_ms: Optional[float]
    """Median latency of the phase's successful arrivals."""
    latency_p99_ms: Optional[float]
    """99th percentile latency of the phase's successful arrivals."""


@dataclass(frozen=True)
class RunResult:
    """One policy's run of the phases: totals, per-phase results and a per-second timeline."""

    policy: str
    description: str
    integration: str
    capacity: float
    duration: float
    """Wall time from the first arrival until the last operation finished."""
    offered: int
    issued: int
    skipped: int
    successes: int
    errors: int
    error_types: dict[str, int]
    server_received: int
    """Workload commands the server received (rejected ones included)."""
    server_rejected: int
    """Workload commands the server's rate limiter rejected."""
    client_attempts: int
    """Workload commands the client started (command monitoring)."""
    amplification: Optional[float]
    """server_received / successes."""
    attempts_per_issued: Optional[float]
    """server_received / issued: extra load added by retries."""
    goodput: float
    """Successes per second over the phases."""
    latency_p50_ms: Optional[float]
    latency_p99_ms: Optional[float]
    refused: Optional[int]
    """Retries refused by the retry budget (None without a budget)."""
    phases: list[PhaseResult]
    timeline: dict[str, list[Any]] = field(default_factory=dict)

    def phase(self, name: str) -> PhaseResult:
        """Return the result of the phase called ``name``."""
        for result in self.phases:
            if result.name == name:
                return result
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """Render as JSON-ready data."""
        return asdict(self)


class _AttemptCounter(monitoring.CommandListener):
    """Records the start time of every workload command (one per attempt)."""

    def __init__(self, clock: Clock) -> None:
        """Start with no attempts."""
        self._clock = clock
        self.times: list[float] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Record a workload command's start."""
        if event.command_name in WORKLOAD_COMMANDS:
            self.times.append(self._clock())

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Ignore."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Ignore."""


def received_commands(stats: dict[str, Any], commands: Sequence[str] = WORKLOAD_COMMANDS) -> int:
    """Sum the server's ``received`` counters of ``commands``."""
    return _sum_counter(stats, commands, "received")


def _sum_counter(stats: dict[str, Any], commands: Sequence[str], key: str) -> int:
    """Sum one per-command counter over ``commands``."""
    per_command = stats.get("commands", {})
    return sum(int(per_command.get(name, {}).get(key, 0)) for name in commands)


def _schedule(phases: Sequence[Phase], capacity: float) -> tuple[list[float], list[int]]:
    """Return arrival offsets (seconds from the start) and each arrival's phase index."""
    times: list[float] = []
    owners: list[int] = []
    start = 0.0
    for index, phase in enumerate(phases):
        rate = phase.load * capacity
        count = round(rate * phase.duration)
        times.extend(start + (j + 0.5) / rate for j in range(count))
        owners.extend([index] * count)
        start += phase.duration
    return times, owners


_READ, _UPDATE, _INSERT = 0, 1, 2


def _operations(count: int, config: WorkloadConfig) -> list[tuple[int, int]]:
    """Return a seeded mix of (kind, key) pairs."""
    rng = random.Random(config.seed)
    ops: list[tuple[int, int]] = []
    for index in range(count):
        draw = rng.random()
        if draw < config.read_fraction:
            ops.append((_READ, rng.randrange(config.keys)))
        elif draw < config.read_fraction + (1.0 - config.read_fraction) / 2:
            ops.append((_UPDATE, rng.randrange(config.keys)))
        else:
            ops.append((_INSERT, config.keys + index))
    return ops


def _run_one(collection: Collection[Document], kind: int, key: int) -> None:
    """Run one workload operation."""
    if kind == _READ:
        collection.find_one({"_id": key})
    elif kind == _UPDATE:
        collection.update_one({"_id": key}, {"$inc": {"n": 1}})
    else:
        collection.insert_one({"_id": key, "n": 0})


def _prepare(client: PolicyClient, config: WorkloadConfig) -> Collection[Document]:
    """Drop and preload the workload collection (call with the limiter off)."""
    collection: Collection[Document] = client.client[config.database][config.collection]
    collection.drop()
    collection.insert_many([{"_id": key, "n": 0} for key in range(config.keys)])
    return collection


def run_policy(
    target: LoadTarget,
    policy: ClientPolicy,
    phases: Sequence[Phase],
    config: WorkloadConfig,
    *,
    progress: Optional[Callable[[float], None]] = None,
    clock: Clock = time.perf_counter,
) -> RunResult:
    """Run ``phases`` against ``target`` with ``policy`` and measure it.

    The server is reset first (data, limiters, counters), the collection preloaded with the
    limiter off, then the limiter set to ``config.capacity`` and the counters zeroed.

    ``progress(seconds)`` is called from this thread as the run advances (for a progress bar).
    """
    if not phases:
        raise ValueError("at least one phase is needed")
    counter = _AttemptCounter(clock)
    target.reset()
    target.disable_rate_limit()
    client = policy.open(target.uri, event_listeners=[counter])
    try:
        collection = _prepare(client, config)
        target.set_rate_limit(config.capacity, burst_seconds=config.burst_seconds)
        target.stats(reset=True)
        counter.times.clear()
        result = _drive(client, collection, policy, phases, config, counter, progress, clock)
        stats = target.stats()
        refused = client.refused()
    finally:
        client.close()
        target.disable_rate_limit()
    return _summarize(result, policy, phases, config, counter, stats, refused)


@dataclass
class _Raw:
    """Raw measurements of one run."""

    t0: float
    end: float
    times: list[float]
    owners: list[int]
    records: list[tuple[int, float, float, bool, str]]
    skipped: list[int]


def _drive(
    client: PolicyClient,
    collection: Collection[Document],
    policy: ClientPolicy,
    phases: Sequence[Phase],
    config: WorkloadConfig,
    counter: _AttemptCounter,
    progress: Optional[Callable[[float], None]],
    clock: Clock,
) -> _Raw:
    """Serve the schedule from ``config.threads`` workers and collect raw records."""
    times, owners = _schedule(phases, config.capacity)
    ops = _operations(len(times), config)
    lock = threading.Lock()
    cursor = [0]
    records: list[tuple[int, float, float, bool, str]] = []
    skipped = [0] * len(phases)
    t0 = clock() + 0.05

    def worker() -> None:
        while True:
            with lock:
                index = cursor[0]
                cursor[0] += 1
            if index >= len(times):
                return
            due = t0 + times[index]
            wait = due - clock()
            if wait > 0:
                time.sleep(wait)
            elif -wait > config.max_lag:
                with lock:
                    skipped[owners[index]] += 1
                continue
            kind, key = ops[index]
            start = clock()
            try:
                client.call(functools.partial(_run_one, collection, kind, key))
            except PyMongoError as exc:
                records.append((index, start, clock(), False, type(exc).__name__))
            else:
                records.append((index, start, clock(), True, ""))

    workers = [
        threading.Thread(target=worker, name=f"workload-{i}", daemon=True)
        for i in range(config.threads)
    ]
    for thread in workers:
        thread.start()
    planned = sum(phase.duration for phase in phases)
    deadline = t0 + planned + config.drain_timeout
    reported = 0.0
    for thread in workers:
        while thread.is_alive() and clock() < deadline:
            thread.join(0.2)
            if progress is not None:
                elapsed = min(planned, max(0.0, clock() - t0))
                if elapsed > reported:
                    progress(elapsed - reported)
                    reported = elapsed
    with lock:  # workers still running past the drain timeout take no further arrival
        cursor[0] = len(times)
    if progress is not None and planned > reported:
        progress(planned - reported)
    end = max([clock(), *(r[2] for r in records)]) if records else clock()
    return _Raw(t0, end, times, owners, list(records), skipped)


def _summarize(
    raw: _Raw,
    policy: ClientPolicy,
    phases: Sequence[Phase],
    config: WorkloadConfig,
    counter: _AttemptCounter,
    stats: dict[str, Any],
    refused: Optional[int],
) -> RunResult:
    """Turn raw records and server counters into a RunResult."""
    t0 = raw.t0
    planned = sum(phase.duration for phase in phases)
    successes = [r for r in raw.records if r[3]]
    failures = [r for r in raw.records if not r[3]]
    latencies = [(r[2] - r[1]) * 1000.0 for r in successes]
    received = received_commands(stats)
    issued = len(raw.records)

    phase_results: list[PhaseResult] = []
    start = 0.0
    for index, phase in enumerate(phases):
        lo, hi = t0 + start, t0 + start + phase.duration
        mine_ok = [r for r in successes if raw.owners[r[0]] == index]
        mine_failed = sum(1 for r in failures if raw.owners[r[0]] == index)
        completed = sum(1 for r in successes if lo <= r[2] < hi)
        offered = sum(1 for owner in raw.owners if owner == index)
        phase_lat = [(r[2] - r[1]) * 1000.0 for r in mine_ok]
        phase_results.append(
            PhaseResult(
                name=phase.name,
                load=phase.load,
                start=start,
                duration=phase.duration,
                offered=offered,
                issued=offered - raw.skipped[index],
                skipped=raw.skipped[index],
                succeeded=len(mine_ok),
                failed=mine_failed,
                completed_ok=completed,
                goodput=rate_per_second(completed, phase.duration),
                latency_p50_ms=percentile(phase_lat, 50),
                latency_p99_ms=percentile(phase_lat, 99),
            )
        )
        start += phase.duration

    width = config.bucket_width
    buckets = max(1, math.ceil((raw.end - t0) / width))
    ok_per = bucket_counts((r[2] for r in successes), t0, width, buckets)
    attempts_per = bucket_counts(counter.times, t0, width, buckets)
    timeline: dict[str, list[Any]] = {
        "t": [round(i * width, 6) for i in range(buckets)],
        "offered": bucket_counts((t0 + t for t in raw.times), t0, width, buckets),
        "issued": bucket_counts((r[1] for r in raw.records), t0, width, buckets),
        "successes": ok_per,
        "errors": bucket_counts((r[2] for r in failures), t0, width, buckets),
        "attempts": attempts_per,
        "amplification": [amplification(a, s) for a, s in zip(attempts_per, ok_per)],
    }
    return RunResult(
        policy=policy.name,
        description=policy.description,
        integration=policy.integration(),
        capacity=config.capacity,
        duration=raw.end - t0,
        offered=len(raw.times),
        issued=issued,
        skipped=sum(raw.skipped),
        successes=len(successes),
        errors=len(failures),
        error_types=dict(Counter(r[4] for r in failures)),
        server_received=received,
        server_rejected=_sum_counter(stats, WORKLOAD_COMMANDS, "rejected"),
        client_attempts=len(counter.times),
        amplification=amplification(received, len(successes)),
        attempts_per_issued=amplification(received, issued),
        goodput=rate_per_second(sum(p.completed_ok for p in phase_results), planned),
        latency_p50_ms=percentile(latencies, 50),
        latency_p99_ms=percentile(latencies, 99),
        refused=refused,
        phases=phase_results,
        timeline=timeline,
    )
