"""The shared load generator of the demo and the benchmarks: phases, arms, metrics."""

from __future__ import annotations

from backpressure.workload.arms import (
    ARM_NAMES,
    ARMS,
    ArmClient,
    ClientArm,
    has_native_backpressure,
)
from backpressure.workload.driver import (
    WORKLOAD_COMMANDS,
    LoadTarget,
    Phase,
    PhaseResult,
    RunResult,
    WorkloadConfig,
    received_commands,
    run_arm,
)

__all__ = [
    "ARMS",
    "ARM_NAMES",
    "WORKLOAD_COMMANDS",
    "ArmClient",
    "ClientArm",
    "LoadTarget",
    "Phase",
    "PhaseResult",
    "RunResult",
    "WorkloadConfig",
    "has_native_backpressure",
    "received_commands",
    "run_arm",
]
