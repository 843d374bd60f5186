"""Unit tests for backpressure.core.backoff: the formula per attempt for both presets."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backpressure.core.backoff import backoff_ceiling, backoff_delay
from backpressure.core.policy import CURRENT_SPEC, DRAFT, Policy

DRAFT_CEILINGS = [0.1, 0.2, 0.4, 0.8, 1.6]
CURRENT_CEILINGS = [0.2, 0.4]


def test_draft_ceilings() -> None:
    """Draft ceilings are 0.1, 0.2, 0.4, 0.8, 1.6 s and sum to 3.1 s."""
    ceilings = [backoff_ceiling(DRAFT, n) for n in range(1, 6)]
    assert ceilings == pytest.approx(DRAFT_CEILINGS)
    assert sum(ceilings) == pytest.approx(3.1)


def test_current_ceilings() -> None:
    """Current-spec ceilings are 0.2, 0.4 s and sum to 0.6 s."""
    ceilings = [backoff_ceiling(CURRENT_SPEC, n) for n in range(1, 3)]
    assert ceilings == pytest.approx(CURRENT_CEILINGS)
    assert sum(ceilings) == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("policy", "ceilings"), [(DRAFT, DRAFT_CEILINGS), (CURRENT_SPEC, CURRENT_CEILINGS)]
)
@pytest.mark.parametrize("jitter", [0.0, 0.5, 0.999])
def test_delay_is_jitter_times_ceiling(
    policy: Policy, ceilings: list[float], jitter: float
) -> None:
    """The delay is jitter times the ceiling for every retry."""
    delays = [backoff_delay(policy, n, jitter) for n in range(1, len(ceilings) + 1)]
    assert delays == pytest.approx([jitter * c for c in ceilings])


def test_max_backoff_caps() -> None:
    """Late retries are capped at max_backoff."""
    policy = DRAFT.replace(max_retries=100)
    assert backoff_ceiling(policy, 8) == pytest.approx(10.0)  # 0.1 * 2**7 = 12.8
    assert backoff_ceiling(policy, 100) == 10.0


def test_huge_exponent_does_not_overflow() -> None:
    """A huge exponent or retry number returns max_backoff instead of overflowing."""
    policy = DRAFT.replace(first_retry_exponent=64, backoff_multiplier=1e10, max_backoff=5.0)
    assert backoff_ceiling(policy, 100) == 5.0
    assert backoff_ceiling(DRAFT, 10**18) == 10.0
    assert backoff_ceiling(DRAFT.replace(base_backoff=5.0, backoff_multiplier=1e300), 3) == 10.0


def test_jitter_clamped() -> None:
    """Jitter outside [0, 1] (or NaN) is clamped."""
    assert backoff_delay(DRAFT, 1, -3.0) == 0.0
    assert backoff_delay(DRAFT, 1, 7.0) == pytest.approx(0.1)
    assert backoff_delay(DRAFT, 1, math.nan) == 0.0


def test_server_base_honoured_and_clamped() -> None:
    """A server base replaces base_backoff and is clamped to [0, max_backoff]."""
    assert backoff_ceiling(DRAFT, 1, 0.05) == pytest.approx(0.05)
    assert backoff_ceiling(DRAFT, 3, 0.05) == pytest.approx(0.2)
    assert backoff_ceiling(CURRENT_SPEC, 1, 0.05) == pytest.approx(0.1)
    assert backoff_ceiling(DRAFT, 1, 60.0) == 10.0
    assert backoff_ceiling(DRAFT, 1, -1.0) == 0.0
    assert backoff_ceiling(DRAFT, 1, math.nan) == pytest.approx(0.1)


def test_server_base_ignored_when_not_honoured() -> None:
    """With honour_server_backoff off the server base is ignored."""
    policy = DRAFT.replace(honour_server_backoff=False)
    assert backoff_ceiling(policy, 1, 5.0) == pytest.approx(0.1)


def test_zero_base_and_flat_multiplier() -> None:
    """A zero base means no backoff; a multiplier of 1 keeps the base."""
    assert backoff_ceiling(DRAFT.replace(base_backoff=0.0), 4) == 0.0
    assert backoff_ceiling(DRAFT.replace(backoff_multiplier=1), 5) == pytest.approx(0.1)


@given(
    retry=st.integers(min_value=1, max_value=10**6),
    jitter=st.floats(allow_nan=False),
    server=st.one_of(st.none(), st.floats(allow_nan=False)),
)
def test_delay_bounded(retry: int, jitter: float, server: float | None) -> None:
    """Every delay lies in [0, max_backoff]."""
    delay = backoff_delay(DRAFT, retry, jitter, server)
    assert 0.0 <= delay <= DRAFT.max_backoff
