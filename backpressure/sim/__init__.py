"""A fleet-scale policy lab: the real decision core in virtual time, and the physical limit.

``backpressure.sim.oracle`` needs nothing beyond the standard library; the simulator itself
(``run``, scenarios, the CLI ``python -m backpressure.sim``) needs the ``sim`` extra (SimPy).
"""

from __future__ import annotations

from backpressure.sim.oracle import (
    Capacity,
    PhysicalLimit,
    closed_loop_min_error_fraction,
    physical_limit,
    physical_min_errors,
)

__all__ = [
    "Capacity",
    "PhysicalLimit",
    "closed_loop_min_error_fraction",
    "physical_limit",
    "physical_min_errors",
]
