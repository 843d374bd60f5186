"""A fleet-scale arm lab: the real decision core in virtual time, and the physical limit.

``backpressure.sim.oracle`` (the physical-limit oracle) needs only the standard library.  The
simulator, ``run`` and the runs of ``python -m backpressure.sim`` need the ``sim`` extra (SimPy;
without it they raise, or print, :class:`~backpressure.MissingExtraError`); the names are
imported on first use::

    from backpressure.sim import run

    result = run("sustained-3x", ["no-retries", "current", "draft"], seed=1)
    result.arms["draft"].app_errors
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from backpressure.core.extras import MissingExtraError
from backpressure.sim.oracle import (
    Capacity,
    PhysicalLimit,
    closed_loop_min_error_fraction,
    physical_limit,
    physical_min_errors,
)

if TYPE_CHECKING:
    from backpressure.sim.arms import SimArm, available_arms
    from backpressure.sim.model import (
        ClientGroup,
        ClosedLoop,
        LimiterSpec,
        OpenLoop,
        Phase,
        Scenario,
        ServerSpec,
    )
    from backpressure.sim.runner import ArmResult, Result, run
    from backpressure.sim.scenarios import SCENARIOS, scenario, scenario_names

__all__ = [
    "SCENARIOS",
    "ArmResult",
    "Capacity",
    "ClientGroup",
    "ClosedLoop",
    "LimiterSpec",
    "OpenLoop",
    "Phase",
    "PhysicalLimit",
    "Result",
    "Scenario",
    "ServerSpec",
    "SimArm",
    "available_arms",
    "closed_loop_min_error_fraction",
    "physical_limit",
    "physical_min_errors",
    "run",
    "scenario",
    "scenario_names",
]

_LAZY = {
    "ClientGroup": "backpressure.sim.model",
    "ClosedLoop": "backpressure.sim.model",
    "LimiterSpec": "backpressure.sim.model",
    "OpenLoop": "backpressure.sim.model",
    "Phase": "backpressure.sim.model",
    "Scenario": "backpressure.sim.model",
    "ServerSpec": "backpressure.sim.model",
    "SimArm": "backpressure.sim.arms",
    "available_arms": "backpressure.sim.arms",
    "ArmResult": "backpressure.sim.runner",
    "Result": "backpressure.sim.runner",
    "run": "backpressure.sim.runner",
    "SCENARIOS": "backpressure.sim.scenarios",
    "scenario": "backpressure.sim.scenarios",
    "scenario_names": "backpressure.sim.scenarios",
}


def __getattr__(name: str) -> Any:
    """Import the simulator's names on first use.

    Raises:
        MissingExtraError: SimPy (the ``sim`` extra) is not installed.
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'backpressure.sim' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name == "simpy":
            raise MissingExtraError("simpy", "sim", f"backpressure.sim.{name}") from exc
        raise
    globals()[name] = value
    return value
