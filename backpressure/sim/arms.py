"""The arms the simulator compares, and how each one reaches the real decision core.

* ``no-retries``: one attempt per operation (pymongo with ``maxAdaptiveRetries=0``).
* ``current``: the package's ``current`` preset, which is also what stock pymongo >= 4.17 does
  (two overload retries, backoff ceilings 0.2 and 0.4 s, no budget, no retargeting).
* ``draft``: the package's ``draft`` preset (five retries, per-client 1000-token bucket,
  retargeting).
* ``retry-storm``: a hand-written application loop, three immediate retries on any error (what
  ``tenacity.retry(stop=stop_after_attempt(4))`` without a wait does).
* ``adaptive``: ``backpressure.ADAPTIVE``, picked up when the installed package has it.

Any :class:`~backpressure.core.policy.Policy` can be simulated too: :func:`resolve` accepts one.
For the core arms, every decision (retry or not, the delay, the budget, retargeting and,
for an adaptive policy, the per-server pacing and its waits) is made by the package's own attempt
cycle (:class:`~backpressure.core.cycle.AttemptCycle`, the one the pymongo adapters run), built
with the simulator's clock and random source; nothing of the policy is re-implemented here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Union

import backpressure
from backpressure.core.adaptive import pacers_for
from backpressure.core.client_state import ClientState
from backpressure.core.cycle import SEND, AttemptCycle, Backoff, Step, Stop, WaitOut
from backpressure.core.decision import RetryController
from backpressure.core.overrides import Criticality
from backpressure.core.policy import CURRENT_SPEC, DRAFT, Policy
from backpressure.workload.arms import arm_label as display_name
from backpressure.workload.arms import default_first
from backpressure.workload.arms import default_policy_name as default_name

__all__ = [
    "ARM_NAMES",
    "Cycle",
    "CycleFactory",
    "SimArm",
    "available_arms",
    "cycle_factory",
    "default_first",
    "default_name",
    "display_name",
    "resolve",
]

KINDS: tuple[str, ...] = ("none", "core", "storm")
"""``none``: one attempt; ``core``: the package's decision core; ``storm``: immediate retries."""


@dataclass(frozen=True)
class SimArm:
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
            raise ValueError(f"SimArm.kind must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == "core") != (self.policy is not None):
            raise ValueError("SimArm.policy must be given exactly when kind is 'core'")
        if self.storm_retries < 0:
            raise ValueError(f"SimArm.storm_retries must be >= 0, got {self.storm_retries!r}")


STOCK = CURRENT_SPEC.replace(route_around=False, name="stock")
"""Stock pymongo >= 4.17 as the simulator runs it: the current spec's retries, no server choice."""


def _adaptive_preset() -> Optional[Policy]:
    """``backpressure.ADAPTIVE`` when the installed package has it."""
    preset = getattr(backpressure, "ADAPTIVE", None)
    return preset if isinstance(preset, Policy) else None


def available_arms() -> dict[str, SimArm]:
    """Every named arm, in report order (``adaptive`` only when the package has it)."""
    arms = [
        SimArm("no-retries", "one attempt, no overload retries", "none"),
        SimArm("retry-storm", "hand-written: 3 immediate retries on any error", "storm"),
        SimArm("current", "the default: current spec + server choice", "core", CURRENT_SPEC),
        SimArm("stock", "stock pymongo >= 4.17 (current spec)", "core", STOCK),
        SimArm("draft", "draft spec, per-client 1000-token bucket", "core", DRAFT),
    ]
    adaptive = _adaptive_preset()
    if adaptive is not None:
        arms.append(SimArm("adaptive", "adaptive per-server pacing", "core", adaptive))
    return {arm.name: arm for arm in arms}


ARM_NAMES: tuple[str, ...] = tuple(available_arms())
"""Names of the arms available with the installed package, in report order."""


def resolve(value: Union[str, Policy, SimArm]) -> SimArm:
    """Turn an arm name, a package Policy or a SimArm into a SimArm.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
        TypeError: any other type.
    """
    if isinstance(value, SimArm):
        return value
    if isinstance(value, Policy):
        return SimArm(value.name, f"package policy {value.name!r}", "core", value)
    if isinstance(value, str):
        known = available_arms()
        arm = known.get(value)
        if arm is None:
            raise ValueError(f"unknown arm {value!r}; known arms: {', '.join(known)}")
        return arm
    raise TypeError(f"an arm must be a name, a Policy or a SimArm, got {value!r}")


def resolve_all(values: Sequence[Union[str, Policy, SimArm]]) -> list[SimArm]:
    """Resolve each value; names must be distinct."""
    arms = [resolve(value) for value in values]
    names = [arm.name for arm in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must be distinct, got {names}")
    if not arms:
        raise ValueError("at least one arm is needed")
    return arms


class Cycle(Protocol):
    """What the simulator's executor asks for each operation (:class:`AttemptCycle`'s calls).

    The core arms run the package's own :class:`~backpressure.core.cycle.AttemptCycle`;
    ``no-retries`` and ``retry-storm`` are hand-written application loops, given the same shape
    so that one executor runs every arm.
    """

    def avoiding(
        self,
    ) -> Optional[Callable[[list[tuple[str, int]]], list[tuple[str, int]]]]:
        """What draws the servers a selection with a choice avoids now (None: none)."""
        ...

    def admit(self, server: tuple[str, int], deadline: Optional[float]) -> Step:
        """Send, wait, or stop (refused) before an attempt to ``server``."""
        ...

    def wait_out(self, step: Step) -> WaitOut:
        """The waits of ``step``, ``admit``'s :class:`Wait`: their seconds, then the answer."""
        ...

    def started(self, server: tuple[str, int]) -> None:
        """An attempt was sent to ``server``."""
        ...

    def succeeded(self) -> None:
        """The attempt succeeded."""
        ...

    def failed(
        self, error: BaseException, *, deadline: Optional[float] = None, now: Optional[float] = None
    ) -> Union[Backoff, Stop]:
        """The attempt failed with ``error``: back off and try again, or stop."""
        ...


CycleFactory = Callable[[str, bool], Cycle]
"""Builds the cycle of one operation: ``(name, sheddable)``."""


class _OneAttempt:
    """``no-retries``: one attempt, whatever happens."""

    __slots__ = ()

    def avoiding(
        self,
    ) -> Optional[Callable[[list[tuple[str, int]]], list[tuple[str, int]]]]:
        """Nothing is avoided: pymongo's own choice."""
        return None

    def admit(self, server: tuple[str, int], deadline: Optional[float]) -> Step:
        """Send at once."""
        return SEND

    def wait_out(self, step: Step) -> WaitOut:  # pragma: no cover - admit never answers Wait
        """Nothing to wait out: send at once."""
        return WaitOut(self.waited, step)

    def waited(self) -> Step:  # pragma: no cover - admit never answers Wait
        """Send at once."""
        return SEND

    def started(self, server: tuple[str, int]) -> None:
        """Nothing to record."""

    def succeeded(self) -> None:
        """Nothing to record."""

    def failed(
        self, error: BaseException, *, deadline: Optional[float] = None, now: Optional[float] = None
    ) -> Union[Backoff, Stop]:
        """Give up."""
        return Stop(error, None)


class _Storm(_OneAttempt):
    """``retry-storm``: ``retries`` immediate retries of any error, until the deadline."""

    __slots__ = ("attempts", "retries")

    def __init__(self, retries: int) -> None:
        """Allow ``retries`` immediate retries."""
        self.retries = retries
        self.attempts = 0

    def started(self, server: tuple[str, int]) -> None:
        """Count the attempt."""
        self.attempts += 1

    def failed(
        self, error: BaseException, *, deadline: Optional[float] = None, now: Optional[float] = None
    ) -> Union[Backoff, Stop]:
        """Retry at once while retries remain and the deadline has not passed."""
        expired = deadline is not None and now is not None and now >= deadline
        if self.attempts > self.retries or expired:
            return Stop(error, None)
        return Backoff(0.0, False, None)


def cycle_factory(
    arm: SimArm,
    random: Callable[[], float],
    clock: Callable[[], float],
    logger: logging.Logger,
) -> tuple[CycleFactory, Optional[ClientState]]:
    """Build one client's cycle factory (and its state, for the core arms).

    A core arm's client is wired as the package's switch wires an enabled client: a
    ``RetryController`` with the policy's pacing (``pacers_for``), a ``ClientState``, and
    one ``AttemptCycle`` per operation, on the simulator's clock and random source.
    """
    if arm.policy is None:
        if arm.kind == "storm":
            retries = arm.storm_retries
            return (lambda _name, _sheddable: _Storm(retries)), None
        one = _OneAttempt()
        return (lambda _name, _sheddable: one), None
    core = arm.policy
    controller = RetryController(
        core, random=random, clock=clock, pacing=pacers_for(core, clock=clock)
    )
    state = ClientState(controller, logger=logger)

    def new_cycle(name: str, sheddable: bool) -> Cycle:
        return AttemptCycle(state, name, criticality=Criticality.SHEDDABLE if sheddable else None)

    return new_cycle, state


def describe(arms: Mapping[str, SimArm]) -> list[tuple[str, str]]:
    """``(name, description)`` pairs for listings."""
    return [(name, arm.description) for name, arm in arms.items()]
