"""The shared load generator of the demo and the benchmarks: phases, policies, metrics."""

from __future__ import annotations

from backpressure.workload.arms import (
    POLICIES,
    POLICY_NAMES,
    ClientArm,
    PolicyClient,
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
    run_policy,
)

__all__ = [
    "POLICIES",
    "POLICY_NAMES",
    "WORKLOAD_COMMANDS",
    "ClientArm",
    "LoadTarget",
    "Phase",
    "PhaseResult",
    "PolicyClient",
    "RunResult",
    "WorkloadConfig",
    "has_native_backpressure",
    "received_commands",
    "run_policy",
]
