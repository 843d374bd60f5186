"""StatsRecorder, OperationSettings and AmplificationWindow as pure timelines."""

from __future__ import annotations

import pytest
from pymongo.errors import OperationFailure

from backpressure import DRAFT, Criticality, InvalidPolicyError
from backpressure.core.budget import RetryBudget
from backpressure.core.cycle_record import CycleRecord
from backpressure.core.decision import Retry, RetryController, StopReason
from backpressure.core.events import OperationFinishedEvent
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.overrides import OperationSettings, validate_policy_changes
from backpressure.core.stats import StatsRecorder
from backpressure.metrics import AmplificationWindow

A = ("a", 1)
B = ("b", 2)


def _overload() -> OperationFailure:
    """An overload error with both labels."""
    return OperationFailure(
        "overloaded", code=462, details={"errorLabels": [SYSTEM_OVERLOADED, RETRYABLE]}
    )


def _event(servers, delays=(), succeeded=True, reason=None) -> OperationFinishedEvent:  # type: ignore[no-untyped-def]
    """A finished-operation event."""
    return OperationFinishedEvent("insert", tuple(servers), tuple(delays), succeeded, reason)


def test_recorder_attributes_attempts_retries_and_outcomes_per_server() -> None:
    """Attempts go to their server, retries to the failed one, the outcome to the last one."""
    recorder = StatsRecorder()
    recorder.operation_finished(_event([A]))
    recorder.operation_finished(_event([A, B], [0.5]))
    recorder.operation_finished(
        _event([A, A, B], [0.1, 0.2], succeeded=False, reason=StopReason.BUDGET_EMPTY)
    )
    recorder.operation_finished(_event([None], succeeded=False))
    stats = recorder.snapshot()
    assert (stats.operations, stats.succeeded, stats.failed) == (4, 2, 2)
    assert (stats.attempts, stats.retries) == (7, 3)
    assert stats.backoff_seconds == pytest.approx(0.8)
    assert dict(stats.gave_up) == {StopReason.BUDGET_EMPTY: 1}
    a, b = stats.servers[A], stats.servers[B]
    assert (a.operations, a.attempts, a.retries, a.backoff_seconds) == (1, 4, 3, pytest.approx(0.8))
    assert (b.operations, b.attempts, b.retries, dict(b.gave_up)) == (
        2,
        2,
        0,
        {StopReason.BUDGET_EMPTY: 1},
    )
    assert set(stats.servers) == {A, B}


def test_operation_reports_one_finished_event() -> None:
    """CycleRecord sends exactly one event, with the servers and delays, on give-up."""
    events: list[OperationFinishedEvent] = []
    controller = RetryController(DRAFT.replace(max_retries=1), random=lambda: 0.5)
    op = CycleRecord(controller, "find", on_finished=events.append)
    op.attempt_started(A)
    assert isinstance(op.failed(_overload()), Retry)
    op.attempt_started(B)
    op.failed(_overload())
    op.ended()
    (event,) = events
    assert event.attempt_servers == (A, B)
    assert event.retry_delays == (0.05,)
    assert (event.succeeded, event.stop_reason) == (False, StopReason.ATTEMPTS_EXHAUSTED)


def test_settings_derive_a_controller_sharing_the_budget() -> None:
    """Overridden policy, same budget and clock; test mode keeps the delay but sleeps 0."""
    budget = RetryBudget(capacity=10)
    controller = RetryController(DRAFT, budget=budget, random=lambda: 0.5, clock=lambda: 0.0)
    settings = OperationSettings(
        policy_changes=validate_policy_changes({"max_retries": 1}),
        criticality=Criticality.SHEDDABLE,
        testing=True,
        random=lambda: 1.0 - 1e-9,
    )
    derived = settings.controller_for(controller)
    assert derived.budget is budget
    assert derived.clock is controller.clock
    assert derived.policy.max_retries == 1
    decision = derived.decide(retry_number=1, error=_overload())
    assert isinstance(decision, Retry)
    assert decision.delay == pytest.approx(0.1)
    assert decision.sleep_seconds == 0.0
    assert budget.tokens == 9


def test_policy_changes_are_validated_field_by_field() -> None:
    """Unknown names and bad values are refused, cross-field checks wait for the policy."""
    with pytest.raises(InvalidPolicyError, match="name"):
        validate_policy_changes({"name": "x"})
    with pytest.raises(InvalidPolicyError, match="max_backoff"):
        validate_policy_changes({"max_backoff": float("nan")})
    changes = validate_policy_changes({"max_backoff": 0.01})
    with pytest.raises(InvalidPolicyError, match="max_backoff"):
        OperationSettings(policy_changes=changes).policy_for(DRAFT)


def test_amplification_window_slides() -> None:
    """Operations older than the window stop counting; an idle window reads 0."""
    now = [100.0]
    window = AmplificationWindow(10, clock=lambda: now[0])
    assert window.ratio() == 0.0
    window.add(1)
    window.add(5)
    assert window.ratio() == 3.0
    now[0] = 105.5
    window.add(1)
    assert window.ratio() == pytest.approx(7 / 3)
    now[0] = 110.5
    assert window.ratio() == 1.0
    now[0] = 200.0
    assert window.ratio() == 0.0


@pytest.mark.parametrize("bad", [0, 0.5, float("inf"), True, "10"])
def test_amplification_window_rejects_bad_lengths(bad: object) -> None:
    """The window length must be a finite number of seconds >= 1."""
    with pytest.raises((TypeError, ValueError), match="window"):
        AmplificationWindow(bad)  # type: ignore[arg-type]


def test_client_state_hands_the_criticality_to_the_operation() -> None:
    """new_operation applies the settings source: overridden policy and criticality."""
    from backpressure.core.client_state import ClientState

    settings = OperationSettings(
        policy_changes=validate_policy_changes({"max_retries": 0}),
        criticality=Criticality.SHEDDABLE,
    )
    state = ClientState(RetryController(DRAFT), settings=lambda: settings)
    operation = state.new_operation("insert")
    assert operation.criticality is Criticality.SHEDDABLE
    assert operation.controller.policy.max_retries == 0
    assert operation.controller.budget is state.controller.budget
    plain = ClientState(RetryController(DRAFT)).new_operation("insert")
    assert plain.criticality is Criticality.CRITICAL


def test_client_state_lets_the_pacing_hold_attempts_except_in_test_mode() -> None:
    """holds_locally is False only while the settings source reports test mode."""
    from backpressure.core.client_state import ClientState

    current: list[OperationSettings | None] = [None]
    state = ClientState(RetryController(DRAFT), settings=lambda: current[0])
    assert state.holds_locally()
    current[0] = OperationSettings(criticality=Criticality.SHEDDABLE)
    assert state.holds_locally()
    current[0] = OperationSettings(testing=True)
    assert not state.holds_locally()
    assert ClientState(RetryController(DRAFT)).holds_locally()


def test_first_attempt_successes_are_folded_into_the_snapshot() -> None:
    """The success path's short form counts like a finished one-attempt operation."""
    recorder = StatsRecorder()
    recorder.first_attempt_succeeded(("a", 1))
    recorder.first_attempt_succeeded(("a", 1))
    recorder.first_attempt_succeeded(None)
    snapshot = recorder.snapshot()
    assert (snapshot.operations, snapshot.succeeded, snapshot.attempts) == (3, 3, 3)
    assert snapshot.failed == 0
    assert snapshot.servers[("a", 1)].operations == 2
    assert snapshot.servers[("a", 1)].attempts == 2
    assert recorder.snapshot() == snapshot  # folding twice counts nothing twice


def test_lock_free_tallies_count_exactly_across_snapshots_and_threads() -> None:
    """``tally`` counters read by several snapshots count every success once, from any thread."""
    import threading

    recorder = StatsRecorder()
    server_a, server_none = object(), None
    tally = recorder.tally(server_a, A)
    assert recorder.tally(server_a, A) is tally  # one counter per key
    assert recorder.tallies[server_a] is tally
    for _ in range(3):
        next(tally)
    next(recorder.tally(server_none, None))
    first = recorder.snapshot()
    assert (first.operations, first.succeeded, first.attempts) == (4, 4, 4)
    assert first.servers[A].operations == 3
    assert recorder.snapshot() == first  # reading the counters counts nothing

    def count(n: int) -> None:
        for _ in range(n):
            next(tally)

    threads = [threading.Thread(target=count, args=(1000,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorder.first_attempt_succeeded(A)
    second = recorder.snapshot()
    assert second.operations == 4 + 4000 + 1
    assert second.servers[A].attempts == 3 + 4000 + 1


def test_count_first_attempt_deposits_counts_and_notifies_like_the_full_path() -> None:
    """The adapters' success path deposits into a drained budget and feeds operation listeners."""
    from backpressure.core.client_state import ClientState

    state = ClientState(RetryController(DRAFT))
    assert state.lean_success
    budget = state.controller.budget
    assert budget.try_consume(1.0)
    key = object()
    resolved: list[object] = []

    def address_of(found: object) -> tuple[str, int]:
        resolved.append(found)
        return A

    state.count_first_attempt(key, address_of)
    state.count_first_attempt(key, address_of)
    assert resolved == [key]  # the address is read once per key
    assert budget.tokens == pytest.approx(999.2)
    assert state.snapshot().servers[A].operations == 2

    events: list[OperationFinishedEvent] = []

    class Listener:
        def operation_finished(self, event: OperationFinishedEvent) -> None:
            events.append(event)

    state.add_listener(Listener())
    assert not state.lean_success
    state.count_first_attempt(key, address_of)
    assert [(e.attempt_servers, e.succeeded) for e in events] == [((A,), True)]
    assert state.snapshot().operations == 3
