"""The per-operation attempt ledger, read as timelines of attempts."""

from __future__ import annotations

from pymongo.errors import OperationFailure

from backpressure.core.cycle_record import CycleRecord
from backpressure.core.decision import GiveUp, Retry, RetryController, StopReason
from backpressure.core.labels import RETRYABLE, RETRYABLE_WRITE, SYSTEM_OVERLOADED
from backpressure.core.ledger import AttemptLedger, AttemptOutcome, AttemptRecord
from backpressure.core.policy import CURRENT_SPEC, DRAFT

A = ("a", 1)
B = ("b", 2)
OVERLOAD = AttemptOutcome.OVERLOAD
CLASSIC = AttemptOutcome.CLASSIC_RETRYABLE


def timeline(*outcomes: AttemptOutcome, opens_transaction: bool = False) -> AttemptLedger:
    """A ledger whose attempts (alternately on A and B) ended with ``outcomes``."""
    ledger = AttemptLedger(opens_transaction=opens_transaction)
    for index, outcome in enumerate(outcomes):
        ledger.started(A if index % 2 == 0 else B)
        ledger.finished(outcome)
    return ledger


def error(*labels: str, code: int = 462) -> OperationFailure:
    """A server error with ``labels``."""
    return OperationFailure("failed", code, {"ok": 0, "code": code, "errorLabels": list(labels)})


def test_records_servers_and_outcomes_in_order() -> None:
    """Each attempt keeps its server and outcome; an open attempt has no outcome yet."""
    ledger = timeline(CLASSIC, OVERLOAD)
    ledger.started(A)
    assert ledger.records == (
        AttemptRecord(A, CLASSIC),
        AttemptRecord(B, OVERLOAD),
        AttemptRecord(A, None),
    )
    assert ledger.open
    assert (ledger.attempts, ledger.failures) == (3, 2)
    assert ledger.servers() == (A, B)


def test_an_attempt_left_open_is_closed_as_other() -> None:
    """Starting an attempt while the previous one is open closes that one as OTHER."""
    ledger = AttemptLedger()
    ledger.started(A)
    ledger.started(B)
    assert ledger.records[0].outcome is AttemptOutcome.OTHER
    assert ledger.non_overload_failure


def test_retry_number_counts_classic_and_overload_failures() -> None:
    """The next retry's number counts every failed attempt (defect 1's cause)."""
    assert timeline(CLASSIC).retry_number() == 1
    assert timeline(CLASSIC, OVERLOAD, OVERLOAD).retry_number() == 3


def test_classic_retry_cap() -> None:
    """Classic rules: one retry (unlimited under CSOT) until an overload, then max_retries."""
    assert timeline(CLASSIC).classic_retry_allowed(2, unlimited=False)
    assert not timeline(CLASSIC, CLASSIC).classic_retry_allowed(2, unlimited=False)
    assert timeline(CLASSIC, CLASSIC, CLASSIC).classic_retry_allowed(2, unlimited=True)
    assert timeline(OVERLOAD, CLASSIC).classic_retry_allowed(2, unlimited=False)
    assert not timeline(OVERLOAD, OVERLOAD, CLASSIC).classic_retry_allowed(2, unlimited=True)


def test_transaction_restarts_only_when_nothing_was_processed() -> None:
    """The first statement restarts the transaction unless the server processed a command."""
    ledger = timeline(OVERLOAD, opens_transaction=True)
    assert ledger.restarts_transaction()
    ledger.command_processed()
    assert not ledger.restarts_transaction()
    assert not timeline(OVERLOAD).restarts_transaction()


def test_commit_write_concern_rule() -> None:
    """Overload errors only: keep the write concern; any other failure: upgrade it."""
    assert timeline(OVERLOAD, OVERLOAD).commit_keeps_write_concern()
    assert not timeline(CLASSIC, OVERLOAD).commit_keeps_write_concern()
    assert not timeline(OVERLOAD, AttemptOutcome.OTHER).commit_keeps_write_concern()


def test_mixed_errors_timeline_stops_at_the_cap() -> None:
    """Defect 1 as a timeline: classic first, then overloads: the current spec stops at 3."""
    operation = CycleRecord(RetryController(CURRENT_SPEC, random=lambda: 0.0), "insert")
    operation.attempt_started(A)
    operation.classic_retry(error(RETRYABLE_WRITE, code=91))
    operation.attempt_started(A)
    first = operation.failed(error(SYSTEM_OVERLOADED, RETRYABLE))
    assert first == Retry(retry_number=2, delay=0.0, retarget=False)
    operation.attempt_started(A)
    assert operation.failed(error(SYSTEM_OVERLOADED, RETRYABLE)) == GiveUp(
        StopReason.ATTEMPTS_EXHAUSTED
    )
    assert operation.attempts == 3


def test_retryable_write_labelled_overload_is_kept_without_a_token() -> None:
    """Defect 2 as a timeline: overload + RetryableWriteError is retried when the classic rules
    retry it, takes no budget token, and is refused when they do not."""
    controller = RetryController(DRAFT.replace(budget_capacity=0.5), random=lambda: 0.0)
    operation = CycleRecord(controller, "insert")
    operation.attempt_started(A)
    labelled = error(SYSTEM_OVERLOADED, RETRYABLE_WRITE)
    decision = operation.failed(labelled, classic_retryable=True)
    assert isinstance(decision, Retry)
    assert not decision.from_budget
    assert controller.budget.tokens == 0.5
    operation.attempt_started(B)
    assert operation.failed(labelled) == GiveUp(StopReason.NOT_RETRYABLE)
