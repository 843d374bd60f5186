"""The backoff formula, in exactly one place.

Spec revision: client-backpressure draft with ``baseBackoffMS`` (2026-06-16) and the attempt
number as the exponent (2026-07-08).  For retry ``n`` (1 for the first retry)::

    ceiling(n) = min(max_backoff, base * backoff_multiplier ** (first_retry_exponent + n - 1))
    delay(n)   = jitter * ceiling(n),  jitter in [0, 1]

``base`` is the server's ``baseBackoffMS`` hint in seconds, clamped to ``[0, max_backoff]``, when
given and ``policy.honour_server_backoff``; otherwise ``policy.base_backoff``.  Keep in sync with
the :class:`~backpressure.core.policy.Policy` docstring and the docs.
"""

from __future__ import annotations

import math
from typing import Optional

from backpressure.core.policy import Policy

__all__ = ["backoff_ceiling", "backoff_delay"]


def backoff_ceiling(
    policy: Policy, retry_number: int, server_base: Optional[float] = None
) -> float:
    """Return the largest delay, in seconds, before retry ``retry_number`` (1-based)."""
    cap = float(policy.max_backoff)
    base = float(policy.base_backoff)
    if server_base is not None and policy.honour_server_backoff:
        hint = float(server_base)
        base = min(max(hint, 0.0), cap) if math.isfinite(hint) else base
    if base <= 0.0 or cap <= 0.0:
        return 0.0
    exponent = policy.first_retry_exponent + max(int(retry_number), 1) - 1
    try:
        # float ** int raises OverflowError instead of returning inf: cap early.
        value = base * float(policy.backoff_multiplier) ** exponent
    except OverflowError:
        return cap
    return min(cap, value)


def backoff_delay(
    policy: Policy, retry_number: int, jitter: float, server_base: Optional[float] = None
) -> float:
    """Return ``jitter * backoff_ceiling(...)`` with ``jitter`` clamped to ``[0, 1]``."""
    j = float(jitter)
    j = 0.0 if math.isnan(j) else min(max(j, 0.0), 1.0)
    return j * backoff_ceiling(policy, retry_number, server_base)
