"""Per-client backpressure state shared by every pymongo adapter."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from backpressure.core.adaptive import ClientPacers, PacingGate
from backpressure.core.budget import A6Budget, NullBudget, RetryBudget, ServerBudgets
from backpressure.core.choice import ChoiceListener, ServerChoice
from backpressure.core.cycle_record import CycleRecord
from backpressure.core.decision import RetryController
from backpressure.core.events import (
    Address,
    GiveUpEvent,
    OperationFinishedEvent,
    RetryEvent,
    RetryListener,
)
from backpressure.core.log_limit import LogRateLimit
from backpressure.core.overrides import Criticality, OperationSettings
from backpressure.core.policy import Policy
from backpressure.core.stats import BackpressureStats, StatsRecorder

LOGGER = logging.getLogger("backpressure")

LEAN_BATCH = 8
"""The lock-free success path counts admitted replies for the pacing in batches of this many."""

LeanEntry = tuple[Iterator[int], Any, Optional[Callable[[], None]]]
"""Per server key: the success tally, the server's budget, and the pacer's batch count (None
without pacing)."""

STATE_ATTRIBUTE = "_backpressure_state"
"""Name of the attribute that holds a client's `ClientState` while backpressure is enabled."""


def _operation_listeners(listeners: Sequence[Any]) -> tuple[Any, ...]:
    """The listeners that implement ``operation_finished``."""
    return tuple(
        listener
        for listener in listeners
        if callable(getattr(listener, "operation_finished", None))
    )


def _with_choice(
    batch: Optional[Callable[[], None]], choice: ServerChoice, server: Address
) -> Callable[[], None]:
    """The lean path's batch call of ``server``: the pacer's count (if any), then the server
    choice's count of ``LEAN_BATCH`` replies (which returns at once while nothing pushes back)."""
    successes = choice.successes
    if batch is None:
        return lambda: successes(server, LEAN_BATCH)

    def both() -> None:
        batch()
        successes(server, LEAN_BATCH)

    return both


class _ChoiceLog(ChoiceListener):
    """Logs at INFO, rate-limited, when a client's server becomes avoided and when it returns,
    and tells the client's listeners that implement the same methods (the metrics)."""

    def __init__(self, state: ClientState) -> None:
        self.state = state
        self.limit = LogRateLimit(1.0, clock=state.controller.clock)

    def server_avoided(self, address: Address, signal: float) -> None:
        """Log the server that selections now avoid and tell the listeners."""
        if self.limit.admit() is not None:
            self.state.logger.info(
                "backpressure: %s:%d pushes back (%.0f%% of recent attempts); selections with a "
                "choice avoid it (client %s)",
                address[0], address[1], 100.0 * signal, self.state.label,
            )  # fmt: skip
        self._tell("server_avoided", address, signal)

    def server_returned(self, address: Address) -> None:
        """Log the server that selections no longer avoid and tell the listeners."""
        if self.limit.admit() is not None:
            self.state.logger.info(
                "backpressure: %s:%d no longer pushes back; selections return to it (client %s)",
                address[0], address[1], self.state.label,
            )  # fmt: skip
        self._tell("server_returned", address)

    def _tell(self, method: str, *args: Any) -> None:
        for listener in self.state.listeners:
            callback = getattr(listener, method, None)
            if callable(callback):
                try:
                    callback(*args)
                except Exception:
                    self.state.logger.exception("backpressure listener %r failed", listener)


class _PartialRetryListener:
    """A listener with only one of ``retried``/``gave_up``, seen as a full ``RetryListener``.

    The method it lacks does nothing, so the retry bookkeeping can call both.
    """

    __slots__ = ("listener",)

    def __init__(self, listener: Any) -> None:
        """Wrap ``listener``."""
        self.listener = listener

    def retried(self, event: RetryEvent) -> None:
        """Call the listener's ``retried`` if it has one."""
        callback = getattr(self.listener, "retried", None)
        if callable(callback):
            callback(event)

    def gave_up(self, event: GiveUpEvent) -> None:
        """Call the listener's ``gave_up`` if it has one."""
        callback = getattr(self.listener, "gave_up", None)
        if callable(callback):
            callback(event)

    def __repr__(self) -> str:
        """Show the wrapped listener (log messages name it)."""
        return repr(self.listener)


def _retry_listeners(listeners: Sequence[Any]) -> tuple[RetryListener, ...]:
    """The listeners that implement ``retried`` or ``gave_up`` (or both), as RetryListeners."""
    found: list[RetryListener] = []
    for listener in listeners:
        retried = callable(getattr(listener, "retried", None))
        gave_up = callable(getattr(listener, "gave_up", None))
        if retried and gave_up:
            found.append(listener)
        elif retried or gave_up:
            found.append(_PartialRetryListener(listener))
    return tuple(found)


@dataclass
class ClientState:
    """What one enabled client carries: its controller (policy + budget) and its listeners.

    ``listeners`` implement one or more methods of the listener protocols
    (:data:`backpressure.core.events.LISTENER_METHODS`): ``retried``/``gave_up``
    (``RetryListener``), ``operation_finished`` (``OperationListener``), ``waited``/``refused``
    (``PacingListener``), ``hedged`` (``HedgeListener``); each method is called if present.
    ``settings`` is called when an operation starts its retry bookkeeping; it returns the
    operation's overrides and test mode (the switch layer reads them from a context variable), or
    None.
    """

    controller: RetryController
    listeners: tuple[Any, ...] = ()
    logger: logging.Logger = field(default=LOGGER)
    settings: Optional[Callable[[], Optional[OperationSettings]]] = None
    label: str = ""
    """How metrics name this client (its seed list by default)."""
    sleep: Optional[Callable[[float], Any]] = None
    """What the executors sleep local waits and backoffs with, of the client's flavour (a
    coroutine function for an async client); None: ``time.sleep`` or ``asyncio.sleep``.  A
    private hook for tests (``backpressure.switch.client.set_timing``)."""
    budget_warning_limit: LogRateLimit = field(init=False, repr=False, compare=False)
    """The client's rate limit of budget-empty WARNINGs, shared by its operations so that an empty
    budget under sustained overload logs one line per interval (on the controller's clock)."""
    stats: StatsRecorder = field(init=False, repr=False, compare=False)
    """The client's statistics (see ``backpressure.stats``)."""

    def __post_init__(self) -> None:
        """Create the client's budget-warning rate limit and statistics."""
        self.budget_warning_limit = LogRateLimit(clock=self.controller.clock)
        pacing = self.controller.pacing
        self.gate: Optional[PacingGate] = (
            PacingGate(pacing, logger=self.logger) if isinstance(pacing, ClientPacers) else None
        )
        """Pacing around each attempt (None unless the policy is adaptive)."""
        self.choice: Optional[ServerChoice] = self.server_choice(self.controller.clock)
        """Server choice: steers selections around overloaded servers (None: turned off)."""
        self.clock: Callable[[], float] = self.controller.clock
        """The monotonic clock of the client's hedging (and, when the tests' timing hook sets it,
        of its pacing and server choice: ``backpressure.switch.client.set_timing``)."""
        self.stats = StatsRecorder()
        self._first_attempt_events: dict[Optional[Address], OperationFinishedEvent] = {}
        self._refresh_listeners()

    def _refresh_listeners(self) -> None:
        """Split ``listeners`` by the protocols they implement."""
        self._retry_listeners = _retry_listeners(self.listeners)
        self._operation_listeners: tuple[Any, ...] = _operation_listeners(self.listeners)
        self.timed: bool = bool(self._operation_listeners)
        """Whether operations starting now are timed (an operation listener, such as the
        metrics, wants their duration and name): the executors read the clock at an operation's
        start only then (``AttemptCycle.started_at``)."""
        if self.gate is not None:
            self.gate.listeners = self.listeners
        budget = self.controller.budget
        self.lean_success: bool = not self._operation_listeners and isinstance(
            budget, (RetryBudget, A6Budget, NullBudget, ServerBudgets)
        )
        """Whether :meth:`count_first_attempt` takes its lock-free path (see there)."""
        self.lean: dict[Hashable, LeanEntry] = {}
        """What the lock-free success path needs per server key (filled by
        :meth:`count_first_attempt`; stays empty unless ``lean_success``)."""

    def _lean_entry(self, key: Hashable, server: Optional[Address]) -> LeanEntry:
        """Build (and keep) the lock-free success path's entry of ``key`` (``server``)."""
        budget = self.controller.budget.for_server(server)
        pacing = self.controller.pacing
        batch: Optional[Callable[[], None]] = None
        if isinstance(pacing, ClientPacers) and server is not None:
            batch = pacing.batch_counter(server, LEAN_BATCH)
        choice = self.choice
        if choice is not None and server is not None:
            batch = _with_choice(batch, choice, server)
        entry = (self.stats.tally(key, server), budget, batch)
        self.lean = {**self.lean, key: entry}
        return entry

    def add_listener(self, listener: Any) -> None:
        """Add ``listener`` for the operations that start from now on (no-op if present)."""
        if not any(existing is listener for existing in self.listeners):
            self.listeners = (*self.listeners, listener)
            self._refresh_listeners()

    def remove_listener(self, listener: Any) -> None:
        """Remove ``listener`` (no-op if absent)."""
        self.listeners = tuple(item for item in self.listeners if item is not listener)
        self._refresh_listeners()

    def server_choice(self, clock: Callable[[], float]) -> Optional[ServerChoice]:
        """A new server choice on ``clock`` for this client (None: the policy turns it off)."""
        if not self.controller.policy.route_around:
            return None
        return ServerChoice(clock=clock, random=self.controller.random, listener=_ChoiceLog(self))

    def steers(self) -> bool:
        """Whether a selection with a choice has servers to avoid now (some server pushes back
        or is paced): otherwise the adapters select as pymongo does, without asking."""
        choice, gate = self.choice, self.gate
        return (choice is not None and choice.engaged) or (gate is not None and gate.engaged)

    def avoid(self, addresses: Sequence[Address]) -> list[Address]:
        """The servers among ``addresses`` one selection with a choice deprioritizes: those
        the server choice draws (:meth:`ServerChoice.avoid`) and those the pacing paces."""
        choice, gate = self.choice, self.gate
        avoided = choice.avoid(addresses) if choice is not None else []
        if gate is not None and gate.engaged:
            avoided += [a for a in addresses if gate.is_paced(a) and a not in avoided]
        return avoided

    def attempt_finished(self, server: Optional[Address], pushed_back: bool) -> None:
        """Hand one finished attempt on ``server`` to the server choice (``pushed_back``: an
        overload error or a timeout)."""
        choice = self.choice
        if choice is not None and (pushed_back or choice.engaged):
            choice.record(server, 1, 1 if pushed_back else 0)

    def holds_locally(self) -> bool:
        """Whether the pacing may hold an attempt starting now (False in test mode).

        Test mode (``settings().testing``) promises that nothing sleeps: retries do not back off
        (``OperationSettings.controller_for``) and the pacing does not hold attempts either.
        """
        if self.settings is None:
            return True
        settings = self.settings()
        return settings is None or not settings.testing

    def sheddable(self) -> bool:
        """Whether the operation starting now is sheddable (``overrides(criticality=...)``).

        The pacing serves critical attempts first and sheds sheddable ones first.
        """
        if self.settings is None:
            return False
        settings = self.settings()
        return settings is not None and settings.criticality is Criticality.SHEDDABLE

    def __repr__(self) -> str:
        """Name the client, its policy with the key fields, and how many listeners it has."""
        return (
            f"ClientState(client={self.label!r}, policy={self.policy.describe()}, "
            f"listeners={len(self.listeners)})"
        )

    @property
    def policy(self) -> Policy:
        """The policy this client retries with."""
        return self.controller.policy

    def snapshot(self) -> BackpressureStats:
        """Return the client's statistics so far, with its servers' pacing state and server
        choice signals."""
        pacing = self.controller.pacing
        paced = pacing.snapshot() if isinstance(pacing, ClientPacers) else None
        choice = self.choice.signals() if self.choice is not None else None
        return self.stats.snapshot(paced, choice)

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

    def first_attempt_succeeded(
        self,
        server: Optional[Address],
        *,
        paced_counted: bool = False,
        operation: Optional[str] = None,
        duration: Optional[float] = None,
    ) -> None:
        """Record an operation that succeeded on its first attempt on ``server``.

        The adapters' success path: a token deposit, the statistics' counters, the pacing's
        count of admitted replies (unless ``paced_counted``: the adapter handed the reply to it),
        and for operation listeners (metrics) one finished event: for a timed operation
        (``duration`` given) with its ``operation`` name and duration, otherwise cached per
        server so nothing is allocated after the first.
        """
        self.controller.record_success(retried=False, server=server)
        self.stats.first_attempt_succeeded(server)
        if not paced_counted:  # else the cycle handed the reply to the choice when it settled
            self.attempt_finished(server, False)
        pacing = self.controller.pacing
        if not paced_counted and isinstance(pacing, ClientPacers):
            pacing.record(server, overloaded=False)
        if not self._operation_listeners:
            return
        if duration is not None:
            self._notify(
                OperationFinishedEvent(
                    operation=operation,
                    attempt_servers=(server,),
                    retry_delays=(),
                    succeeded=True,
                    stop_reason=None,
                    duration=duration,
                )
            )
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
        self,
        key: Hashable,
        address_of: Callable[[Any], Optional[Address]],
        *,
        paced_counted: bool = False,
    ) -> None:
        """Record an operation that succeeded on its first attempt on the server known as ``key``.

        The adapters' cheapest success path: ``key`` is what the adapter holds (pymongo's
        ``Server`` object, or None when no server was selected) and ``address_of(key)`` is
        called only the first time a key is seen.  Without operation listeners it is a
        lock-free count, a deposit that returns at once while the server's budget is full and,
        for an adaptive policy, one call of the pacer's batch count per ``LEAN_BATCH``
        successes (the rate it measures before any pushback); otherwise it is
        :meth:`first_attempt_succeeded`.  ``paced_counted``: the adapter already handed this
        reply to the pacing (``PacingGate.record``), so it is not counted there again.
        """
        if self.lean_success:
            entry = self.lean.get(key)
            if entry is None:
                entry = self._lean_entry(key, address_of(key))
            count = next(entry[0])
            budget = entry[1]
            if not budget.full:
                budget.record_success(retried=False)
            batch = entry[2]
            if batch is not None and not paced_counted and not count % LEAN_BATCH:
                batch()
            return
        self.first_attempt_succeeded(address_of(key), paced_counted=paced_counted)

    def new_operation(
        self,
        operation: str,
        *,
        opens_transaction: bool = False,
        criticality: Optional[Criticality] = None,
        started: Optional[float] = None,
    ) -> CycleRecord:
        """Start the retry bookkeeping of one operation (one call of the retry loop).

        ``opens_transaction``: the operation is the first statement of a transaction.
        ``criticality``: the operation's criticality when the caller knows it (the simulator);
        None: from ``settings`` (critical when nothing says otherwise).  ``started``: when a
        timed operation started, on the controller's clock (None: untimed).
        """
        controller = self.controller
        known = criticality
        criticality = Criticality.CRITICAL
        if self.settings is not None:
            settings = self.settings()
            if settings is not None:
                controller = settings.controller_for(controller)
                criticality = settings.criticality
        if known is not None:
            criticality = known
        return CycleRecord(
            controller,
            operation,
            listeners=self._retry_listeners,
            logger=self.logger,
            budget_warning_limit=self.budget_warning_limit,
            on_finished=self.operation_finished,
            criticality=criticality,
            opens_transaction=opens_transaction,
            started=started,
        )
