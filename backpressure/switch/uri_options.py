"""Our URI and keyword options: backpressure, maxAdaptiveRetries, enableOverloadRetargeting,
hedgeDelayMS, maxHedges and routeAroundOverload.

Theory of operation: the client classes take these options out of the URI and the keyword
arguments before pymongo sees them, so pymongo < 4.17 never meets an option it does not know and
pymongo >= 4.17 gets its own two options only in the form the adapter chooses.

Values are read as stock pymongo (4.17+) reads its own options, on every pymongo era, so that
``backpressure.MongoClient`` is a drop-in for ``pymongo.MongoClient``:

- the integer options (``maxAdaptiveRetries`` >= 0, ``hedgeDelayMS`` 0..3600000, ``maxHedges``
  1..4) take an ``int`` or a string that Python's ``int()`` reads (``"7"``, ``" 7 "``,
  ``"+7"``), in keywords and URIs alike, as pymongo's ``maxPoolSize="7"``; a ``bool`` is an int
  there too (``True`` is 1), as in pymongo; a float, ``None`` or ``"7.0"`` is refused;
- the booleans (``enableOverloadRetargeting``, ``routeAroundOverload``, and ``backpressure``
  besides its presets) take a
  ``bool`` or exactly ``"true"``/``"false"``;
- keywords are case-insensitive and have a snake_case spelling (``max_adaptive_retries``), which
  wins over the camelCase one when both are given; in a URI only the camelCase names, in any
  case, are options (``max_adaptive_retries=3`` in a URI is an unknown option, left to pymongo,
  which warns).

An invalid value in a URI is reported with a ``UserWarning`` and ignored (``warn=False`` raises
instead), as pymongo does; an invalid keyword raises :class:`InvalidOptionValue` (a
``ValueError`` too) or :class:`InvalidOptionType` (a ``TypeError`` too), the kinds pymongo raises,
both :class:`~backpressure.InvalidPolicyError`, naming the option and the allowed values.
``maxAdaptiveRetries`` overrides ``Policy.max_retries`` and ``enableOverloadRetargeting``
overrides ``Policy.retarget``; ``hedgeDelayMS`` (milliseconds) sets ``Policy.hedge_delay``
(seconds) and ``maxHedges`` sets ``Policy.max_hedges``, which without ``hedgeDelayMS`` (and a
policy that does not hedge) acts on nothing and warns with :class:`InertOptionWarning`;
``routeAroundOverload`` overrides ``Policy.route_around``.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping
from typing import Any, Optional, Union
from urllib.parse import unquote_plus

from backpressure.core.policy import (
    HEDGE_DELAY_LIMIT,
    MAX_HEDGES_LIMIT,
    InvalidPolicyError,
    Policy,
    resolve_policy,
    short_repr,
)

__all__ = [
    "BACKPRESSURE",
    "ENABLE_OVERLOAD_RETARGETING",
    "HEDGE_DELAY_MS",
    "MAX_ADAPTIVE_RETRIES",
    "MAX_HEDGES",
    "OPTION_NAMES",
    "ROUTE_AROUND_OVERLOAD",
    "InertOptionWarning",
    "InvalidOptionType",
    "InvalidOptionValue",
    "apply_overrides",
    "parse_backpressure_options",
    "split_backpressure_kwargs",
    "validate_option",
    "warn_inert_options",
]

BACKPRESSURE = "backpressure"
"""Switch: ``true``/``false``, a preset (``draft``, ``current``, ``adaptive``) or a ``Policy``."""

MAX_ADAPTIVE_RETRIES = "maxAdaptiveRetries"
"""Overload retries after the first attempt; overrides ``Policy.max_retries``."""

ENABLE_OVERLOAD_RETARGETING = "enableOverloadRetargeting"
"""Deprioritize the overloaded server on retry; overrides ``Policy.retarget``."""

HEDGE_DELAY_MS = "hedgeDelayMS"
"""Hedge eligible reads after this many ms without a reply; sets ``Policy.hedge_delay``."""

MAX_HEDGES = "maxHedges"
"""Hedges per read at most (1..4); overrides ``Policy.max_hedges``."""

ROUTE_AROUND_OVERLOAD = "routeAroundOverload"
"""Steer selections with a choice around a server that pushes back (default true); overrides
``Policy.route_around``."""

OPTION_NAMES: tuple[str, ...] = (
    BACKPRESSURE,
    MAX_ADAPTIVE_RETRIES,
    ENABLE_OVERLOAD_RETARGETING,
    HEDGE_DELAY_MS,
    MAX_HEDGES,
    ROUTE_AROUND_OVERLOAD,
)
"""Canonical names of the options this module owns."""

# Lower-cased spellings of each option: the URI's (camelCase, any case) ...
_URI_SPELLINGS: Mapping[str, str] = {name.lower(): name for name in OPTION_NAMES}
# ... and the keywords', which add pymongo's snake_case forms.
_SNAKE_SPELLINGS: Mapping[str, str] = {
    "max_adaptive_retries": MAX_ADAPTIVE_RETRIES,
    "enable_overload_retargeting": ENABLE_OVERLOAD_RETARGETING,
    "hedge_delay_ms": HEDGE_DELAY_MS,
    "max_hedges": MAX_HEDGES,
    "route_around_overload": ROUTE_AROUND_OVERLOAD,
}
_SPELLINGS: Mapping[str, str] = {**_URI_SPELLINGS, **_SNAKE_SPELLINGS}
_URI_BOOLEANS = {"true": True, "false": False}


class InvalidOptionValue(InvalidPolicyError, ValueError):
    """An option has a value of the right type that is not allowed (pymongo: ``ValueError``)."""


class InvalidOptionType(InvalidPolicyError, TypeError):
    """An option has a value of a type it never takes (pymongo: ``TypeError``)."""


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_stacklevel() -> int:
    """Return the ``warnings`` stacklevel of the first caller outside this package.

    Called by the function that warns, so that the warning points at the user's line (the
    ``MongoClient(...)`` call), not at this package's code.
    """
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def _canonical(key: str) -> Optional[str]:
    """Return the canonical name of one of our options (any keyword spelling), or None."""
    return _SPELLINGS.get(key.lower())


def _invalid(
    option: str, allowed: str, value: object, *, from_uri: bool, wrong_type: bool = False
) -> InvalidPolicyError:
    """Build the error for an invalid value of ``option``, naming what is allowed."""
    where = "URI option" if from_uri else "option"
    kind = InvalidOptionType if wrong_type else InvalidOptionValue
    return kind(f"The value of {where} {option} must be {allowed}, got {short_repr(value)}")


def _validate_int(
    option: str, value: object, low: int, high: Optional[int], *, from_uri: bool
) -> int:
    """Return ``value`` as an int in ``low..high`` (no upper bound when None), or raise.

    pymongo's rule for its integer options: an int (a bool is one, as in Python), or a string
    that ``int()`` reads; any other type is a type error.
    """
    allowed = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    allowed += " (an int, or a string of one)"
    if isinstance(value, int):
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value)
        except ValueError:
            raise _invalid(option, allowed, value, from_uri=from_uri) from None
    else:
        raise _invalid(option, allowed, value, from_uri=from_uri, wrong_type=True)
    if number < low or (high is not None and number > high):
        raise _invalid(option, allowed, value, from_uri=from_uri)
    return number


def _validate_bool(option: str, value: object, *, from_uri: bool) -> bool:
    """Return the boolean option ``option``'s ``value`` as a bool or raise.

    pymongo's rule, for keywords and URIs alike: a bool, or exactly ``'true'``/``'false'``.
    """
    if isinstance(value, bool):
        return value
    allowed = "'true' or 'false'" if from_uri else "True, False, 'true' or 'false'"
    if isinstance(value, str):
        if value in _URI_BOOLEANS:
            return _URI_BOOLEANS[value]
        raise _invalid(option, allowed, value, from_uri=from_uri)
    raise _invalid(option, allowed, value, from_uri=from_uri, wrong_type=True)


def _validate_switch(value: object, *, from_uri: bool) -> Union[bool, Policy]:
    """Return the ``backpressure`` value as a bool or a Policy, or raise InvalidPolicyError.

    Booleans follow pymongo's URI rule in keywords and URIs alike: a bool, or exactly
    ``'true'``/``'false'``; preset names are case-insensitive.
    """
    if isinstance(value, str) and value in _URI_BOOLEANS:
        return _URI_BOOLEANS[value]
    if isinstance(value, (str, bool, Policy)) or value is None:
        try:
            policy = resolve_policy(value)
        except InvalidPolicyError:
            policy = None
        else:
            return False if policy is None else policy
    allowed = (
        "'true', 'false', 'draft', 'current' or 'adaptive'"
        if from_uri
        else "a bool, 'true', 'false', a Policy, 'draft', 'current' or 'adaptive'"
    )
    wrong_type = not isinstance(value, (str, bool, Policy))
    raise _invalid(BACKPRESSURE, allowed, value, from_uri=from_uri, wrong_type=wrong_type)


def validate_option(name: str, value: object, *, from_uri: bool = False) -> Any:
    """Validate one of our options and return its normalized value.

    Args:
        name: any accepted spelling (``maxAdaptiveRetries``, ``max_adaptive_retries``, ...).
        value: the raw value (a string when it comes from a URI).
        from_uri: the value comes from a connection string (wording of the error).

    Raises:
        InvalidOptionValue: the value is not allowed (also a ``ValueError``); the message names
            the option and what is allowed.
        InvalidOptionType: the value's type is never allowed (also a ``TypeError``).
        KeyError: ``name`` is not one of our options.
    """
    canonical = _canonical(name)
    if canonical == MAX_ADAPTIVE_RETRIES:
        return _validate_int(MAX_ADAPTIVE_RETRIES, value, 0, None, from_uri=from_uri)
    if canonical in (ENABLE_OVERLOAD_RETARGETING, ROUTE_AROUND_OVERLOAD):
        return _validate_bool(canonical, value, from_uri=from_uri)
    if canonical == BACKPRESSURE:
        return _validate_switch(value, from_uri=from_uri)
    if canonical == HEDGE_DELAY_MS:
        limit = int(HEDGE_DELAY_LIMIT * 1000)
        return _validate_int(HEDGE_DELAY_MS, value, 0, limit, from_uri=from_uri)
    if canonical == MAX_HEDGES:
        return _validate_int(MAX_HEDGES, value, 1, MAX_HEDGES_LIMIT, from_uri=from_uri)
    raise KeyError(name)


def parse_backpressure_options(uri: str, *, warn: bool = True) -> tuple[str, dict[str, Any]]:
    """Take our options out of a connection string.

    Returns the URI without them and a dict of their validated values keyed by canonical name
    (``backpressure`` -> bool or Policy, ``maxAdaptiveRetries`` -> int,
    ``enableOverloadRetargeting`` -> bool, ``hedgeDelayMS`` -> int, ``maxHedges`` -> int,
    ``routeAroundOverload`` -> bool).
    Other options are left untouched, in order.

    Args:
        uri: a ``mongodb://`` or ``mongodb+srv://`` connection string.
        warn: report invalid values with a ``UserWarning`` and ignore them (pymongo's
            behaviour for URI options); when False, raise instead.

    Raises:
        InvalidPolicyError: an option value is invalid and ``warn`` is False.
    """
    head, sep, query = uri.partition("?")
    if not sep or not query:
        return uri, {}
    delimiter = ";" if ";" in query and "&" not in query else "&"
    kept: list[str] = []
    found: dict[str, Any] = {}
    seen: set[str] = set()
    for item in re.split("[&;]", query):
        key, _, raw = item.partition("=")
        canonical = _URI_SPELLINGS.get(unquote_plus(key).lower())
        if canonical is None:
            kept.append(item)
            continue
        if canonical in seen and warn:
            warnings.warn(
                f"Duplicate URI option '{key}'.", UserWarning, stacklevel=_user_stacklevel()
            )
        seen.add(canonical)
        try:
            found[canonical] = validate_option(canonical, unquote_plus(raw), from_uri=True)
        except InvalidPolicyError as exc:
            if not warn:
                raise
            found.pop(canonical, None)
            warnings.warn(str(exc), UserWarning, stacklevel=_user_stacklevel())
    if not seen:
        return uri, {}
    remaining = delimiter.join(kept)
    return (head + "?" + remaining if remaining else head), found


def split_backpressure_kwargs(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split keyword arguments into (pymongo's, ours validated by canonical name).

    Every value is validated; an option given under several spellings takes, as in pymongo, the
    snake_case one's value (``max_adaptive_retries`` over ``maxAdaptiveRetries``), else the last.

    Raises:
        InvalidPolicyError: one of our options has an invalid value (``InvalidOptionValue`` or
            ``InvalidOptionType``).
    """
    rest: dict[str, Any] = {}
    ours: dict[str, Any] = {}
    from_snake: set[str] = set()
    for key, value in kwargs.items():
        canonical = _canonical(key)
        if canonical is None:
            rest[key] = value
            continue
        checked = validate_option(canonical, value)
        snake = key.lower() in _SNAKE_SPELLINGS
        if canonical in from_snake and not snake:
            continue
        ours[canonical] = checked
        if snake:
            from_snake.add(canonical)
    return rest, ours


class InertOptionWarning(UserWarning):
    """An option was given that has no effect (``maxHedges`` without ``hedgeDelayMS``)."""


def warn_inert_options(policy: Policy, options: Mapping[str, Any]) -> None:
    """Warn with :class:`InertOptionWarning` about options that change nothing in ``policy``.

    ``maxHedges`` without ``hedgeDelayMS`` (when the policy itself does not hedge) is inert:
    hedging is on only with a hedge delay.
    """
    if MAX_HEDGES in options and HEDGE_DELAY_MS not in options and policy.hedge_delay is None:
        warnings.warn(
            f"{MAX_HEDGES}={options[MAX_HEDGES]!r} has no effect without {HEDGE_DELAY_MS}: "
            f"reads are hedged only when {HEDGE_DELAY_MS} is set too",
            InertOptionWarning,
            stacklevel=_user_stacklevel(),
        )


def apply_overrides(policy: Policy, options: Mapping[str, Any]) -> Policy:
    """Return ``policy`` with ``maxAdaptiveRetries``, ``enableOverloadRetargeting``,
    ``hedgeDelayMS``, ``maxHedges`` and ``routeAroundOverload`` applied."""
    changes: dict[str, Any] = {}
    if HEDGE_DELAY_MS in options:
        changes["hedge_delay"] = int(options[HEDGE_DELAY_MS]) / 1000.0
    if MAX_HEDGES in options:
        changes["max_hedges"] = int(options[MAX_HEDGES])
    if MAX_ADAPTIVE_RETRIES in options:
        changes["max_retries"] = int(options[MAX_ADAPTIVE_RETRIES])
    if ENABLE_OVERLOAD_RETARGETING in options:
        changes["retarget"] = bool(options[ENABLE_OVERLOAD_RETARGETING])
    if ROUTE_AROUND_OVERLOAD in options:
        changes["route_around"] = bool(options[ROUTE_AROUND_OVERLOAD])
    return policy.replace(**changes) if changes else policy
