"""Per-client backpressure state shared by every pymongo adapter."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from backpressure.core.adaptive import AdmissionControl, AdmissionGate
from backpressure.core.budget import A6Budget, NullBudget, RetryBudget
from backpressure.core.decision import RetryController
from backpressure.core.events import Address, OperationFinishedEvent, RetryListener
from backpressure.core.operation import BudgetWarnings, OperationRetries
from backpressure.core.overrides import Criticality, OperationSettings
from backpressure.core.policy import Policy
from backpressure.core.stats import BackpressureStats, StatsRecorder

LOGGER = logging.getLogger("backpressure")

STATE_ATTRIBUTE = "_backpressure_state"
"""Name of the attribute that holds a client's `ClientState` while backpressure is enabled."""


def _operation_listeners(listeners: Sequence[Any]) -> tuple[Any, ...]:
    """The listeners that implement ``operation_finished``."""
    return tuple(
        listener
        for listener in listeners
        if callable(getattr(listener, "operation_finished", None))
    )


def _retry_listeners(listeners: Sequence[Any]) -> tuple[Any, ...]:
    """The listeners that implement ``retried`` and ``gave_up``."""
    return tuple(
        listener
        for listener in listeners
        if callable(getattr(listener, "retried", None))
        and callable(getattr(listener, "gave_up", None))
    )


@dataclass
class ClientState:
    """What one enabled client carries: its controller (policy + budget) and its listeners.

    ``listeners`` may implement ``retried``/``gave_up`` (the ``RetryListener`` protocol),
    ``operation_finished`` (the ``OperationListener`` protocol), or both.  ``settings`` is called
    when an operation starts its retry bookkeeping; it returns the operation's overrides and test
    mode (the switch layer reads them from a context variable), or None.
    """

    controller: RetryController
    listeners: tuple[Any, ...] = ()
    logger: logging.Logger = field(default=LOGGER)
    settings: Optional[Callable[[], Optional[OperationSettings]]] = None
    label: str = ""
    """How metrics name this client (its seed list by default)."""
    budget_warnings: BudgetWarnings = field(init=False, repr=False, compare=False)
    """The client's rate limit of budget-empty WARNINGs (on the controller's clock)."""
    stats: StatsRecorder = field(init=False, repr=False, compare=False)
    """The client's statistics (see ``backpressure.stats``)."""

    def __post_init__(self) -> None:
        """Create the client's budget-warning rate limit and statistics."""
        self.budget_warnings = BudgetWarnings(clock=self.controller.clock)
        admission = self.controller.admission
        self.gate: Optional[AdmissionGate] = (
            AdmissionGate(admission, logger=self.logger)
            if isinstance(admission, AdmissionControl)
            else None
        )
        """Pacing around each attempt (None unless the policy is adaptive)."""
        self.stats = StatsRecorder()
        self._first_attempt_events: dict[Optional[Address], OperationFinishedEvent] = {}
        self._refresh_listeners()

    def _refresh_listeners(self) -> None:
        """Split ``listeners`` by the protocols they implement."""
        self._retry_listeners: tuple[RetryListener, ...] = _retry_listeners(self.listeners)
        self._operation_listeners: tuple[Any, ...] = _operation_listeners(self.listeners)
        if self.gate is not None:
            self.gate.listeners = self.listeners
        budget = self.controller.budget
        self.lean_success: bool = not self._operation_listeners and isinstance(
            budget, (RetryBudget, A6Budget, NullBudget)
        )
        """Whether :meth:`count_first_attempt` takes its lock-free path (see there)."""
        self.budget: Union[RetryBudget, A6Budget, NullBudget] = (
            budget if isinstance(budget, (RetryBudget, A6Budget, NullBudget)) else NullBudget()
        )
        """The client's one budget for the lock-free path (``full``: nothing to deposit)."""

    def add_listener(self, listener: Any) -> None:
        """Add ``listener`` for the operations that start from now on (no-op if present)."""
        if not any(existing is listener for existing in self.listeners):
            self.listeners = (*self.listeners, listener)
            self._refresh_listeners()

    def remove_listener(self, listener: Any) -> None:
        """Remove ``listener`` (no-op if absent)."""
        self.listeners = tuple(item for item in self.listeners if item is not listener)
        self._refresh_listeners()

    @property
    def policy(self) -> Policy:
        """The policy this client retries with."""
        return self.controller.policy

    def snapshot(self) -> BackpressureStats:
        """Return the client's statistics so far."""
        return self.stats.snapshot()

    def operation_finished(self, event: OperationFinishedEvent) -> None:
        """Hand a finished operation to the statistics and the operation listeners."""
        self.stats.operation_finished(event)
        self._notify(event)

    def _notify(self, event: OperationFinishedEvent) -> None:
        """Hand a finished operation to the operation listeners (exceptions logged)."""
        for listener in self._operation_listeners:
            try:
                listener.operation_finished(event)
            except Exception:
                self.logger.exception("backpressure operation listener %r failed", listener)

    def first_attempt_succeeded(self, server: Optional[Address]) -> None:
        """Record an operation that succeeded on its first attempt on ``server``.

        The adapters' success path: a token deposit, the statistics' counters, and for operation
        listeners (metrics) one finished event, cached per server so nothing is allocated after
        the first.
        """
        self.controller.record_success(retried=False, server=server)
        self.stats.first_attempt_succeeded(server)
        if not self._operation_listeners:
            return
        event = self._first_attempt_events.get(server)
        if event is None:
            event = OperationFinishedEvent(
                operation=None,
                attempt_servers=(server,),
                retry_delays=(),
                succeeded=True,
                stop_reason=None,
            )
            self._first_attempt_events[server] = event
        self._notify(event)

    def count_first_attempt(
        self, key: Hashable, address_of: Callable[[Any], Optional[Address]]
    ) -> None:
        """Record an operation that succeeded on its first attempt on the server known as ``key``.

        The adapters' cheapest success path: ``key`` is what the adapter holds (pymongo's
        ``Server`` object, or None when no server was selected) and ``address_of(key)`` is
        called only the first time a key is seen.  Without operation listeners and with one
        budget for the client, it is a lock-free count and a deposit that returns at once while
        the budget is full; otherwise it is :meth:`first_attempt_succeeded`.
        """
        if self.lean_success:
            tally = self.stats.tallies.get(key)
            if tally is None:
                tally = self.stats.tally(key, address_of(key))
            next(tally)
            budget = self.budget
            if not budget.full:
                budget.record_success(retried=False)
            return
        self.first_attempt_succeeded(address_of(key))

    def new_operation(self, operation: str, *, opens_transaction: bool = False) -> OperationRetries:
        """Start the retry bookkeeping of one operation (one call of the retry loop).

        ``opens_transaction``: the operation is the first statement of a transaction.
        """
        controller = self.controller
        criticality = Criticality.CRITICAL
        if self.settings is not None:
            settings = self.settings()
            if settings is not None:
                controller = settings.controller_for(controller)
                criticality = settings.criticality
        return OperationRetries(
            controller,
            operation,
            listeners=self._retry_listeners,
            logger=self.logger,
            budget_warnings=self.budget_warnings,
            on_finished=self.operation_finished,
            criticality=criticality,
            opens_transaction=opens_transaction,
        )
