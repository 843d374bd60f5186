"""The client policies the simulator compares, and how each one reaches the real decision core.

* ``no-retries``: one attempt per operation (pymongo with ``maxAdaptiveRetries=0``).
* ``current``: the package's ``current`` preset, which is also what stock pymongo >= 4.17 does
  (two overload retries, backoff ceilings 0.2 and 0.4 s, no budget, no retargeting).
* ``draft``: the package's ``draft`` preset (five retries, per-client 1000-token bucket,
  retargeting).
* ``retry-storm``: a hand-written application loop, three immediate retries on any error (what
  ``tenacity.retry(stop=stop_after_attempt(4))`` without a wait does).
* ``adaptive``: ``backpressure.ADAPTIVE``, picked up when the installed package has it.

Any :class:`~backpressure.core.policy.Policy` can be simulated too: :func:`resolve` accepts one.
For the core policies, every decision (retry or not, the delay, the budget, retargeting and,
for adaptive policies, the per-server pacing) is made by the package's own objects, built with
the simulator's clock and random source; nothing of the policy is re-implemented here.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Union

import backpressure
from backpressure.core.decision import RetryController
from backpressure.core.policy import CURRENT_SPEC, DRAFT, Policy
from backpressure.workload.policies import default_first
from backpressure.workload.policies import default_policy_name as default_name
from backpressure.workload.policies import policy_label as display_name

__all__ = [
    "ADMISSION_AVAILABLE",
    "POLICY_NAMES",
    "Admission",
    "SimPolicy",
    "available_policies",
    "default_first",
    "default_name",
    "display_name",
    "make_admission",
    "resolve",
]

KINDS: tuple[str, ...] = ("none", "core", "storm")
"""``none``: one attempt; ``core``: the package's decision core; ``storm``: immediate retries."""


@dataclass(frozen=True)
class SimPolicy:
    """One way of calling the servers, as the simulator runs it."""

    name: str
    description: str
    kind: str
    policy: Optional[Policy] = None
    """The package policy (kind ``core`` only)."""
    storm_retries: int = 3
    """Immediate retries of the ``storm`` kind."""

    def __post_init__(self) -> None:
        """Validate the kind and its policy."""
        if self.kind not in KINDS:
            raise ValueError(f"SimPolicy.kind must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == "core") != (self.policy is not None):
            raise ValueError("SimPolicy.policy must be given exactly when kind is 'core'")
        if self.storm_retries < 0:
            raise ValueError(f"SimPolicy.storm_retries must be >= 0, got {self.storm_retries!r}")


def _adaptive_preset() -> Optional[Policy]:
    """``backpressure.ADAPTIVE`` when the installed package has it."""
    preset = getattr(backpressure, "ADAPTIVE", None)
    return preset if isinstance(preset, Policy) else None


def available_policies() -> dict[str, SimPolicy]:
    """Every named policy, in report order (``adaptive`` only when the package has it)."""
    policies = [
        SimPolicy("no-retries", "one attempt, no overload retries", "none"),
        SimPolicy("retry-storm", "hand-written: 3 immediate retries on any error", "storm"),
        SimPolicy("current", "current spec = stock pymongo >= 4.17", "core", CURRENT_SPEC),
        SimPolicy("draft", "draft spec, per-client 1000-token bucket", "core", DRAFT),
    ]
    adaptive = _adaptive_preset()
    if adaptive is not None:
        policies.append(SimPolicy("adaptive", "adaptive per-server pacing", "core", adaptive))
    return {policy.name: policy for policy in policies}


POLICY_NAMES: tuple[str, ...] = tuple(available_policies())
"""Names of the policies available with the installed package, in report order."""


def resolve(value: Union[str, Policy, SimPolicy]) -> SimPolicy:
    """Turn a policy name, a package Policy or a SimPolicy into a SimPolicy.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: any other type.
    """
    if isinstance(value, SimPolicy):
        return value
    if isinstance(value, Policy):
        return SimPolicy(value.name, f"package policy {value.name!r}", "core", value)
    if isinstance(value, str):
        known = available_policies()
        policy = known.get(value)
        if policy is None:
            raise ValueError(f"unknown policy {value!r}; known policies: {', '.join(known)}")
        return policy
    raise TypeError(f"a policy must be a name, a Policy or a SimPolicy, got {value!r}")


def resolve_all(values: Sequence[Union[str, Policy, SimPolicy]]) -> list[SimPolicy]:
    """Resolve each value; names must be distinct."""
    policies = [resolve(value) for value in values]
    names = [policy.name for policy in policies]
    if len(set(names)) != len(names):
        raise ValueError(f"policy names must be distinct, got {names}")
    if not policies:
        raise ValueError("at least one policy is needed")
    return policies


class Admission(Protocol):
    """The per-server admission state of an adaptive policy, as the simulator drives it."""

    def admit(
        self, server: Optional[tuple[str, int]], deadline: Optional[float] = None, **extra: Any
    ) -> Any:
        """Return an object with ``wait`` (seconds), and ``reason`` when the attempt is refused."""
        ...

    def recheck(self, server: Optional[tuple[str, int]], admission: Any) -> Any:
        """Once a wait is over: the further wait (seconds), or an object with ``reason``."""
        ...

    def record(self, server: Optional[tuple[str, int]], *, overloaded: bool, **extra: Any) -> None:
        """Account for the reply of an attempt."""
        ...

    def is_paced(self, server: tuple[str, int]) -> bool:
        """Whether attempts to ``server`` are paced now (reads avoid it)."""
        ...


def _admission_factory() -> Optional[Callable[..., Optional[Admission]]]:
    """The package's builder of per-server admission control, when the package has one."""
    try:
        module = importlib.import_module("backpressure.core.adaptive")
    except ImportError:
        return None
    for name in ("admission_for", "AdmissionControl"):
        factory = getattr(module, name, None)
        if callable(factory):
            return factory  # type: ignore[no-any-return]
    return None


ADMISSION_AVAILABLE: bool = _admission_factory() is not None
"""Whether the installed package has per-server admission control (the adaptive policy)."""


def make_admission(policy: Policy, clock: Callable[[], float]) -> Optional[Admission]:
    """Build the package's admission control for an adaptive ``policy`` (None otherwise)."""
    if not getattr(policy, "adaptive", False):
        return None
    factory = _admission_factory()
    if factory is None:
        return None
    return factory(policy, clock=clock)


def _accepts(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function`` takes a keyword argument called ``name``."""
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def make_controller(
    policy: Policy, random: Callable[[], float], clock: Callable[[], float]
) -> tuple[RetryController, Optional[Admission]]:
    """Build a client's controller as the package's switch does, with its admission control.

    The admission control (adaptive policies only) is handed to the controller when the
    controller takes one, so the package's own wiring is what the simulator runs.
    """
    admission = make_admission(policy, clock)
    if admission is not None and _accepts(RetryController.__init__, "admission"):
        wiring: dict[str, Any] = {"admission": admission}
        controller = RetryController(policy, random=random, clock=clock, **wiring)
    else:
        controller = RetryController(policy, random=random, clock=clock)
    return controller, admission


def record_takes_admission(admission: Admission) -> bool:
    """Whether ``admission.record`` wants the answer ``admit`` gave for the attempt."""
    return _accepts(admission.record, "admission")


def admit_takes_retry(admission: Admission) -> bool:
    """Whether ``admission.admit`` takes ``retry`` (a retry of a pushed-back attempt)."""
    return _accepts(admission.admit, "retry")


def admit_takes_sheddable(admission: Admission) -> bool:
    """Whether ``admission.admit`` takes ``sheddable`` (the operation may be shed first)."""
    return _accepts(admission.admit, "sheddable")


def describe(policies: Mapping[str, SimPolicy]) -> list[tuple[str, str]]:
    """``(name, description)`` pairs for listings."""
    return [(name, policy.description) for name, policy in policies.items()]
