"""Overhead without overload: what an enabled client adds to each operation, measured two ways.

Theory of operation.  A stock ``pymongo.MongoClient`` and a ``backpressure.MongoClient`` with
the default preset talk to the same server; each benchmark operation runs on both.

* **Work count (deterministic).**  A tracer counts, per operation, the Python function calls of
  the whole client (stock and enabled) and the calls and line events of this package's own code
  (``sys.settrace`` on 3.11 and older, ``sys.monitoring`` on 3.12+).  The counts do not depend on
  the machine's load: they say exactly how much Python-level work enabling adds on a success path.
* **Client CPU time (statistical).**  ``pairs`` paired samples: each sample runs ``block``
  operations on one client then ``block`` on the other, in alternating order, timing the calling
  thread's CPU (``time.thread_time_ns``: waiting for the server is left out, the wrapper's cost is
  not), less the timer's own cost (calibrated first: it would pull every ratio towards 1).  The
  estimate is the median over the pairs of enabled CPU / stock CPU; its 95 % confidence interval
  comes from a seeded bootstrap that resamples whole pairs.  Drift that hits both halves of a
  pair cancels in its ratio, and the median ignores the pairs a neighbour's burst of work landed
  on.  The goal is decided on the CI's upper bound.  Many short pairs (by default 4,000 pairs of
  one operation each) decide a 1 % goal on a shared machine; a few long blocks do not: the
  interference of other processes comes in bursts longer than a block, so longer blocks do not
  average it out, while more pairs narrow the median's interval (about ±0.3 % at 4,000 pairs
  with the per-pair spread of a loaded 2-core machine).

* **Instructions (deterministic, ``--instructions``).**  Each operation runs under valgrind's
  callgrind in one process per operation, the calling thread counted alone
  (``--separate-threads=yes``: pymongo's monitor threads apart); a call of ``os.getppid``, which
  callgrind dumps its counters before, ends each segment of ``low`` then ``high`` operations, and
  instructions per operation = (high - low) / (high_ops - low_ops), so start-up and the
  marker cancel.  The enabled client is counted again with its instance wrappers taken off one
  at a time (``_process_response``, ``_select_server``, ``_retry_internal``) to attribute the
  added instructions to each; the stock path's CPU per operation (best of a few short timed
  blocks) turns them into microseconds.  A ratio free of the machine's load, for judging a
  change to the quiet path on a shared machine.

pyperf is not used: it times wall-clock runs of one benchmark in separate worker processes and
compares two result files with a t-test; it has neither a paired, alternating design nor a timer
for one thread's CPU, and each worker process would have to connect to the replica set again.
"""

from __future__ import annotations

import contextlib
import gc
import json
import random
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Callable, Optional

from pymongo import MongoClient
from pymongo.client_session import ClientSession
from pymongo.collection import Collection

from backpressure.switch.client import state as state_of
from backpressure.workload.arms import Document

__all__ = [
    "INSTRUCTION_GOALS",
    "INSTRUCTION_VARIANTS",
    "OPERATIONS",
    "WRAPPED_NAMES",
    "WRAPPERS",
    "CpuOverhead",
    "InstructionCount",
    "OverheadTargets",
    "ValgrindMissingError",
    "WorkCount",
    "bootstrap_ratio_ci",
    "callgrind_total",
    "count_work",
    "counts_from_dumps",
    "instruction_child",
    "instruction_report",
    "instruction_segments",
    "main_thread_dumps",
    "measure_cpu",
    "measure_instructions",
    "measure_overhead",
    "open_targets",
    "stock_rate",
    "timer_cost_ns",
    "verdict",
]

_SMALL_DOCS = 5
_SMALL_BATCH = 2
_DATABASE = "backpressure_bench"


@dataclass(frozen=True)
class OverheadTargets:
    """The collections (and client) one side of the comparison operates on."""

    client: MongoClient[Document]
    reads: Collection[Document]
    """Five small documents, ``_id`` 0-4."""
    inserts: Collection[Document]
    """A collection that only grows."""
    counters: Collection[Document]
    """One document the transaction updates (a transaction's commit rewrites what it touched,
    so it must not touch a collection that grows)."""


Operation = Callable[[OverheadTargets, int], None]


def _insert_one(target: OverheadTargets, i: int) -> None:
    """Insert one small document."""
    target.inserts.insert_one({"n": i})


def _find_one(target: OverheadTargets, i: int) -> None:
    """Find one document by _id."""
    target.reads.find_one({"_id": i % _SMALL_DOCS})


def _find_get_more(target: OverheadTargets, i: int) -> None:
    """Read 5 documents in batches of 2: one find and two getMores."""
    docs = list(target.reads.find({"_id": {"$lt": _SMALL_DOCS}}, batch_size=_SMALL_BATCH))
    if len(docs) != _SMALL_DOCS:
        raise AssertionError(f"expected {_SMALL_DOCS} documents, got {len(docs)}")


def _aggregate(target: OverheadTargets, i: int) -> None:
    """A two-stage aggregate returning the five documents."""
    pipeline: list[dict[str, Any]] = [
        {"$match": {"_id": {"$lt": _SMALL_DOCS}}},
        {"$sort": {"_id": 1}},
    ]
    docs = list(target.reads.aggregate(pipeline))
    if len(docs) != _SMALL_DOCS:
        raise AssertionError(f"expected {_SMALL_DOCS} documents, got {len(docs)}")


def _transaction(target: OverheadTargets, i: int) -> None:
    """A transaction through ``with_transaction``: one update, then commit."""

    def body(session: ClientSession) -> None:
        target.counters.update_one({"_id": 0}, {"$inc": {"n": 1}}, session=session)

    with target.client.start_session() as session:
        session.with_transaction(body)


OPERATIONS: Mapping[str, Operation] = {
    "insert_one": _insert_one,
    "find_one": _find_one,
    "find+getMore": _find_get_more,
    "aggregate": _aggregate,
    "transaction": _transaction,
}
"""The measured operations by name."""


# -- the deterministic work count ----------------------------------------------------------------


@dataclass(frozen=True)
class WorkCount:
    """Python-level work per operation of one client, counted by a tracer."""

    operation: str
    client: str
    """``stock`` or ``enabled``."""
    operations: int
    """Operations counted."""
    calls: float
    """Python function calls per operation, all code (pymongo's included)."""
    our_calls: float
    """Calls per operation of this package's code (its benchmark and workload code excluded)."""
    our_lines: float
    """Line events per operation in this package's code."""


_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)
_NOT_OURS = tuple(str(Path(_PACKAGE_DIR) / sub) for sub in ("bench", "workload", "demo"))


def _is_ours(code: CodeType) -> bool:
    """Whether ``code`` is this package's code (not the benchmark's own)."""
    filename = code.co_filename
    return filename.startswith(_PACKAGE_DIR) and not filename.startswith(_NOT_OURS)


class _Tally:
    """Counters a tracer fills."""

    __slots__ = ("calls", "our_calls", "our_lines")

    def __init__(self) -> None:
        """Start at zero."""
        self.calls = 0
        self.our_calls = 0
        self.our_lines = 0


@contextmanager
def _settrace_counter(tally: _Tally) -> Iterator[None]:
    """Count calls (all code) and line events (our code) on this thread with ``sys.settrace``."""
    ours: dict[CodeType, bool] = {}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            tally.our_lines += 1
        return local

    def global_trace(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        tally.calls += 1
        code = frame.f_code
        mine = ours.get(code)
        if mine is None:
            mine = ours[code] = _is_ours(code)
        if mine:
            tally.our_calls += 1
            return local
        return None

    previous = sys.gettrace()
    sys.settrace(global_trace)
    try:
        yield
    finally:
        sys.settrace(previous)


@contextmanager
def _monitoring_counter(tally: _Tally) -> Iterator[None]:  # pragma: no cover - Python 3.12+
    """Count calls (all code) and line events (our code) with ``sys.monitoring`` (3.12+)."""
    monitoring: Any = vars(sys)["monitoring"]
    tool = monitoring.PROFILER_ID
    get_ident = threading.get_ident
    thread = get_ident()
    ours: dict[CodeType, bool] = {}

    def is_ours(code: CodeType) -> bool:
        mine = ours.get(code)
        if mine is None:
            mine = ours[code] = _is_ours(code)
        return mine

    def on_start(code: CodeType, offset: int) -> Any:
        if get_ident() != thread:  # monitoring is process-wide: count this thread only
            return None
        tally.calls += 1
        if is_ours(code):
            tally.our_calls += 1
        return None

    def on_line(code: CodeType, line: int) -> Any:
        if not is_ours(code):
            return monitoring.DISABLE
        if get_ident() == thread:
            tally.our_lines += 1
        return None

    monitoring.use_tool_id(tool, "backpressure.bench")
    try:
        monitoring.register_callback(tool, monitoring.events.PY_START, on_start)
        monitoring.register_callback(tool, monitoring.events.LINE, on_line)
        monitoring.set_events(tool, monitoring.events.PY_START | monitoring.events.LINE)
        monitoring.restart_events()
        yield
    finally:
        monitoring.set_events(tool, 0)
        monitoring.register_callback(tool, monitoring.events.PY_START, None)
        monitoring.register_callback(tool, monitoring.events.LINE, None)
        monitoring.free_tool_id(tool)


def tracer_name() -> str:
    """The tracing mechanism :func:`count_work` uses on this Python."""
    return "sys.monitoring" if sys.version_info >= (3, 12) else "sys.settrace"


def count_work(
    name: str, operation: Operation, target: OverheadTargets, client: str, operations: int = 20
) -> WorkCount:
    """Count the Python-level work of ``operations`` runs of ``operation`` on ``target``."""
    if operations < 1:
        raise ValueError(f"operations must be >= 1, got {operations!r}")
    for i in range(3):  # warm caches, the pool and the session pool
        operation(target, i)
    tally = _Tally()
    counter = _monitoring_counter if sys.version_info >= (3, 12) else _settrace_counter
    with counter(tally):
        for i in range(operations):
            operation(target, i)
    return WorkCount(
        operation=name,
        client=client,
        operations=operations,
        calls=tally.calls / operations,
        our_calls=tally.our_calls / operations,
        our_lines=tally.our_lines / operations,
    )


# -- the CPU-time measure ------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuOverhead:
    """Client CPU per operation, enabled against stock, with a bootstrap CI on the ratio."""

    operation: str
    pairs: int
    block: int
    stock_cpu_us: float
    """Median client-thread CPU per operation of the stock client, in microseconds."""
    enabled_cpu_us: float
    """Median client-thread CPU per operation of the enabled client, in microseconds."""
    ratio: float
    """Median over the pairs of enabled CPU / stock CPU (the goal's estimate)."""
    ratio_ci_low: float
    ratio_ci_high: float
    """Bounds of the 95 % bootstrap confidence interval of ``ratio``."""
    ratio_of_means: float
    """Total enabled CPU / total stock CPU (less robust to outliers; shown for reference)."""
    stock_wall_us: float
    """Median wall time per operation of the stock client (context for the CPU figures)."""
    enabled_wall_us: float
    timer_ns: int = 0
    """The timers' own CPU cost taken off each sample, in ns (calibrated per run)."""


def _median(values: Sequence[float]) -> float:
    """The median of a non-empty sample."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def bootstrap_ratio_ci(
    enabled: Sequence[float],
    stock: Sequence[float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    rng: Optional[random.Random] = None,
) -> tuple[float, float, float]:
    """Return (ratio, low, high): the median paired ratio enabled/stock and its bootstrap CI.

    The i-th values of ``enabled`` and ``stock`` form a pair; the percentile bootstrap resamples
    whole pairs (``rng`` seeds it: the same samples give the same interval).
    """
    if len(enabled) != len(stock) or not stock:
        raise ValueError("enabled and stock must be non-empty and of equal length")
    if any(s <= 0 for s in stock):
        raise ValueError("every stock sample must be a positive time")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    rng = rng or random.Random(0)
    ratios = [e / s for e, s in zip(enabled, stock)]
    n = len(ratios)
    estimates = sorted(_median(rng.choices(ratios, k=n)) for _ in range(resamples))
    tail = (1.0 - confidence) / 2.0
    low = estimates[int(tail * (resamples - 1))]
    high = estimates[round((1.0 - tail) * (resamples - 1))]
    return _median(ratios), low, high


def verdict(low: float, high: float, goal: float) -> str:
    """Decide an upper-bound goal on a ratio from its confidence interval.

    "met" when the whole interval is at or below ``goal``, "NOT met" when it is wholly above,
    and "undecided (CI too wide)" when it straddles the goal: more pairs or larger blocks are
    needed to decide.
    """
    if high <= goal:
        return "met"
    if low > goal:
        return "NOT met"
    return "undecided (CI too wide)"


def _time_block(
    operation: Operation, target: OverheadTargets, block: int, start: int, timer_ns: int = 0
) -> tuple[float, float]:
    """Return (CPU seconds, wall seconds) of ``block`` operations on this thread.

    ``timer_ns``: the timers' own CPU cost, taken off the CPU time (never below 1 ns).
    """
    cpu = time.thread_time_ns()
    wall = time.perf_counter_ns()
    for i in range(start, start + block):
        operation(target, i)
    spent = max(1, time.thread_time_ns() - cpu - timer_ns)
    return spent / 1e9, (time.perf_counter_ns() - wall) / 1e9


def timer_cost_ns(samples: int = 2001) -> int:
    """The median CPU time, in ns, that :func:`_time_block` measures around no work at all."""
    costs = []
    for _ in range(samples):
        cpu = time.thread_time_ns()
        time.perf_counter_ns()
        costs.append(time.thread_time_ns() - cpu)
    return int(_median(costs))


def measure_cpu(
    name: str,
    operation: Operation,
    stock: OverheadTargets,
    enabled: OverheadTargets,
    *,
    pairs: int = 4000,
    block: int = 1,
    progress: Callable[[float], None] = lambda _: None,
    rng: Optional[random.Random] = None,
) -> CpuOverhead:
    """Measure client CPU per operation over ``pairs`` alternating paired samples.

    The garbage collector is paused inside each pair (and run between pairs) so that a
    collection's cost does not land at random in one half of a pair.
    """
    if pairs < 2 or block < 1:
        raise ValueError(f"pairs must be >= 2 and block >= 1, got {pairs!r} and {block!r}")
    sides = {"stock": stock, "enabled": enabled}
    for target in sides.values():  # warm-up
        _time_block(operation, target, max(block, 20), 0)
    timer_ns = timer_cost_ns()
    cpu: dict[str, list[float]] = {"stock": [], "enabled": []}
    wall: dict[str, list[float]] = {"stock": [], "enabled": []}
    gc_was_enabled = gc.isenabled()
    try:
        for k in range(pairs):
            order = ("stock", "enabled") if k % 2 == 0 else ("enabled", "stock")
            gc.collect(0)
            gc.disable()
            for side in order:
                spent, elapsed = _time_block(operation, sides[side], block, k * block, timer_ns)
                cpu[side].append(spent / block)
                wall[side].append(elapsed / block)
            if gc_was_enabled:
                gc.enable()
            progress(1.0)
    finally:
        if gc_was_enabled:
            gc.enable()
    ratio, low, high = bootstrap_ratio_ci(cpu["enabled"], cpu["stock"], rng=rng)
    return CpuOverhead(
        operation=name,
        pairs=pairs,
        block=block,
        stock_cpu_us=_median(cpu["stock"]) * 1e6,
        enabled_cpu_us=_median(cpu["enabled"]) * 1e6,
        ratio=ratio,
        ratio_ci_low=low,
        ratio_ci_high=high,
        ratio_of_means=sum(cpu["enabled"]) / sum(cpu["stock"]),
        stock_wall_us=_median(wall["stock"]) * 1e6,
        enabled_wall_us=_median(wall["enabled"]) * 1e6,
        timer_ns=timer_ns,
    )


WRAPPERS = ("auto", "forwarding")
"""The native adapter's wrappers the enabled client gets: those its pymongo's signature calls
for (``auto``), or the forwarding ones whatever the signature (to measure their cost)."""


@contextmanager
def open_targets(
    uri: str, wrappers: str = "auto"
) -> Iterator[tuple[OverheadTargets, OverheadTargets, str]]:
    """Open the stock and the enabled client; yield both sides and the enabled preset's name.

    ``wrappers``: one of :data:`WRAPPERS`.
    """
    import backpressure
    from backpressure.adapters import seams

    if wrappers not in WRAPPERS:
        raise ValueError(f"wrappers must be one of {', '.join(WRAPPERS)}; got {wrappers!r}")
    stock_client: MongoClient[Document] = MongoClient(uri)
    try:
        with seams.forwarding_only() if wrappers == "forwarding" else contextlib.nullcontext():
            enabled_client: MongoClient[Document] = backpressure.MongoClient(uri)
    except BaseException:
        stock_client.close()
        raise
    try:
        state = state_of(enabled_client)
        preset = state.policy.name if state is not None else "disabled"
        seed = stock_client[_DATABASE]["overhead"]
        seed.drop()
        seed.insert_many([{"_id": i} for i in range(_SMALL_DOCS)])
        stock_client[_DATABASE]["overhead_inserts"].drop()
        counters = stock_client[_DATABASE]["overhead_counters"]
        counters.drop()
        counters.insert_one({"_id": 0, "n": 0})

        def side(client: MongoClient[Document]) -> OverheadTargets:
            database = client[_DATABASE]
            return OverheadTargets(
                client,
                database["overhead"],
                database["overhead_inserts"],
                database["overhead_counters"],
            )

        yield side(stock_client), side(enabled_client), preset
    finally:
        stock_client.close()
        enabled_client.close()


def measure_overhead(
    uri: str,
    *,
    pairs: int = 4000,
    block: int = 1,
    count_operations: int = 20,
    operations: Mapping[str, Operation] = OPERATIONS,
    progress: Callable[[float], None] = lambda _: None,
    wrappers: str = "auto",
) -> dict[str, Any]:
    """Count the work and measure the CPU of every operation; return JSON-ready data.

    ``wrappers``: see :data:`WRAPPERS`; the report names the flavour measured and the pymongo.
    """

    import pymongo

    from backpressure.adapters.native import wrapper_flavour

    rng = random.Random(12345)
    with open_targets(uri, wrappers) as (stock, enabled, preset):
        flavour = wrapper_flavour(enabled.client) or "backport"
        work = []
        for name, operation in operations.items():
            for label, target in (("stock", stock), ("enabled", enabled)):
                work.append(count_work(name, operation, target, label, count_operations))
        cpu = []
        gc.collect()
        for name, operation in operations.items():
            cpu.append(
                measure_cpu(
                    name,
                    operation,
                    stock,
                    enabled,
                    pairs=pairs,
                    block=block,
                    progress=progress,
                    rng=rng,
                )
            )
        same = _same_client_check(uri, stock, operations, pairs, block, rng)
    return {
        "preset": preset,
        "pymongo": pymongo.version,
        "wrappers": flavour,
        "tracer": tracer_name(),
        "work": [asdict(w) for w in work],
        "cpu": [asdict(c) for c in cpu],
        "same_client_check": None if same is None else asdict(same),
    }


def _same_client_check(
    uri: str,
    stock: OverheadTargets,
    operations: Mapping[str, Operation],
    pairs: int,
    block: int,
    rng: random.Random,
) -> Optional[CpuOverhead]:
    """Measure a second stock client against the first, the same way (an A/A check).

    Two identical clients do not cost exactly the same (the enabled one is always the one
    opened second); the ratio of this check, ideally 1, shows how far the method's own bias
    goes beyond its confidence interval.  Run on find_one (None when it is not measured).
    """
    operation = operations.get("find_one")
    if operation is None:
        return None
    second: MongoClient[Document] = MongoClient(uri)
    try:
        database = second[_DATABASE]
        other = OverheadTargets(
            second,
            database["overhead"],
            database["overhead_inserts"],
            database["overhead_counters"],
        )
        return measure_cpu(
            "find_one, second stock client / first", operation, stock, other,
            pairs=pairs, block=block, rng=rng,
        )  # fmt: skip
    finally:
        second.close()


# -- the instruction count (callgrind) -----------------------------------------------------------

INSTRUCTION_GOALS: Mapping[str, float] = {
    "insert_one": 1.01,
    "find_one": 1.01,
    "find+getMore": 1.01,
    "aggregate": 1.01,
    "transaction": 1.03,
}
"""Issue 47's goals for enabled/stock per operation, which the instruction mode applies to its
instruction ratio."""

INSTRUCTION_VARIANTS = ("stock", "enabled", "-_process_response", "-_select_server", "-all")
"""The sides the instruction mode counts, in order: the stock client, the enabled client, then
the enabled client with its instance wrappers taken off one at a time (``_process_response``,
then also ``_select_server``, then also ``_retry_internal``): the differences between
consecutive sides attribute the added instructions to each wrapper, and the last side's excess
over stock to what the installation changes besides them (pool, class-level hooks)."""

WRAPPED_NAMES = ("_process_response", "_select_server", "_retry_internal")
"""The enabled client's instance wrappers, in the order the instruction mode takes them off."""

_MARKER_SYMBOL = "os_getppid"
"""The C function callgrind dumps its counters before (``--dump-before``): ``os.getppid``,
which neither pymongo nor this package calls, marks the end of each counted segment."""


class ValgrindMissingError(RuntimeError):
    """``--instructions`` needs valgrind on the PATH."""


@dataclass(frozen=True)
class InstructionCount:
    """Instructions per operation of one side, from the main thread's callgrind counters."""

    operation: str
    side: str
    """One of :data:`INSTRUCTION_VARIANTS`."""
    low: int
    """Instructions of the segment of ``low_ops`` operations."""
    high: int
    """Instructions of the segment of ``high_ops`` operations."""
    low_ops: int
    high_ops: int

    @property
    def per_op(self) -> float:
        """Instructions per operation: the difference of the two segments over that of their
        operation counts (the marker's own cost and a segment's fixed cost cancel)."""
        return (self.high - self.low) / (self.high_ops - self.low_ops)


def callgrind_total(text: str) -> int:
    """The event total of one callgrind output file (its ``totals:`` or ``summary:`` line)."""
    for line in text.splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise ValueError("no totals: or summary: line in the callgrind output")


def main_thread_dumps(folder: Path, base: str = "callgrind.out") -> list[int]:
    """The main thread's totals of every dump in ``folder``, in dump order.

    With ``--separate-threads=yes`` callgrind writes ``<base>.<dump>-<thread>`` per dump and
    thread (the last dump, at exit, without its number when nothing else was dumped); the main
    thread is thread 01.
    """
    pattern = re.compile(re.escape(base) + r"(?:\.(\d+))?-01$")
    found = []
    for path in folder.iterdir():
        match = pattern.fullmatch(path.name)
        if match is not None:
            number = int(match[1]) if match[1] else 1 << 30  # the final dump has no number
            found.append((number, callgrind_total(path.read_text(encoding="utf-8"))))
    return [total for _, total in sorted(found)]


def instruction_segments(
    operations: Sequence[str], sides: Sequence[str] = INSTRUCTION_VARIANTS
) -> list[tuple[str, str, str]]:
    """The counted segments in the order the child runs them: per operation and side, a
    warm-up, then ``low`` then ``high`` (``(operation, side, segment)``)."""
    return [
        (name, side, segment)
        for name in operations
        for side in sides
        for segment in ("warm-up", "low", "high")
    ]


def counts_from_dumps(
    totals: Sequence[int],
    operations: Sequence[str],
    low_ops: int,
    high_ops: int,
    sides: Sequence[str] = INSTRUCTION_VARIANTS,
) -> list[InstructionCount]:
    """Pair the main thread's dump totals with the segments that made them.

    One dump per segment of :func:`instruction_segments` (the first one's includes the start-up,
    which only a warm-up holds), then a final dump at exit.
    """
    segments = instruction_segments(operations, sides)
    if len(totals) < len(segments):
        raise ValueError(f"expected at least {len(segments)} dumps, got {len(totals)}")
    by_key = dict(zip(segments, totals))
    return [
        InstructionCount(
            name, side, by_key[(name, side, "low")], by_key[(name, side, "high")], low_ops, high_ops
        )
        for name in operations
        for side in sides
    ]


def _run_counted(
    operation: Operation, target: OverheadTargets, count: int, start: int, marker: Callable[[], int]
) -> None:
    """Run ``count`` operations with the collector paused, then mark the segment's end."""
    gc.collect()
    gc.disable()
    try:
        for i in range(start, start + count):
            operation(target, i)
        marker()
    finally:
        gc.enable()


def instruction_child(
    uri: str, names: Sequence[str], low_ops: int, high_ops: int, warmup: int, wrappers: str
) -> None:
    """The process callgrind runs: every segment of :func:`instruction_segments`, in order."""
    import os

    marker = os.getppid
    with open_targets(uri, wrappers) as (stock, enabled, _):
        client = enabled.client
        installed = {name: vars(client)[name] for name in WRAPPED_NAMES if name in vars(client)}
        for name in names:
            operation = OPERATIONS[name]
            for side in INSTRUCTION_VARIANTS:
                if side.startswith("-"):  # take the next wrapper off (the class's method shows)
                    for wrapped in WRAPPED_NAMES if side == "-all" else (side[1:],):
                        vars(client).pop(wrapped, None)
                target = stock if side == "stock" else enabled
                _run_counted(operation, target, warmup, 0, marker)
                _run_counted(operation, target, low_ops, warmup, marker)
                _run_counted(operation, target, high_ops, warmup + low_ops, marker)
            for wrapped, wrapper in installed.items():  # put them back for the next operation
                setattr(client, wrapped, wrapper)


def stock_rate(uri: str, names: Sequence[str], ops: int = 60, blocks: int = 7) -> dict[str, float]:
    """Stock client CPU per operation in µs, per operation (the minimum over ``blocks`` blocks
    of ``ops`` operations: interference only adds time).  The instruction mode divides the
    stock path's instructions by it to turn instructions into microseconds."""
    with open_targets(uri) as (stock, _, _):
        result = {}
        for name in names:
            operation = OPERATIONS[name]
            for i in range(20):
                operation(stock, i)
            best = float("inf")
            for b in range(blocks):
                gc.collect()
                gc.disable()
                try:
                    cpu = time.thread_time_ns()
                    for i in range(ops):
                        operation(stock, b * ops + i)
                    best = min(best, (time.thread_time_ns() - cpu) / ops / 1e3)
                finally:
                    gc.enable()
            result[name] = best
    return result


def measure_instructions(
    uri: str,
    *,
    operations: Sequence[str] = tuple(OPERATIONS),
    low_ops: int = 100,
    high_ops: int = 400,
    warmup: int = 100,
    wrappers: str = "auto",
    valgrind: Optional[str] = None,
) -> dict[str, Any]:
    """Count instructions per operation under callgrind (main thread only); JSON-ready data.

    One child process per operation runs under ``valgrind --tool=callgrind
    --separate-threads=yes``; each segment ends with a marker call callgrind dumps before, so
    every segment has its own counters and pymongo's monitor threads are counted apart.  Per
    side, instructions per operation = (high segment - low segment) / (high_ops - low_ops).

    Raises:
        ValgrindMissingError: valgrind is not on the PATH.
    """
    import os
    import shutil
    import subprocess
    import tempfile

    import pymongo

    valgrind = valgrind or shutil.which("valgrind")
    if valgrind is None:
        raise ValgrindMissingError("--instructions needs valgrind (callgrind) on the PATH")
    if not 0 < low_ops < high_ops:
        raise ValueError(f"expected 0 < low_ops < high_ops, got {low_ops!r} and {high_ops!r}")
    unknown = [name for name in operations if name not in OPERATIONS]
    if unknown:
        raise ValueError(f"unknown operations: {', '.join(unknown)}")
    with open_targets(uri, wrappers) as (_, enabled, preset):
        from backpressure.adapters.native import wrapper_flavour

        flavour = wrapper_flavour(enabled.client) or "backport"
    rates = stock_rate(uri, operations)
    code = (
        "import sys, json; from backpressure.bench.overhead import instruction_child; "
        "instruction_child(*json.loads(sys.argv[1]))"
    )
    env = dict(os.environ, PYTHONHASHSEED="0")
    root = str(Path(_PACKAGE_DIR).parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    counts: list[InstructionCount] = []
    for name in operations:  # one process per operation: a failure names its operation
        spec = [uri, [name], low_ops, high_ops, warmup, wrappers]
        with tempfile.TemporaryDirectory(prefix="bp-callgrind-") as folder:
            command = [
                valgrind, "--tool=callgrind", "--separate-threads=yes",
                f"--dump-before={_MARKER_SYMBOL}",
                f"--callgrind-out-file={Path(folder) / 'callgrind.out'}",
                sys.executable, "-c", code, json.dumps(spec),
            ]  # fmt: skip
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(
                    f"callgrind run of {name} failed ({done.returncode}): {done.stderr[-2000:]}"
                )
            totals = main_thread_dumps(Path(folder))
        counts += counts_from_dumps(totals, [name], low_ops, high_ops)
    return instruction_report(counts, rates, preset=preset, pymongo=pymongo.version,
                              wrappers=flavour)  # fmt: skip


def instruction_report(
    counts: Sequence[InstructionCount],
    rates: Mapping[str, float],
    *,
    preset: str,
    pymongo: str,
    wrappers: str,
) -> dict[str, Any]:
    """The instruction mode's JSON-ready section: per operation the stock and enabled
    instructions, the ratio, and the added instructions attributed to each wrapper (in
    instructions and in µs at the stock path's measured rate)."""
    per = {(c.operation, c.side): c.per_op for c in counts}
    rows = []
    for name in dict.fromkeys(c.operation for c in counts):
        stock, enabled = per[(name, "stock")], per[(name, "enabled")]
        no_pr, no_ss, bare = (per[(name, s)] for s in INSTRUCTION_VARIANTS[2:])
        us_per_op = rates.get(name)
        rate = stock / us_per_op if us_per_op else None  # instructions per µs
        parts = {
            "_process_response": enabled - no_pr,
            "_select_server": no_pr - no_ss,
            "_retry_internal": no_ss - bare,
            "rest": bare - stock,
        }
        rows.append(
            {
                "operation": name,
                "stock": stock,
                "enabled": enabled,
                "added": enabled - stock,
                "ratio": enabled / stock,
                "stock_cpu_us": us_per_op,
                "instructions_per_us": rate,
                "attribution": {
                    part: {"instructions": value, "us": value / rate if rate else None}
                    for part, value in parts.items()
                },
            }
        )
    return {
        "mode": "instructions",
        "preset": preset,
        "pymongo": pymongo,
        "wrappers": wrappers,
        "counts": [asdict(c) for c in counts],
        "instructions": rows,
    }
