"""The overload benchmark's plan: scenarios, loads and durations, shared by the benchmark
(:mod:`backpressure.bench.overload`) and the benchmark's agreement harness with the simulator
(:mod:`backpressure.bench.agreement`); the simulator's bench-shaped scenarios read it too, and
the simulator never imports the benchmark."""

from __future__ import annotations

from dataclasses import dataclass

from backpressure.workload.driver import Phase

__all__ = ["HOT_MEMBER", "OverloadPlan"]

HOT_MEMBER = 1
"""Index of the rate-limited member in the hot-member scenario (a secondary)."""


@dataclass(frozen=True)
class OverloadPlan:
    """Scenarios, loads and durations of the overload benchmark."""

    capacity: float = 200.0
    """Closed loop: server capacity C, ops/s."""
    closed_workers: tuple[int, ...] = (32, 128, 512)
    closed_seconds: float = 10.0
    open_capacity: float = 100.0
    """Open loop: C, ops/s (lower than the closed loop's so 10x C stays within what the client
    machine can offer)."""
    open_loads: tuple[float, ...] = (1.5, 3.0, 10.0)
    open_threads: int = 512
    warmup: float = 1.0
    """Seconds at ``base_load`` before the sustained load and the burst."""
    sustained: float = 5.0
    burst_load: float = 3.0
    burst: float = 3.0
    recovery: float = 3.0
    base_load: float = 0.5
    hot_capacity: float = 50.0
    """Hot member: the limited secondary's capacity, ops/s."""
    hot_workers: int = 32
    hot_seconds: float = 5.0
    allowed_wait: float = 1.0
    """Seconds an operation may take from its arrival (its CSOT deadline)."""
    burst_seconds: float = 1.0
    """The server limiter's burst allowance, seconds of capacity."""
    goodput_skip: float = 1.0
    """Seconds at the start of a closed loop left out of its goodput (the limiter's burst)."""

    def open_shapes(self) -> dict[str, list[Phase]]:
        """The open-loop shapes by label."""
        shapes = {
            f"open {load:g}x": [
                Phase("warmup", self.base_load, self.warmup),
                Phase("overload", load, self.sustained),
            ]
            for load in self.open_loads
        }
        shapes[f"burst {self.burst_load:g}x {self.burst:g}s"] = [
            Phase("steady", self.base_load, self.warmup),
            Phase("burst", self.burst_load, self.burst),
            Phase("recovery", self.base_load, self.recovery),
        ]
        return shapes

    def seconds_per_arm(self) -> float:
        """Planned seconds of load per arm."""
        closed = self.closed_seconds * len(self.closed_workers) + self.hot_seconds
        shapes = sum(p.duration for phases in self.open_shapes().values() for p in phases)
        return closed + shapes
