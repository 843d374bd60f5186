"""The named scenarios of ``python -m backpressure.sim --list``.

Unless a scenario says otherwise: a 3-member replica set whose primary admits ``C = 1000``
requests/s (burst 1 s, no queue) and does ``4 C`` of work per second; 50 application processes
with Poisson arrivals, half reads and half writes, all on the primary, with a 2 s CSOT timeout;
the server sends no ``baseBackoffMS``.

The ``bench-*`` scenarios reproduce the benchmark's runs against the embedded server
(``backpressure.bench.overload``): one client process, a 1 s CSOT deadline per operation, open
loop (evenly spaced arrivals served by 512 threads, C = 100/s), closed loop (32, 128 and 512
workers, C = 200/s) and one hot member; they are the ones the simulator is checked against.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional

from backpressure.sim.model import (
    ClientGroup,
    ClosedLoop,
    LimiterSpec,
    OpenLoop,
    Phase,
    Scenario,
    ServerSpec,
)

__all__ = [
    "SCENARIOS",
    "BenchShape",
    "FaultSchedule",
    "bench_closed",
    "bench_criticality",
    "bench_hot_member",
    "bench_open",
    "bench_scenarios",
    "closed_fleet",
    "fault_schedule",
    "faults",
    "hot_router",
    "hot_secondary",
    "hot_then_cool",
    "mixed_fleet",
    "recovery_fleet",
    "scenario",
    "scenario_names",
    "transient",
]

C = 1000.0
"""Capacity of the default primary, in requests per second."""


def _replica_set(
    primary: LimiterSpec,
    secondaries: tuple[LimiterSpec, ...] = (LimiterSpec(C), LimiterSpec(C)),
    *,
    service_ms: float = 0.5,
    rtt_ms: float = 0.3,
    work_capacity_per_s: Optional[float] = None,
) -> tuple[ServerSpec, ...]:
    """A primary and its secondaries."""
    limiters = (primary, *secondaries)
    return tuple(
        ServerSpec(
            f"rs{index}",
            "primary" if index == 0 else "secondary",
            limiter,
            service_ms=service_ms,
            rtt_ms=rtt_ms,
            work_capacity_per_s=work_capacity_per_s,
        )
        for index, limiter in enumerate(limiters)
    )


def _open(phases: tuple[Phase, ...], **group: object) -> ClientGroup:
    """50 open-loop clients with the default mix and timeout."""
    settings: dict[str, object] = {"count": 50, "timeout_ms": 2000.0}
    settings.update(group)
    return ClientGroup(workload=OpenLoop(phases), **settings)  # type: ignore[arg-type]


def _marks(phases: tuple[Phase, ...]) -> tuple[tuple[float, str], ...]:
    """Chart marks at each phase start."""
    marks: list[tuple[float, str]] = []
    start = 0.0
    for phase in phases:
        marks.append((start, phase.name))
        start += phase.duration_s
    return tuple(marks)


def _sustained(load: float) -> Scenario:
    """``load x C`` for 20 s between quiet stretches."""
    phases = (
        Phase(5.0, 0.5 * C, "warm-up"),
        Phase(20.0, load * C, f"{load:g}x C"),
        Phase(10.0, 0.5 * C, "after"),
    )
    return Scenario(
        name=f"sustained-{load:g}x",
        description=f"{load:g}x capacity for 20 s on a replica set's primary, 2 s CSOT",
        servers=_replica_set(LimiterSpec(C)),
        clients=(_open(phases),),
        phases=_marks(phases),
        overload_end_s=25.0,
    )


def _criticality(clients: int = 50) -> Scenario:
    """2x C for 20 s, half of the operations sheddable, from ``clients`` open-loop clients."""
    phases = (
        Phase(5.0, 0.5 * C, "warm-up"),
        Phase(20.0, 2.0 * C, "2x C, half sheddable"),
        Phase(10.0, 0.5 * C, "after"),
    )
    fleet = "" if clients == 50 else f", {clients} clients"
    return Scenario(
        name="criticality" if clients == 50 else "criticality-fleet",
        description=f"2x capacity for 20 s, half of the operations sheddable{fleet}",
        servers=_replica_set(LimiterSpec(C)),
        clients=(_open(phases, sheddable_fraction=0.5, count=clients),),
        phases=_marks(phases),
        overload_end_s=25.0,
    )


def bench_criticality(
    processes: int,
    threads: int,
    capacity: float,
    phases: tuple[tuple[float, float], ...],
    deadline_s: float,
    sheddable_fraction: float,
    burst_seconds: float,
) -> Scenario:
    """The real criticality benchmark's plan (:mod:`backpressure.bench.criticality`).

    ``processes`` open-loop clients, Poisson arrivals at their share of each ``(seconds, load x
    capacity)`` phase, served by ``threads`` threads each (an arrival no thread starts within
    ``deadline_s`` is skipped), half reads, ``sheddable_fraction`` of them sheddable, a CSOT
    deadline of ``deadline_s``; the primary admits ``capacity`` ops/s with a burst of
    ``burst_seconds``.
    """
    marked = tuple(Phase(seconds, load * capacity, f"{load:g}x C") for seconds, load in phases)
    loads = [load for _, load in phases]
    overload = loads.index(max(loads))
    limiter = LimiterSpec(capacity, burst_seconds=burst_seconds)
    return Scenario(
        name="bench-criticality",
        description=(
            f"the criticality benchmark: {processes} open-loop clients, C = {capacity:g}/s, "
            f"{sheddable_fraction:.0%} sheddable"
        ),
        servers=_replica_set(limiter, (limiter, limiter)),
        clients=(
            ClientGroup(
                count=processes,
                workload=OpenLoop(marked, threads=threads, max_lag_s=deadline_s),
                timeout_ms=deadline_s * 1000.0,
                max_pool_size=threads + 10,
                sheddable_fraction=sheddable_fraction,
            ),
        ),
        phases=_marks(marked),
        overload_end_s=sum(seconds for seconds, _ in phases[: overload + 1]),
    )


def _burst() -> Scenario:
    """A 2 s burst at 5x C."""
    phases = (
        Phase(5.0, 0.5 * C, "steady"),
        Phase(2.0, 5.0 * C, "burst 5x"),
        Phase(8.0, 0.5 * C, "after"),
    )
    return Scenario(
        name="burst",
        description="a 2 s burst at 5x capacity, then back to half load",
        servers=_replica_set(LimiterSpec(C)),
        clients=(_open(phases),),
        phases=_marks(phases),
        overload_end_s=7.0,
    )


def _hot_member() -> Scenario:
    """Reads from any member; one secondary admits a quarter of the others."""
    phases = (Phase(20.0, 1.8 * C, "reads 1.8x C"),)
    return Scenario(
        name="hot-member",
        description=("reads from any member (nearest); rs2 admits 250/s, the others 1000/s"),
        servers=_replica_set(LimiterSpec(C), (LimiterSpec(C), LimiterSpec(0.25 * C))),
        clients=(_open(phases, read_fraction=1.0, read_preference="nearest"),),
        phases=_marks(phases),
    )


def _fleet() -> Scenario:
    """10,000 clients, 3 mongos, capacity to 20% for 30 s."""
    rate = 1500.0
    limiter = LimiterSpec(rate, changes=((15.0, 0.2 * rate), (45.0, rate)))
    phases = (Phase(60.0, 3000.0, "0.3 op/s per client"),)
    return Scenario(
        name="fleet",
        description=("10,000 clients, 3 mongos; capacity to 20% from 15 s to 45 s (a failover)"),
        servers=tuple(ServerSpec(f"mongos{i}", "mongos", limiter, rtt_ms=0.5) for i in range(3)),
        clients=(
            ClientGroup(
                count=10_000,
                workload=OpenLoop(phases),
                read_fraction=0.8,
                timeout_ms=2000.0,
            ),
        ),
        drain_s=3.0,
        phases=((0.0, "normal"), (15.0, "failover: 20% capacity"), (45.0, "recovered")),
        overload_end_s=45.0,
    )


def _retry_storm() -> Scenario:
    """Closed-loop workers against a server whose CPU is nearly saturated by rejections."""
    return Scenario(
        name="retry-storm",
        description=("800 closed-loop workers; the primary's work capacity is 1.5x its limiter"),
        servers=_replica_set(LimiterSpec(C), work_capacity_per_s=1.5 * C),
        clients=(
            ClientGroup(
                count=200,
                workload=ClosedLoop(workers=4, duration_s=20.0),
                timeout_ms=1000.0,
                name="workers",
            ),
        ),
        phases=((0.0, "800 workers"),),
    )


def _recovery() -> Scenario:
    """3x for 10 s, then half load: how long until errors stop."""
    phases = (
        Phase(3.0, 0.5 * C, "steady"),
        Phase(10.0, 3.0 * C, "3x C"),
        Phase(17.0, 0.5 * C, "recovery"),
    )
    return Scenario(
        name="recovery",
        description="10 s at 3x capacity, then half load: time until errors stop",
        servers=_replica_set(LimiterSpec(C)),
        clients=(_open(phases),),
        phases=_marks(phases),
        bucket_s=0.5,
        overload_end_s=13.0,
    )


def _connection_storm() -> Scenario:
    """Cold start of 2,000 clients against a connection-establishment limiter."""
    phases = (Phase(10.0, 2.0 * C, "cold start"),)
    conn = LimiterSpec(200.0, burst_seconds=1.0, queue_depth=100)
    servers = tuple(
        ServerSpec(
            name,
            role,
            LimiterSpec(4 * C),
            connection_limiter=conn,
        )
        for name, role in (("rs0", "primary"), ("rs1", "secondary"), ("rs2", "secondary"))
    )
    return Scenario(
        name="connection-storm",
        description=("2,000 clients start cold; each member accepts 200 connections/s"),
        servers=servers,
        clients=(_open(phases, count=2000, read_preference="nearest"),),
        phases=_marks(phases),
    )


@dataclass(frozen=True)
class BenchShape:
    """The embedded server and the client process of the benchmark, as the simulator models them.

    The defaults mirror ``backpressure.workload.plan.OverloadPlan``; the client and server costs
    are those measured on the embedded server (``python -m backpressure.bench.agreement`` measures
    the client's again before it compares).
    """

    capacity: float = 200.0
    """Closed loop and hot member: the limited member(s)' rate, ops/s."""
    open_capacity: float = 100.0
    open_threads: int = 512
    warmup: float = 1.0
    sustained: float = 5.0
    burst_load: float = 3.0
    burst: float = 3.0
    recovery: float = 3.0
    base_load: float = 0.5
    closed_seconds: float = 10.0
    hot_capacity: float = 50.0
    hot_workers: int = 32
    hot_seconds: float = 5.0
    allowed_wait: float = 1.0
    burst_seconds: float = 1.0
    cpu_ms_per_attempt: float = 0.45
    """The client process's CPU per attempt (its threads share one GIL)."""
    start_jitter_ms: float = 0.5
    """Thread wake-up delay after an arrival is due."""
    service_ms: float = 0.15
    """The embedded server's time per admitted request."""
    work_capacity_per_s: float = 6000.0
    """Admitted requests per second the embedded server's process can do."""
    rtt_ms: float = 0.1


def _bench_servers(
    shape: BenchShape, limits: tuple[Optional[float], Optional[float], Optional[float]]
) -> tuple[ServerSpec, ...]:
    """The embedded 3-member replica set; ``limits`` are the members' rates (None: unlimited)."""
    return tuple(
        ServerSpec(
            f"rs{index}",
            "primary" if index == 0 else "secondary",
            None if rate is None else LimiterSpec(rate, burst_seconds=shape.burst_seconds),
            service_ms=shape.service_ms,
            rtt_ms=shape.rtt_ms,
            work_capacity_per_s=shape.work_capacity_per_s,
        )
        for index, rate in enumerate(limits)
    )


def _shape_group(shape: BenchShape, **fields: Any) -> ClientGroup:
    """One client group of ``shape``: its deadline per operation and its client CPU per attempt
    (and one client, unless ``fields`` say otherwise)."""
    fields.setdefault("count", 1)
    return ClientGroup(
        timeout_ms=shape.allowed_wait * 1000.0,
        cpu_ms_per_attempt=shape.cpu_ms_per_attempt,
        **fields,
    )


def bench_open(load: float, shape: BenchShape = BenchShape(), *, burst: bool = False) -> Scenario:
    """The benchmark's open loop at ``load`` x C (``burst``: its burst shape at that load)."""
    c = shape.open_capacity
    phases: tuple[Phase, ...]
    if burst:
        phases = (
            Phase(shape.warmup, shape.base_load * c, "steady"),
            Phase(shape.burst, load * c, "burst"),
            Phase(shape.recovery, shape.base_load * c, "recovery"),
        )
        name, what = f"bench-burst-{load:g}x", f"a {shape.burst:g} s burst at {load:g}x"
    else:
        phases = (
            Phase(shape.warmup, shape.base_load * c, "warmup"),
            Phase(shape.sustained, load * c, "overload"),
        )
        name, what = f"bench-open-{load:g}x", f"{load:g}x sustained"
    return Scenario(
        name=name,
        description=f"the benchmark's open loop: {what}, C = {c:g}/s, {shape.open_threads} threads",
        servers=_bench_servers(shape, (c, c, c)),
        clients=(
            _shape_group(
                shape,
                workload=OpenLoop(
                    phases,
                    arrivals="scheduled",
                    threads=shape.open_threads,
                    max_lag_s=shape.allowed_wait,
                    start_jitter_ms=shape.start_jitter_ms,
                ),
                read_fraction=0.5,
                name="workload",
            ),
        ),
        drain_s=shape.allowed_wait + 1.0,
        phases=_marks(phases),
        bucket_s=0.5,
    )


def bench_closed(workers: int, shape: BenchShape = BenchShape()) -> Scenario:
    """The benchmark's closed loop: ``workers`` threads back to back against C."""
    c = shape.capacity
    return Scenario(
        name=f"bench-closed-{workers}w",
        description=f"the benchmark's closed loop: {workers} workers, C = {c:g}/s",
        servers=_bench_servers(shape, (c, c, c)),
        clients=(
            _shape_group(
                shape,
                workload=ClosedLoop(workers, shape.closed_seconds),
                read_fraction=0.5,
                max_pool_size=workers + 10,
                name="workload",
            ),
        ),
        drain_s=shape.allowed_wait + 1.0,
        phases=((0.0, f"{workers} workers"),),
        bucket_s=0.5,
    )


def bench_hot_member(shape: BenchShape = BenchShape()) -> Scenario:
    """The benchmark's hot member: reads from secondaries, one of them limited."""
    return Scenario(
        name="bench-hot-member",
        description=(
            f"the benchmark's hot member: {shape.hot_workers} workers read from secondaries, "
            f"rs1 at {shape.hot_capacity:g}/s"
        ),
        servers=_bench_servers(shape, (None, shape.hot_capacity, None)),
        clients=(
            _shape_group(
                shape,
                workload=ClosedLoop(shape.hot_workers, shape.hot_seconds),
                read_fraction=1.0,
                read_preference="secondary",
                max_pool_size=shape.hot_workers + 10,
                name="workload",
            ),
        ),
        drain_s=shape.allowed_wait + 1.0,
        phases=((0.0, "rs1 limited"),),
        bucket_s=0.5,
    )


def bench_scenarios(shape: BenchShape = BenchShape()) -> dict[str, Scenario]:
    """Every benchmark scenario, by name."""
    built = [bench_open(load, shape) for load in (1.5, 3.0, 10.0)]
    built.append(bench_open(shape.burst_load, shape, burst=True))
    built.extend(bench_closed(workers, shape) for workers in (32, 128, 512))
    built.append(bench_hot_member(shape))
    return {scenario.name: scenario for scenario in built}


def _embedded_primary(
    shape: BenchShape,
    rate: float,
    changes: tuple[tuple[float, float], ...] = (),
    **faults: object,
) -> tuple[ServerSpec, ...]:
    """The embedded replica set with only its primary used, limited to ``rate`` (changing)."""
    limiter = LimiterSpec(rate, burst_seconds=shape.burst_seconds, changes=changes)
    primary = ServerSpec(
        "rs0",
        "primary",
        limiter,
        service_ms=shape.service_ms,
        rtt_ms=shape.rtt_ms,
        work_capacity_per_s=shape.work_capacity_per_s,
        **faults,  # type: ignore[arg-type]
    )
    secondaries = tuple(
        ServerSpec(
            f"rs{index}",
            "secondary",
            limiter,
            service_ms=shape.service_ms,
            rtt_ms=shape.rtt_ms,
            work_capacity_per_s=shape.work_capacity_per_s,
        )
        for index in (1, 2)
    )
    return (primary, *secondaries)


def closed_fleet(
    clients: int = 8,
    workers: int = 8,
    *,
    step_s: float = 10.0,
    rates: tuple[float, ...] = (200.0, 100.0, 300.0),
    shape: BenchShape = BenchShape(),
    think_ms: float = 0.0,
    name: Optional[str] = None,
    overload_end_s: Optional[float] = None,
) -> Scenario:
    """``clients`` processes x ``workers`` closed-loop threads, 1 s deadline, capacity steps.

    Mirrors the real fleet benchmark (:mod:`backpressure.bench.fleet`): each client process is
    one pymongo client with its own GIL, half find_one and half insert_one on the primary, every
    operation under a 1 s CSOT deadline; the primary's rate limit steps through ``rates`` every
    ``step_s`` seconds.  ``think_ms`` between a worker's operations bounds the demand;
    ``overload_end_s`` is when the overload ends (the recovery is measured from there).
    """
    changes = tuple((step_s * (i + 1), rate) for i, rate in enumerate(rates[1:]))
    marks = tuple((step_s * i, f"{rate:g}/s") for i, rate in enumerate(rates))
    suffix = "" if (clients, workers) == (8, 8) else f"-{clients}x{workers}"
    think = f", {think_ms:g} ms think" if think_ms else ""
    what = "closed-loop workers" if not think_ms else "workers"
    limits = " -> ".join(f"{r:g}" for r in rates) + "/s"
    if any(rate >= 1e5 for rate in rates):  # unlimited in effect
        limits = " -> ".join(f"{r:g}/s" if r < 1e5 else "none" for r in rates)
    return Scenario(
        name=name or f"closed-fleet{suffix}",
        description=(
            f"{clients} x {workers} {what}{think}, 1 s deadline, C {limits}, {step_s:g} s steps"
        ),
        servers=_embedded_primary(shape, rates[0], changes),
        clients=(
            _shape_group(
                shape,
                count=clients,
                workload=ClosedLoop(workers, step_s * len(rates), think_ms),
                read_fraction=0.5,
                max_pool_size=workers + 10,
                name="fleet",
            ),
        ),
        drain_s=shape.allowed_wait + 1.0,
        phases=marks,
        bucket_s=0.5,
        overload_end_s=overload_end_s,
    )


def mixed_fleet(
    stock: int = 4,
    clients: int = 8,
    workers: int = 8,
    *,
    stock_arm: str = "current",
    shape: BenchShape = BenchShape(),
) -> Scenario:
    """A rollout in progress: the 8 x 8 closed fleet with ``stock`` of its processes on
    ``stock_arm`` (stock pymongo's own loop) and the rest on the arm the run is under."""
    if not 0 < stock < clients:
        raise ValueError(f"mixed_fleet: stock must be in 1..{clients - 1}, got {stock!r}")
    base = closed_fleet(clients, workers, shape=shape)
    (group,) = base.clients
    return dataclasses.replace(
        base,
        name=f"mixed-fleet-{stock}of{clients}",
        description=(
            f"{clients} x {workers} closed fleet, {stock} of the {clients} processes on {stock_arm}"
        ),
        clients=(
            dataclasses.replace(group, count=stock, arm=stock_arm, name="stock"),
            dataclasses.replace(group, count=clients - stock, name="upgraded"),
        ),
    )


RECOVERY_DEMAND_THINK_MS = 60.0
"""Think time of the recovery fleet's workers: 32 workers at about 520 operations/s."""


def recovery_fleet(shape: BenchShape = BenchShape()) -> Scenario:
    """4 x 8 closed-loop workers (60 ms think: about 520 ops/s of demand), capacity 100/s for
    10 s, then no limit for 10 s: how soon the goodput is the demand again."""
    return closed_fleet(
        4,
        8,
        rates=(100.0, 100_000.0),
        shape=shape,
        think_ms=RECOVERY_DEMAND_THINK_MS,
        name="recovery-fleet",
        overload_end_s=10.0,
    )


def transient(
    rejections: int = 3,
    *,
    base_rate: float = 100.0,
    rise: float = 4.0,
    capacity: float = 2000.0,
    shape: BenchShape = BenchShape(),
) -> Scenario:
    """A blip at low load, then demand rises ``rise`` x, still far below capacity.

    One client, 16 threads serving evenly spaced arrivals at ``base_rate``/s; at 3 s the server
    rejects the next ``rejections`` commands (a ``{times: n}`` fail point); at 4 s demand rises
    to ``rise * base_rate``/s for 6 s.  An arm that keeps no state from one pushback serves
    everything but the rejected commands' retries.
    """
    phases = (
        Phase(3.0, base_rate, "steady"),
        Phase(1.0, base_rate, f"{rejections} rejected"),
        Phase(6.0, rise * base_rate, f"x{rise:g} demand"),
    )
    suffix = "" if rejections == 3 else f"-{rejections}"
    return Scenario(
        name=f"transient{suffix}",
        description=(
            f"16 threads at {base_rate:g}/s, C {capacity:g}/s; {rejections} rejected at 3 s; "
            f"from 4 s {rise * base_rate:g}/s"
        ),
        servers=_embedded_primary(shape, capacity, reject_bursts=((3.0, rejections),)),
        clients=(
            _shape_group(
                shape,
                workload=OpenLoop(
                    phases,
                    arrivals="scheduled",
                    threads=16,
                    max_lag_s=shape.allowed_wait,
                    start_jitter_ms=shape.start_jitter_ms,
                ),
                read_fraction=0.5,
                max_pool_size=26,
                name="workload",
            ),
        ),
        drain_s=shape.allowed_wait + 1.0,
        phases=_marks(phases),
        bucket_s=0.5,
        settle_s=0.0,
    )


@dataclass(frozen=True)
class FaultSchedule:
    """A seeded fault schedule: what the simulated server does, and every fault drawn."""

    bursts: tuple[tuple[float, int], ...]
    """``(time_s, count)``: rejected commits, as the next ``count`` writes rejected."""
    windows: tuple[tuple[float, float], ...]
    """All-reject windows."""
    rate_changes: tuple[tuple[float, float], ...]
    """Tight limits: the rate drops, then returns to the capacity."""
    marks: tuple[tuple[float, str], ...]
    """The real soak's rounds: one mark every ``slice_s`` (``round 1``, ``round 2``, ...)."""
    faults: tuple[tuple[float, float, str, str], ...] = ()
    """Every fault drawn, ``(start_s, end_s, kind, label)``, those not simulated included."""


SOAK_SECONDS = 96.0
"""Length of the simulated soak: the real soak's schedule as run in ``faults-run3``/``run4``."""

SOAK_ROUND_S = 12.0
"""The real soak's round length there (8 rounds of 12 s): one chart mark each."""

SOAK_CPU_MS_PER_ATTEMPT = 3.3
"""Client CPU per attempt in the simulated soak, calibrated against the real one.

The real soak's 4 client processes share a 2-core machine with the embedded server and other
work, so CPU holds its writers far below the 2,000/s limit (``faults-run3``: ``current`` acked
930 writes/s, its processes using 0.39 cores between them, the machine 100 % busy).  This cost,
serialised per client as one GIL, gives the simulated ``current`` the same rate (935/s)."""


def fault_schedule(
    seed: int = 1,
    duration_s: float = SOAK_SECONDS,
    capacity: float = 2000.0,
    slice_s: float = SOAK_ROUND_S,
) -> FaultSchedule:
    """The real fault soak's schedule (``backpressure.bench.faults``), drawn the same way.

    Every 1-3 s one fault from ``random.Random("soak:<seed>")``, the five kinds equally likely
    and drawn in the real soak's order, so the same seed and length give the same faults:
    ``close`` (1-20 writes' connections closed), ``block`` (1-20 writes held 100-800 ms),
    ``overload`` (every write rejected for 0.3-1.5 s or, one time in three, 3-8 s), ``limit``
    (the rate at 20-200/s for 0.5-2 s) and ``commit`` (1-5 commits closed or rejected).  The
    simulator runs the overload windows, the limits and the rejected commits (as that many
    writes rejected); closes, blocks and closed commits say nothing to the pacing (a network
    error is no pushback) and are listed in ``faults`` only.
    """
    rng = random.Random(f"soak:{seed}")
    bursts: list[tuple[float, int]] = []
    windows: list[tuple[float, float]] = []
    changes: list[tuple[float, float]] = []
    drawn: list[tuple[float, float, str, str]] = []
    t = 1.0 + rng.uniform(0.0, 2.0)
    while t < duration_s - 1.0:
        kind = ("close", "block", "overload", "limit", "commit")[rng.randrange(5)]
        at = round(t, 3)
        end = at
        if kind == "close":
            label = f"{rng.randint(1, 20)} closed"
        elif kind == "block":
            count, block_ms = rng.randint(1, 20), rng.randint(100, 800)
            label = f"{count} blocked {block_ms} ms"
        elif kind == "overload":
            length = rng.uniform(3.0, 8.0) if rng.random() < 1 / 3 else rng.uniform(0.3, 1.5)
            end = round(min(at + length, duration_s), 3)
            windows.append((at, end))
            label = f"all rejected {end - at:.1f} s"
        elif kind == "limit":
            rate = float(rng.randint(20, 200))
            end = round(min(at + rng.uniform(0.5, 2.0), duration_s), 3)
            changes.extend(((at, rate), (end, capacity)))
            label = f"{rate:g}/s for {end - at:.1f} s"
        else:
            count = rng.randint(1, 5)
            rejected = rng.random() >= 0.5
            if rejected:
                bursts.append((at, count))
            label = f"{count} commits {'rejected' if rejected else 'closed'}"
        drawn.append((at, end, kind, label))
        t = end + rng.uniform(1.0, 3.0)
    marks: list[tuple[float, str]] = []
    start = 0.0
    while start < duration_s:
        marks.append((start, f"round {len(marks) + 1}"))
        start += slice_s
    return FaultSchedule(tuple(bursts), tuple(windows), tuple(changes), tuple(marks), tuple(drawn))


def faults(
    seed: int = 1,
    *,
    processes: int = 4,
    workers: int = 8,
    duration_s: float = SOAK_SECONDS,
    capacity: float = 2000.0,
    cpu_ms_per_attempt: float = SOAK_CPU_MS_PER_ATTEMPT,
    shape: BenchShape = BenchShape(),
) -> Scenario:
    """The fault soak as the real one runs it: ``processes`` x ``workers`` closed-loop
    writers, 1 s deadline, the real soak's seeded schedule (:func:`fault_schedule`), each
    client held by its CPU (``cpu_ms_per_attempt``, calibrated against the real soak)."""
    schedule = fault_schedule(seed, duration_s, capacity)
    return Scenario(
        name="faults" if seed == 1 else f"faults-{seed}",
        description=(
            f"{processes} x {workers} writers, {cpu_ms_per_attempt:g} ms CPU/attempt, "
            f"C {capacity:g}/s, real soak schedule {seed}, {duration_s:g} s"
        ),
        servers=_embedded_primary(
            shape,
            capacity,
            schedule.rate_changes,
            reject_windows=schedule.windows,
            reject_bursts=schedule.bursts,
        ),
        clients=(
            ClientGroup(
                count=processes,
                workload=ClosedLoop(workers, duration_s),
                read_fraction=0.0,
                timeout_ms=shape.allowed_wait * 1000.0,
                cpu_ms_per_attempt=cpu_ms_per_attempt,
                max_pool_size=workers + 10,
                name="writers",
            ),
        ),
        drain_s=shape.allowed_wait + 1.0,
        phases=schedule.marks,
        bucket_s=0.25,
        settle_s=0.0,
    )


HOT_RATE = 50.0
"""The hot server's rate in the hotspot scenarios (the ``hotspot`` benchmark's), ops/s."""

ROOM = 2 * C
"""The other servers' rate in the hot router and hot secondary scenarios: more than the
4 x 8 workers can ask of one server (at most 1,600/s with 20 ms think time)."""


def _hotspot_group(read_fraction: float, read_preference: str = "primary") -> ClientGroup:
    """The hotspot benchmark's clients: 4 processes x 8 closed-loop threads, 20 ms think time,
    a 1 s timeout, for 10 s."""
    return ClientGroup(
        count=4,
        workload=ClosedLoop(workers=8, duration_s=10.0, think_ms=20.0),
        read_fraction=read_fraction,
        read_preference=read_preference,
        timeout_ms=1000.0,
    )


def hot_router() -> Scenario:
    """Three mongos routers, one limited to 50/s, the others with room."""
    limits = (LimiterSpec(HOT_RATE), LimiterSpec(ROOM), LimiterSpec(ROOM))
    return Scenario(
        name="hot-router",
        description=(
            f"3 mongos, mongos0 admits {HOT_RATE:g}/s, the others {ROOM:g}/s; 4 x 8 workers, "
            "half reads"
        ),
        servers=tuple(
            ServerSpec(f"mongos{i}", "mongos", limit, rtt_ms=0.5) for i, limit in enumerate(limits)
        ),
        clients=(_hotspot_group(0.5),),
        phases=((0.0, "mongos0 hot"),),
    )


def hot_secondary() -> Scenario:
    """Reads from secondaries (secondaryPreferred), one secondary limited to 50/s."""
    return Scenario(
        name="hot-secondary",
        description=(
            f"reads secondaryPreferred; rs1 admits {HOT_RATE:g}/s, the others {ROOM:g}/s; 4 x 8 "
            "workers"
        ),
        servers=_replica_set(LimiterSpec(ROOM), (LimiterSpec(HOT_RATE), LimiterSpec(ROOM))),
        clients=(_hotspot_group(1.0, "secondaryPreferred"),),
        phases=((0.0, "rs1 hot"),),
    )


def hot_then_cool() -> Scenario:
    """Three routers at 300/s each, about 700/s of demand; router 0 at 50/s for 10 s."""
    rate = 300.0
    hot = LimiterSpec(rate, changes=((0.0, HOT_RATE), (10.0, rate)))
    phases = (Phase(20.0, 700.0, "700/s"),)
    return Scenario(
        name="hot-then-cool",
        description=(
            f"3 mongos at {rate:g}/s, 700/s of demand; mongos0 at {HOT_RATE:g}/s for 10 s, "
            "then back"
        ),
        servers=tuple(
            ServerSpec(f"mongos{i}", "mongos", hot if i == 0 else LimiterSpec(rate), rtt_ms=0.5)
            for i in range(3)
        ),
        clients=(_open(phases, timeout_ms=1000.0),),
        phases=((0.0, "mongos0 hot"), (10.0, "mongos0 recovered")),
        bucket_s=0.5,
        overload_end_s=10.0,
    )


def _bench_named(name: str) -> Scenario:
    """One benchmark scenario with the default shape."""
    return bench_scenarios()[name]


SCENARIOS: Mapping[str, Callable[[], Scenario]] = {
    "burst": _burst,
    "sustained-1.5x": lambda: _sustained(1.5),
    "sustained-3x": lambda: _sustained(3.0),
    "sustained-10x": lambda: _sustained(10.0),
    "hot-member": _hot_member,
    "criticality": _criticality,
    "criticality-fleet": lambda: _criticality(8),
    "fleet": _fleet,
    "retry-storm": _retry_storm,
    "recovery": _recovery,
    "connection-storm": _connection_storm,
    "closed-fleet": closed_fleet,
    "closed-fleet-4x16": lambda: closed_fleet(4, 16),
    "recovery-fleet": recovery_fleet,
    "mixed-fleet-1of8": lambda: mixed_fleet(1),
    "mixed-fleet-4of8": lambda: mixed_fleet(4),
    "mixed-fleet-7of8": lambda: mixed_fleet(7),
    "transient": transient,
    "hot-router": hot_router,
    "hot-secondary": hot_secondary,
    "hot-then-cool": hot_then_cool,
    "transient-1": lambda: transient(1),
    "faults": faults,
    **{name: functools.partial(_bench_named, name) for name in bench_scenarios()},
}
"""Every named scenario, built on demand."""


def scenario_names() -> tuple[str, ...]:
    """The names, in listing order."""
    return tuple(SCENARIOS)


def scenario(name: str) -> Scenario:
    """The scenario called ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    factory = SCENARIOS.get(name)
    if factory is None:
        raise ValueError(f"unknown scenario {name!r}; known scenarios: {', '.join(SCENARIOS)}")
    return factory()
