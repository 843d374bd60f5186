"""The hedging decision as timelines on a fake clock: schedule, pushback pause, target, budget."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pymongo.errors import AutoReconnect, OperationFailure

from backpressure import DRAFT, InvalidPolicyError, Policy
from backpressure.core.budget import A6Budget, NullBudget, RetryBudget, ServerBudgets, budget_for
from backpressure.core.events import HedgeEvent
from backpressure.core.hedging import (
    Hedge,
    HedgeNotifier,
    HedgeRace,
    Hedging,
    NoHedge,
    SkipReason,
    is_non_fatal,
)
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import PRESETS
from tests.fakes import FakeClock

A = ("a", 1)
B = ("b", 2)
C = ("c", 3)
HEDGED = DRAFT.replace(hedge_delay=0.1, max_hedges=2, hedge_pushback_pause=1.0)


class Paced:
    """A stand-in for the adaptive pacing: pushes back while ``paced`` is set."""

    def __init__(self) -> None:
        """Start with no server paced."""
        self.paced = False

    def pushing_back(self) -> bool:
        """Whether some server is paced."""
        return self.paced


def hedging(
    policy: Policy = HEDGED, budget: Any = None, *, random: float = 0.0, **kwargs: Any
) -> tuple[Hedging, FakeClock]:
    """A Hedging on a fake clock with the random source pinned to ``random``."""
    clock = FakeClock()
    chosen = NullBudget() if budget is None else budget
    return Hedging(policy, chosen, clock=clock, random=lambda: random, **kwargs), clock


def test_hedge_times_are_multiples_of_the_delay_from_the_start() -> None:
    """Hedge n is due at start + n * hedge_delay (A6's schedule)."""
    decision, _ = hedging()
    assert decision.delay == 0.1
    assert [decision.hedge_time(5.0, n) for n in (1, 2)] == [5.1, 5.2]


def test_the_wait_before_each_hedge_is_counted_on_the_injected_clock() -> None:
    """next_wait: the seconds left until the next hedge is due on the given clock (0 once due),
    None once max_hedges were asked for."""
    decision, clock = hedging()
    assert decision.max_hedges == 2
    start = clock.now
    assert decision.next_wait(start, 0) == pytest.approx(0.1)
    clock.advance(0.04)
    assert decision.next_wait(start, 0) == pytest.approx(0.06)
    clock.advance(0.06)
    assert decision.next_wait(start, 0) == 0.0
    clock.advance(0.5)  # late: due at once, never negative
    assert decision.next_wait(start, 0) == 0.0
    assert decision.next_wait(start, 1) == 0.0
    assert decision.next_wait(start, 1, now=start + 0.15) == pytest.approx(0.05)
    assert decision.next_wait(start, 2) is None  # max_hedges=2 asked for


def test_a_race_records_each_member_tried_once_in_order() -> None:
    """The members a read went to, in order, each once; an unknown member is not recorded."""
    race = HedgeRace()
    for address in (B, None, A, B):
        race.tried(address)
    assert race.tried_so_far() == [B, A]


def test_the_server_choice_rule_steers_the_hedge_away_while_another_member_remains() -> None:
    """A member the choice avoids is not a hedge's target while another untried one remains;
    the rule is asked about the untried members only, and only when there is a choice."""
    decision, _ = hedging(random=0.0)
    asked: list[list[tuple[str, int]]] = []

    def avoid(addresses: list[tuple[str, int]]) -> list[tuple[str, int]]:
        asked.append(list(addresses))
        return [B]

    assert decision.decide(hedge=1, candidates=[A, B, C], tried=[A], avoid=avoid) == Hedge(C, 1)
    assert asked == [[B, C]]
    # B is the only member left: avoided members stay eligible (pymongo's deprioritization).
    assert decision.decide(hedge=2, candidates=[A, B, C], tried=[A, C], avoid=avoid) == Hedge(B, 2)
    assert asked == [[B, C]]
    # The rule avoiding every untried member leaves the draw as it was.
    everyone, _ = hedging(random=0.0)
    assert everyone.decide(
        hedge=1, candidates=[A, B, C], tried=[A], avoid=lambda found: list(found)
    ) == Hedge(B, 1)


def test_an_unsent_hedge_gives_its_token_back_to_its_targets_budget() -> None:
    """A hedge decided but not sent (the read was answered first) returns the token it took."""
    budget = budget_for(HEDGED.replace(budget_scope="server", budget_capacity=2.0))
    assert isinstance(budget, ServerBudgets)
    decision, _ = hedging(budget=budget)
    hedge = decision.decide(hedge=1, candidates=[A, B], tried=[A])
    assert hedge == Hedge(B, 1)
    assert budget.for_server(B).tokens == 1.0
    decision.unsent(hedge)
    assert budget.for_server(B).tokens == 2.0
    assert budget.for_server(A).tokens == 2.0
    decision.unsent(hedge)  # never above capacity
    assert budget.for_server(B).tokens == 2.0
    throttle = A6Budget(4.0)
    a6, _ = hedging(budget=throttle)
    a6.unsent(Hedge(B, 1))  # A6: a hedge takes no token, so none comes back
    assert throttle.tokens == 4.0


def test_a_hedge_goes_to_an_untried_candidate_chosen_at_random() -> None:
    """The target is drawn among the members not tried yet; tried members are never chosen."""
    low, _ = hedging(random=0.0)
    high, _ = hedging(random=0.999)
    assert low.decide(hedge=1, candidates=[A, B, C], tried=[A]) == Hedge(B, 1)
    assert high.decide(hedge=1, candidates=[A, B, C], tried=[A]) == Hedge(C, 1)
    assert low.decide(hedge=2, candidates=[A, B, C], tried=[A, B]) == Hedge(C, 2)


def test_no_hedge_without_another_eligible_member() -> None:
    """A read whose only eligible member was tried (primary reads, a standalone) is not hedged."""
    decision, _ = hedging()
    assert decision.decide(hedge=1, candidates=[A], tried=[A]) == NoHedge(SkipReason.NO_CANDIDATE)
    assert decision.decide(hedge=1, candidates=[], tried=[]) == NoHedge(SkipReason.NO_CANDIDATE)


def test_no_more_than_max_hedges() -> None:
    """Hedge max_hedges + 1 is refused whatever else holds."""
    decision, _ = hedging()
    assert decision.decide(hedge=3, candidates=[A, B, C], tried=[A]) == NoHedge(SkipReason.LIMIT)


def test_no_hedge_once_the_deadline_has_passed() -> None:
    """At or past the operation's deadline nothing more is sent."""
    decision, clock = hedging()
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A], deadline=clock.now + 0.01) == (
        Hedge(B, 1)
    )
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A], deadline=clock.now) == NoHedge(
        SkipReason.DEADLINE
    )


def test_pushback_holds_hedges_for_the_hold_then_they_resume() -> None:
    """An overload reply from any server holds hedges for hedge_pushback_pause seconds."""
    decision, clock = hedging()
    decision.record_pushback()
    clock.now += 0.999
    assert decision.pushing_back()
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A]) == NoHedge(SkipReason.PUSHBACK)
    clock.now += 0.001
    assert not decision.pushing_back()
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A]) == Hedge(B, 1)


def test_an_older_pushback_does_not_shorten_the_hold() -> None:
    """Recording a pushback with an earlier time keeps the latest one."""
    decision, clock = hedging()
    decision.record_pushback(clock.now)
    decision.record_pushback(clock.now - 5.0)
    assert decision.pushing_back(clock.now + 0.5)


def test_a_paced_server_holds_hedges_while_it_is_paced() -> None:
    """With the adaptive policy, any paced server holds hedges (its per-server state)."""
    pacing = Paced()
    decision, _ = hedging(pacing=pacing)
    pacing.paced = True
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A]) == NoHedge(SkipReason.PUSHBACK)
    pacing.paced = False
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A]) == Hedge(B, 1)


def test_a_hedge_takes_a_token_from_the_target_servers_budget() -> None:
    """Per-server budgets: the hedge's token comes from the target's budget, not the others'."""
    budget = budget_for(HEDGED.replace(budget_scope="server", budget_capacity=1.0))
    assert isinstance(budget, ServerBudgets)
    decision, _ = hedging(budget=budget)
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A]) == Hedge(B, 1)
    assert budget.for_server(B).tokens == 0.0
    assert budget.for_server(A).tokens == 1.0
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A]) == NoHedge(
        SkipReason.BUDGET_EMPTY
    )
    assert decision.decide(hedge=1, candidates=[A, B], tried=[B]) == Hedge(A, 1)


def test_no_token_is_taken_when_no_hedge_is_sent() -> None:
    """Refusals for the limit, the deadline, pushback or no candidate leave the budget alone."""
    budget = RetryBudget(2.0)
    decision, clock = hedging(budget=budget)
    decision.decide(hedge=3, candidates=[A, B], tried=[A])
    decision.decide(hedge=1, candidates=[A, B], tried=[A], deadline=clock.now)
    decision.decide(hedge=1, candidates=[A], tried=[A])
    decision.record_pushback()
    decision.decide(hedge=1, candidates=[A, B], tried=[A])
    assert budget.tokens == 2.0


def test_the_a6_throttle_allows_hedges_only_above_half() -> None:
    """A6 mode: hedges are sent while tokens > max_tokens / 2, and take none themselves."""
    throttle = A6Budget(4.0, token_ratio=0.5)
    decision, _ = hedging(budget=throttle)
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A]) == Hedge(B, 1)
    throttle.record_overload_failure()
    throttle.record_overload_failure()
    assert throttle.tokens == 2.0
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A]) == NoHedge(
        SkipReason.BUDGET_EMPTY
    )
    throttle.record_success(retried=False)
    assert decision.decide(hedge=1, candidates=[A, B], tried=[A]) == Hedge(B, 1)


def test_a_policy_without_hedge_delay_cannot_hedge() -> None:
    """Hedging refuses a policy whose hedge_delay is None."""
    with pytest.raises(ValueError, match="hedge_delay"):
        Hedging(DRAFT, NullBudget())


@pytest.mark.parametrize(
    ("error", "non_fatal"),
    [
        (AutoReconnect("connection closed"), True),
        (
            OperationFailure("overloaded", 462, {"errorLabels": [SYSTEM_OVERLOADED, RETRYABLE]}),
            True,
        ),
        (OperationFailure("not primary or secondary", 13436), True),
        (OperationFailure("bad query", 2), False),
        (OperationFailure("maxTimeMS expired", 50), False),
        (ValueError("not a server error"), False),
    ],
)
def test_non_fatal_errors_are_those_another_member_may_not_return(
    error: BaseException, non_fatal: bool
) -> None:
    """Network, overload and retryable-read errors are non-fatal; the rest end the read."""
    assert is_non_fatal(error) is non_fatal


class Listener:
    """Keeps hedge events; optionally raises."""

    def __init__(self, fail: bool = False) -> None:
        """Start empty."""
        self.events: list[HedgeEvent] = []
        self.fail = fail

    def hedged(self, event: HedgeEvent) -> None:
        """Record (or fail on) a hedge."""
        self.events.append(event)
        if self.fail:
            raise RuntimeError("listener failure")


def test_every_hedge_is_an_event_and_a_rate_limited_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Listeners get every hedge (a failing one is logged); INFO lines are rate-limited."""
    budget = RetryBudget(10.0)
    decision, clock = hedging(budget=budget)
    good, bad = Listener(), Listener(fail=True)
    notifier = HedgeNotifier(decision, lambda: (good, bad, object()), log_interval=5.0)
    caplog.set_level(logging.INFO, logger="backpressure")
    for _ in range(3):
        hedge = decision.decide(hedge=1, candidates=[A, B], tried=[A])
        assert isinstance(hedge, Hedge)
        notifier.hedged("find", hedge, A, 0.1)
    clock.now += 5.0
    notifier.hedged("find", Hedge(B, 2), None, 0.2)
    assert [e.server for e in good.events] == [B, B, B, B]
    assert good.events[0] == HedgeEvent(
        operation="find", server=B, first_server=A, hedge=1, after=0.1, budget_tokens=9.0
    )
    assert len(bad.events) == 4
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("hedging")]
    assert lines == [
        "hedging find to b:2 after 0.100s without a reply from a:1 (hedge 1)",
        "hedging find to b:2 after 0.200s without a reply from unknown server (hedge 2); "
        "2 more hedge(s) since the previous line",
    ]
    assert sum("hedge listener" in r.getMessage() for r in caplog.records) == 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hedge_delay": -0.1}, "Policy.hedge_delay must be None or a number in 0..3600"),
        ({"hedge_delay": float("nan")}, "Policy.hedge_delay must be None or a number in 0..3600"),
        ({"hedge_delay": 3601}, "Policy.hedge_delay must be None or a number in 0..3600"),
        ({"hedge_delay": "0.1"}, "Policy.hedge_delay must be None or a number in 0..3600"),
        ({"hedge_delay": True}, "Policy.hedge_delay must be None or a number in 0..3600"),
        ({"max_hedges": 0}, "Policy.max_hedges must be an int in 1..4"),
        ({"max_hedges": 5}, "Policy.max_hedges must be an int in 1..4"),
        ({"max_hedges": 1.5}, "Policy.max_hedges must be an int"),
        ({"hedge_pushback_pause": 0}, "Policy.hedge_pushback_pause must be a number > 0"),
        ({"hedge_pushback_pause": float("inf")}, "Policy.hedge_pushback_pause must be a finite"),
    ],
)
def test_hedging_fields_are_validated_with_their_name_and_range(
    changes: dict[str, Any], message: str
) -> None:
    """Every hedging field rejects bad values with an error naming the field and range."""
    with pytest.raises(InvalidPolicyError, match=message.replace(".", r"\.")):
        DRAFT.replace(**changes)


def test_hedging_is_off_by_default_in_every_preset() -> None:
    """No preset hedges: hedge_delay is None unless the user sets it."""

    for preset in PRESETS.values():
        assert preset.hedge_delay is None
        assert not preset.hedging
    assert DRAFT.replace(hedge_delay=0).hedging


def test_hedging_uri_and_keyword_options_set_the_policy_fields() -> None:
    """hedgeDelayMS (ms) and maxHedges come from the URI or keywords, validated like the others."""
    from backpressure.switch.uri_options import (
        apply_overrides,
        parse_backpressure_options,
        split_backpressure_kwargs,
    )

    uri, found = parse_backpressure_options("mongodb://h/?hedgeDelayMS=50&maxHedges=2&w=1")
    assert uri == "mongodb://h/?w=1"
    policy = apply_overrides(DRAFT, found)
    assert (policy.hedge_delay, policy.max_hedges) == (0.05, 2)
    rest, ours = split_backpressure_kwargs({"hedge_delay_ms": 0, "max_hedges": 4, "w": 1})
    assert rest == {"w": 1}
    assert apply_overrides(DRAFT, ours).hedge_delay == 0.0
    with pytest.warns(UserWarning, match="URI option maxHedges must be an integer from 1 to 4"):
        assert parse_backpressure_options("mongodb://h/?maxHedges=5")[1] == {}
    with pytest.raises(InvalidPolicyError, match="option hedgeDelayMS must be an integer from 0"):
        split_backpressure_kwargs({"hedgeDelayMS": -1})
