"""The load generator: open-loop arrivals or a closed loop of workers, per-second timelines.

Theory of operation.  Every operation has an *arrival* instant and an *allowed wait*
(``WorkloadConfig.allowed_wait``): the application gives up on it at ``arrival + allowed_wait``.
It runs under ``pymongo.timeout`` with the time that remains (a CSOT deadline every arm
sees), and the arrival log (arrival instant and allowed wait of every operation, on the clock of
the server's limiter) is kept so the physical-limit oracle can be run on exactly these arrivals.

* **Open loop** (:func:`run_arm`): the phases are turned into one schedule of arrival times
  (evenly spaced at ``load * capacity`` per second inside each phase) and a seeded operation mix.
  Worker threads take the next arrival, sleep until it is due and run it.  An arrival whose
  deadline has passed before a worker reaches it (every worker was busy) is *skipped*: never sent,
  counted as an app error, never run late, so the offered load stays what the phases say.
* **Closed loop** (:func:`run_closed_loop`): ``workers`` threads each run operations back to back
  for ``duration`` seconds, as a web application's thread pool does; an operation arrives when
  its worker issues it.

Attempts are counted three ways: by the server's per-command ``received`` counters (the totals:
attempts per operation), by a command listener on the client (the per-second timeline, and per
operation, so an operation that failed without sending anything is counted as refused locally),
and, where the arm reports them, by its local-wait and local-refusal events.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Protocol

import pymongo
from pymongo import monitoring
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from backpressure.workload.arms import ArmClient, ClientArm, Document, to_file
from backpressure.workload.metrics import (
    amplification,
    bucket_counts,
    percentile,
    rate_per_second,
)

__all__ = [
    "WORKLOAD_COMMANDS",
    "LoadTarget",
    "LocalEventCounter",
    "Phase",
    "PhaseResult",
    "Record",
    "RunResult",
    "WorkloadConfig",
    "received_commands",
    "run_arm",
    "run_closed_loop",
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

    def set_rate_limit(
        self, rate: float, burst_seconds: float = 1.0, *, member: Any = None
    ) -> None:
        """Switch the ingress request rate limiter on at ``rate`` ops/s (one member or all)."""
        ...

    def disable_rate_limit(self, member: Any = None) -> None:
        """Switch the ingress request rate limiter off (one member or all)."""
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
    """Everything about the load except the phases and the arm."""

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
    allowed_wait: float = 1.0
    """Seconds an operation may take from its arrival: its CSOT deadline (``pymongo.timeout``)."""
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
        if not (self.allowed_wait > 0 and math.isfinite(self.allowed_wait)):
            raise ValueError(
                "WorkloadConfig.allowed_wait must be a finite number > 0, "
                f"got {self.allowed_wait!r}"
            )


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
    """Arrivals of the phase never sent: their deadline passed before a worker was free."""
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
    """One arm's run: totals, per-phase results, a per-second timeline and the arrival log."""

    arm: str
    description: str
    integration: str
    capacity: float
    duration: float
    """Wall time from the first arrival until the last operation finished."""
    offered: int
    """Operations that arrived (open loop: scheduled; closed loop: issued by the workers)."""
    issued: int
    """Operations handed to the client (offered - skipped)."""
    skipped: int
    """Open loop: arrivals never handed to the client (deadline passed before a worker was free)."""
    successes: int
    errors: int
    """Operations that raised."""
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
    loop: str = "open"
    """``open`` (scheduled arrivals) or ``closed`` (workers running back to back)."""
    workers: int = 0
    """Worker threads."""
    allowed_wait: float = 0.0
    """Seconds each operation may take from its arrival (its deadline)."""
    never_sent: int = 0
    """Operations that raised without any attempt reaching the network (refused locally)."""
    local_waits: Optional[int] = None
    """Local-wait events the arm reported (None: the arm reports none)."""
    local_refusals: Optional[int] = None
    """Local-refusal events the arm reported (None: the arm reports none)."""
    arrivals: list[float] = field(default_factory=list, repr=False)
    """Arrival instant of every operation, seconds from the start (the limiter's clock)."""

    @property
    def app_errors(self) -> int:
        """Operations the application lost: raised, plus arrivals never handed to the client."""
        return self.errors + self.skipped

    def phase(self, name: str) -> PhaseResult:
        """Return the result of the phase called ``name``."""
        for result in self.phases:
            if result.name == name:
                return result
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """Render as JSON-ready data (without the arrival log, which can be long)."""
        data = asdict(self)
        del data["arrivals"]
        data["app_errors"] = self.app_errors
        return to_file(data)


class _AttemptCounter(monitoring.CommandListener):
    """Records the start time of every workload command, and counts them per operation."""

    def __init__(self, clock: Clock) -> None:
        """Start with no attempts."""
        self._clock = clock
        self._local = threading.local()
        self.times: list[float] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Record a workload command's start."""
        if event.command_name in WORKLOAD_COMMANDS:
            self.times.append(self._clock())
            self._local.sent = getattr(self._local, "sent", 0) + 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Ignore."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Ignore."""

    def begin_operation(self) -> None:
        """Start counting the attempts of an operation run on this thread."""
        self._local.sent = 0

    def sent(self) -> int:
        """Attempts started on this thread since :meth:`begin_operation`."""
        return int(getattr(self._local, "sent", 0))


class LocalEventCounter:
    """Counts the local waits and refusals an arm reports to its listeners.

    Passed to this package's clients (the arms of kind ``ours``) as a listener; an arm that
    holds operations locally calls ``waited(event)`` and ``refused(event)``, the retry events
    are ignored here.
    """

    def __init__(self) -> None:
        """Start at zero."""
        self._lock = threading.Lock()
        self.waits = 0
        self.refusals = 0
        self.reported = False

    def waited(self, event: Any) -> None:
        """Count one local wait."""
        with self._lock:
            self.waits += 1
            self.reported = True

    def refused(self, event: Any) -> None:
        """Count one local refusal."""
        with self._lock:
            self.refusals += 1
            self.reported = True

    def retried(self, event: Any) -> None:
        """Ignore retries (the server counters count attempts)."""

    def gave_up(self, event: Any) -> None:
        """Ignore give-ups (the driver counts errors)."""


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


def _draw(rng: random.Random, config: WorkloadConfig, index: int) -> tuple[int, int]:
    """Draw one (kind, key) of the operation mix; ``index`` makes inserted keys unique."""
    draw = rng.random()
    if draw < config.read_fraction:
        return (_READ, rng.randrange(config.keys))
    if draw < config.read_fraction + (1.0 - config.read_fraction) / 2:
        return (_UPDATE, rng.randrange(config.keys))
    return (_INSERT, config.keys + index)


def _operations(count: int, config: WorkloadConfig) -> list[tuple[int, int]]:
    """Return a seeded mix of (kind, key) pairs."""
    rng = random.Random(config.seed)
    return [_draw(rng, config, index) for index in range(count)]


def _run_one(collection: Collection[Document], kind: int, key: int) -> None:
    """Run one workload operation."""
    if kind == _READ:
        collection.find_one({"_id": key})
    elif kind == _UPDATE:
        collection.update_one({"_id": key}, {"$inc": {"n": 1}})
    else:
        collection.insert_one({"_id": key, "n": 0})


def _prepare(client: ArmClient, config: WorkloadConfig) -> Collection[Document]:
    """Drop and preload the workload collection (call with the limiter off)."""
    collection: Collection[Document] = client.client[config.database][config.collection]
    collection.drop()
    collection.insert_many([{"_id": key, "n": 0} for key in range(config.keys)])
    return collection


Record = tuple[int, float, float, float, bool, str, int]
"""(operation index, arrival, start, end, succeeded, error class name, attempts sent)."""


@dataclass
class _Raw:
    """Raw measurements of one run."""

    t0: float
    end: float
    planned: float
    """Seconds of load planned (the phases)."""
    times: list[float]
    """Arrival offsets of every operation (open loop: scheduled, skipped ones included)."""
    owners: list[int]
    """Phase index of every operation."""
    records: list[Record]
    skipped: list[int]
    """Skipped arrivals per phase."""
    skipped_times: list[float]
    """Due instants (absolute) of the skipped arrivals."""


def _attempt(
    client: ArmClient,
    collection: Collection[Document],
    counter: _AttemptCounter,
    kind: int,
    key: int,
    remaining: float,
) -> tuple[bool, str, int]:
    """Run one operation with ``remaining`` seconds of CSOT; return (ok, error name, sent)."""
    counter.begin_operation()
    try:
        with pymongo.timeout(remaining):
            client.call(functools.partial(_run_one, collection, kind, key))
    except PyMongoError as exc:
        return False, type(exc).__name__, counter.sent()
    return True, "", counter.sent()


class _Scenario:
    """One run's setup: open the client, preload, limit the server, then measure."""

    def __init__(
        self,
        target: LoadTarget,
        arm: ClientArm,
        config: WorkloadConfig,
        clock: Clock,
        client_options: dict[str, Any],
        limited_member: Optional[int],
    ) -> None:
        """Remember the setup."""
        self.target = target
        self.arm = arm
        self.config = config
        self.clock = clock
        self.client_options = client_options
        self.limited_member = limited_member

    def run(
        self, drive: Callable[[ArmClient, Collection[Document], _AttemptCounter], _Raw]
    ) -> tuple[_Raw, dict[str, Any], Optional[int], _AttemptCounter, LocalEventCounter]:
        """Reset the server, preload, set the limiter, zero the counters and call ``drive``."""
        counter = _AttemptCounter(self.clock)
        events = LocalEventCounter()
        self.target.reset()
        self.target.disable_rate_limit()
        client = self.arm.open(
            self.target.uri,
            event_listeners=[counter],
            local_listener=events,
            **self.client_options,
        )
        try:
            collection = _prepare(client, self.config)
            if self.limited_member is None:
                self.target.set_rate_limit(
                    self.config.capacity, burst_seconds=self.config.burst_seconds
                )
            else:
                self.target.set_rate_limit(
                    self.config.capacity,
                    burst_seconds=self.config.burst_seconds,
                    member=self.limited_member,
                )
            self.target.stats(reset=True)
            counter.times.clear()
            raw = drive(client, collection, counter)
            stats = self.target.stats()
            refused = client.refused()
        finally:
            client.close()
            self.target.disable_rate_limit()
        return raw, stats, refused, counter, events


def run_arm(
    target: LoadTarget,
    arm: ClientArm,
    phases: Sequence[Phase],
    config: WorkloadConfig,
    *,
    progress: Optional[Callable[[float], None]] = None,
    clock: Clock = time.perf_counter,
) -> RunResult:
    """Run the open-loop ``phases`` against ``target`` with ``arm`` and measure it.

    The server is reset first (data, limiters, counters), the collection preloaded with the
    limiter off, then the limiter set to ``config.capacity`` and the counters zeroed.

    ``progress(seconds)`` is called from this thread as the run advances (for a progress bar).
    """
    if not phases:
        raise ValueError("at least one phase is needed")
    scenario = _Scenario(target, arm, config, clock, {}, None)

    def drive(
        client: ArmClient, collection: Collection[Document], counter: _AttemptCounter
    ) -> _Raw:
        return _drive_open(client, collection, phases, config, counter, progress, clock)

    raw, stats, refused, counter, events = scenario.run(drive)
    return _summarize(raw, arm, phases, config, counter, stats, refused, events, "open")


def run_closed_loop(
    target: LoadTarget,
    arm: ClientArm,
    workers: int,
    duration: float,
    config: WorkloadConfig,
    *,
    read_preference: Optional[str] = None,
    limited_member: Optional[int] = None,
    progress: Optional[Callable[[float], None]] = None,
    clock: Clock = time.perf_counter,
) -> RunResult:
    """Run ``workers`` threads issuing operations back to back for ``duration`` seconds.

    ``read_preference`` (a pymongo mode name such as ``"secondary"``) goes to the client;
    ``limited_member`` limits only that member (index) of the deployment, the others are not.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers!r}")
    if not (duration > 0 and math.isfinite(duration)):
        raise ValueError(f"duration must be a finite number > 0, got {duration!r}")
    options: dict[str, Any] = {"maxPoolSize": workers + 10}
    if read_preference is not None:
        options["readPreference"] = read_preference
    scenario = _Scenario(target, arm, config, clock, options, limited_member)

    def drive(
        client: ArmClient, collection: Collection[Document], counter: _AttemptCounter
    ) -> _Raw:
        return _drive_closed(
            client, collection, workers, duration, config, counter, progress, clock
        )

    raw, stats, refused, counter, events = scenario.run(drive)
    phases = [Phase("closed", 0.0, duration)]
    result = _summarize(raw, arm, phases, config, counter, stats, refused, events, "closed")
    return dataclasses.replace(result, workers=workers)


def _join(
    workers: Sequence[threading.Thread],
    t0: float,
    planned: float,
    deadline: float,
    progress: Optional[Callable[[float], None]],
    clock: Clock,
) -> None:
    """Wait for the workers until ``deadline``, reporting progress in seconds of load."""
    reported = 0.0
    for thread in workers:
        while thread.is_alive() and clock() < deadline:
            thread.join(0.2)
            if progress is not None:
                elapsed = min(planned, max(0.0, clock() - t0))
                if elapsed > reported:
                    progress(elapsed - reported)
                    reported = elapsed
    if progress is not None and planned > reported:
        progress(planned - reported)


def _drive_open(
    client: ArmClient,
    collection: Collection[Document],
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
    records: list[Record] = []
    skipped = [0] * len(phases)
    skipped_times: list[float] = []
    t0 = clock() + 0.05
    wait_allowed = config.allowed_wait

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
            remaining = due + wait_allowed - clock()
            if remaining <= 0:
                with lock:
                    skipped[owners[index]] += 1
                    skipped_times.append(due)
                continue
            kind, key = ops[index]
            start = clock()
            ok, error, sent = _attempt(client, collection, counter, kind, key, remaining)
            records.append((index, due, start, clock(), ok, error, sent))

    threads = [
        threading.Thread(target=worker, name=f"workload-{i}", daemon=True)
        for i in range(config.threads)
    ]
    for thread in threads:
        thread.start()
    planned = sum(phase.duration for phase in phases)
    _join(threads, t0, planned, t0 + planned + config.drain_timeout, progress, clock)
    with lock:  # workers still running past the drain timeout take no further arrival
        cursor[0] = len(times)
    end = max([clock(), *(r[3] for r in records)]) if records else clock()
    return _Raw(t0, end, planned, times, owners, list(records), skipped, list(skipped_times))


def _drive_closed(
    client: ArmClient,
    collection: Collection[Document],
    workers: int,
    duration: float,
    config: WorkloadConfig,
    counter: _AttemptCounter,
    progress: Optional[Callable[[float], None]],
    clock: Clock,
) -> _Raw:
    """Run ``workers`` threads back to back until ``duration`` has passed."""
    records: list[Record] = []
    lock = threading.Lock()
    next_index = [0]
    t0 = clock() + 0.05
    stop = t0 + duration
    wait_allowed = config.allowed_wait

    def worker(number: int) -> None:
        rng = random.Random(config.seed * 100_003 + number)
        delay = t0 - clock()
        if delay > 0:
            time.sleep(delay)
        while True:
            # The arrival is stamped with its index under the lock, so the arrival log (in index
            # order) is in time order too: stamped outside, another worker could take the next
            # index between one worker's stamp and its index.
            with lock:
                arrival = clock()
                if arrival >= stop:
                    return
                index = next_index[0]
                next_index[0] += 1
            kind, key = _draw(rng, config, index)
            ok, error, sent = _attempt(client, collection, counter, kind, key, wait_allowed)
            records.append((index, arrival, arrival, clock(), ok, error, sent))

    threads = [
        threading.Thread(target=worker, args=(i,), name=f"closed-{i}", daemon=True)
        for i in range(workers)
    ]
    for thread in threads:
        thread.start()
    _join(threads, t0, duration, stop + wait_allowed + config.drain_timeout, progress, clock)
    done = sorted(records, key=lambda r: r[0])
    times = [r[1] - t0 for r in done]
    end = max([clock(), *(r[3] for r in done)]) if done else clock()
    renumbered: list[Record] = [
        (i, arrival, start, finish, ok, error, sent)
        for i, (_, arrival, start, finish, ok, error, sent) in enumerate(done)
    ]
    return _Raw(t0, end, duration, times, [0] * len(done), renumbered, [0], [])


def _weighted_counts(
    items: Iterable[tuple[float, int]], start: float, width: float, buckets: int
) -> list[int]:
    """Sum the weights of ``(time, weight)`` items per bucket (as ``bucket_counts`` places them)."""
    sums = [0] * buckets
    for t, weight in items:
        if t < start:
            continue
        sums[min(int((t - start) / width), buckets - 1)] += weight
    return sums


def _summarize(
    raw: _Raw,
    arm: ClientArm,
    phases: Sequence[Phase],
    config: WorkloadConfig,
    counter: _AttemptCounter,
    stats: dict[str, Any],
    refused: Optional[int],
    events: LocalEventCounter,
    loop: str,
) -> RunResult:
    """Turn raw records and server counters into a RunResult."""
    t0 = raw.t0
    planned = raw.planned
    successes = [r for r in raw.records if r[4]]
    failures = [r for r in raw.records if not r[4]]
    latencies = [(r[3] - r[1]) * 1000.0 for r in successes]
    received = received_commands(stats)
    issued = len(raw.records)

    phase_results: list[PhaseResult] = []
    start = 0.0
    for index, phase in enumerate(phases):
        lo, hi = t0 + start, t0 + start + phase.duration
        mine_ok = [r for r in successes if raw.owners[r[0]] == index]
        mine_failed = sum(1 for r in failures if raw.owners[r[0]] == index)
        completed = sum(1 for r in successes if lo <= r[3] < hi)
        offered = sum(1 for owner in raw.owners if owner == index)
        phase_lat = [(r[3] - r[1]) * 1000.0 for r in mine_ok]
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
    ok_per = bucket_counts((r[3] for r in successes), t0, width, buckets)
    attempts_per = bucket_counts(counter.times, t0, width, buckets)
    timeline: dict[str, list[Any]] = {
        "t": [round(i * width, 6) for i in range(buckets)],
        "offered": bucket_counts((t0 + t for t in raw.times), t0, width, buckets),
        "issued": bucket_counts((r[2] for r in raw.records), t0, width, buckets),
        "successes": ok_per,
        "errors": bucket_counts((r[3] for r in failures), t0, width, buckets),
        "skipped": bucket_counts(raw.skipped_times, t0, width, buckets),
        "never_sent": bucket_counts((r[3] for r in failures if r[6] == 0), t0, width, buckets),
        "attempts": attempts_per,
        "amplification": [amplification(a, s) for a, s in zip(attempts_per, ok_per)],
        "arrived": bucket_counts((t0 + t for t in raw.times), t0, width, buckets),
        "sent_by_arrival": _weighted_counts(
            ((r[1], r[6]) for r in raw.records), t0, width, buckets
        ),
    }
    return RunResult(
        arm=arm.name,
        description=arm.description,
        integration=arm.integration(),
        capacity=config.capacity,
        duration=raw.end - t0,
        offered=len(raw.times),
        issued=issued,
        skipped=sum(raw.skipped),
        successes=len(successes),
        errors=len(failures),
        error_types=dict(Counter(r[5] for r in failures)),
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
        loop=loop,
        workers=config.threads,
        allowed_wait=config.allowed_wait,
        never_sent=sum(1 for r in failures if r[6] == 0),
        local_waits=events.waits if events.reported else None,
        local_refusals=events.refusals if events.reported else None,
        arrivals=list(raw.times),
    )
