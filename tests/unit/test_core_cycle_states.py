"""The attempt cycle's state machine: every order an executor uses is in the table, and a call
out of order raises while ``cycle.STRICT`` is on and passes silently while it is off.

Each legal order is a script of calls with the phase expected after each (the executors' real
orders: the native hooks, both backport loops and the simulator); one test checks that together
they take every entry of ``TRANSITIONS``, so the table holds no order no executor uses.
"""

from __future__ import annotations

from typing import Callable, Optional

import pytest
from pymongo.errors import OperationFailure, PyMongoError

from backpressure.core import cycle as cycle_module
from backpressure.core.adaptive import pacers_for
from backpressure.core.client_state import ClientState
from backpressure.core.cycle import (
    SEND,
    TRANSITIONS,
    AttemptCycle,
    Backoff,
    CycleOrderError,
    Event,
    Phase,
    Stop,
    Wait,
)
from backpressure.core.decision import RetryController
from backpressure.core.labels import RETRYABLE, SYSTEM_OVERLOADED
from backpressure.core.policy import ADAPTIVE, CURRENT_SPEC, Policy
from tests.fakes import FakeClock

A = ("a", 27017)
B = ("b", 27017)

IDLE, ASKED, WAITING, SENT, SETTLED, STOPPED, DONE = (
    Phase.IDLE,
    Phase.ASKED,
    Phase.WAITING,
    Phase.SENT,
    Phase.SETTLED,
    Phase.STOPPED,
    Phase.DONE,
)


def overload() -> PyMongoError:
    """A load-shedding error as the server sends it (retried: the answer is a Backoff)."""
    return PyMongoError("rate exceeded", error_labels=[SYSTEM_OVERLOADED, RETRYABLE])


def fatal() -> PyMongoError:
    """An error no rule retries (the answer is a Stop)."""
    return OperationFailure("bad value", code=2)


def client(policy: Policy, clock: FakeClock) -> ClientState:
    """One client's state on ``clock``."""
    controller = RetryController(
        policy, random=lambda: 1.0, clock=clock, pacing=pacers_for(policy, clock=clock)
    )
    return ClientState(controller)


def unpaced(clock: FakeClock) -> ClientState:
    """A client whose ``admit`` answers SEND."""
    return client(CURRENT_SPEC, clock)


def close_pacing(state: ClientState, clock: FakeClock) -> None:
    """Push back attempts to A until its pacer closes (the next attempts wait)."""
    for _ in range(100):
        cycle = AttemptCycle(state, "find")
        cycle.admit(A, None)
        cycle.started(A)
        cycle.failed(overload(), classic_retryable=True)
        clock.advance(0.001)
        paced = cycle.paced()
        if paced is not None and paced(A):
            for _ in range(3):  # take the next slots: the attempt under test waits
                AttemptCycle(state, "find").admit(A, None)
            return
    raise AssertionError("the pacer never closed")


def paced(clock: FakeClock) -> ClientState:
    """A client whose ``admit`` answers a Wait, then SEND once the waits are over."""
    state = client(ADAPTIVE.replace(adaptive_min_rate=2.0, max_local_wait=30.0), clock)
    close_pacing(state, clock)
    return state


def refusing(clock: FakeClock) -> ClientState:
    """A client whose pacing refuses an attempt with a deadline 50 ms away (after a Wait)."""
    state = client(ADAPTIVE.replace(adaptive_min_rate=0.01, adaptive_decrease=0.01), clock)
    close_pacing(state, clock)
    return state


def call(cycle: AttemptCycle, clock: FakeClock, what: str) -> Optional[object]:
    """Make one call of a script on ``cycle``; return its answer."""
    deadline = clock.now + 0.05
    calls: dict[str, Callable[[], object]] = {
        "admit A": lambda: cycle.admit(A),
        "admit A within 50 ms": lambda: cycle.admit(A, deadline),
        "admit B": lambda: cycle.admit(B),
        "waited": cycle.waited,
        "started A": lambda: cycle.started(A),
        "started B": lambda: cycle.started(B),
        "transaction_began": cycle.transaction_began,
        "settle overload": lambda: cycle.settle(overload()),
        "succeeded": cycle.succeeded,
        "failed overload": lambda: cycle.failed(overload(), classic_retryable=True),
        "failed fatal": lambda: cycle.failed(fatal(), retries_allowed=False),
        "unsent fatal": lambda: cycle.unsent(fatal()),
        "unsent, deadline passed": lambda: cycle.unsent(overload(), deadline=clock.now - 1.0),
        "decided_inside": lambda: cycle.decided_inside(overload()),
        "ended": lambda: cycle.ended(fatal()),
    }
    if what == "wait out":  # the executors' wait-and-recheck loop (after admit's Wait)
        waits = cycle.wait_out(Wait(0.0))
        for seconds in waits:
            clock.advance(seconds)
        return waits.answer
    return calls[what]()


def run(state_for: Callable[[FakeClock], ClientState], script: list[str]) -> list[Phase]:
    """Run ``script`` on a new cycle of a client made by ``state_for``; the phase after each."""
    clock = FakeClock()
    cycle = AttemptCycle(state_for(clock), "find")
    assert cycle.phase is Phase.IDLE
    phases = []
    for what in script:
        call(cycle, clock, what)
        assert cycle.phase is not None
        phases.append(cycle.phase)
    return phases


# name: (client, calls, the phase after each call)
LEGAL: dict[str, tuple[Callable[[FakeClock], ClientState], list[str], list[Phase]]] = {
    "first attempt, nothing paced (no admit)": (unpaced, ["started A", "succeeded"], [SENT, DONE]),
    "first attempt, admitted": (
        unpaced,
        ["admit A", "started A", "succeeded"],
        [ASKED, SENT, DONE],
    ),
    "failure, backoff, retry succeeds": (
        unpaced,
        ["admit A", "started A", "failed overload", "admit B", "started B", "succeeded"],
        [ASKED, SENT, IDLE, ASKED, SENT, DONE],
    ),
    "failure, retry sent without admit": (
        unpaced,
        ["started A", "failed overload", "started B", "succeeded"],
        [SENT, IDLE, SENT, DONE],
    ),
    "pymongo's classic retry (no failure reported)": (
        unpaced,
        ["started A", "started B", "succeeded"],
        [SENT, SENT, DONE],
    ),
    "paced: wait, recheck, send": (
        paced,
        ["admit A", "wait out", "started A", "succeeded"],
        [WAITING, ASKED, SENT, DONE],
    ),
    "paced: the pool was reset in the wait, admitted again": (
        paced,
        ["admit A", "wait out", "admit B", "started B", "succeeded"],
        [WAITING, ASKED, ASKED, SENT, DONE],
    ),
    "refused after a wait": (refusing, ["admit A within 50 ms", "wait out"], [WAITING, DONE]),
    "transaction began": (
        unpaced,
        ["started A", "transaction_began", "succeeded"],
        [SENT, SENT, DONE],
    ),
    "backport: settle, then the retry rules": (
        unpaced,
        ["started A", "settle overload", "failed overload", "started B", "succeeded"],
        [SENT, SETTLED, IDLE, SENT, DONE],
    ),
    "backport: settle, pymongo's classic retry": (
        unpaced,
        ["admit A", "started A", "settle overload", "admit B", "started B", "succeeded"],
        [ASKED, SENT, SETTLED, ASKED, SENT, DONE],
    ),
    "backport: settle, classic retry without admit": (
        unpaced,
        ["started A", "settle overload", "started B", "succeeded"],
        [SENT, SETTLED, SENT, DONE],
    ),
    "backport: settle, then raised": (
        unpaced,
        ["started A", "settle overload", "ended"],
        [SENT, SETTLED, DONE],
    ),
    "stopped, then raised with the summary": (
        unpaced,
        ["started A", "failed fatal", "ended"],
        [SENT, STOPPED, DONE],
    ),
    "ended without a decision (no server for the retry)": (
        unpaced,
        ["started A", "failed overload", "ended"],
        [SENT, IDLE, DONE],
    ),
    "ended within an attempt (the backport raises the earlier error)": (
        unpaced,
        ["started A", "ended"],
        [SENT, DONE],
    ),
    "ended after admit (no server once the wait was over)": (
        paced,
        ["admit A", "wait out", "ended"],
        [WAITING, ASKED, DONE],
    ),
    "ended while waiting (the wait raised)": (paced, ["admit A", "ended"], [WAITING, DONE]),
    "backport: no server for the first attempt, then raised": (
        unpaced,
        ["unsent fatal", "ended"],
        [STOPPED, DONE],
    ),
    "backport: the deadline passed before the retry (unsent after a backoff)": (
        unpaced,
        ["started A", "failed overload", "unsent, deadline passed", "ended"],
        [SENT, IDLE, STOPPED, DONE],
    ),
    "backport: no server for pymongo's classic retry": (
        unpaced,
        ["started A", "settle overload", "unsent fatal", "ended"],
        [SENT, SETTLED, STOPPED, DONE],
    ),
    "backport: no server once the wait was over": (
        paced,
        ["admit A", "wait out", "unsent fatal", "ended"],
        [WAITING, ASKED, STOPPED, DONE],
    ),
    "backport's methods: an inner retry loop decided the error": (
        unpaced,
        ["admit A", "started A", "decided_inside"],
        [ASKED, SENT, DONE],
    ),
}


@pytest.fixture
def strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """The order of the calls is checked (as in every test run)."""
    monkeypatch.setattr(cycle_module, "STRICT", True)


@pytest.fixture
def lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    """The order of the calls is not checked (production)."""
    monkeypatch.setattr(cycle_module, "STRICT", False)


@pytest.mark.usefixtures("strict")
@pytest.mark.parametrize("order", LEGAL)
def test_each_order_an_executor_uses_is_legal(order: str) -> None:
    """Each real order runs through the table, phase by phase."""
    state_for, script, phases = LEGAL[order]
    assert run(state_for, script) == phases


@pytest.mark.usefixtures("strict")
def test_the_legal_orders_take_every_entry_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table holds exactly the transitions the executors' orders take."""
    taken: set[tuple[Phase, Event]] = set()
    to = AttemptCycle._to

    def recording(self: AttemptCycle, event: Event) -> None:
        assert self.phase is not None
        taken.add((self.phase, event))
        to(self, event)

    monkeypatch.setattr(AttemptCycle, "_to", recording)
    for state_for, script, _phases in LEGAL.values():
        run(state_for, script)
    assert taken >= set(TRANSITIONS)
    assert taken <= set(TRANSITIONS)


@pytest.mark.usefixtures("strict")
def test_answers_move_the_phase() -> None:
    """``admit``'s and ``failed``'s answers are what move the cycle on."""
    clock = FakeClock()
    cycle = AttemptCycle(unpaced(clock), "find")
    assert cycle.admit(A) is SEND
    assert cycle.phase is Phase.ASKED
    cycle.started(A)
    assert type(cycle.failed(overload(), classic_retryable=True)) is Backoff
    assert cycle.phase is Phase.IDLE
    cycle.started(A)
    assert type(cycle.failed(fatal())) is Stop
    assert cycle.phase is Phase.STOPPED


# name: (client, the legal calls before, the call out of order)
ILLEGAL: dict[str, tuple[Callable[[FakeClock], ClientState], list[str], str]] = {
    "succeeded twice": (unpaced, ["started A", "succeeded"], "succeeded"),
    "succeeded before started": (unpaced, [], "succeeded"),
    "succeeded after admit, unsent": (unpaced, ["admit A"], "succeeded"),
    "settle before started": (unpaced, [], "settle overload"),
    "settle twice": (unpaced, ["started A", "settle overload"], "settle overload"),
    "waited without a Wait": (unpaced, ["admit A"], "waited"),
    "waited before admit": (unpaced, [], "waited"),
    "started while waiting": (paced, ["admit A"], "started A"),
    "started after a refusal": (refusing, ["admit A within 50 ms", "wait out"], "started A"),
    "started after a Stop": (unpaced, ["started A", "failed fatal"], "started B"),
    "failed before started": (unpaced, [], "failed overload"),
    "failed twice": (unpaced, ["started A", "failed overload"], "failed overload"),
    "failed after succeeded": (unpaced, ["started A", "succeeded"], "failed overload"),
    "ended twice": (unpaced, ["started A", "failed fatal", "ended"], "ended"),
    "ended after succeeded": (unpaced, ["started A", "succeeded"], "ended"),
    "admit after succeeded": (unpaced, ["started A", "succeeded"], "admit A"),
    "transaction_began before started": (unpaced, [], "transaction_began"),
    "unsent within an attempt": (unpaced, ["started A"], "unsent fatal"),
    "unsent while waiting": (paced, ["admit A"], "unsent fatal"),
    "decided_inside before started": (unpaced, [], "decided_inside"),
    "decided_inside after a failure": (unpaced, ["started A", "failed overload"], "decided_inside"),
}


@pytest.mark.usefixtures("strict")
@pytest.mark.parametrize("order", ILLEGAL)
def test_a_call_out_of_order_raises_while_strict(order: str) -> None:
    """With the switch on, the call out of order raises ``CycleOrderError`` (an
    ``AssertionError``) naming the call, the phase and what is legal there."""
    state_for, before, wrong = ILLEGAL[order]
    clock = FakeClock()
    cycle = AttemptCycle(state_for(clock), "find")
    for what in before:
        call(cycle, clock, what)
    phase = cycle.phase
    assert phase is not None
    with pytest.raises(CycleOrderError, match=f"in phase {phase.name}; legal there") as info:
        call(cycle, clock, wrong)
    assert isinstance(info.value, AssertionError)
    assert cycle.phase is phase  # raised before the call did anything to the phase


@pytest.mark.usefixtures("lenient")
@pytest.mark.parametrize("order", ILLEGAL)
def test_a_call_out_of_order_passes_silently_when_off(order: str) -> None:
    """With the switch off (production) the phase is not tracked and nothing raises."""
    state_for, before, wrong = ILLEGAL[order]
    clock = FakeClock()
    cycle = AttemptCycle(state_for(clock), "find")
    assert cycle.phase is None
    for what in [*before, wrong]:
        call(cycle, clock, what)
    assert cycle.phase is None


def test_a_cycle_created_strict_stops_tracking_once_the_switch_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call out of order after the switch was turned off never raises: the cycle just stops
    tracking its phase."""
    monkeypatch.setattr(cycle_module, "STRICT", True)
    clock = FakeClock()
    cycle = AttemptCycle(unpaced(clock), "find")
    cycle.started(A)
    cycle.succeeded()
    monkeypatch.setattr(cycle_module, "STRICT", False)
    cycle.succeeded()
    assert cycle.phase is None


def test_every_phase_but_done_can_end_and_done_is_final() -> None:
    """``ended`` is legal wherever an executor can raise (not within ``failed``), nothing
    follows DONE, and the table's phases are the enum's."""
    ends = {phase for (phase, event) in TRANSITIONS if event is Event.END}
    assert ends == set(Phase) - {Phase.FAILED, Phase.DONE}
    assert not [key for key in TRANSITIONS if key[0] is Phase.DONE]
    assert {phase for key in TRANSITIONS for phase in (key[0], TRANSITIONS[key])} == set(Phase)
