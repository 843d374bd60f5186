"""Per-server budgets, the ratio deposit rule, A6 throttling and the adaptive preset."""

from __future__ import annotations

import pytest
from pymongo.errors import PyMongoError

from backpressure.core.adaptive import ClientPacers, pacers_for
from backpressure.core.budget import A6Budget, NullBudget, RetryBudget, ServerBudgets, budget_for
from backpressure.core.decision import GiveUp, Retry, RetryController, StopReason
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import (
    ADAPTIVE,
    CURRENT_SPEC,
    DRAFT,
    FIELD_NAMES,
    PRESETS,
    resolve_policy,
)

A = ("a", 27017)
B = ("b", 27017)


def overload() -> PyMongoError:
    """A retryable overload error."""
    return PyMongoError("shed", error_labels=[SYSTEM_OVERLOADED, RETRYABLE])


def test_adaptive_preset_resolves_from_every_spelling() -> None:
    """ "adaptive" works as a keyword value and is listed among the presets."""
    assert resolve_policy("adaptive") is ADAPTIVE
    assert resolve_policy(" Adaptive ") is ADAPTIVE
    assert PRESETS["adaptive"] is ADAPTIVE
    assert ADAPTIVE.adaptive
    assert ADAPTIVE.name == "adaptive"


def test_adaptive_keeps_the_current_specs_retry_rules() -> None:
    """``adaptive`` is ``current`` plus pacing: every field but the pacing's is the current
    spec's (2 retries, its backoff, no budget, no retargeting), so it passes the current
    spec's tests as ``current`` does and ``maxAdaptiveRetries`` reads the same."""
    pacing = {"adaptive", "name"} | {f for f in FIELD_NAMES if f.startswith("adaptive_")}
    pacing.add("max_local_wait")
    for field in FIELD_NAMES:
        if field not in pacing:
            assert getattr(ADAPTIVE, field) == getattr(CURRENT_SPEC, field), field
    assert ADAPTIVE.max_retries == 2
    assert ADAPTIVE.first_retry_exponent == 1
    assert not ADAPTIVE.budget_enabled
    assert not ADAPTIVE.retarget
    assert isinstance(budget_for(ADAPTIVE), NullBudget)


def test_draft_is_unchanged() -> None:
    """The draft preset keeps its per-client 1000-token bucket and no pacing."""
    budget = budget_for(DRAFT)
    assert isinstance(budget, RetryBudget)
    assert budget.capacity == 1000.0
    assert not DRAFT.adaptive
    assert DRAFT.budget_scope == "client"
    assert RetryController(DRAFT).pacing is None
    assert RetryController(ADAPTIVE).pacing is None  # pacing is passed in, not built


def test_server_scope_keeps_one_budget_per_server() -> None:
    """Draining one server's budget leaves the others' retries alone."""
    policy = DRAFT.replace(budget_scope="server", budget_capacity=2.0)
    controller = RetryController(policy, random=lambda: 0.0)
    assert isinstance(controller.budget, ServerBudgets)
    for _ in range(2):
        assert isinstance(controller.decide(retry_number=1, error=overload(), server=A), Retry)
    refused = controller.decide(retry_number=1, error=overload(), server=A)
    assert refused == GiveUp(StopReason.BUDGET_EMPTY)
    assert isinstance(controller.decide(retry_number=1, error=overload(), server=B), Retry)
    budgets = controller.budget
    assert budgets.granted == 3
    assert budgets.refused == 1
    assert budgets.tokens == 0.0
    assert set(budgets.servers()) == {A, B}
    assert "servers=2" in repr(budgets)


def test_server_budgets_without_a_server_use_the_unknown_servers_budget() -> None:
    """Calls that do not name a server share one budget (keyed None)."""
    budgets = ServerBudgets(lambda: RetryBudget(3.0))
    assert budgets.tokens == 3.0
    assert budgets.capacity == 3.0
    assert budgets.retry_cost == 1.0
    assert budgets.try_acquire()
    assert budgets.try_consume(1.0)
    budgets.deposit(0.5)
    budgets.record_success(retried=True)
    budgets.record_overload_failure()
    budgets.record_non_overload_failure()
    assert budgets.for_server(None).tokens == 3.0
    assert list(budgets.servers()) == [None]


def test_ratio_mode_deposits_per_success_and_refunds_nothing() -> None:
    """Retries never exceed ratio x successes + capacity, whatever the fleet size."""
    budget = budget_for(DRAFT.replace(budget_mode="ratio", budget_capacity=10.0, budget_ratio=0.1))
    assert isinstance(budget, RetryBudget)
    granted = sum(budget.try_acquire() for _ in range(50))
    assert granted == 10
    for _ in range(100):
        budget.record_success(retried=True)  # a successful retry earns 0.1, not its token back
    granted = sum(budget.try_acquire() for _ in range(50))
    assert granted == 10  # 100 successes x 0.1


def test_a6_mode_allows_retries_only_above_half_the_tokens() -> None:
    """gRPC A6: failures take a token, successes add tokenRatio, retries need > max/2."""
    budget = budget_for(DRAFT.replace(budget_mode="a6", budget_capacity=10.0, budget_ratio=0.5))
    assert isinstance(budget, A6Budget)
    assert budget.retry_cost == 0.0
    assert budget.capacity == 10.0
    for _ in range(4):
        budget.record_overload_failure()
    assert budget.try_acquire()  # 6 > 5
    budget.record_overload_failure()
    assert not budget.try_acquire()  # 5 is not > 5
    budget.record_success(retried=False)
    assert budget.try_acquire()  # 5.5 > 5
    assert budget.granted == 2
    assert budget.refused == 1
    for _ in range(20):
        budget.record_overload_failure()
    assert budget.tokens == 0.0
    budget.record_non_overload_failure()
    budget.deposit(100.0)
    assert budget.tokens == 10.0
    assert budget.try_consume(4.0)
    assert not budget.try_consume(7.0)
    assert "max_tokens=10.0" in repr(budget)
    assert budget.for_server(A) is budget


def test_a6_controller_counts_overload_failures_per_server() -> None:
    """With per-server A6 budgets, one server's failures throttle only that server."""
    policy = DRAFT.replace(budget_mode="a6", budget_scope="server", budget_capacity=4.0)
    controller = RetryController(policy, random=lambda: 0.0)
    for _ in range(2):
        controller.record_failure(overload(), retried=False, server=A)
    assert controller.decide(retry_number=1, error=overload(), server=A) == GiveUp(
        StopReason.BUDGET_EMPTY
    )
    assert isinstance(controller.decide(retry_number=1, error=overload(), server=B), Retry)
    controller.record_success(retried=False, server=A)
    assert isinstance(controller.decide(retry_number=1, error=overload(), server=A), Retry)


def test_paced_retries_spend_no_budget() -> None:
    """A retry to a server whose attempts are held locally needs no token."""
    clock = [0.0]
    policy = ADAPTIVE.replace(
        budget_enabled=True, budget_scope="server", budget_mode="ratio", budget_capacity=1.0
    )
    admission = ClientPacers(policy, clock=lambda: clock[0])
    controller = RetryController(policy, random=lambda: 0.0, pacing=admission)
    assert isinstance(controller.decide(retry_number=1, error=overload(), server=A), Retry)
    refused = controller.decide(retry_number=1, error=overload(), server=A)
    assert refused == GiveUp(StopReason.BUDGET_EMPTY)  # not paced yet: the budget decides
    admission.record(A, overloaded=True)  # one pushback is a blip: still not paced
    assert controller.decide(retry_number=1, error=overload(), server=A) == refused
    admission.record(A, overloaded=True)  # the second within the window closes the pacer
    for _ in range(20):
        assert isinstance(controller.decide(retry_number=1, error=overload(), server=A), Retry)


def test_a_paced_critical_retry_past_the_deadline_waits_part_of_the_time_left() -> None:
    """A backoff that would pass the deadline gives up, as the spec says, unless the server is
    paced and the operation critical: the pacer spaces that retry (it takes another attempt's
    slot), so it waits 0.3 of the time left instead.  A sheddable one still gives up, and so
    does one whose deadline has passed."""
    clock = [100.0]
    admission = ClientPacers(ADAPTIVE, clock=lambda: clock[0])
    controller = RetryController(ADAPTIVE, random=lambda: 1.0, pacing=admission)
    # Jitter 1: the current spec's first retry waits 0.2 s; 0.05 s are left.
    late = {"retry_number": 1, "error": overload(), "server": A, "deadline": 100.05, "now": 100.0}
    assert controller.decide(**late) == GiveUp(StopReason.DEADLINE)  # not paced yet
    for _ in range(2):
        admission.record(A, overloaded=True)
    assert admission.is_paced(A)
    decision = controller.decide(**late)
    assert isinstance(decision, Retry)
    assert decision.delay == pytest.approx(0.015)
    assert controller.decide(**late, sheddable=True) == GiveUp(StopReason.DEADLINE)
    passed = {**late, "now": 100.05}
    assert controller.decide(**passed) == GiveUp(StopReason.DEADLINE)
    assert controller.decide(**{**late, "server": B}) == GiveUp(StopReason.DEADLINE)  # B: open
    early = controller.decide(**{**late, "deadline": 101.0})
    assert isinstance(early, Retry)
    assert early.delay == pytest.approx(0.2)  # the spec's delay when it fits


def test_pacers_for_builds_pacing_only_for_adaptive_policies() -> None:
    """pacers_for gives a ClientPacers on the given clock for ADAPTIVE, None for DRAFT."""

    def clock() -> float:
        return 5.0

    pacers = pacers_for(ADAPTIVE, clock=clock)
    assert pacers is not None
    assert pacers.clock is clock
    assert pacers.policy is ADAPTIVE
    assert pacers_for(DRAFT) is None


def test_null_budget_is_its_own_server_budget() -> None:
    """A disabled budget stays disabled for every server."""
    budget = budget_for(ADAPTIVE.replace(budget_enabled=False))
    assert isinstance(budget, NullBudget)
    assert budget.for_server(A) is budget
    budget.record_overload_failure()
    assert budget.try_acquire()


@pytest.mark.parametrize("mode", ["bucket", "ratio", "a6"])
def test_every_mode_and_scope_builds(mode: str) -> None:
    """Each budget mode works in both scopes."""
    for scope in ("client", "server"):
        policy = DRAFT.replace(budget_mode=mode, budget_scope=scope)
        assert budget_for(policy).for_server(A).try_acquire()
