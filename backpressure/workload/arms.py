"""The client retry policies the demo and the benchmarks compare.

Each :class:`ClientArm` opens a :class:`PolicyClient`: a pymongo client plus the way the
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
    "NO_ROUTE_AROUND",
    "POLICIES",
    "POLICY_NAMES",
    "STOCK",
    "ClientArm",
    "PolicyClient",
    "default_first",
    "default_policy_name",
    "has_native_backpressure",
    "policy_label",
]

T = TypeVar("T")
Document = dict[str, Any]


def default_policy_name() -> str:
    """The name of the package's default policy, read now (it may change between releases)."""
    return str(_presets.DEFAULT_POLICY.name)


def default_first(names: Sequence[str]) -> list[str]:
    """``names`` with the default policy's moved to the front (the order otherwise kept): every
    table that compares policies shows the default's row first."""
    default = default_policy_name()
    return sorted(names, key=lambda name: name != default)


def policy_label(name: str) -> str:
    """A policy's row label in every table: ``default (<name>)`` for the default, and pymongo's
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


class PolicyClient(Protocol):
    """An open client under one policy."""

    @property
    def client(self) -> MongoClient[Document]:
        """The pymongo client the workload uses."""
        ...

    def call(self, fn: Callable[[], T]) -> T:
        """Run one application operation the way this policy's application would."""
        ...

    def refused(self) -> Optional[int]:
        """Retries refused by the retry budget so far (None when the policy has no budget)."""
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
        """Why this policy cannot run with the installed pymongo, or None."""
        if self.kind == "native" and not has_native_backpressure():
            return f"pymongo {pymongo.version} has no native overload retries (needs >= 4.17)"
        return None

    def integration(self) -> str:
        """How the policy is wired (for reports)."""
        return "backpressure.MongoClient" if self.kind == "ours" else "pymongo.MongoClient"

    def open(self, uri: str, *, local_listener: Any = None, **kwargs: Any) -> PolicyClient:
        """Open a client for ``uri``; ``kwargs`` go to pymongo (e.g. ``event_listeners``).

        ``local_listener`` receives this package's retry, local-wait and local-refusal events
        (policies of kind ``ours`` only).
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
package): the arm the benchmarks compare every policy with."""

POLICIES: Mapping[str, ClientArm] = {
    policy.name: policy
    for policy in (
        ClientArm("no-retries", "pymongo, no overload retries", "plain"),
        ClientArm("hand-written", "3 immediate retries on any error", "hand-written"),
        ClientArm(STOCK, "pymongo native (maxAdaptiveRetries=2)", "native"),
        *_ours(),
    )
}
"""Every policy by name, in report order."""

POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)
"""Policy names in report order."""
