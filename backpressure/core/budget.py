"""The per-client retry budget: a thread-safe token bucket and its disabled twin.

Theory of operation: the bucket starts full (``capacity`` tokens).  Every retry takes
``retry_cost`` tokens and is refused when fewer are left; a first-try success deposits
``success_deposit``, a successful retry ``success_deposit + retry_cost``, and a retry that fails
without the overload label ``failure_deposit``.  Tokens never go below 0 nor above ``capacity``.
A ``threading.Lock`` guards only the arithmetic (never a sleep, an await or I/O), so one bucket
serves threads, Motor's executor and the event loop alike.

Tokens are counted internally as integer nano-tokens, so ten deposits of 0.1 make exactly one
token and concurrent acquires and deposits of equal size cancel exactly (no float drift).
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Callable, Optional, Union

from backpressure.core.policy import InvalidPolicyError, short_repr

if TYPE_CHECKING:
    from backpressure.core.policy import Policy

__all__ = [
    "A6Budget",
    "InvalidBudgetError",
    "NullBudget",
    "RetryBudget",
    "ServerBudgets",
    "budget_for",
]


class InvalidBudgetError(InvalidPolicyError, ValueError):
    """A retry budget amount is invalid (the message names it)."""


def _amount(name: str, value: float, *, positive: bool = False) -> float:
    """Validate a token amount and return it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidBudgetError(f"{name} must be a number (int or float), got {short_repr(value)}")
    bound = "> 0" if positive else ">= 0"
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise InvalidBudgetError(
            f"{name} must be a finite number {bound}, got {short_repr(value)}"
        ) from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise InvalidBudgetError(f"{name} must be a finite number {bound}, got {short_repr(value)}")
    return number


_SCALE = 10**9  # internal units per token
_LARGE = 1e290  # above this, amount * _SCALE would overflow a float


def _units(amount: float) -> int:
    """Convert a validated token amount to internal integer units."""
    if amount >= _LARGE:
        return int(amount) * _SCALE
    return round(amount * _SCALE)


def _tokens(units: int) -> float:
    """Convert internal units back to tokens (correctly rounded)."""
    return units / _SCALE


class _Counted:
    """The lock and the granted/refused counters both budgets keep."""

    def __init__(self) -> None:
        """Zero the counters."""
        self._granted = 0
        self._refused = 0
        self._lock = threading.Lock()

    @property
    def granted(self) -> int:
        """Number of ``try_acquire`` calls that succeeded."""
        with self._lock:
            return self._granted

    @property
    def refused(self) -> int:
        """Number of ``try_acquire`` calls that were refused (always 0 for ``NullBudget``)."""
        with self._lock:
            return self._refused


class _Bucket(_Counted):
    """Integer token arithmetic both token buckets share: capacity, tokens, take and add."""

    def __init__(
        self, capacity_field: str, capacity: float, initial: Optional[float] = None
    ) -> None:
        """Start at ``initial`` tokens (None: full at ``capacity``; finite, > 0; errors name
        ``capacity_field``); ``initial`` is clamped to ``capacity``."""
        super().__init__()
        self._capacity = _amount(capacity_field, capacity, positive=True)
        self._cap_units = max(1, _units(self._capacity))
        start = self._cap_units if initial is None else _units(_amount("initial", initial))
        self._units = min(self._cap_units, start)
        self.full = self._units >= self._cap_units
        """True while the bucket holds its capacity (a success then deposits nothing).

        Written under the lock with every change of the tokens; read without it by the success
        path, which is exact for the reason given in :meth:`_add`."""

    @property
    def tokens(self) -> float:
        """Tokens currently available."""
        with self._lock:
            return _tokens(self._units)

    def try_consume(self, n: float) -> bool:
        """Take ``n`` tokens if that many are available; return whether they were taken."""
        amount = _units(_amount("n", n))
        with self._lock:
            if self._units >= amount:
                self._units -= amount
                self.full = self._units >= self._cap_units
                return True
            return False

    def deposit(self, n: float) -> None:
        """Add ``n`` tokens, never going above capacity."""
        self._add(_units(_amount("n", n)))

    def _add(self, units: int) -> None:
        """Add ``units`` under the lock, clamped to capacity.

        A full bucket (the normal state without overload) returns without taking the lock.
        That is exact, not an approximation: reading one int attribute is atomic, and a bucket
        seen full at that read is one where this deposit, ordered at that instant, is clamped
        to nothing; an acquire racing with it is simply ordered after it.  Nothing is written,
        so the count can never exceed capacity, and the arithmetic stays integer under the lock.
        """
        if self._units >= self._cap_units:
            return
        with self._lock:
            self._units = min(self._cap_units, self._units + units)
            self.full = self._units >= self._cap_units


class RetryBudget(_Bucket):
    """A thread-safe token bucket limiting overload retries for one client."""

    def __init__(
        self,
        capacity: float = 1000.0,
        *,
        success_deposit: float = 0.1,
        retry_cost: float = 1.0,
        failure_deposit: float = 1.0,
        refund_retries: bool = True,
        initial: Optional[float] = None,
    ) -> None:
        """Create a bucket; every amount must be finite and >= 0 (capacity > 0).

        ``refund_retries=False`` (the "ratio" mode) gives a successful retry only
        ``success_deposit``, not its ``retry_cost`` back.  ``initial``: the tokens it starts
        with (None: full).
        """
        super().__init__("RetryBudget.capacity", capacity, initial)
        self._refund_retries = bool(refund_retries)
        self._success_deposit = _amount("RetryBudget.success_deposit", success_deposit)
        self._retry_cost = _amount("RetryBudget.retry_cost", retry_cost)
        self._failure_deposit = _amount("RetryBudget.failure_deposit", failure_deposit)
        self._cost_units = _units(self._retry_cost)
        self._success_units = _units(self._success_deposit)
        self._failure_units = _units(self._failure_deposit)

    @property
    def capacity(self) -> float:
        """Maximum (and initial) number of tokens."""
        return self._capacity

    @property
    def retry_cost(self) -> float:
        """Tokens taken by one retry."""
        return self._retry_cost

    def try_acquire(self) -> bool:
        """Take ``retry_cost`` tokens for one retry; return False (and count it) if too few."""
        with self._lock:
            if self._units >= self._cost_units:
                self._units -= self._cost_units
                self.full = self._units >= self._cap_units
                self._granted += 1
                return True
            self._refused += 1
            return False

    def record_success(self, *, retried: bool) -> None:
        """Deposit ``success_deposit`` (plus ``retry_cost`` when the success was a retry)."""
        if self._units >= self._cap_units:
            return  # full: nothing to add (the success hot path; see ``_add`` for why it is exact)
        refund = self._cost_units if retried and self._refund_retries else 0
        self._add(self._success_units + refund)

    def record_overload_failure(self) -> None:
        """Do nothing: the bucket charges retries, not failures."""

    def for_server(self, server: object) -> RetryBudget:
        """Return this bucket: one per client, whatever the server."""
        return self

    def record_non_overload_failure(self) -> None:
        """Deposit ``failure_deposit`` for a retry that failed without the overload label."""
        self._add(self._failure_units)

    def __repr__(self) -> str:
        """Show tokens and capacity."""
        return f"RetryBudget(tokens={self.tokens!r}, capacity={self._capacity!r})"


class NullBudget(_Counted):
    """The disabled budget: always grants, never runs out (``tokens`` is infinite)."""

    full = True
    """Always True: a success never needs a deposit."""

    @property
    def capacity(self) -> float:
        """Always infinite."""
        return math.inf

    @property
    def retry_cost(self) -> float:
        """Always 0: retries cost nothing."""
        return 0.0

    @property
    def tokens(self) -> float:
        """Always infinite."""
        return math.inf

    def try_consume(self, n: float) -> bool:
        """Always True (``n`` is still validated)."""
        _amount("n", n)
        return True

    def deposit(self, n: float) -> None:
        """Do nothing (``n`` is still validated)."""
        _amount("n", n)

    def try_acquire(self) -> bool:
        """Always True."""
        with self._lock:
            self._granted += 1
        return True

    def record_success(self, *, retried: bool) -> None:
        """Do nothing."""

    def record_non_overload_failure(self) -> None:
        """Do nothing."""

    def record_overload_failure(self) -> None:
        """Do nothing."""

    def for_server(self, server: object) -> NullBudget:
        """Return this null budget."""
        return self

    def __repr__(self) -> str:
        """Name the null budget."""
        return "NullBudget()"


class A6Budget(_Bucket):
    """gRPC A6 retry throttling for one server: retries only while tokens > max_tokens / 2.

    Tokens start at ``max_tokens``; every overload failure takes 1, every success adds
    ``token_ratio``; a retry is granted while tokens exceed half of ``max_tokens`` and takes
    nothing itself (the failure that caused it already did).
    """

    def __init__(
        self, max_tokens: float = 10.0, *, token_ratio: float = 0.1, initial: Optional[float] = None
    ) -> None:
        """Create a throttle, full unless ``initial`` says otherwise; ``max_tokens`` > 0,
        ``token_ratio`` >= 0, both finite."""
        super().__init__("A6Budget.max_tokens", max_tokens, initial)
        self._ratio_units = _units(_amount("A6Budget.token_ratio", token_ratio))
        self._one = _units(1.0)

    @property
    def capacity(self) -> float:
        """``max_tokens``: the initial and largest number of tokens."""
        return self._capacity

    @property
    def retry_cost(self) -> float:
        """Always 0: in A6 failures take tokens, retries do not."""
        return 0.0

    def try_acquire(self) -> bool:
        """Grant a retry while tokens > max_tokens / 2 (and count the answer)."""
        with self._lock:
            if 2 * self._units > self._cap_units:
                self._granted += 1
                return True
            self._refused += 1
            return False

    def record_success(self, *, retried: bool) -> None:
        """Add ``token_ratio`` (the same for a retry)."""
        if self._units >= self._cap_units:
            return  # full: the success hot path (exact, as in RetryBudget._add)
        with self._lock:
            self._units = min(self._cap_units, self._units + self._ratio_units)
            self.full = self._units >= self._cap_units

    def record_overload_failure(self) -> None:
        """Take one token (never below 0)."""
        with self._lock:
            self._units = max(0, self._units - self._one)
            self.full = self._units >= self._cap_units

    def record_non_overload_failure(self) -> None:
        """Do nothing: only overload failures count against the server."""

    def for_server(self, server: object) -> A6Budget:
        """Return this throttle."""
        return self

    def __repr__(self) -> str:
        """Show tokens and max_tokens."""
        return f"A6Budget(tokens={self.tokens!r}, max_tokens={self._capacity!r})"


ServerBudget = Union[RetryBudget, NullBudget, A6Budget]
"""The budget of one scope (a client or a server)."""


class ServerBudgets:
    """One budget per server address, created on first use (``budget_scope="server"``).

    The overload of one server then never starves the retries aimed at the others.  The
    aggregate properties (``granted``, ``refused``) sum over servers; ``tokens`` is the lowest
    of them (``capacity`` while none exists yet).  Calls without a server use the budget kept
    for an unknown server (``None``).
    """

    def __init__(self, factory: Callable[[], ServerBudget]) -> None:
        """Build each server's budget with ``factory()``."""
        self._factory = factory
        self._budgets: dict[object, ServerBudget] = {}
        self._lock = threading.Lock()
        self._capacity = factory().capacity

    def for_server(self, server: object) -> ServerBudget:
        """Return the budget of ``server`` (an address, or None when unknown)."""
        budget = self._budgets.get(server)
        if budget is None:
            with self._lock:
                budget = self._budgets.get(server)
                if budget is None:
                    budget = self._budgets[server] = self._factory()
        return budget

    def servers(self) -> dict[object, ServerBudget]:
        """Return a snapshot of the budgets by server."""
        with self._lock:
            return dict(self._budgets)

    @property
    def capacity(self) -> float:
        """Capacity of each server's budget."""
        return self._capacity

    @property
    def retry_cost(self) -> float:
        """Tokens one retry takes from its server's budget."""
        return self.for_server(None).retry_cost

    @property
    def tokens(self) -> float:
        """The lowest number of tokens of any server (capacity while there is none)."""
        budgets = self.servers().values()
        return min((b.tokens for b in budgets), default=self._capacity)

    @property
    def granted(self) -> int:
        """Retries granted, all servers together."""
        return sum(b.granted for b in self.servers().values())

    @property
    def refused(self) -> int:
        """Retries refused, all servers together."""
        return sum(b.refused for b in self.servers().values())

    def try_consume(self, n: float) -> bool:
        """Take ``n`` tokens from the unknown server's budget."""
        return self.for_server(None).try_consume(n)

    def deposit(self, n: float) -> None:
        """Deposit into the unknown server's budget."""
        self.for_server(None).deposit(n)

    def try_acquire(self) -> bool:
        """Ask the unknown server's budget for one retry."""
        return self.for_server(None).try_acquire()

    def record_success(self, *, retried: bool) -> None:
        """Record a success whose server is unknown."""
        self.for_server(None).record_success(retried=retried)

    def record_overload_failure(self) -> None:
        """Record an overload failure whose server is unknown."""
        self.for_server(None).record_overload_failure()

    def record_non_overload_failure(self) -> None:
        """Record a retry failing without the overload label, server unknown."""
        self.for_server(None).record_non_overload_failure()

    def __repr__(self) -> str:
        """Show the number of servers."""
        return f"ServerBudgets(servers={len(self.servers())}, capacity={self._capacity!r})"


Budget = Union[RetryBudget, NullBudget, A6Budget, ServerBudgets]
"""Any kind of budget."""


def _scope_budget(policy: Policy) -> ServerBudget:
    """Build one scope's budget from ``policy``."""
    if not policy.budget_enabled:
        return NullBudget()
    if policy.budget_mode == "a6":
        return A6Budget(
            policy.budget_capacity, token_ratio=policy.budget_ratio, initial=policy.budget_initial
        )
    ratio = policy.budget_mode == "ratio"
    return RetryBudget(
        policy.budget_capacity,
        success_deposit=policy.budget_ratio if ratio else policy.budget_success_deposit,
        retry_cost=policy.budget_retry_cost,
        failure_deposit=policy.budget_failure_deposit,
        refund_retries=not ratio,
        initial=policy.budget_initial,
    )


def budget_for(policy: Policy) -> Budget:
    """Return a fresh budget built from ``policy`` (per server when its scope is "server").

    A NullBudget when the budget is disabled; a RetryBudget ("bucket" or "ratio" mode) or an
    A6Budget for the client scope; a ServerBudgets of those for the server scope.
    """
    if not policy.budget_enabled:
        return NullBudget()
    if policy.budget_scope == "server":
        return ServerBudgets(lambda: _scope_budget(policy))
    return _scope_budget(policy)
