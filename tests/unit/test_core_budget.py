"""Unit, property and concurrency tests for the retry budget (token bucket)."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from backpressure.core.budget import NullBudget, RetryBudget, budget_for
from backpressure.core.policy import CURRENT_SPEC, DRAFT, InvalidPolicyError


def test_starts_full() -> None:
    """A new bucket holds its capacity."""
    budget = RetryBudget()
    assert budget.capacity == 1000.0
    assert budget.tokens == 1000.0
    assert budget.granted == 0
    assert budget.refused == 0


def test_draft_timeline() -> None:
    """Tokens after each event follow the draft rules (-1, +0.1, +1.1, +1)."""
    budget = RetryBudget(10.0)
    timeline: list[tuple[str, float]] = []

    def step(name: str) -> None:
        """Apply one event and record the tokens after it."""
        if name == "retry":
            assert budget.try_acquire()
        elif name == "success":
            budget.record_success(retried=False)
        elif name == "retried success":
            budget.record_success(retried=True)
        else:
            budget.record_non_overload_failure()
        timeline.append((name, budget.tokens))

    for name in ["retry", "retry", "retry", "success", "retried success", "failed retry"]:
        step(name)
    assert [name for name, _ in timeline] == [
        "retry",
        "retry",
        "retry",
        "success",
        "retried success",
        "failed retry",
    ]
    assert [tokens for _, tokens in timeline] == [9.0, 8.0, 7.0, 7.1, 8.2, 9.2]
    assert budget.granted == 3


def test_capacity_enforced() -> None:
    """Deposits never push tokens above capacity."""
    budget = RetryBudget(5.0)
    budget.record_success(retried=True)
    budget.record_non_overload_failure()
    budget.deposit(100)
    assert budget.tokens == 5.0
    assert budget.try_acquire()
    budget.record_success(retried=True)
    assert budget.tokens == 5.0


def test_two_tokens_permit_exactly_two_retries() -> None:
    """A bucket of 2 tokens grants two retries, then refuses."""
    budget = RetryBudget(2.0)
    assert [budget.try_acquire() for _ in range(4)] == [True, True, False, False]
    assert budget.tokens == 0.0
    assert budget.granted == 2
    assert budget.refused == 2


def test_refused_needs_full_cost() -> None:
    """A partial token does not pay for a retry; deposits bring retries back."""
    budget = RetryBudget(1.5)
    assert budget.try_acquire()
    assert budget.tokens == pytest.approx(0.5)
    assert not budget.try_acquire()
    for _ in range(5):
        budget.record_success(retried=False)
    assert budget.tokens == 1.0  # exact: no float drift
    assert budget.try_acquire()


def test_primitives() -> None:
    """try_consume and deposit move arbitrary amounts within [0, capacity]."""
    budget = RetryBudget(10.0)
    assert budget.try_consume(7.5)
    assert not budget.try_consume(3)
    assert budget.tokens == 2.5
    assert budget.try_consume(0)
    budget.deposit(0.5)
    assert budget.tokens == 3.0
    assert budget.refused == 0


@pytest.mark.parametrize("amount", [-1, math.nan, math.inf, True, "1", None])
def test_primitives_validate(amount: Any) -> None:
    """Negative, non-finite and non-numeric amounts are rejected by both budgets."""
    for budget in (RetryBudget(), NullBudget()):
        with pytest.raises((TypeError, ValueError)):
            budget.deposit(amount)
        with pytest.raises((TypeError, ValueError)):
            budget.try_consume(amount)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"capacity": -1},
        {"capacity": math.inf},
        {"success_deposit": -0.1},
        {"retry_cost": math.nan},
        {"failure_deposit": True},
    ],
)
def test_constructor_validates(kwargs: dict[str, Any]) -> None:
    """Invalid constructor amounts are rejected."""
    with pytest.raises((TypeError, ValueError)):
        RetryBudget(**kwargs)


def test_null_budget() -> None:
    """The null budget always grants and never runs out."""
    budget = NullBudget()
    assert all(budget.try_acquire() for _ in range(10_000))
    assert budget.tokens == math.inf
    assert budget.capacity == math.inf
    assert budget.retry_cost == 0.0
    assert budget.granted == 10_000
    assert budget.refused == 0
    assert budget.try_consume(1e300)
    budget.deposit(1)
    budget.record_success(retried=True)
    budget.record_non_overload_failure()
    assert budget.tokens == math.inf
    assert repr(budget) == "NullBudget()"


def test_budget_for() -> None:
    """budget_for builds a bucket from the policy, or a null budget when disabled."""
    assert isinstance(budget_for(CURRENT_SPEC), NullBudget)
    draft = budget_for(DRAFT)
    assert isinstance(draft, RetryBudget)
    assert draft.capacity == 1000.0
    assert draft.retry_cost == 1.0
    small = budget_for(DRAFT.replace(budget_capacity=3, budget_retry_cost=2))
    assert [small.try_acquire() for _ in range(2)] == [True, False]
    assert "tokens=1.0" in repr(small)
    assert budget_for(DRAFT) is not draft


NANO = 10**9


class BucketMachine(RuleBasedStateMachine):
    """Random sequences of bucket operations keep 0 <= tokens <= capacity and match a model.

    The model counts exact nano-tokens, so the bucket must have no rounding drift.
    """

    def __init__(self) -> None:
        """Create a small bucket so that both limits are reached often."""
        super().__init__()
        self.budget = RetryBudget(5.0, success_deposit=0.1, retry_cost=1.0, failure_deposit=1.0)
        self.model = 5 * NANO

    def add(self, units: int) -> None:
        """Deposit into the model, clamped to capacity."""
        self.model = min(5 * NANO, self.model + units)

    @rule()
    def acquire(self) -> None:
        """Try to take a retry token."""
        granted = self.budget.try_acquire()
        assert granted == (self.model >= NANO)
        if granted:
            self.model -= NANO

    @rule(n=st.floats(min_value=0, max_value=10, allow_nan=False))
    def deposit(self, n: float) -> None:
        """Deposit an arbitrary amount."""
        self.budget.deposit(n)
        self.add(round(n * NANO))

    @rule(n=st.floats(min_value=0, max_value=10, allow_nan=False))
    def consume(self, n: float) -> None:
        """Consume an arbitrary amount."""
        taken = self.budget.try_consume(n)
        assert taken == (self.model >= round(n * NANO))
        if taken:
            self.model -= round(n * NANO)

    @rule(retried=st.booleans())
    def success(self, retried: bool) -> None:
        """Record a success (+0.1, or +1.1 after a retry)."""
        self.budget.record_success(retried=retried)
        self.add(NANO // 10 + (NANO if retried else 0))

    @rule()
    def failure(self) -> None:
        """Record a retry that failed without the overload label (+1)."""
        self.budget.record_non_overload_failure()
        self.add(NANO)

    @precondition(lambda self: self.model < NANO)
    @rule()
    def empty_refuses(self) -> None:
        """An almost empty bucket refuses a retry and counts the refusal."""
        refused = self.budget.refused
        assert not self.budget.try_acquire()
        assert self.budget.refused == refused + 1

    @invariant()
    def within_bounds(self) -> None:
        """Tokens stay within [0, capacity] and equal the model exactly."""
        assert 0.0 <= self.budget.tokens <= self.budget.capacity
        assert self.budget.tokens == self.model / NANO


BucketMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestBucketMachine = BucketMachine.TestCase


def test_threads_keep_invariant_and_exact_arithmetic() -> None:
    """8 threads pairing acquires with equal deposits leave the tokens unchanged."""
    budget = RetryBudget(100.0)
    budget.try_consume(2.3)  # off a round number (exposes drift) and below capacity
    threads_count, rounds = 8, 2_000
    barrier = threading.Barrier(threads_count)
    violations: list[float] = []
    grants = [0] * threads_count

    def worker(index: int) -> None:
        """Acquire then give back the same amount, many times."""
        barrier.wait()
        for _ in range(rounds):
            if budget.try_acquire():
                grants[index] += 1
                tokens = budget.tokens
                if not 0.0 <= tokens <= 100.0:
                    violations.append(tokens)
                budget.deposit(1.0)
                budget.record_success(retried=False)
                budget.try_consume(0.1)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert violations == []
    assert budget.tokens == 97.7
    assert budget.granted == sum(grants) == threads_count * rounds
    assert budget.refused == 0


def test_threads_contend_for_a_small_bucket() -> None:
    """With 8 threads and 50 tokens, exactly 50 retries are granted in total."""
    budget = RetryBudget(50.0)
    barrier = threading.Barrier(8)
    grants = [0] * 8

    def worker(index: int) -> None:
        """Try to take many tokens."""
        barrier.wait()
        for _ in range(500):
            if budget.try_acquire():
                grants[index] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(grants) == 50
    assert budget.tokens == 0.0
    assert budget.granted == 50
    assert budget.refused == 8 * 500 - 50


def test_huge_capacity() -> None:
    """Very large capacities and amounts do not overflow the internal units."""
    budget = RetryBudget(1e300)
    assert budget.tokens == 1e300
    assert budget.try_consume(1e295)
    budget.deposit(1e299)
    assert budget.tokens == 1e300


class _NoLock:
    """A lock stand-in that fails the test when taken."""

    def __enter__(self) -> None:
        """Fail: the full-bucket deposit must not take the lock."""
        raise AssertionError("lock taken")

    def __exit__(self, *exc: object) -> None:
        """Never reached."""


def test_deposit_into_a_full_bucket_skips_the_lock_and_stays_exact() -> None:
    """A full bucket takes deposits without locking; the count never passes capacity."""
    budget = RetryBudget(2.0, success_deposit=0.1, retry_cost=1.0, failure_deposit=1.0)
    real_lock = budget._lock
    budget._lock = _NoLock()  # type: ignore[assignment]
    budget.record_success(retried=False)
    budget.record_success(retried=True)
    budget.record_non_overload_failure()
    budget.deposit(0.5)
    budget._lock = real_lock
    assert budget.tokens == 2.0
    assert budget.try_acquire()
    for _ in range(9):
        budget.record_success(retried=False)
    assert budget.tokens == 1.9
    budget.record_success(retried=False)
    assert budget.tokens == 2.0  # ten deposits of 0.1 make exactly one token
    budget.record_success(retried=True)
    assert budget.tokens == 2.0


@pytest.mark.parametrize("field", ["capacity", "success_deposit", "retry_cost", "failure_deposit"])
def test_huge_int_is_an_invalid_policy_naming_the_field(field: str) -> None:
    """RetryBudget(field=10**400) raises InvalidPolicyError naming the field (not OverflowError)."""
    with pytest.raises(InvalidPolicyError, match=rf"RetryBudget\.{field} must be a finite"):
        RetryBudget(**{field: 10**400})


def test_full_flag_follows_every_change_of_the_tokens() -> None:
    """``full`` (read without the lock by the success path) is True exactly at capacity."""
    from backpressure.core.budget import A6Budget, NullBudget, RetryBudget

    bucket = RetryBudget(2.0, success_deposit=1.0, retry_cost=1.0)
    assert bucket.full
    assert bucket.try_acquire()
    assert not bucket.full
    bucket.record_success(retried=False)
    assert bucket.full
    assert bucket.try_consume(0.5)
    assert not bucket.full
    bucket.deposit(0.5)
    assert bucket.full
    a6 = A6Budget(4.0, token_ratio=1.0)
    a6.record_overload_failure()
    assert not a6.full
    a6.record_success(retried=False)
    assert a6.full
    assert NullBudget().full
