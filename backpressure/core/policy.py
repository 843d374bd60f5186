"""The retry policy: a frozen, validated value object, its presets and ``resolve_policy``.

Backoff formula (keep in sync with :mod:`backpressure.core.backoff` and the docs)::

    delay(n) = jitter * min(max_backoff,
                            base * backoff_multiplier ** (first_retry_exponent + n - 1))

where ``n`` is the retry number (1 for the first retry), ``jitter`` is uniform in ``[0, 1)`` and
``base`` is the server's ``baseBackoffMS`` hint (when ``honour_server_backoff``) or
``base_backoff``.  The draft gives ceilings 0.1, 0.2, 0.4, 0.8, 1.6 s; the current spec
(``first_retry_exponent=1``, two retries) gives 0.2, 0.4 s.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Optional, Union

from pymongo.errors import ConfigurationError

__all__ = [
    "ADAPTIVE",
    "BUDGET_MODES",
    "BUDGET_SCOPES",
    "CURRENT_SPEC",
    "DEFAULT_POLICY",
    "DRAFT",
    "FIELD_NAMES",
    "HEDGE_DELAY_LIMIT",
    "MAX_HEDGES_LIMIT",
    "PRESETS",
    "InvalidPolicyError",
    "Policy",
    "resolve_policy",
]


class InvalidPolicyError(ConfigurationError):
    """A retry policy, or the value naming one, is invalid."""


_BOOL_FIELDS = (
    "budget_enabled",
    "honour_server_backoff",
    "retarget",
    "respect_retry_options",
    "adaptive",
    "route_around",
)
_INT_FIELDS = ("max_retries", "first_retry_exponent", "max_hedges")
_FLOAT_FIELDS = (
    "base_backoff",
    "max_backoff",
    "backoff_multiplier",
    "budget_capacity",
    "budget_success_deposit",
    "budget_retry_cost",
    "budget_failure_deposit",
    "budget_ratio",
    "max_local_wait",
    "adaptive_decrease",
    "adaptive_window",
    "adaptive_increase",
    "adaptive_quiet",
    "adaptive_min_rate",
    "hedge_pushback_pause",
)
MAX_HEDGES_LIMIT = 4
"""Largest ``Policy.max_hedges`` (gRPC A6 caps maxAttempts, the original included, at 5)."""
HEDGE_DELAY_LIMIT = 3600.0
"""Largest ``Policy.hedge_delay``, in seconds."""

BUDGET_SCOPES: tuple[str, ...] = ("client", "server")
"""Allowed ``Policy.budget_scope`` values: one budget per client, or one per server address."""

BUDGET_MODES: tuple[str, ...] = ("bucket", "ratio", "a6")
"""Allowed ``Policy.budget_mode`` values (see :class:`Policy`)."""
_EXPONENT_LIMIT = 64
_DEFAULT_NAME = "current"
"""Name of the default preset, whose values are Policy's field defaults (``DEFAULT_POLICY``)."""
_FIELDS: frozenset[str] = frozenset()
"""The field names of Policy (filled in once the class exists)."""


def short_repr(value: object) -> str:
    """``repr(value)``, shortened when huge (an int of hundreds of digits)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _one_of(values: tuple[str, ...]) -> str:
    """Describe a choice of strings for an error message."""
    return "one of " + ", ".join(repr(v) for v in values)


def _bad(field: str, value: object, allowed: str) -> InvalidPolicyError:
    """Build the error for one invalid field."""
    return InvalidPolicyError(f"Policy.{field} must be {allowed}, got {short_repr(value)}")


@dataclass(frozen=True)
class Policy:
    """How overload errors are retried: attempts, backoff, retry budget and retargeting.

    A bare ``Policy(...)`` starts from the default preset, ``current`` (``DEFAULT_POLICY``, which
    is ``Policy(name="current")``): every field not given keeps that preset's value.  So
    ``Policy(max_retries=3)`` is the current spec with 3 retries; it switches on no retry budget
    and no retargeting.  Those defaults: 2 retries; backoff
    ``jitter * min(10 s, 0.1 s * 2 ** n)`` for retry ``n`` (ceilings 0.2, 0.4 s); no token
    bucket; the server's ``baseBackoffMS`` honoured; no retargeting; retryReads/retryWrites
    respected.  To start from another preset, use its ``replace``: ``DRAFT.replace(...)``.
    """

    max_retries: int = 2
    """Retries after the first attempt (attempts = max_retries + 1), >= 0 (no upper bound, as
    pymongo's ``maxAdaptiveRetries``)."""
    base_backoff: float = 0.1
    """Backoff base in seconds (>= 0)."""
    max_backoff: float = 10.0
    """Backoff ceiling in seconds (>= base_backoff)."""
    backoff_multiplier: float = 2.0
    """Base of the exponent (>= 1)."""
    first_retry_exponent: int = 1
    """Exponent used for the first retry, 0..64 (draft 0, current spec 1)."""
    budget_enabled: bool = False
    """Whether retries draw tokens from a per-client bucket."""
    budget_capacity: float = 1000.0
    """Bucket capacity and initial tokens (> 0)."""
    budget_success_deposit: float = 0.1
    """Tokens deposited per first-try success (a successful retry adds retry_cost too)."""
    budget_retry_cost: float = 1.0
    """Tokens taken per retry."""
    budget_failure_deposit: float = 1.0
    """Tokens deposited per retry that fails without the overload label."""
    honour_server_backoff: bool = True
    """Use the server's baseBackoffMS as the base when present."""
    retarget: bool = False
    """Deprioritize the server that returned the overload error."""
    respect_retry_options: bool = True
    """retryReads/retryWrites gate overload retries (runCommand needs both)."""
    budget_scope: str = "client"
    """"client": one budget for the client; "server": one budget per server address."""
    budget_mode: str = "bucket"
    """How the budget earns tokens: "bucket" (the draft spec), "ratio" or "a6".

    "bucket": the draft's token bucket (deposits and costs as above).  "ratio": every successful
    operation deposits ``budget_ratio`` tokens and a successful retry gets nothing back, so the
    retries of a client never exceed ``budget_ratio`` times its successes plus
    ``budget_capacity``: a fleet's retry load stays a fixed fraction of its own traffic.  "a6":
    gRPC A6 throttling; tokens start at ``budget_capacity`` (maxTokens), every overload failure
    takes 1, every success adds ``budget_ratio`` (tokenRatio), and retries are allowed only while
    tokens > ``budget_capacity / 2`` (a retry itself takes nothing).
    """
    budget_ratio: float = 0.1
    """Tokens per successful operation in "ratio" and "a6" mode (0 < ratio <= 1)."""
    budget_initial: Optional[float] = None
    """Tokens a budget starts with (None: ``budget_capacity``, full; else 0..budget_capacity).

    A fleet's clients each start with this many: a low start keeps a fleet of sparse clients
    from retrying on free tokens (10,000 clients x 10 tokens is a retry storm)."""
    adaptive: bool = False
    """Pace attempts per server once it pushes back (see :mod:`backpressure.core.adaptive`)."""
    max_local_wait: float = 5.0
    """Longest local wait, in seconds, for a paced attempt (> 0); past it the attempt is refused."""
    adaptive_decrease: float = 0.8
    """Multiplicative decrease of the send rate on overload, once per round (0 < f < 1)."""
    adaptive_window: float = 1.0
    """Window, in seconds, for the overload signal, the send rate and reopening (0.05..60)."""
    adaptive_increase: float = 10.0
    """Additive increase of the paced rate, attempts/s per second, the same for every client
    (so a fleet's shares converge); 0 < increase <= 1e6."""
    adaptive_quiet: float = 1.0
    """Seconds without pushback after which the paced rate doubles every quarter window
    (the fast climb after an overload ends); 0.05..60."""
    adaptive_min_rate: float = 1.0
    """Lowest paced rate, in attempts per second (> 0)."""
    hedge_delay: Optional[float] = None
    """Send a hedged read to another eligible member after this many seconds without a reply
    (0..3600; None: hedging off, the default).  See :mod:`backpressure.core.hedging`."""
    max_hedges: int = 1
    """Hedged copies of one read at most, 1..4 (one more every ``hedge_delay``)."""
    hedge_pushback_pause: float = 2.0
    """No hedge is sent for this many seconds after any server's overload error (> 0)."""
    route_around: bool = True
    """Steer selections that have a choice of server (several mongos, reads from secondaries)
    around a server that pushes back (see :mod:`backpressure.core.choice`); on in every preset.
    """
    name: str = dataclasses.field(default="custom", compare=False)
    """Label for logs and reprs (not compared); presets: "draft", "current", "adaptive"."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Policy:
        """Refuse unknown field names before the generated ``__init__`` sees them.

        Raises:
            InvalidPolicyError: a keyword is no field of Policy (the message lists the fields).
        """
        _check_field_names(kwargs)
        return super().__new__(cls)

    def __repr__(self) -> str:
        """Show the name and the fields that differ from the default preset, which a trailing
        comment names (``eval`` ignores it: the repr evaluates back)."""
        shown = [f"name={self.name!r}"]
        for field in dataclasses.fields(self):
            if field.name == "name":
                continue
            value = getattr(self, field.name)
            if value != field.default:
                shown.append(f"{field.name}={value!r}")
        return f"Policy({', '.join(shown)})  # other fields as in preset {_DEFAULT_NAME!r}"

    def describe(self) -> str:
        """One line naming the preset and the key fields, for logs and reprs.

        For example ``current: max_retries=2, base=100ms, max=10s, budget=off,
        retargeting=off``; a preset changed by options is named ``current (modified)``.
        """
        preset = PRESETS.get(self.name)
        label = self.name if preset is None or preset == self else f"{self.name} (modified)"
        if self.budget_enabled:
            budget = f"{self.budget_mode}({self.budget_capacity:g} per {self.budget_scope})"
        else:
            budget = "off"
        parts = [
            f"max_retries={self.max_retries}",
            f"base={_duration(self.base_backoff)}",
            f"max={_duration(self.max_backoff)}",
            f"budget={budget}",
            f"retargeting={'on' if self.retarget else 'off'}",
        ]
        if self.adaptive:
            parts.append("adaptive=on")
        if not self.route_around:
            parts.append("route_around=off")
        if self.hedge_delay is not None:
            parts.append(f"hedging={_duration(self.hedge_delay)} x{self.max_hedges}")
        return f"{label}: {', '.join(parts)}"

    def __post_init__(self) -> None:
        """Validate every field; raise InvalidPolicyError naming the first bad one."""
        for field in _BOOL_FIELDS:
            value = getattr(self, field)
            if not isinstance(value, bool):
                raise _bad(field, value, "a bool (True or False)")
        for field in _INT_FIELDS:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise _bad(field, value, "an int")
        for field in _FLOAT_FIELDS:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _bad(field, value, "a number (int or float)")
            try:
                finite = math.isfinite(value)
            except OverflowError:  # an int too large for a float
                finite = False
            if not finite:
                raise _bad(field, value, "a finite number")
            if value < 0:
                raise _bad(field, value, "a number >= 0")
        for field in ("budget_scope", "budget_mode"):
            value = getattr(self, field)
            if not isinstance(value, str):
                raise _bad(
                    field,
                    value,
                    _one_of(BUDGET_SCOPES if field == "budget_scope" else BUDGET_MODES),
                )
        if not isinstance(self.name, str):
            raise _bad("name", self.name, "a str")
        if self.max_retries < 0:
            raise _bad("max_retries", self.max_retries, "an int >= 0")
        if not 0 <= self.first_retry_exponent <= _EXPONENT_LIMIT:
            raise _bad(
                "first_retry_exponent", self.first_retry_exponent, f"an int in 0..{_EXPONENT_LIMIT}"
            )
        if self.max_backoff < self.base_backoff:
            raise _bad(
                "max_backoff",
                self.max_backoff,
                f"a number >= base_backoff ({self.base_backoff!r})",
            )
        if self.backoff_multiplier < 1:
            raise _bad("backoff_multiplier", self.backoff_multiplier, "a number >= 1")
        if self.budget_capacity <= 0:
            raise _bad("budget_capacity", self.budget_capacity, "a number > 0")
        if self.budget_scope not in BUDGET_SCOPES:
            raise _bad("budget_scope", self.budget_scope, _one_of(BUDGET_SCOPES))
        if self.budget_mode not in BUDGET_MODES:
            raise _bad("budget_mode", self.budget_mode, _one_of(BUDGET_MODES))
        if not 0 < self.budget_ratio <= 1:
            raise _bad("budget_ratio", self.budget_ratio, "a number > 0 and <= 1")
        if self.max_local_wait <= 0:
            raise _bad("max_local_wait", self.max_local_wait, "a number > 0")
        if not 0 < self.adaptive_decrease < 1:
            raise _bad("adaptive_decrease", self.adaptive_decrease, "a number > 0 and < 1")
        if not 0.05 <= self.adaptive_window <= 60:
            raise _bad("adaptive_window", self.adaptive_window, "a number in 0.05..60")
        if not 0 < self.adaptive_increase <= 1e6:
            raise _bad("adaptive_increase", self.adaptive_increase, "a number > 0 and <= 1e6")
        if not 0.05 <= self.adaptive_quiet <= 60:
            raise _bad("adaptive_quiet", self.adaptive_quiet, "a number in 0.05..60")
        self._validate_budget_initial()
        if self.adaptive_min_rate <= 0:
            raise _bad("adaptive_min_rate", self.adaptive_min_rate, "a number > 0")
        self._validate_hedging()

    def _validate_budget_initial(self) -> None:
        """Validate ``budget_initial`` (None, or a number in 0..budget_capacity)."""
        initial = self.budget_initial
        if initial is None:
            return
        allowed = f"None or a number in 0..budget_capacity ({self.budget_capacity!r})"
        if isinstance(initial, bool) or not isinstance(initial, (int, float)):
            raise _bad("budget_initial", initial, allowed)
        if not 0 <= initial <= self.budget_capacity:  # NaN fails too
            raise _bad("budget_initial", initial, allowed)

    def _validate_hedging(self) -> None:
        """Validate the hedging fields (``hedge_delay`` may be None)."""
        delay = self.hedge_delay
        allowed = f"None or a number in 0..{HEDGE_DELAY_LIMIT:g} (seconds)"
        if delay is not None:
            if isinstance(delay, bool) or not isinstance(delay, (int, float)):
                raise _bad("hedge_delay", delay, allowed)
            if not 0 <= delay <= HEDGE_DELAY_LIMIT:  # NaN and infinities fail too
                raise _bad("hedge_delay", delay, allowed)
        if not 1 <= self.max_hedges <= MAX_HEDGES_LIMIT:
            raise _bad("max_hedges", self.max_hedges, f"an int in 1..{MAX_HEDGES_LIMIT}")
        if self.hedge_pushback_pause <= 0:
            raise _bad("hedge_pushback_pause", self.hedge_pushback_pause, "a number > 0")

    @property
    def hedging(self) -> bool:
        """Whether reads are hedged (``hedge_delay`` is set)."""
        return self.hedge_delay is not None

    def replace(self, **changes: Any) -> Policy:
        """Return a copy with ``changes`` applied (validated again).

        Raises:
            InvalidPolicyError: a change names no field of Policy (the message lists the
                fields), or a value is invalid.
        """
        _check_field_names(changes)
        return dataclasses.replace(self, **changes)


FIELD_NAMES: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(Policy))
"""The fields of :class:`Policy`, in declaration order."""
_FIELDS = frozenset(FIELD_NAMES)


def _check_field_names(names: Mapping[str, Any]) -> None:
    """Raise InvalidPolicyError, listing the valid fields, if a key of ``names`` is no field."""
    unknown = [name for name in names if name not in _FIELDS]
    if not unknown:
        return
    close = difflib.get_close_matches(str(unknown[0]), FIELD_NAMES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    noun = "field" if len(unknown) == 1 else "fields"
    raise InvalidPolicyError(
        f"Policy has no {noun} {', '.join(repr(name) for name in unknown)}{hint}; "
        f"its fields are {', '.join(sorted(_FIELDS))}"
    )


def _duration(seconds: float) -> str:
    """Format seconds for a log line: ``100ms``, ``1.5s``, ``10s``."""
    if 0 < seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


CURRENT_SPEC = Policy(name=_DEFAULT_NAME)
"""The current spec: 2 retries, ceilings 0.2/0.4 s, no bucket, no retargeting.

It is a bare ``Policy``: the field defaults are this preset, the default one."""

DRAFT = Policy(
    name="draft",
    max_retries=5,
    first_retry_exponent=0,
    budget_enabled=True,
    retarget=True,
)
"""The draft spec: 5 retries, 0.1 s base, exponent from 0, token bucket, retargeting."""

ADAPTIVE = CURRENT_SPEC.replace(
    name="adaptive",
    adaptive=True,
    adaptive_decrease=0.8,
    adaptive_increase=10.0,
    adaptive_quiet=1.0,
)
"""The current spec's retries with a per-server AIMD send-rate pacer on top: hold the caller.

The retry rules are the current spec's, unchanged (derived from :data:`CURRENT_SPEC`): 2
retries, backoff ceilings 0.2 and 0.4 s, no retry budget, no retargeting; ``maxAdaptiveRetries``
and ``enableOverloadRetargeting`` override them as they override ``current``.  The pacing only
decides *when* an attempt is sent, never whether a retry the spec allows is made.

A server is paced once it signals overload (at least 2 pushbacks within ``adaptive_window``,
1 s, that are also at least a tenth of its replies there: a blip changes nothing).  Every
attempt to it (first attempts included) then waits locally for a send slot, within the
operation's deadline and ``max_local_wait``.  The pacer closes at 0.8 times the rate the server
admitted (at least 0.8 times half the send rate); each later pushback lowers the rate to 0.8
times itself (or the recent send rate, if lower) at most once per round, and holds it instead
when the round admitted nothing (the server rejects everything: the rate must not collapse).
Between decreases the rate grows by a fixed 10 attempts/s every second (the same for every
client, so a fleet's shares converge) and, once the server has been quiet for 1 s (0.25 s after
a held round; after a young overload, three times the mean gap between its pushback rounds, at
least 0.25 s), doubles every quarter window until the next pushback, with no ceiling (after a
held round it climbs as soon as the server has admitted everything for a round, if that comes
first); a climb within 4 s of the close starts from what the server admitted before the
overload.  The pacer reopens when it has limited no caller for a window.  A caller that cannot
be served within its bound is held until its bound, then refused: a closed loop never spins on
refusals.
"""

PRESETS: Mapping[str, Policy] = MappingProxyType(
    {"draft": DRAFT, "current": CURRENT_SPEC, "adaptive": ADAPTIVE}
)
"""Presets by name."""

DEFAULT_POLICY = CURRENT_SPEC
"""The policy used when backpressure is simply switched on: the current spec.

A bare ``Policy(...)`` starts from it: its values are Policy's field defaults (a unit test holds
``Policy() == DEFAULT_POLICY``, so a new default preset means new field defaults).

``adaptive`` (an AIMD pacer per server) beats stock pymongo by far in the fleet benchmarks, but
it misses some of the goals the default must meet (attempts per operation in sparse fleets,
recovery within a second after faults, p99 no worse than stock, 128 closed-loop workers in one
client): ``docs/adaptive.md`` and ``bench/results/`` have every policy's figures.  Until a preset
meets every fleet, transient and fault goal, the default is the one that behaves as stock
pymongo's own loop does; ``adaptive`` stays opt-in.
"""

_ALIASES: Mapping[str, Policy] = MappingProxyType(
    {
        "draft": DRAFT,
        "default": DEFAULT_POLICY,
        "current": CURRENT_SPEC,
        "current-spec": CURRENT_SPEC,
        "adaptive": ADAPTIVE,
    }
)


def resolve_policy(value: Union[bool, str, Policy, None]) -> Optional[Policy]:
    """Turn a user setting into a Policy, or None when backpressure is disabled.

    ``None``/``False``/``"false"`` -> None; ``True``/``"true"`` -> the default preset,
    CURRENT_SPEC (the strings exactly so, as pymongo reads URI booleans); a preset name ("draft",
    "default", "current", "current-spec", "adaptive", case-insensitive) -> that preset; a Policy
    -> itself.

    Raises:
        InvalidPolicyError: for any other value.
    """
    if value is None or value is False or value == "false":
        return None
    if value is True or value == "true":
        return DEFAULT_POLICY
    if isinstance(value, Policy):
        return value
    if isinstance(value, str):
        preset = _ALIASES.get(value.strip().lower())
        if preset is not None:
            return preset
    raise InvalidPolicyError(
        f"backpressure must be None, a bool, a Policy or one of "
        f"{', '.join(repr(k) for k in _ALIASES)}; got {value!r}"
    )
