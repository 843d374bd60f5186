"""The discrete-event run of one scenario under one arm, on SimPy's virtual clock.

Theory of operation.  One SimPy process per operation (and one per closed-loop worker, one per
open-loop arrival stream).  An operation:

1. selects a server as pymongo does (writes to the primary or any mongos, reads by read
   preference; among the eligible ones, two at random and the one with fewer operations in
   flight; servers the arm deprioritized are avoided while others remain);
2. asks the package's attempt cycle (:class:`~backpressure.core.cycle.AttemptCycle`, the one
   the pymongo adapters run) whether to send now, wait locally (and ask again: it yields an
   ``env.timeout`` for each wait of the cycle's ``wait_out``), or not send;
3. checks a connection out of the client's pool to that server (a new connection goes through
   the server's connection-establishment limiter; at most ``max_connecting`` are established
   at once);
4. spends the client's CPU for the attempt (one FIFO processor per client: one GIL), sends, and
   the server answers at once by arithmetic (see :mod:`backpressure.sim.server`); the operation
   waits for the reply, or until its CSOT deadline;
5. hands the reply or the error to the cycle (the success accounting, the pacing's record, the
   retry rules) and sleeps the backoff it answers, or gives up.

The executor has no retry or pacing logic of its own: it selects, sleeps, sends and counts.

The clock and random source given to the package's objects are SimPy's ``env.now`` and a seeded
``random.Random``, so a run is deterministic under its seed.  Arrivals and operation kinds come
from their own seeded stream, identical for every arm, so arms are compared on the same
offered load.
"""

from __future__ import annotations

import functools
import logging
import math
import random
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import simpy
from pymongo.errors import NetworkTimeout

from backpressure.core.adaptive.pacers import ClientPacers
from backpressure.core.client_state import ClientState
from backpressure.core.cycle import Backoff, Stop, Wait
from backpressure.sim.arms import CycleFactory, SimArm, cycle_factory, resolve
from backpressure.sim.model import ClientGroup, ClosedLoop, OpenLoop, Scenario
from backpressure.sim.oracle import Capacity, physical_limit
from backpressure.sim.server import SimServer

__all__ = ["OperationLog", "RunData", "simulate"]

_QUIET = logging.getLogger("backpressure.sim.quiet")
_QUIET.setLevel(logging.CRITICAL + 10)
_QUIET.propagate = False
_QUIET.addHandler(logging.NullHandler())

Event = Any
"""A SimPy event (SimPy's own types are loose)."""

# Why an operation failed (keys of RunData.error_reasons).
OVERLOAD = "overload error"
TIMEOUT = "timeout (CSOT deadline)"
REFUSED = "refused locally"
REFUSAL_MIN_COST_S = 0.0001
"""Client time a local refusal takes at least (raising and catching the error), in seconds."""
SKIPPED = "skipped (no free thread)"
UNFINISHED = "unfinished at the end"


@dataclass
class OperationLog:
    """What happened to every operation of one run, in arrival order of their start."""

    arrival: list[float] = field(default_factory=list)
    """When the application wanted the operation."""
    allowed_wait: list[float] = field(default_factory=list)
    """How long it could wait for a send slot and still meet its deadline."""
    eligible: list[int] = field(default_factory=list)
    """Index into ``RunData.eligible_sets``: the servers that could serve it."""


@dataclass
class RunData:
    """Raw outcome of one simulated run (turned into a ArmResult by backpressure.sim.run)."""

    ops: int = 0
    issued: int = 0
    successes: int = 0
    errors: int = 0
    error_reasons: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    server_attempts: int = 0
    server_rejected: int = 0
    server_work: float = 0.0
    connections_refused: int = 0
    local_waits: int = 0
    timeline_ok: list[int] = field(default_factory=list)
    timeline_errors: list[int] = field(default_factory=list)
    timeline_offered: list[int] = field(default_factory=list)
    timeline_received: list[int] = field(default_factory=list)
    timeline_rejected: list[int] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)
    log: OperationLog = field(default_factory=OperationLog)
    eligible_sets: list[tuple[int, ...]] = field(default_factory=list)
    physical_min_errors: int = 0
    physical_exact: bool = True
    floor_fraction: Optional[float] = None
    """Closed loops only: the error fraction no arm can beat, ``max(0, 1 - C * D / N)`` per
    bucket (C the capacity then, D the deadline, N the workers), over the arrival window
    (``physical_min_errors`` is then the matching count: see ``_closed_loop_floor``).  It
    depends on the scenario alone, never on the arrivals an arm generated."""
    client_successes: list[int] = field(default_factory=list)
    """Successful operations per client (every group's clients, in order)."""
    client_errors: list[int] = field(default_factory=list)
    """Failed operations per client, in the same order."""
    client_pushbacks: list[list[float]] = field(default_factory=list)
    """Per client, in the same order: when each overload error its attempts got was read
    (seconds from the start; what its pacer learns from, in order)."""
    end_s: float = 0.0
    sheddable_ops: int = 0
    """Operations run as sheddable (``ClientGroup.sheddable_fraction``; skipped ones are not
    classed)."""
    sheddable_errors: int = 0
    """App errors of the sheddable operations (unfinished ones included)."""
    critical_ops: int = 0
    """Operations run as critical (the rest of those run; 0 when no group marks any)."""
    critical_errors: int = 0
    """App errors of the critical operations (unfinished ones included)."""
    client_competing_spells: list[int] = field(default_factory=list)
    """Per client, in the same order: the competing spells its pacers started (0 for an arm
    without pacing)."""
    client_competed_s: list[float] = field(default_factory=list)
    """Per client: the seconds its pacers competed, summed over its servers."""


_TIMEOUT_ERROR = NetworkTimeout("timed out (CSOT deadline)")
"""What an attempt that runs out of time raises: not an overload error, never retried."""

_EXPIRED = object()
"""Value of a pool waiter woken by its deadline."""


def _expire(waiter: Event, _alarm: Event) -> None:
    """Wake a pool waiter at its deadline if nothing woke it before."""
    if not waiter.triggered:
        waiter.succeed(_EXPIRED)


class _Pool:
    """One client's connections to one server (pymongo's CMAP pool, as counters)."""

    __slots__ = ("connecting", "idle", "total", "waiters")

    def __init__(self) -> None:
        """An empty pool."""
        self.idle = 0
        self.total = 0
        self.connecting = 0
        self.waiters: deque[Event] = deque()


class _Client:
    """One simulated application process with one pymongo client."""

    __slots__ = (
        "arm",
        "cpu_free",
        "free_threads",
        "group",
        "index",
        "inflight",
        "new_cycle",
        "pending",
        "pools",
        "state",
    )

    def __init__(
        self,
        group: ClientGroup,
        servers: int,
        new_cycle: CycleFactory,
        index: int = 0,
        arm: Optional[SimArm] = None,
        state: Optional[ClientState] = None,
    ) -> None:
        """A client with empty pools (``index``: its place among every client of the run;
        ``arm``: the one it runs, when not the run's; ``state``: its client state, for a
        core arm)."""
        self.index = index
        self.state = state
        self.arm = arm
        self.group = group
        self.new_cycle = new_cycle
        """Builds the attempt cycle of each operation (the arm's, on the run's clock)."""
        self.pools = [_Pool() for _ in range(servers)]
        self.inflight = [0] * servers
        self.cpu_free = 0.0
        workload = group.workload
        self.free_threads = workload.threads if isinstance(workload, OpenLoop) else None
        self.pending: deque[float] = deque()


class _Run:
    """Everything one run shares: the environment, servers, clients, counters."""

    def __init__(self, scenario: Scenario, arm: SimArm, seed: int) -> None:
        """Build servers and clients for ``arm``."""
        self.env = simpy.Environment()
        self.scenario = scenario
        self.arm = arm
        self.seed = seed
        self.servers = [SimServer(spec, index) for index, spec in enumerate(scenario.servers)]
        self.data = RunData()
        self.end = scenario.duration_s + scenario.drain_s
        self.buckets = max(1, math.ceil(self.end / scenario.bucket_s))
        self.width = scenario.bucket_s
        data = self.data
        for name in ("ok", "errors", "offered", "received", "rejected"):
            setattr(data, f"timeline_{name}", [0] * self.buckets)
        self.jitter = random.Random(f"{seed}:jitter").random
        self._uniform = random.Random(f"{seed}:selection").random
        self.wake = random.Random(f"{seed}:wake")
        self._wake_jitter = [
            group.workload.start_jitter_ms / 1000.0 if isinstance(group.workload, OpenLoop) else 0.0
            for group in scenario.clients
        ]
        now: Callable[[], float] = lambda: self.env.now  # noqa: E731 (the injected clock)
        self.clock = now
        self.running = 0
        self._eligible_index: dict[tuple[int, ...], int] = {}
        self._overheads: list[float] = []
        # Which operations are sheddable: a stream of its own, drawn only for groups that mark
        # some (the other scenarios' streams are unchanged).
        self._criticality = random.Random(f"{seed}:criticality").random
        self._classed = any(group.sheddable_fraction > 0 for group in scenario.clients)
        self._running_sheddable = 0
        self.groups: list[list[_Client]] = []
        for group in scenario.clients:
            self.groups.append([self._new_client(group) for _ in range(group.count)])
        self._read_sets = [self._read_candidates(group) for group in scenario.clients]
        self._write_set = self._write_candidates()

    def _new_client(self, group: ClientGroup) -> _Client:
        """A client with its own state (own budget and pacing) when the arm is a core arm.

        A group that names its own arm (a mixed fleet) runs that one, the others the run's.
        """
        arm = self.arm if group.arm is None else resolve(group.arm)
        new_cycle, state = cycle_factory(arm, self.jitter, self.clock, _QUIET)
        self.data.client_successes.append(0)
        self.data.client_errors.append(0)
        self.data.client_pushbacks.append([])
        index = len(self.data.client_successes) - 1
        return _Client(group, len(self.servers), new_cycle, index, arm, state)

    # -- topology ------------------------------------------------------------------------------

    def _write_candidates(self) -> tuple[int, ...]:
        """Servers that accept writes."""
        roles = [server.spec.role for server in self.servers]
        if self.scenario.topology == "replicaset":
            return tuple(i for i, role in enumerate(roles) if role == "primary")
        return tuple(range(len(self.servers)))

    def _read_candidates(self, group: ClientGroup) -> tuple[int, ...]:
        """Servers a read of ``group`` may go to (by read preference)."""
        if self.scenario.topology != "replicaset":
            return tuple(range(len(self.servers)))
        primary = tuple(i for i, s in enumerate(self.servers) if s.spec.role == "primary")
        secondaries = tuple(i for i, s in enumerate(self.servers) if s.spec.role == "secondary")
        mode = group.read_preference
        if mode in ("primary", "primaryPreferred"):
            return primary
        if mode == "secondary":
            return secondaries or primary
        if mode == "secondaryPreferred":
            return secondaries or primary
        return primary + secondaries

    def _select(
        self,
        client: _Client,
        candidates: tuple[int, ...],
        avoid: int,
        avoiding: Optional[Callable[[list[tuple[str, int]]], list[tuple[str, int]]]] = None,
    ) -> SimServer:
        """pymongo's choice: two at random, fewer operations in flight (avoiding ``avoid``).

        With the package, a selection with a choice leaves out the servers its server choice
        and its pacing avoid (``avoiding``: ``AttemptCycle.avoiding``), unless none would be
        left, as the adapters' deprioritized servers do in pymongo.
        """
        count = len(candidates)
        if avoid >= 0 and count > 1:
            candidates = tuple(i for i in candidates if i != avoid)
            count -= 1
        if avoiding is not None and count > 1:
            servers = self.servers
            drawn = avoiding([servers[i].address for i in candidates])
            if drawn:
                free = tuple(i for i in candidates if servers[i].address not in drawn)
                if free:
                    candidates, count = free, len(free)
        if count == 1:
            return self.servers[candidates[0]]
        uniform = self._uniform
        first_index = int(uniform() * count)
        second_index = int(uniform() * (count - 1))
        if second_index >= first_index:
            second_index += 1
        first, second = candidates[first_index], candidates[second_index]
        inflight = client.inflight
        return self.servers[first if inflight[first] <= inflight[second] else second]

    # -- bookkeeping ----------------------------------------------------------------------------

    def _bucket(self, t: float) -> int:
        """Timeline bucket of ``t``."""
        index = int(t / self.width)
        return index if index < self.buckets else self.buckets - 1

    def _finish(self, start: float, ok: bool, reason: str = "", client: int = -1) -> None:
        """Record the end of an operation issued at ``start`` by the client of index ``client``."""
        data = self.data
        now = self.env.now
        if ok:
            data.successes += 1
            if client >= 0:
                data.client_successes[client] += 1
            data.latencies_ms.append((now - start) * 1000.0)
            data.timeline_ok[self._bucket(now)] += 1
        else:
            data.errors += 1
            data.error_reasons[reason] = data.error_reasons.get(reason, 0) + 1
            if client >= 0:
                data.client_errors[client] += 1
            data.timeline_errors[self._bucket(now)] += 1

    def _log_arrival(self, arrival: float, deadline: float, eligible: tuple[int, ...]) -> None:
        """Record an arrival for the oracle."""
        data = self.data
        data.ops += 1
        data.timeline_offered[self._bucket(arrival)] += 1
        key = self._eligible_index.get(eligible)
        if key is None:
            key = self._eligible_index[eligible] = len(data.eligible_sets)
            data.eligible_sets.append(eligible)
            self._overheads.append(
                min(
                    self.servers[i].spec.rtt_ms / 1000.0 + self.servers[i].service for i in eligible
                )
            )
        overhead = self._overheads[key]
        data.log.arrival.append(arrival)
        data.log.allowed_wait.append(max(0.0, deadline - arrival - overhead))
        data.log.eligible.append(key)

    # -- the operation ----------------------------------------------------------------------

    def operation(
        self,
        client: _Client,
        group_index: int,
        is_read: bool,
        arrival: Optional[float] = None,
    ) -> Generator[Event]:
        """Run one operation to success or failure (``arrival``: when it was due, default now).

        The CSOT deadline counts from the arrival, so time spent waiting for a free application
        thread is part of it.

        One flat generator (nested ``yield from`` costs on every resume): the slow paths
        (opening a connection, waiting for one) are the only sub-generators.
        """
        env = self.env
        start = env.now if arrival is None else arrival
        group = client.group
        timeout = group.timeout_ms
        deadline = start + timeout / 1000.0 if timeout is not None else math.inf
        candidates = self._read_sets[group_index] if is_read else self._write_set
        self._log_arrival(start, min(deadline, self.end), candidates)
        data = self.data
        data.issued += 1
        self.running += 1
        sheddable = group.sheddable_fraction > 0 and self._criticality() < group.sheddable_fraction
        if sheddable:
            data.sheddable_ops += 1
            self._running_sheddable += 1
        elif self._classed:
            data.critical_ops += 1
        jitter = self._wake_jitter[group_index]
        if jitter > 0:
            yield env.timeout(self.wake.expovariate(1.0 / jitter))
        cycle = client.new_cycle("find" if is_read else "insert", sheddable)
        csot = deadline if deadline != math.inf else None
        cpu_half = group.cpu_ms_per_attempt / 2000.0
        avoid = -1
        ok = False
        reason = OVERLOAD
        while True:
            server = self._select(client, candidates, avoid, cycle.avoiding())
            address = server.address
            step = cycle.admit(address, csot)
            if type(step) is Wait:
                data.local_waits += 1
                waits = cycle.wait_out(step)
                for seconds in waits:
                    yield env.timeout(seconds)
                step = waits.answer
            if type(step) is Stop:
                reason = REFUSED
                # Refusing still costs the client an attempt's bookkeeping, and it moves time
                # on: a closed-loop worker's next operation never starts at the same instant (it
                # would loop without ever yielding).
                begin = client.cpu_free if client.cpu_free > env.now else env.now
                client.cpu_free = begin + max(cpu_half, REFUSAL_MIN_COST_S)
                yield env.timeout(client.cpu_free - env.now)
                break
            cycle.started(address)
            index = server.index
            pool = client.pools[index]
            if pool.idle > 0:
                pool.idle -= 1
                connected: Optional[bool] = True
            else:
                client.inflight[index] += 1
                connected = yield from self._checkout(client, server, pool, deadline)
                client.inflight[index] -= 1
                if connected is None:
                    reason = TIMEOUT
                    cycle.failed(_TIMEOUT_ERROR, deadline=csot, now=env.now)
                    break
            if connected:
                client.inflight[index] += 1
                if cpu_half > 0:  # the client's half of the attempt before sending
                    begin = client.cpu_free if client.cpu_free > env.now else env.now
                    client.cpu_free = begin + cpu_half
                    yield env.timeout(client.cpu_free - env.now)
                now = env.now
                admitted, reply = server.request(now + server.half_rtt)
                bucket = self._bucket(now)
                data.timeline_received[bucket] += 1
                if reply > deadline:
                    if not admitted:
                        data.timeline_rejected[bucket] += 1
                    yield env.timeout(deadline - now if deadline > now else 0.0)
                    client.inflight[index] -= 1
                    pool.total -= 1  # a timed-out connection is closed
                    if pool.waiters:
                        self._wake(pool)
                    reason = TIMEOUT
                    cycle.failed(_TIMEOUT_ERROR, deadline=csot, now=env.now)
                    break
                yield env.timeout(reply - now)
                if cpu_half > 0:  # reading the reply: the thread holds its connection meanwhile
                    begin = client.cpu_free if client.cpu_free > env.now else env.now
                    client.cpu_free = begin + cpu_half
                    yield env.timeout(client.cpu_free - env.now)
                client.inflight[index] -= 1
                pool.idle += 1
                if pool.waiters:
                    self._wake(pool)
                if admitted:
                    cycle.succeeded()
                    ok = True
                    break
                data.timeline_rejected[bucket] += 1
                data.client_pushbacks[client.index].append(env.now)
                error: BaseException = server.error
            else:
                error = server.connection_error
            step = cycle.failed(error, deadline=csot, now=env.now)
            if type(step) is Stop:
                break
            assert type(step) is Backoff
            if step.retarget:
                avoid = index
            if step.seconds > 0:
                yield env.timeout(step.seconds)
        self.running -= 1
        if sheddable:
            self._running_sheddable -= 1
            if not ok:
                data.sheddable_errors += 1
        elif self._classed and not ok:
            data.critical_errors += 1
        self._finish(start, ok, "" if ok else reason, client.index)

    def _checkout(
        self, client: _Client, server: SimServer, pool: _Pool, deadline: float
    ) -> Generator[Event, Any, Optional[bool]]:
        """Get a connection: True when checked out, False when refused, None on timeout."""
        env = self.env
        group = client.group
        while True:
            if pool.idle > 0:
                pool.idle -= 1
                return True
            if pool.total + pool.connecting < group.max_pool_size and (
                pool.connecting < group.max_connecting
            ):
                pool.connecting += 1
                accepted, ready = server.connect(env.now + server.half_rtt)
                if ready > deadline:
                    yield env.timeout(max(0.0, deadline - env.now))
                    pool.connecting -= 1
                    self._wake(pool)
                    return None
                yield env.timeout(ready - env.now)
                pool.connecting -= 1
                if accepted:
                    pool.total += 1
                    return True
                self.data.connections_refused += 1
                self._wake(pool)
                return False
            waiter = env.event()
            pool.waiters.append(waiter)
            if deadline != math.inf:
                # Wake the waiter at its deadline unless a connection came first (cheaper than
                # SimPy's AnyOf condition).
                alarm = env.timeout(max(0.0, deadline - env.now))
                alarm.callbacks.append(functools.partial(_expire, waiter))
            woken = yield waiter
            if woken is _EXPIRED:
                pool.waiters.remove(waiter)
                return None

    def _wake(self, pool: _Pool) -> None:
        """Let the first waiter of ``pool`` try again."""
        while pool.waiters:
            waiter = pool.waiters.popleft()
            if not waiter.triggered:
                waiter.succeed()
                return

    # -- arrivals ------------------------------------------------------------------------------

    def _start(self, client: _Client, group_index: int, is_read: bool) -> None:
        """Start one operation now (through the client's threads when it has a fixed pool)."""
        if client.free_threads is None:
            self.env.process(self.operation(client, group_index, is_read))
            return
        if client.free_threads > 0:
            client.free_threads -= 1
            self.env.process(self._on_thread(client, group_index, is_read))
        else:
            client.pending.append(self.env.now if is_read else -self.env.now - 1.0)

    def _on_thread(self, client: _Client, group_index: int, is_read: bool) -> Generator[Event]:
        """Run operations on one application thread until its client has none waiting."""
        workload = client.group.workload
        assert isinstance(workload, OpenLoop)
        arrival: Optional[float] = None
        while True:
            yield from self.operation(client, group_index, is_read, arrival)
            now = self.env.now
            picked = False
            while client.pending:
                code = client.pending.popleft()
                due = code if code >= 0 else -code - 1.0
                if now - due > workload.max_lag_s:
                    self._skip(due, group_index, code >= 0)
                    continue
                is_read = code >= 0
                arrival = due
                picked = True
                break
            if not picked:
                assert client.free_threads is not None
                client.free_threads += 1
                return

    def _skip(self, due: float, group_index: int, is_read: bool) -> None:
        """Count an arrival skipped because no thread was free for ``max_lag_s``."""
        data = self.data
        candidates = self._read_sets[group_index] if is_read else self._write_set
        timeout = self.scenario.clients[group_index].timeout_ms
        deadline = due + timeout / 1000.0 if timeout is not None else math.inf
        self._log_arrival(due, min(deadline, self.end), candidates)
        data.errors += 1
        data.error_reasons[SKIPPED] = data.error_reasons.get(SKIPPED, 0) + 1
        data.timeline_errors[self._bucket(self.env.now)] += 1

    def open_loop(self, group_index: int, workload: OpenLoop) -> Generator[Event]:
        """Generate the arrivals of an open-loop group, phase by phase."""
        env = self.env
        group = self.scenario.clients[group_index]
        clients = self.groups[group_index]
        rng = random.Random(f"{self.seed}:arrivals:{group_index}")
        read_fraction = group.read_fraction
        start = 0.0
        for phase in workload.phases:
            end = start + phase.duration_s
            rate = phase.rate_per_s
            if rate > 0:
                count = round(rate * phase.duration_s)
                for j in range(count):
                    if workload.arrivals == "poisson":
                        at = env.now + rng.expovariate(rate)
                        if at >= end:
                            break
                    else:
                        at = start + (j + 0.5) / rate
                    if at > env.now:
                        yield env.timeout(at - env.now)
                    client = clients[rng.randrange(len(clients)) if len(clients) > 1 else 0]
                    self._start(client, group_index, rng.random() < read_fraction)
            if end > env.now:
                yield env.timeout(end - env.now)
            start = end

    def closed_loop(
        self, group_index: int, client: _Client, workload: ClosedLoop, rng: random.Random
    ) -> Generator[Event]:
        """One closed-loop worker: operations back to back until the workload's end."""
        env = self.env
        think = workload.think_ms / 1000.0
        read_fraction = client.group.read_fraction
        while env.now < workload.duration_s:
            yield from self.operation(client, group_index, rng.random() < read_fraction)
            if think > 0:
                yield env.timeout(think)

    # -- the whole run ---------------------------------------------------------------------------

    def run(self, progress: Optional[Callable[[float], None]] = None) -> RunData:
        """Run to the scenario's end and return the raw data."""
        env = self.env
        for index, group in enumerate(self.scenario.clients):
            workload = group.workload
            if isinstance(workload, OpenLoop):
                env.process(self.open_loop(index, workload))
            else:
                rng = random.Random(f"{self.seed}:closed:{index}")
                for client in self.groups[index]:
                    for _ in range(workload.workers):
                        env.process(self.closed_loop(index, client, workload, rng))
        step = max(self.width, self.end / 100.0)
        reached = 0.0
        while reached < self.end:
            target = min(self.end, reached + step)
            env.run(until=target)
            if progress is not None:
                progress(target - reached)
            reached = target
        return self._collect()

    def _collect(self) -> RunData:
        """Count what is still running as failed and fill in the server totals and the oracle."""
        data = self.data
        unfinished = self.running
        if unfinished > 0:
            data.errors += unfinished
            data.error_reasons[UNFINISHED] = unfinished
            if self._classed:
                data.sheddable_errors += self._running_sheddable
                data.critical_errors += unfinished - self._running_sheddable
        # Arrivals still waiting for a thread at the end were never run.
        for group_index, clients in enumerate(self.groups):
            for client in clients:
                for code in client.pending:
                    self._skip(code if code >= 0 else -code - 1.0, group_index, code >= 0)
                client.pending.clear()
        data.server_attempts = sum(server.received for server in self.servers)
        data.server_rejected = sum(server.rejected for server in self.servers)
        data.server_work = sum(server.work for server in self.servers)
        data.connections_refused = sum(server.connections_refused for server in self.servers)
        used = sorted({index for eligible in data.eligible_sets for index in eligible})
        data.capacity = [
            sum(self.servers[index].capacity_at(i * self.width) for index in used)
            for i in range(self.buckets)
        ]
        data.end_s = self.end
        for clients in self.groups:
            for client in clients:
                pacers = client.state.controller.pacing if client.state is not None else None
                snapshots = pacers.snapshot().values() if isinstance(pacers, ClientPacers) else ()
                data.client_competing_spells.append(sum(s.competing_spells for s in snapshots))
                data.client_competed_s.append(sum(s.competed_s for s in snapshots))
        floor = _closed_loop_floor(data, self.scenario, self.width)
        if floor is None:
            data.physical_min_errors, data.physical_exact = _oracle(data, self.scenario)
        else:
            data.physical_min_errors, data.floor_fraction = floor
            data.physical_exact = False
        return data


def _closed_loop_floor(
    data: RunData, scenario: Scenario, width: float
) -> Optional[tuple[int, float]]:
    """The arm-independent error floor of a scenario whose groups are all closed loops.

    With N workers, a capacity C and a deadline D, every operation ends within D, so at least
    N / D operations start per second, and at most C of them succeed: per second at least
    ``max(0, N / D - C)`` fail, an error fraction of ``max(0, 1 - C * D / N)``.  Summed over the
    timeline buckets of the arrival window, that is the floor (a count), whatever the arm.
    The fraction returned weighs each bucket by the operations the best client would run in it
    (``max(N / D, C)``).  Returns None for an open loop or a closed loop without a deadline.

    The oracle run on the arrival log would not do for a closed loop: its arrivals are made by
    the arm itself (a local refusal starts the next operation at once).
    """
    groups = scenario.clients
    if not all(isinstance(group.workload, ClosedLoop) for group in groups):
        return None
    deadlines = [group.timeout_ms for group in groups]
    if any(deadline is None for deadline in deadlines):
        return None
    deadline = min(d for d in deadlines if d is not None) / 1000.0
    workers = sum(
        group.count * group.workload.workers
        for group in groups
        if isinstance(group.workload, ClosedLoop)
    )
    demand = workers / deadline
    buckets = min(len(data.capacity), max(1, math.ceil(scenario.duration_s / width - 1e-9)))
    floor = 0.0
    ideal_ops = 0.0
    for index in range(buckets):
        capacity = data.capacity[index]
        floor += max(0.0, demand - capacity) * width
        ideal_ops += max(demand, capacity if capacity < math.inf else demand) * width
    return round(floor), (floor / ideal_ops if ideal_ops else 0.0)


def _capacity(spec_limiter: Any) -> Capacity:
    """The oracle's view of one server's request limiter."""
    return Capacity(
        spec_limiter.rate_per_s,
        burst_seconds=spec_limiter.burst_seconds,
        changes=tuple(spec_limiter.changes),
    )


def _oracle(data: RunData, scenario: Scenario) -> tuple[int, bool]:
    """The physical minimum of app errors for the run's arrival log (and whether it is exact).

    Operations are grouped by the set of servers that could serve them.  Groups whose server sets
    are disjoint are independent, and their minima add up.  When sets overlap (reads that may go
    to any member next to writes bound to the primary), each union ``S`` of overlapping sets gives
    a floor: the operations that can use nothing but ``S`` against the tokens of ``S`` alone.
    The largest of those floors is kept, marked inexact.  Servers without a limiter never fail
    an operation.
    """
    sets = data.eligible_sets
    if not sets:
        return 0, True
    parent = list(range(len(sets)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            if set(sets[i]) & set(sets[j]):
                parent[find(i)] = find(j)
    components: dict[int, list[int]] = {}
    for i in range(len(sets)):
        components.setdefault(find(i), []).append(i)
    total = 0
    exact = True
    log = data.log
    for members in components.values():
        unions: set[frozenset[int]] = {frozenset()}
        for i in members:
            unions |= {union | frozenset(sets[i]) for union in unions}
        unions.discard(frozenset())
        best = 0
        for union in unions:
            limiters = [scenario.servers[s].limiter for s in sorted(union)]
            if any(limiter is None for limiter in limiters):
                continue
            inside = {i for i in members if frozenset(sets[i]) <= union}
            arrivals = [a for a, k in zip(log.arrival, log.eligible) if k in inside]
            waits = [w for w, k in zip(log.allowed_wait, log.eligible) if k in inside]
            capacities = [_capacity(limiter) for limiter in limiters]
            limit = physical_limit(arrivals, waits, capacities)
            best = max(best, limit.min_errors)
            if len(members) == 1:
                exact = exact and limit.exact
        if len(members) > 1:
            exact = False
        total += best
    return total, exact


def simulate(
    scenario: Scenario,
    arm: SimArm,
    seed: int,
    progress: Optional[Callable[[float], None]] = None,
) -> RunData:
    """Run ``scenario`` under ``arm`` with ``seed`` and return the raw data."""
    return _Run(scenario, arm, seed).run(progress)
