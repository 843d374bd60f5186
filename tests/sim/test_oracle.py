"""The physical-limit oracle on hand-computed cases and against an exhaustive search."""

from __future__ import annotations

import math
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backpressure.sim.oracle import (
    Capacity,
    closed_loop_min_error_fraction,
    physical_limit,
    physical_min_errors,
)


def test_a_burst_beyond_the_bucket_fails_the_excess_when_nobody_may_wait() -> None:
    """20 operations at t=0, no wait, a full bucket of 10 tokens: 10 admitted, 10 errors."""
    assert physical_min_errors([0.0] * 20, 0.0, Capacity(10.0, burst_seconds=1.0)) == 10


def test_waiting_earns_the_tokens_that_refill_in_time() -> None:
    """With 0.5 s of allowed wait, tokens at 0.1 .. 0.5 s admit 5 more of the 20: 5 errors."""
    limit = physical_limit([0.0] * 20, 0.5, Capacity(10.0, burst_seconds=1.0))
    assert (limit.ops, limit.admitted, limit.min_errors) == (20, 15, 5)
    assert limit.last_admission_s == pytest.approx(0.5)
    assert limit.min_error_fraction == pytest.approx(0.25)


def test_earliest_deadline_first_saves_the_urgent_operation() -> None:
    """A patient and an urgent operation share the first token: serving the urgent one saves both.

    Rate 1/s, bucket of 1 token starting empty.  A (deadline 10) and B (deadline 1) arrive at 0.
    Tokens come at 1 s and 2 s: B at 1, A at 2.  First-come-first-served would lose B.
    """
    capacity = Capacity(1.0, burst_seconds=1.0, initial_tokens=0.0)
    assert physical_min_errors([0.0, 0.0], [10.0, 1.0], capacity) == 0


def test_an_operation_admitted_exactly_at_its_deadline_succeeds() -> None:
    """The token that arrives at the deadline itself counts."""
    capacity = Capacity(2.0, burst_seconds=0.5, initial_tokens=0.0)  # 1-token bucket, 0.5 s/token
    assert physical_min_errors([0.0], [0.5], capacity) == 0
    assert physical_min_errors([0.0], [0.49], capacity) == 1


def test_an_idle_bucket_does_not_grow_beyond_its_size() -> None:
    """10 s idle at 5/s with a 2-token bucket still leaves only 2 tokens for a burst of 5."""
    capacity = Capacity(5.0, burst_seconds=0.4)  # 2 tokens
    assert physical_min_errors([10.0] * 5, 0.0, capacity) == 3


def test_a_capacity_drop_is_followed_in_time() -> None:
    """Rate 10/s, then 0 during [1, 2), then 10/s: a 1-token bucket.

    Operations at 1.0, 1.2, 1.5 each may wait 0.6 s.  The one at 1.0 takes the token earned by
    1.0 (bucket full at 1 token).  No tokens come until 2.0; the one at 1.5 (deadline 2.1) gets the
    token at 2.0, the one at 1.2 (deadline 1.8) fails.
    """
    capacity = Capacity(10.0, burst_seconds=0.1, changes=((1.0, 0.0), (2.0, 10.0)))
    assert physical_min_errors([1.0, 1.2, 1.5], 0.6, capacity) == 1


def test_an_outage_that_never_ends_fails_everything_still_waiting() -> None:
    """After the rate drops to 0 for good, only the tokens left in the bucket help."""
    capacity = Capacity(10.0, burst_seconds=0.3, changes=((1.0, 0.0),))  # 3 tokens, then none
    assert physical_min_errors([5.0] * 4, math.inf, capacity) == 4 - 1  # bucket clipped to 1


def test_interchangeable_servers_pool_their_tokens() -> None:
    """Two servers with one token each admit two of three simultaneous operations."""
    servers = [Capacity(1.0, burst_seconds=1.0), Capacity(1.0, burst_seconds=1.0)]
    assert physical_min_errors([0.0, 0.0, 0.0], 0.0, servers) == 1
    assert physical_min_errors([0.0, 0.0, 0.0], 0.5, servers) == 1
    assert physical_min_errors([0.0, 0.0, 0.0], 1.0, servers) == 0


def test_sustained_overload_loses_what_exceeds_capacity_plus_the_wait() -> None:
    """3x overload for 10 s at 100/s with 0.2 s waits: at most 100*10.2 + 100 admitted."""
    arrivals = [i / 300.0 for i in range(3000)]
    limit = physical_limit(arrivals, 0.2, Capacity(100.0, burst_seconds=1.0))
    # Bucket (100) + refill over [0, last deadline] (100 * 10.197) = 1119 tokens; every one used.
    assert limit.admitted == 100 + math.floor(100 * (arrivals[-1] + 0.2))
    assert limit.min_errors == 3000 - limit.admitted


def test_the_arrival_order_given_does_not_matter() -> None:
    """Arrivals may come in any order: only the one at 3 s finds a token (earned at 2 s) in time."""
    capacity = Capacity(0.5, burst_seconds=2.0, initial_tokens=0.0)
    assert physical_min_errors([3.0, 1.0, 0.0], 0.5, capacity) == 2
    assert physical_min_errors([0.0, 1.0, 3.0], 0.5, capacity) == 2


def test_mixed_waits_are_bracketed_when_keeping_a_token_pays() -> None:
    """A patient operation should not take the only token an urgent later arrival needs.

    Rate 0.5/s, a 1-token bucket starting empty.  A (0 s, deadline 10), B (1 s, deadline 1),
    C (3 s, deadline 3).  Nobody can save B (the first token comes at 2 s).  The best plan keeps
    the token from 2 s to 3 s for C and serves A at 5 s: 1 error.  Greedy EDF gives the 2 s token
    to A and loses C: 2 errors.  The relaxed floor (all deadlines raised to 10) is 0.
    """
    capacity = Capacity(0.5, burst_seconds=2.0, initial_tokens=0.0)
    limit = physical_limit([0.0, 1.0, 3.0], [10.0, 0.0, 0.0], capacity)
    assert (limit.min_errors, limit.achievable_errors, limit.exact) == (0, 2, False)


def test_equal_waits_are_exact() -> None:
    """With one allowed wait for every operation, floor and achievable coincide."""
    limit = physical_limit([0.0, 1.0, 3.0], 0.5, Capacity(0.5, burst_seconds=2.0))
    assert limit.exact
    assert (limit.min_errors, limit.admitted) == (1, 2)  # the full bucket at 0, then 2 s/token


def test_an_empty_log_has_no_errors() -> None:
    """Nothing arrives, nothing fails."""
    limit = physical_limit([], [], Capacity(1.0))
    assert (limit.ops, limit.min_errors, limit.min_error_fraction) == (0, 0, 0.0)


@pytest.mark.parametrize(
    ("arrivals", "waits", "capacity", "message"),
    [
        ([0.0], [1.0, 2.0], Capacity(1.0), "allowed_waits must have one entry per arrival"),
        ([-1.0], 0.0, Capacity(1.0), r"arrivals\[0\] must be a finite number >= 0"),
        ([0.0], [float("nan")], Capacity(1.0), r"allowed_waits\[0\] must be a number >= 0"),
        ([0.0], 0.0, [], "capacity must name at least one Capacity"),
    ],
)
def test_bad_input_names_the_argument(
    arrivals: list[float], waits: object, capacity: object, message: str
) -> None:
    """Each bad argument raises an error naming it."""
    with pytest.raises(ValueError, match=message):
        physical_limit(arrivals, waits, capacity)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate_per_s": -1.0}, "Capacity.rate_per_s must be a finite number >= 0"),
        ({"rate_per_s": 1.0, "burst_seconds": 0.0}, "Capacity.burst_seconds must be > 0"),
        ({"rate_per_s": 1.0, "changes": ((2.0, 1.0), (1.0, 1.0))}, "increasing time"),
        ({"rate_per_s": 1.0, "initial_tokens": -2}, "Capacity.initial_tokens"),
    ],
)
def test_bad_capacity_names_the_field(kwargs: dict[str, object], message: str) -> None:
    """A bad Capacity field raises a ValueError naming it."""
    with pytest.raises(ValueError, match=message):
        Capacity(**kwargs)  # type: ignore[arg-type]


def test_closed_loop_bound_is_zero_when_every_worker_can_wait_its_turn() -> None:
    """32 workers at 200/s need 160 ms of wait for zero errors; half that loses half."""
    assert closed_loop_min_error_fraction(32, 0.16, 200.0) == 0.0
    assert closed_loop_min_error_fraction(32, 0.08, 200.0) == pytest.approx(0.5)
    assert closed_loop_min_error_fraction(32, math.inf, 200.0) == 0.0
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        closed_loop_min_error_fraction(0, 1.0, 1.0)


def _exhaustive_max_admitted(
    jobs: tuple[tuple[int, int], ...], units_per_token: int, size: int, initial: int
) -> int:
    """Try every admission choice at every integer instant.

    The bucket refills one unit per second and a token is ``units_per_token`` units (rate 1/s or
    0.5/s); ``size`` and ``initial`` are in tokens.
    """
    horizon = max((d for _, d in jobs), default=0)
    cap = size * units_per_token

    @cache
    def best(t: int, units: int, done: frozenset[int]) -> int:
        if t > horizon:
            return 0
        waiting = [i for i, (a, d) in enumerate(jobs) if i not in done and a <= t <= d]
        result = 0
        for mask in range(1 << len(waiting)):
            chosen = [waiting[k] for k in range(len(waiting)) if mask >> k & 1]
            spent = len(chosen) * units_per_token
            if spent > units:
                continue
            left = min(cap, units - spent + 1)
            result = max(result, len(chosen) + best(t + 1, left, done | frozenset(chosen)))
        return result

    return best(0, initial * units_per_token, frozenset())


@settings(max_examples=200, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 3)).map(lambda p: (p[0], p[0] + p[1])),
        max_size=6,
    ),
    units_per_token=st.sampled_from([1, 2]),
    size=st.integers(1, 3),
    initial=st.integers(0, 3),
)
def test_the_bracket_holds_the_exhaustive_optimum(
    jobs: list[tuple[int, int]], units_per_token: int, size: int, initial: int
) -> None:
    """On small instances: floor <= best possible <= greedy, all equal when waits agree."""
    initial = min(size, initial)
    rate = 1.0 / units_per_token
    capacity = Capacity(rate, burst_seconds=size / rate, initial_tokens=float(initial))
    arrivals = [float(a) for a, _ in jobs]
    waits = [float(d - a) for a, d in jobs]
    best = len(jobs) - _exhaustive_max_admitted(tuple(jobs), units_per_token, size, initial)
    limit = physical_limit(arrivals, waits, capacity)
    assert limit.min_errors <= best <= limit.achievable_errors
    in_order = sorted(jobs)
    if all(d1 <= d2 for (_, d1), (_, d2) in zip(in_order, in_order[1:])):
        assert limit.exact
        assert limit.min_errors == best
