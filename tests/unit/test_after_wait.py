"""``after_wait``: the server a paced attempt is sent to once its wait is over.

Fake servers carry a pool state and an address as pymongo's do; the cycle only records what it
is asked (its answers are what the attempt would be told).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from backpressure.adapters import seams
from backpressure.adapters.sync_cycle import after_wait
from backpressure.core.cycle import SEND, Step, Wait, WaitOut


@dataclass
class FakePool:
    state: Any


@dataclass
class FakeDescription:
    address: tuple[str, int]


@dataclass
class FakeServer:
    address: tuple[str, int]
    paused: bool = False
    pool: FakePool = field(init=False)
    description: FakeDescription = field(init=False)

    def __post_init__(self) -> None:
        self.pool = FakePool(seams.selection._PAUSED if self.paused else object())
        self.description = FakeDescription(self.address)


@dataclass
class FakeCycle:
    """Answers ``admit`` with ``answer`` and records the servers it was asked about."""

    answer: Step = SEND
    asked: list[Any] = field(default_factory=list)
    rechecks: int = 0
    slept: list[float] = field(default_factory=list)
    state: Any = field(init=False)

    def __post_init__(self) -> None:
        self.state = SimpleNamespace(sleep=self.slept.append)  # no real sleeping

    def admit(self, server: Any, deadline: Any = None) -> Step:
        self.asked.append(server)
        return self.answer

    def waited(self) -> Step:
        self.rechecks += 1
        return SEND

    def wait_out(self, step: Step) -> WaitOut:
        return WaitOut(self.waited, step)  # the cycle's own wait-and-recheck loop


A = ("a", 27017)
B = ("b", 27017)


def test_a_ready_pool_keeps_the_selection() -> None:
    """Nothing changed while the attempt waited: no new selection, nothing asked again."""
    cycle, server = FakeCycle(), FakeServer(A)
    chosen = after_wait(cycle, server, lambda: FakeServer(B))  # type: ignore[arg-type]
    assert chosen is server
    assert cycle.asked == []


def test_a_paused_pool_selects_again_and_keeps_the_same_servers_slot() -> None:
    """The pool was reset: select again; the same server keeps the slot it waited for."""
    cycle, again = FakeCycle(), FakeServer(A)
    chosen = after_wait(cycle, FakeServer(A, paused=True), lambda: again)  # type: ignore[arg-type]
    assert chosen is again
    assert cycle.asked == []


def test_a_new_selection_of_another_server_is_admitted_there() -> None:
    """Another server was selected: the attempt asks that server's pacing, and waits if told."""
    cycle, other = FakeCycle(answer=Wait(0.25)), FakeServer(B)
    chosen = after_wait(cycle, FakeServer(A, paused=True), lambda: other)  # type: ignore[arg-type]
    assert chosen is other
    assert cycle.asked == [other]
    assert cycle.slept == [0.25]
    assert cycle.rechecks == 1


def test_the_pool_state_is_read_from_pymongo() -> None:
    """pymongo's PoolState.PAUSED was found (4.9-4.20 all define it)."""
    assert seams.selection._PAUSED is not None
    assert not seams.pool_paused(object())
