"""Unit tests for backpressure.core.policy: validation, presets and resolve_policy."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from pymongo.errors import ConfigurationError

from backpressure.core.policy import (
    ADAPTIVE,
    CURRENT_SPEC,
    DEFAULT_POLICY,
    DRAFT,
    PRESETS,
    InvalidPolicyError,
    Policy,
    resolve_policy,
)


def test_the_default_preset_is_current() -> None:
    """Switching backpressure on without naming a preset gives CURRENT_SPEC (also as "default").

    ``adaptive`` is opt-in until it meets the fleet, transient and fault goals too.
    """
    assert DEFAULT_POLICY is CURRENT_SPEC
    assert resolve_policy("default") is CURRENT_SPEC
    assert resolve_policy("adaptive") is ADAPTIVE


def test_draft_defaults() -> None:
    """DRAFT has the draft spec's numbers."""
    assert DRAFT.name == "draft"
    assert DRAFT.max_retries == 5
    assert DRAFT.base_backoff == 0.1
    assert DRAFT.max_backoff == 10.0
    assert DRAFT.backoff_multiplier == 2.0
    assert DRAFT.first_retry_exponent == 0
    assert DRAFT.budget_enabled
    assert DRAFT.budget_capacity == 1000.0
    assert DRAFT.budget_success_deposit == 0.1
    assert DRAFT.budget_retry_cost == 1.0
    assert DRAFT.budget_failure_deposit == 1.0
    assert DRAFT.honour_server_backoff
    assert DRAFT.retarget
    assert DRAFT.respect_retry_options


def test_current_spec() -> None:
    """CURRENT_SPEC: two retries, exponent from 1, no bucket, no retargeting."""
    assert CURRENT_SPEC.name == "current"
    assert CURRENT_SPEC.max_retries == 2
    assert CURRENT_SPEC.first_retry_exponent == 1
    assert not CURRENT_SPEC.budget_enabled
    assert not CURRENT_SPEC.retarget
    assert CURRENT_SPEC.honour_server_backoff


def test_presets_read_only() -> None:
    """PRESETS maps the three names and cannot be modified."""
    assert dict(PRESETS) == {"draft": DRAFT, "current": CURRENT_SPEC, "adaptive": ADAPTIVE}
    with pytest.raises(TypeError):
        PRESETS["x"] = DRAFT  # type: ignore[index]


def test_frozen_and_replace() -> None:
    """Policies are frozen; replace derives a validated copy."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        DRAFT.max_retries = 3  # type: ignore[misc]
    three = DRAFT.replace(max_retries=3, name="three")
    assert three.max_retries == 3
    assert three.name == "three"
    assert DRAFT.max_retries == 5
    with pytest.raises(InvalidPolicyError):
        DRAFT.replace(max_retries=-1)


def test_a_bare_policy_starts_from_the_default_preset() -> None:
    """``Policy(...)`` keeps the default preset's value for every field not given: no budget, no
    retargeting switched on by naming another field; the docstring says so."""
    assert Policy() == DEFAULT_POLICY
    assert Policy(name=DEFAULT_POLICY.name) == DEFAULT_POLICY
    three = Policy(max_retries=3)
    assert three == DEFAULT_POLICY.replace(max_retries=3)
    assert not three.budget_enabled
    assert not three.retarget
    for field in dataclasses.fields(Policy):
        if field.name != "name":
            assert field.default == getattr(DEFAULT_POLICY, field.name), field.name
    assert f"default preset, ``{DEFAULT_POLICY.name}``" in (Policy.__doc__ or "")


def test_name_not_compared() -> None:
    """The name is a label: equal settings are equal policies with equal hashes."""
    assert Policy() == CURRENT_SPEC
    assert hash(Policy()) == hash(CURRENT_SPEC)
    assert DRAFT.replace(name="mine") == DRAFT
    assert CURRENT_SPEC != DRAFT


def test_int_accepted_for_float_fields() -> None:
    """Float fields accept ints."""
    policy = Policy(base_backoff=1, max_backoff=20, budget_capacity=10)
    assert policy.max_backoff == 20


def test_error_is_configuration_error() -> None:
    """InvalidPolicyError is a pymongo ConfigurationError."""
    assert issubclass(InvalidPolicyError, ConfigurationError)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_retries", -1),
        ("max_retries", -2),
        ("max_retries", 2.0),
        ("max_retries", True),
        ("max_retries", "2"),
        ("max_retries", None),
        ("first_retry_exponent", -1),
        ("first_retry_exponent", 65),
        ("first_retry_exponent", False),
        ("first_retry_exponent", 1.5),
        ("base_backoff", -0.1),
        ("base_backoff", math.nan),
        ("base_backoff", math.inf),
        ("base_backoff", True),
        ("base_backoff", "0.1"),
        ("max_backoff", 0.05),
        ("max_backoff", math.inf),
        ("max_backoff", -1.0),
        ("backoff_multiplier", 0.5),
        ("backoff_multiplier", math.nan),
        ("backoff_multiplier", False),
        ("budget_capacity", 0),
        ("budget_capacity", -5.0),
        ("budget_capacity", math.inf),
        ("budget_capacity", True),
        ("budget_success_deposit", -0.1),
        ("budget_success_deposit", math.nan),
        ("budget_retry_cost", -1),
        ("budget_retry_cost", "1"),
        ("budget_failure_deposit", -1.0),
        ("budget_failure_deposit", math.inf),
        ("budget_enabled", 1),
        ("budget_enabled", "yes"),
        ("honour_server_backoff", None),
        ("retarget", 0),
        ("respect_retry_options", "true"),
        ("name", 5),
    ],
)
def test_invalid_field(field: str, value: Any) -> None:
    """Each invalid field value raises InvalidPolicyError naming the field and the value."""
    with pytest.raises(InvalidPolicyError) as info:
        Policy(**{field: value})
    message = str(info.value)
    assert field in message
    assert repr(value) in message


def test_valid_edges() -> None:
    """Boundary values are accepted."""
    Policy(max_retries=0)
    Policy(max_retries=10**6)  # no upper bound, as pymongo's maxAdaptiveRetries
    Policy(first_retry_exponent=64)
    Policy(base_backoff=0, max_backoff=0)
    Policy(backoff_multiplier=1)
    Policy(budget_success_deposit=0, budget_retry_cost=0, budget_failure_deposit=0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (False, None),
        (True, CURRENT_SPEC),
        ("draft", DRAFT),
        ("DRAFT", DRAFT),
        ("default", CURRENT_SPEC),
        ("current", CURRENT_SPEC),
        ("Current-Spec", CURRENT_SPEC),
        (" current ", CURRENT_SPEC),
    ],
)
def test_resolve_policy(value: Any, expected: Policy | None) -> None:
    """resolve_policy maps switches and names to presets."""
    assert resolve_policy(value) is expected


def test_resolve_policy_passes_policy_through() -> None:
    """A Policy resolves to itself."""
    custom = Policy(max_retries=1)
    assert resolve_policy(custom) is custom


@pytest.mark.parametrize("value", ["aggressive", "", 1, 0, 2.5, {"max_retries": 1}, ["draft"]])
def test_resolve_policy_rejects(value: Any) -> None:
    """Other values raise InvalidPolicyError naming backpressure and the allowed values."""
    with pytest.raises(InvalidPolicyError, match="backpressure") as info:
        resolve_policy(value)
    assert "'draft'" in str(info.value)
    assert "'current'" in str(info.value)


@pytest.mark.parametrize("field", ["base_backoff", "max_backoff", "budget_capacity"])
def test_huge_int_is_an_invalid_policy_naming_the_field(field: str) -> None:
    """An int too large for a float (10**400) is refused like any non-finite value."""
    with pytest.raises(InvalidPolicyError, match=rf"Policy\.{field} must be a finite number"):
        Policy(**{field: 10**400})


@pytest.mark.parametrize(("value", "expected"), [("true", "current"), ("false", None)])
def test_boolean_strings_resolve_like_booleans(value: str, expected: object) -> None:
    """'true'/'false' (exactly, as pymongo reads URI booleans) mean True/False."""
    resolved = resolve_policy(value)
    assert (resolved.name if resolved is not None else None) == expected
    with pytest.raises(InvalidPolicyError):
        resolve_policy(value.upper())


@pytest.mark.parametrize(
    "make",
    [
        lambda: DRAFT.replace(nosuch=1),
        lambda: Policy(nosuch=1),
        lambda: CURRENT_SPEC.replace(max_retrys=3),
    ],
    ids=["replace", "constructor", "close-to-a-field"],
)
def test_an_unknown_field_lists_the_valid_fields(make: Any) -> None:
    """A field typo raises InvalidPolicyError naming it and every field (not a bare TypeError)."""
    with pytest.raises(InvalidPolicyError, match="Policy has no field") as raised:
        make()
    message = str(raised.value)
    for field in dataclasses.fields(Policy):
        assert field.name in message


def test_a_typo_close_to_a_field_suggests_it() -> None:
    """The message suggests the closest field name."""
    with pytest.raises(InvalidPolicyError, match=r"did you mean 'max_retries'\?"):
        DRAFT.replace(max_retrys=3)
    with pytest.raises(InvalidPolicyError, match="no fields 'a', 'b'"):
        Policy(a=1, b=2)


def test_policies_still_copy_and_pickle() -> None:
    """The field check leaves copy, deepcopy and pickle working (they pass no field names)."""
    import copy
    import pickle

    for preset in PRESETS.values():
        assert copy.copy(preset) == preset
        assert copy.deepcopy(preset) == preset
        assert pickle.loads(pickle.dumps(preset)) == preset


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (CURRENT_SPEC, "Policy(name='current')  # other fields as in preset 'current'"),
        (
            DRAFT,
            "Policy(name='draft', max_retries=5, first_retry_exponent=0, "
            "budget_enabled=True, retarget=True)  # other fields as in preset 'current'",
        ),
        (
            Policy(max_retries=1, hedge_delay=0.05),
            "Policy(name='custom', max_retries=1, hedge_delay=0.05)  "
            "# other fields as in preset 'current'",
        ),
    ],
)
def test_repr_shows_the_fields_that_differ_from_the_defaults(policy: Policy, expected: str) -> None:
    """repr names the policy, its fields that differ from the default preset and that preset,
    and evaluates back to it."""
    assert repr(policy) == expected
    again = eval(repr(policy), {"Policy": Policy})
    assert again == policy
    assert again.name == policy.name


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            CURRENT_SPEC,
            "current: max_retries=2, base=100ms, max=10s, budget=off, retargeting=off",
        ),
        (
            DRAFT,
            "draft: max_retries=5, base=100ms, max=10s, budget=bucket(1000 per client), "
            "retargeting=on",
        ),
        (
            ADAPTIVE,
            "adaptive: max_retries=2, base=100ms, max=10s, budget=off, retargeting=off, "
            "adaptive=on",
        ),
        (
            CURRENT_SPEC.replace(max_retries=1, max_backoff=1.5),
            "current (modified): max_retries=1, base=100ms, max=1.5s, budget=off, retargeting=off",
        ),
        (
            Policy(hedge_delay=0.02, max_hedges=2),
            "custom: max_retries=2, base=100ms, max=10s, budget=off, retargeting=off, "
            "hedging=20ms x2",
        ),
    ],
)
def test_describe_names_the_preset_and_its_key_fields(policy: Policy, expected: str) -> None:
    """describe() is one readable line: preset name (or "modified"), retries, backoff, budget,
    retargeting, and pacing or hedging when on."""
    assert policy.describe() == expected
