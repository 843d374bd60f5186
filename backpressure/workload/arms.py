"""The arms the demo and the benchmarks compare: the ways of calling MongoDB under overload.

Each :class:`ClientArm` opens an :class:`ArmClient`: a pymongo client plus the way the
application calls it (``call(fn)``), and the number of retries its budget refused.

* ``no-retries``: stock pymongo without overload retries (``maxAdaptiveRetries=0`` where the
  installed pymongo has the option, a plain client otherwise).
* ``hand-written``: the retry loop people write with tenacity: 3 immediate retries on any error.
* ``pymongo-native``: pymongo's own overload retries (pymongo >= 4.17 only).
* ``current`` / ``draft`` (and ``adaptive`` where the package has it): this package's presets
  through ``backpressure.MongoClient``.
* ``no-route-around``: the default preset with server choice off (``routeAroundOverload=false``),
  so a benchmark can show what server choice alone changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, TypeVar

import pymongo
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from backpressure.core import policy as _presets
from backpressure.core.policy import CURRENT_SPEC, DRAFT, Policy
from backpressure.switch.client import budget as budget_of

__all__ = [
    "ARMS",
    "ARMS_KEY",
    "ARM_KEY",
    "ARM_NAMES",
    "NO_ROUTE_AROUND",
    "STOCK",
    "ArmClient",
    "ClientArm",
    "arm_label",
    "default_first",
    "default_policy_name",
    "from_file",
    "has_native_backpressure",
    "to_file",
]

T = TypeVar("T")
Document = dict[str, Any]


def default_policy_name() -> str:
    """The name of the package's default policy, read now (it may change between releases)."""
    return str(_presets.DEFAULT_POLICY.name)


def default_first(names: Sequence[str]) -> list[str]:
    """``names`` with the default policy's arm moved to the front (the order otherwise kept):
    every table that compares arms shows the default's row first."""
    default = default_policy_name()
    return sorted(names, key=lambda name: name != default)


def arm_label(name: str) -> str:
    """An arm's row label in every table: ``default (<name>)`` for the default, and pymongo's
    own overload retries (``pymongo-native``) named "stock pymongo"."""
    if name == NO_ROUTE_AROUND:
        return "default, routeAroundOverload=false"
    text = "stock pymongo" if name == "pymongo-native" else name
    return f"default ({text})" if name == default_policy_name() else text


def has_native_backpressure() -> bool:
    """Whether the installed pymongo has its own overload retries (``maxAdaptiveRetries``)."""
    validators: Mapping[str, Any] = getattr(pymongo.common, "VALIDATORS", {})
    return "maxadaptiveretries" in validators


def _no_native_retries() -> dict[str, Any]:
    """Client options that switch pymongo's own overload retries off, where it has them."""
    return {"maxAdaptiveRetries": 0} if has_native_backpressure() else {}


class ArmClient(Protocol):
    """An open client of one arm."""

    @property
    def client(self) -> MongoClient[Document]:
        """The pymongo client the workload uses."""
        ...

    def call(self, fn: Callable[[], T]) -> T:
        """Run one application operation the way this arm's application would."""
        ...

    def refused(self) -> Optional[int]:
        """Retries refused by the retry budget so far (None when the arm has no budget)."""
        ...

    def close(self) -> None:
        """Close the client."""
        ...


class _Plain:
    """A client called directly; its own (native) retries, if any, happen inside pymongo."""

    def __init__(self, client: MongoClient[Document]) -> None:
        """Wrap ``client``."""
        self._client = client

    @property
    def client(self) -> MongoClient[Document]:
        """The pymongo client."""
        return self._client

    def call(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` once."""
        return fn()

    def refused(self) -> Optional[int]:
        """No budget."""
        return None

    def close(self) -> None:
        """Close the client."""
        self._client.close()


class _HandWritten(_Plain):
    """``@retry(stop=stop_after_attempt(4))`` without a wait: 3 immediate retries on any error."""

    retries = 3

    def call(self, fn: Callable[[], T]) -> T:
        """Call ``fn``, retrying at once up to 3 times on any PyMongoError."""
        for _ in range(self.retries):
            try:
                return fn()
            except PyMongoError:
                continue
        return fn()


class _Enabled(_Plain):
    """A ``backpressure.MongoClient``: retries happen inside the client."""

    def __init__(
        self, client: MongoClient[Document], budget: Callable[[], Any], policy: Policy
    ) -> None:
        """Wrap ``client``; ``budget()`` returns its retry budget."""
        super().__init__(client)
        self._budget = budget
        self._policy = policy

    def refused(self) -> Optional[int]:
        """Retries the client's budget refused (None when the policy has no budget)."""
        if not policy_has_budget(self._policy):
            return None
        refused = getattr(self._budget(), "refused", None)
        return refused if isinstance(refused, int) else None


def policy_has_budget(policy: Policy) -> bool:
    """Whether ``policy`` uses a retry budget."""
    return policy.budget_enabled


@dataclass(frozen=True)
class ClientArm:
    """One way of calling MongoDB under overload, as compared by the demo and the benchmarks."""

    name: str
    """Short name used on the command line and in reports."""
    description: str
    """One-line description for tables."""
    kind: str
    """``plain``, ``hand-written``, ``native`` or ``ours``."""
    preset: Optional[Policy] = None
    """Our policy preset (kind ``ours`` only)."""

    def unavailable(self) -> Optional[str]:
        """Why this arm cannot run with the installed pymongo, or None."""
        if self.kind == "native" and not has_native_backpressure():
            return f"pymongo {pymongo.version} has no native overload retries (needs >= 4.17)"
        return None

    def integration(self) -> str:
        """How the arm is wired (for reports)."""
        return "backpressure.MongoClient" if self.kind == "ours" else "pymongo.MongoClient"

    def open(self, uri: str, *, local_listener: Any = None, **kwargs: Any) -> ArmClient:
        """Open a client for ``uri``; ``kwargs`` go to pymongo (e.g. ``event_listeners``).

        ``local_listener`` receives this package's retry, local-wait and local-refusal events
        (arms of kind ``ours`` only).
        """
        reason = self.unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        if self.kind == "plain":
            return _Plain(MongoClient(uri, **_no_native_retries(), **kwargs))
        if self.kind == "hand-written":
            return _HandWritten(MongoClient(uri, **_no_native_retries(), **kwargs))
        if self.kind == "native":
            return _Plain(MongoClient(uri, **kwargs))
        assert self.preset is not None
        import backpressure

        if local_listener is not None:
            kwargs["backpressure_listeners"] = [local_listener]
        client: MongoClient[Document] = backpressure.MongoClient(
            uri, backpressure=self.preset, **kwargs
        )
        return _Enabled(client, lambda: budget_of(client), self.preset)


def _ours() -> tuple[ClientArm, ...]:
    """This package's presets; ``adaptive`` once the package has it."""
    presets = [
        ClientArm("current", "backpressure current-spec preset", "ours", CURRENT_SPEC),
        ClientArm("draft", "backpressure draft preset + token budget", "ours", DRAFT),
    ]
    adaptive: Optional[Policy] = getattr(_presets, "ADAPTIVE", None)
    if isinstance(adaptive, Policy):
        presets.append(
            ClientArm("adaptive", "backpressure adaptive preset (local pacing)", "ours", adaptive)
        )
    presets.append(
        ClientArm(
            NO_ROUTE_AROUND,
            "the default preset without server choice (routeAroundOverload=false)",
            "ours",
            _presets.DEFAULT_POLICY.replace(route_around=False),
        )
    )
    return tuple(presets)


NO_ROUTE_AROUND = "no-route-around"
"""The arm that runs the default preset with server choice off: beside the default, it shows
what server choice alone changes."""


STOCK = "pymongo-native"
"""The arm that runs stock pymongo's own overload retries (what a user gets without this
package): the arm the benchmarks compare every other arm with."""

ARMS: Mapping[str, ClientArm] = {
    arm.name: arm
    for arm in (
        ClientArm("no-retries", "pymongo, no overload retries", "plain"),
        ClientArm("hand-written", "3 immediate retries on any error", "hand-written"),
        ClientArm(STOCK, "pymongo native (maxAdaptiveRetries=2)", "native"),
        *_ours(),
    )
}
"""Every arm by name, in report order."""

ARM_NAMES: tuple[str, ...] = tuple(ARMS)
"""Arm names in report order."""


ARM_KEY = "policy"
"""The key of an arm's name in the result files' JSON. The files committed under
``bench/results/`` were written when the lab still called its arms policies, and the goals table,
the history ledger and the pages' renderers read them all, so the key stays."""

ARMS_KEY = "policies"
"""The key of a run's list (or mapping) of arms in the result files' JSON (see :data:`ARM_KEY`)."""


def to_file(data: Mapping[str, Any]) -> dict[str, Any]:
    """A record's fields as the result files write them: its ``arm`` under :data:`ARM_KEY`
    (the order kept)."""
    return {ARM_KEY if key == "arm" else key: value for key, value in data.items()}


def from_file(data: Mapping[str, Any]) -> dict[str, Any]:
    """A record read from a result file, its :data:`ARM_KEY` back under ``arm`` (the inverse
    of :func:`to_file`)."""
    return {"arm" if key == ARM_KEY else key: value for key, value in data.items()}
