"""Timeline tests for RetryController with a fake clock and a scripted random source."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import pytest
from pymongo.errors import AutoReconnect, OperationFailure

from backpressure.core.budget import NullBudget, RetryBudget
from backpressure.core.decision import GiveUp, Retry, RetryController, StopReason
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import CURRENT_SPEC, DRAFT, Policy
from tests.fakes import FakeClock


def near(value: float) -> float:
    """Return a float stand-in that compares approximately equal (for frozen dataclasses)."""
    return cast(float, pytest.approx(value))


class ScriptedRandom:
    """Returns the scripted jitter values in order, then repeats the last one."""

    def __init__(self, values: Iterable[float]) -> None:
        """Remember the script."""
        self.values = list(values)
        self.calls = 0

    def __call__(self) -> float:
        """Return the next scripted value."""
        value = self.values[min(self.calls, len(self.values) - 1)]
        self.calls += 1
        return value


def overload(labels: Any = (SYSTEM_OVERLOADED, RETRYABLE), backoff_ms: Any = None) -> Exception:
    """Build an overload error as the server sends it."""
    doc: dict[str, Any] = {"ok": 0, "code": 462, "errorLabels": list(labels)}
    if backoff_ms is not None:
        doc["baseBackoffMS"] = backoff_ms
    return OperationFailure("rate exceeded", 462, doc)


def controller(
    policy: Policy = DRAFT, jitter: Iterable[float] = (1.0,), **kwargs: Any
) -> tuple[RetryController, FakeClock, ScriptedRandom]:
    """Build a controller with a fake clock and scripted jitter."""
    clock, rand = FakeClock(1000.0), ScriptedRandom(jitter)
    return RetryController(policy, random=rand, clock=clock, **kwargs), clock, rand


def run_until_give_up(ctl: RetryController, error: BaseException) -> tuple[list[Retry], GiveUp]:
    """Decide retries 1, 2, ... until the controller gives up."""
    retries: list[Retry] = []
    for number in range(1, 1000):
        decision = ctl.decide(retry_number=number, error=error)
        if isinstance(decision, GiveUp):
            return retries, decision
        retries.append(decision)
    raise AssertionError("never gave up")


def test_stop_reason_values() -> None:
    """Stop reasons read as plain English."""
    assert StopReason.NOT_RETRYABLE.value == "not retryable"
    assert StopReason.BUDGET_EMPTY.value == "retry budget empty"
    assert len({reason.value for reason in StopReason}) == len(StopReason)


@pytest.mark.parametrize("jitter", [0.0, 0.999])
def test_draft_timeline(jitter: float) -> None:
    """Draft: five retries with delays jitter*(0.1..1.6), then ATTEMPTS_EXHAUSTED."""
    ctl, _, rand = controller(DRAFT, [jitter])
    retries, give_up = run_until_give_up(ctl, overload())
    assert [r.retry_number for r in retries] == [1, 2, 3, 4, 5]
    assert [r.delay for r in retries] == pytest.approx(
        [jitter * c for c in (0.1, 0.2, 0.4, 0.8, 1.6)]
    )
    assert all(r.retarget for r in retries)
    assert give_up == GiveUp(StopReason.ATTEMPTS_EXHAUSTED)
    assert rand.calls == 5
    assert ctl.budget.tokens == 995.0


@pytest.mark.parametrize("jitter", [0.0, 0.999])
def test_current_timeline(jitter: float) -> None:
    """Current spec: two retries with delays jitter*(0.2, 0.4), then ATTEMPTS_EXHAUSTED."""
    ctl, _, _ = controller(CURRENT_SPEC, [jitter])
    retries, give_up = run_until_give_up(ctl, overload())
    assert [r.delay for r in retries] == pytest.approx([jitter * 0.2, jitter * 0.4])
    assert not any(r.retarget for r in retries)
    assert give_up.reason is StopReason.ATTEMPTS_EXHAUSTED
    assert isinstance(ctl.budget, NullBudget)


@pytest.mark.parametrize(("policy", "maximum"), [(DRAFT, 3.1), (CURRENT_SPEC, 0.6)])
def test_maximum_total_backoff(policy: Policy, maximum: float) -> None:
    """With jitter 1 the total backoff is 3.1 s (draft) and 0.6 s (current)."""
    ctl, _, _ = controller(policy, [1.0])
    retries, _ = run_until_give_up(ctl, overload())
    assert sum(r.delay for r in retries) == pytest.approx(maximum)


def test_server_backoff_honoured() -> None:
    """baseBackoffMS replaces the base backoff; huge hints are clamped to max_backoff."""
    ctl, _, _ = controller(DRAFT, [1.0])
    first = ctl.decide(retry_number=1, error=overload(backoff_ms=50))
    third = ctl.decide(retry_number=3, error=overload(backoff_ms=50))
    huge = ctl.decide(retry_number=1, error=overload(backoff_ms=60_000))
    assert isinstance(first, Retry)
    assert isinstance(third, Retry)
    assert isinstance(huge, Retry)
    assert first.delay == pytest.approx(0.05)
    assert third.delay == pytest.approx(0.2)
    assert huge.delay == 10.0


def test_server_backoff_ignored_when_not_honoured() -> None:
    """With honour_server_backoff off the hint is ignored."""
    ctl, _, _ = controller(DRAFT.replace(honour_server_backoff=False), [1.0])
    decision = ctl.decide(retry_number=1, error=overload(backoff_ms=5000))
    assert isinstance(decision, Retry)
    assert decision.delay == pytest.approx(0.1)


@pytest.mark.parametrize(
    "value", [-50, float("nan"), float("inf"), "50", True, 1e308, {"a": {"b": [1, {"c": 2}]}}]
)
def test_hostile_server_backoff_ignored(value: Any) -> None:
    """Hostile baseBackoffMS values fall back to the policy's base."""
    ctl, _, _ = controller(DRAFT, [1.0])
    decision = ctl.decide(retry_number=2, error=overload(backoff_ms=value))
    assert isinstance(decision, Retry)
    assert decision.delay == pytest.approx(0.2)


def test_budget_of_two_permits_two_retries() -> None:
    """A budget of 2 tokens permits exactly two retries, then BUDGET_EMPTY."""
    ctl, _, _ = controller(DRAFT.replace(budget_capacity=2))
    error = overload()
    retries, give_up = run_until_give_up(ctl, error)
    assert len(retries) == 2
    assert give_up.reason is StopReason.BUDGET_EMPTY
    assert ctl.budget.tokens == 0.0
    assert ctl.budget.refused == 1


def test_shared_budget_across_operations() -> None:
    """One budget is shared by every operation of the client."""
    budget = RetryBudget(3.0)
    ctl, _, _ = controller(DRAFT, budget=budget)
    error = overload()
    assert isinstance(ctl.decide(retry_number=1, error=error), Retry)
    assert isinstance(ctl.decide(retry_number=1, error=error), Retry)
    assert isinstance(ctl.decide(retry_number=1, error=error), Retry)
    assert ctl.decide(retry_number=1, error=error) == GiveUp(StopReason.BUDGET_EMPTY)
    assert ctl.budget is budget


def test_deadline_checked_before_token() -> None:
    """A delay past the deadline gives DEADLINE and leaves the tokens untouched."""
    ctl, clock, _ = controller(DRAFT, [1.0])
    error = overload()
    decision = ctl.decide(retry_number=4, error=error, deadline=clock.now + 0.5)
    assert decision == GiveUp(StopReason.DEADLINE)
    assert ctl.budget.tokens == 1000.0
    ok = ctl.decide(retry_number=4, error=error, deadline=clock.now + 0.8)
    assert ok == Retry(4, near(0.8), True)
    assert ctl.budget.tokens == 999.0


def test_deadline_uses_explicit_now_or_clock() -> None:
    """``now`` overrides the injected clock; otherwise the clock is read."""
    ctl, clock, _ = controller(DRAFT, [1.0])
    error = overload()
    assert isinstance(ctl.decide(retry_number=1, error=error, deadline=5.0, now=4.85), Retry)
    assert ctl.decide(retry_number=1, error=error, deadline=5.0, now=4.95) == GiveUp(
        StopReason.DEADLINE
    )
    clock.now = 4.95
    assert ctl.decide(retry_number=1, error=error, deadline=5.0) == GiveUp(StopReason.DEADLINE)
    clock.advance(-1.0)
    assert isinstance(ctl.decide(retry_number=1, error=error, deadline=5.0), Retry)
    assert ctl.clock is clock


def test_exhausted_after_five_draft_retries_no_token_taken() -> None:
    """Retry 6 under the draft is refused without touching the budget or the random source."""
    ctl, _, rand = controller(DRAFT)
    assert ctl.decide(retry_number=6, error=overload()) == GiveUp(StopReason.ATTEMPTS_EXHAUSTED)
    assert ctl.budget.tokens == 1000.0
    assert rand.calls == 0


@pytest.mark.parametrize(
    "error",
    [
        overload(labels=[SYSTEM_OVERLOADED]),
        overload(labels=[RETRYABLE]),
        overload(labels=[]),
        AutoReconnect("connection reset"),
        ValueError("not pymongo"),
    ],
)
def test_not_retryable(error: BaseException) -> None:
    """Errors without both labels are NOT_RETRYABLE, even when retries are disabled."""
    ctl, _, _ = controller()
    assert ctl.decide(retry_number=1, error=error) == GiveUp(StopReason.NOT_RETRYABLE)
    assert ctl.decide(retry_number=9, error=error, retries_allowed=False) == GiveUp(
        StopReason.NOT_RETRYABLE
    )


def test_retries_disabled_before_attempts() -> None:
    """retries_allowed=False gives RETRIES_DISABLED before the attempt check."""
    ctl, _, _ = controller()
    assert ctl.decide(retry_number=99, error=overload(), retries_allowed=False) == GiveUp(
        StopReason.RETRIES_DISABLED
    )


def test_zero_retries_policy() -> None:
    """max_retries=0 never retries."""
    ctl, _, _ = controller(DRAFT.replace(max_retries=0))
    assert ctl.decide(retry_number=1, error=overload()) == GiveUp(StopReason.ATTEMPTS_EXHAUSTED)


def test_accounting_timeline() -> None:
    """record_success/record_failure move the tokens by the draft's rules."""
    ctl, _, _ = controller(DRAFT.replace(budget_capacity=10))
    error = overload()
    plain = AutoReconnect("reset")
    steps: list[float] = []
    assert isinstance(ctl.decide(retry_number=1, error=error), Retry)
    steps.append(ctl.budget.tokens)  # -1
    ctl.record_failure(plain, retried=True)
    steps.append(ctl.budget.tokens)  # +1: failed retry without overload label
    assert isinstance(ctl.decide(retry_number=1, error=error), Retry)
    ctl.record_failure(error, retried=True)
    steps.append(ctl.budget.tokens)  # -1, +0: failed retry with overload label
    ctl.record_failure(plain, retried=False)
    steps.append(ctl.budget.tokens)  # +0: first attempts never refund
    ctl.record_success(retried=True)
    steps.append(ctl.budget.tokens)  # +1.1
    assert isinstance(ctl.decide(retry_number=1, error=error), Retry)
    assert isinstance(ctl.decide(retry_number=1, error=error), Retry)
    ctl.record_success(retried=False)
    steps.append(ctl.budget.tokens)  # -2, +0.1
    assert steps == [9.0, 10.0, 9.0, 9.0, 10.0, 8.1]


def test_default_budget_from_policy() -> None:
    """Without an explicit budget the controller builds one from the policy."""
    assert isinstance(RetryController(DRAFT).budget, RetryBudget)
    assert isinstance(RetryController(CURRENT_SPEC).budget, NullBudget)
    assert RetryController(DRAFT).policy is DRAFT
