"""Server choice (``backpressure.core.choice``) on a fake clock and a scripted random source."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Optional

import pytest

from backpressure import CURRENT_SPEC, Policy
from backpressure.core.choice import (
    DEAD_ZONE,
    FULL_AVOID,
    HALF_LIFE,
    PROBE_SHARE,
    WEIGHT,
    ChoiceListener,
    ServerChoice,
)
from backpressure.core.client_state import LEAN_BATCH, ClientState
from backpressure.core.cycle import AttemptCycle
from backpressure.core.decision import RetryController
from backpressure.core.events import Address

A: Address = ("a", 27017)
B: Address = ("b", 27017)
C: Address = ("c", 27017)


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Changes(ChoiceListener):
    """Records what the choice tells its listener."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Address]] = []

    def server_avoided(self, address: Address, signal: float) -> None:
        self.seen.append(("avoided", address))

    def server_returned(self, address: Address) -> None:
        self.seen.append(("returned", address))


def choice_on(
    clock: Clock, draws: Optional[list[float]] = None, listener: Optional[ChoiceListener] = None
) -> ServerChoice:
    """A choice on ``clock`` drawing ``draws`` in turn (default: always 0, never a probe)."""
    source = iter(draws) if draws is not None else itertools.repeat(0.0)
    return ServerChoice(clock=clock, random=lambda: next(source), listener=listener)


def test_quiet_servers_engage_nothing() -> None:
    """Replies alone leave the rule idle: nothing is remembered, nothing avoided."""
    clock = Clock()
    choice = choice_on(clock)
    for _ in range(100):
        choice.record(A)
        choice.successes(B, LEAN_BATCH)
    assert not choice.engaged
    assert choice.avoid([A, B, C]) == []
    assert choice.signals() == {}


def test_a_server_that_pushes_back_is_avoided_and_the_others_are_not() -> None:
    clock = Clock()
    choice = choice_on(clock)
    for _ in range(10):
        choice.record(A, pushed_back=1)
        choice.record(B)
        choice.record(C)
    assert choice.engaged
    assert choice.avoid([A, B, C]) == [A]
    signals = choice.signals()
    assert signals[A].signal == pytest.approx(1 - (1 - WEIGHT) ** 10)
    assert signals[A].avoided
    assert signals[A].routed_around == 1
    assert signals[B].signal == 0.0
    assert not signals[B].avoided


def test_equal_pushback_chooses_as_stock() -> None:
    """Every server pushing back alike: no server is avoided (pymongo's own choice stays)."""
    clock = Clock()
    choice = choice_on(clock)
    for _ in range(10):
        for server in (A, B, C):
            choice.record(server, pushed_back=1)
            choice.record(server)
    assert choice.avoid([A, B, C]) == []


def test_only_the_candidates_given_are_compared() -> None:
    """A cool server the selection cannot use does not make the eligible hot ones avoided
    beyond what their own gap says; two equally hot candidates are both kept."""
    clock = Clock()
    choice = choice_on(clock)
    for _ in range(10):
        choice.record(A, pushed_back=1)
        choice.record(B, pushed_back=1)
    assert choice.avoid([A, B]) == []
    assert sorted(choice.avoid([A, B, C])) == [A, B]


def test_the_avoidance_grows_with_the_gap_and_keeps_probes() -> None:
    choice = choice_on(Clock())
    assert choice.chance(0.0) == 0.0
    assert choice.chance(DEAD_ZONE) == 0.0
    middle = (DEAD_ZONE + FULL_AVOID) / 2
    assert choice.chance(middle) == pytest.approx(0.5 * (1 - PROBE_SHARE))
    assert choice.chance(FULL_AVOID) == pytest.approx(1 - PROBE_SHARE)
    assert choice.chance(1.0) == pytest.approx(1 - PROBE_SHARE)


def test_a_fully_avoided_server_is_still_probed() -> None:
    """Draws at or above ``1 - PROBE_SHARE`` leave the hot server eligible: the probes."""
    clock = Clock()
    draws = [0.0, 0.5, 0.94, 0.96, 0.99]
    choice = choice_on(clock, draws)
    for _ in range(20):
        choice.record(A, pushed_back=1)
    avoided = [choice.avoid([A, B]) for _ in draws]
    assert avoided == [[A], [A], [A], [], []]


def test_the_signal_decays_with_the_half_life() -> None:
    clock = Clock()
    choice = choice_on(clock)
    choice.record(A, attempts=9, pushed_back=9)
    pushed = 1 - (1 - WEIGHT) ** 9
    assert choice.signals()[A].signal == pytest.approx(pushed)
    clock.now += HALF_LIFE
    assert choice.signals()[A].signal == pytest.approx(pushed / 2)
    choice.record(A, attempts=3)
    assert choice.signals()[A].signal == pytest.approx(pushed / 2 * (1 - WEIGHT) ** 3)
    clock.now += 10 * HALF_LIFE
    assert choice.signals()[A].signal < 0.01
    assert choice.avoid([A, B]) == []


def test_a_recovered_server_returns_within_a_second() -> None:
    """After a hard pushback spell, a server that answers its probes is chosen again within
    a second: the simulated clients select 1,000 times a second, the server answers every
    attempt from the recovery on, and its share of the selections is back near a third."""
    clock = Clock()
    rng = random.Random(7)
    listener = Changes()
    choice = ServerChoice(clock=clock, random=rng.random, listener=listener)
    servers = [A, B, C]
    recovered_at = 5.0
    share_after: dict[int, float] = {}
    picks: Counter[int] = Counter()
    for tick in range(8000):  # one selection per millisecond
        clock.now = 100.0 + tick / 1000.0
        elapsed = tick / 1000.0
        avoided = choice.avoid(servers)
        free = [s for s in servers if s not in avoided] or servers
        server = rng.choice(free)
        hot = elapsed < recovered_at and server == A
        choice.record(server, pushed_back=1 if hot else 0)
        if elapsed >= recovered_at and server == A:
            picks[int((elapsed - recovered_at) * 10)] += 1
    for tenth in range(30):
        share_after[tenth] = picks[tenth] / 100.0
    assert ("avoided", A) in listener.seen
    assert ("returned", A) in listener.seen
    # Within the first second after the recovery the server is chosen at close to its share.
    assert share_after[9] > 0.25
    # And it was avoided right at the start (only probes then).
    assert share_after[0] < 0.1


def test_no_herding_onto_one_server() -> None:
    """With one hot server among three, the two cool ones share the selections: the rule
    leaves the hot one out and keeps pymongo's own balancing between the rest."""
    clock = Clock()
    rng = random.Random(3)
    choice = ServerChoice(clock=clock, random=rng.random)
    for _ in range(50):
        choice.record(A, pushed_back=1)
    picks: Counter[Address] = Counter()
    for _ in range(3000):
        avoided = choice.avoid([A, B, C])
        free = [s for s in (A, B, C) if s not in avoided] or [A, B, C]
        picks[rng.choice(free)] += 1
    assert picks[A] < 0.05 * 3000
    assert abs(picks[B] - picks[C]) < 0.1 * 3000


def test_a_new_hot_server_is_avoided_in_turn() -> None:
    """Load moved off one server that then pushes back on another: each is avoided only
    while its signal exceeds the others'."""
    clock = Clock()
    choice = choice_on(clock)
    for _ in range(20):
        choice.record(A, pushed_back=1)
    assert choice.avoid([A, B, C]) == [A]
    for _ in range(20):
        choice.record(B, pushed_back=1)
        choice.record(A)
    # A's twenty replies brought it back; B is avoided now.
    assert choice.avoid([A, B, C]) == [B]
    assert choice.signals()[A].signal < DEAD_ZONE


def test_the_rule_disengages_once_every_signal_has_faded() -> None:
    clock = Clock()
    choice = choice_on(clock)
    choice.record(A, pushed_back=1)
    assert choice.engaged
    clock.now += 40 * HALF_LIFE
    assert choice.avoid([A, B]) == []
    assert not choice.engaged


def test_unknown_addresses_are_ignored() -> None:
    choice = choice_on(Clock())
    choice.record(None, pushed_back=1)
    assert not choice.engaged


@pytest.mark.parametrize(
    ("half_life", "probe_share"), [(0.0, 0.05), (float("inf"), 0.05), (1.0, -0.1), (1.0, 1.5)]
)
def test_invalid_settings_are_refused(half_life: float, probe_share: float) -> None:
    with pytest.raises(ValueError, match=r"half_life|probe_share"):
        ServerChoice(half_life=half_life, probe_share=probe_share)


def test_every_preset_routes_around_and_the_field_turns_it_off() -> None:
    for preset in ("draft", "current", "adaptive"):
        state = ClientState(RetryController(Policy(name=preset).replace()))
        assert state.choice is not None
    off = ClientState(RetryController(CURRENT_SPEC.replace(route_around=False)))
    assert off.choice is None
    assert not off.steers()
    assert "route_around=off" in CURRENT_SPEC.replace(route_around=False).describe()


def test_the_cycle_reports_pushbacks_and_replies_to_the_choice() -> None:
    """An overload error counts as a pushback for the attempt's server, a timeout too, and a
    retried operation's reply counts as a reply."""
    from pymongo.errors import NetworkTimeout, OperationFailure

    clock = Clock()
    state = ClientState(RetryController(CURRENT_SPEC, clock=clock, random=lambda: 0.0))
    assert state.choice is not None
    overload = OperationFailure(
        "overloaded", 462, {"errorLabels": ["SystemOverloadedError", "RetryableError"]}
    )
    cycle = AttemptCycle(state, "find")
    cycle.started(A)
    cycle.failed(overload, now=clock())
    cycle.started(B)
    cycle.succeeded()
    signals = state.choice.signals()
    assert signals[A].signal == pytest.approx(WEIGHT)
    assert signals[B].signal == 0.0
    cycle = AttemptCycle(state, "find")
    cycle.started(C)
    cycle.failed(NetworkTimeout("timed out"), now=clock())
    assert state.choice.signals()[C].signal == pytest.approx(WEIGHT)
    assert state.steers()
    avoiding = AttemptCycle(state, "find").avoiding()
    assert avoiding is not None
    assert sorted(avoiding([A, B, C])) == [A, C]
