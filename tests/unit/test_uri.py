"""Our URI and keyword options: parsing, stripping, warnings, validation, policy overrides."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from backpressure import CURRENT_SPEC, DRAFT, InvalidPolicyError, Policy
from backpressure.switch.uri_options import (
    BACKPRESSURE,
    ENABLE_OVERLOAD_RETARGETING,
    MAX_ADAPTIVE_RETRIES,
    apply_overrides,
    parse_backpressure_options,
    split_backpressure_kwargs,
    validate_option,
)


def _parse(uri: str, **kw: Any) -> tuple[str, dict[str, Any]]:
    """Parse with warnings turned into errors (no warning expected)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return parse_backpressure_options(uri, **kw)


def test_other_options_are_kept_in_order() -> None:
    """Only our options are removed; pymongo's stay, in order, with their delimiter."""
    uri = "mongodb://a,b/db?w=1&backpressure=false&replicaSet=rs&maxAdaptiveRetries=2&tls=true"
    cleaned, options = _parse(uri)
    assert cleaned == "mongodb://a,b/db?w=1&replicaSet=rs&tls=true"
    assert options == {BACKPRESSURE: False, MAX_ADAPTIVE_RETRIES: 2}
    cleaned, _ = _parse("mongodb://h/?w=1;backpressure=true;journal=true")
    assert cleaned == "mongodb://h/?w=1;journal=true"


def test_uri_without_our_options_is_unchanged() -> None:
    """A URI with no option of ours comes back identical."""
    for uri in ("mongodb://h", "mongodb://h/", "mongodb://h/?", "mongodb+srv://x.y/?w=2"):
        assert _parse(uri) == (uri, {})


def test_option_names_are_case_insensitive_and_values_unquoted() -> None:
    """Keys match case-insensitively (as pymongo's); values are URL-decoded."""
    _, options = _parse("mongodb://h/?MAXADAPTIVERETRIES=%33&EnableOverloadRetargeting=true")
    assert options == {MAX_ADAPTIVE_RETRIES: 3, ENABLE_OVERLOAD_RETARGETING: True}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True),
        ("false", False),
        ("draft", DRAFT),
        ("current", CURRENT_SPEC),
    ],
)
def test_backpressure_switch_values(value: str, expected: Any) -> None:
    """backpressure= takes true/false or a preset name."""
    _, options = _parse(f"mongodb://h/?backpressure={value}")
    assert options == {BACKPRESSURE: expected}


@pytest.mark.parametrize("value", [True, False, "true", "false", "TRUE", "False", "1", "yes", 1])
@pytest.mark.parametrize("option", [BACKPRESSURE, "enableOverloadRetargeting"])
def test_one_boolean_rule_for_keywords_and_uris_as_pymongo(option: str, value: Any) -> None:
    """Keyword and URI accept the same booleans, exactly those pymongo's URI parser accepts:
    a bool, or the strings 'true' and 'false' (not 'TRUE', not 1)."""
    from pymongo.common import validate_boolean_or_string

    try:
        expected: Any = validate_boolean_or_string(option, value)
    except (TypeError, ValueError):
        expected = None
    try:
        keyword: Any = validate_option(option, value)
    except InvalidPolicyError:
        keyword = None
    if isinstance(keyword, Policy):  # backpressure=True means the default preset
        keyword = True
    assert keyword == expected
    if isinstance(value, str):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, options = parse_backpressure_options(f"mongodb://h/?{option}={value}")
        assert options.get(option) == expected


def test_invalid_value_warns_user_warning_and_is_ignored() -> None:
    """Like pymongo: a UserWarning naming the option; the option is dropped."""
    with pytest.warns(UserWarning, match="backpressure must be") as record:
        cleaned, options = parse_backpressure_options("mongodb://h/?backpressure=maybe&w=1")
    assert len(record) == 1
    assert (cleaned, options) == ("mongodb://h/?w=1", {})


def test_invalid_value_raises_without_warn() -> None:
    """warn=False raises InvalidPolicyError instead of warning."""
    with pytest.raises(InvalidPolicyError, match="maxAdaptiveRetries"):
        parse_backpressure_options("mongodb://h/?maxAdaptiveRetries=x", warn=False)


def test_duplicate_option_warns_and_last_wins() -> None:
    """A repeated option warns like pymongo's duplicate warning; the last value wins."""
    with pytest.warns(UserWarning, match="Duplicate URI option"):
        _, options = parse_backpressure_options(
            "mongodb://h/?maxAdaptiveRetries=1&maxAdaptiveRetries=4"
        )
    assert options == {MAX_ADAPTIVE_RETRIES: 4}


def test_invalid_after_valid_duplicate_drops_the_option() -> None:
    """An invalid later value removes the earlier valid one (the last setting is the user's)."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        _, options = parse_backpressure_options(
            "mongodb://h/?maxAdaptiveRetries=1&maxAdaptiveRetries=-1"
        )
    assert options == {}


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("maxAdaptiveRetries", 0, 0),
        ("max_adaptive_retries", 7, 7),
        ("maxadaptiveretries", 100, 100),
        ("maxAdaptiveRetries", "7", 7),
        ("maxAdaptiveRetries", 10**6, 10**6),
        ("maxAdaptiveRetries", True, 1),
        ("hedgeDelayMS", "50", 50),
        ("maxHedges", " 2 ", 2),
        ("enableOverloadRetargeting", True, True),
        ("enable_overload_retargeting", "false", False),
        ("backpressure", None, False),
        ("backpressure", "current", CURRENT_SPEC),
        ("backpressure", Policy(max_retries=1), Policy(max_retries=1)),
    ],
)
def test_validate_option_accepts(name: str, value: Any, expected: Any) -> None:
    """Valid keyword values are normalized."""
    assert validate_option(name, value) == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("maxAdaptiveRetries", -1, "an integer >= 0"),
        ("maxAdaptiveRetries", "-1", "an integer >= 0"),
        ("maxAdaptiveRetries", 1.5, "maxAdaptiveRetries"),
        ("maxAdaptiveRetries", "7.0", "maxAdaptiveRetries"),
        ("enableOverloadRetargeting", 1, "'true' or 'false'"),
        ("enableOverloadRetargeting", "True", "enableOverloadRetargeting"),
        ("backpressure", 1.0, "backpressure"),
        ("backpressure", "yes", "backpressure"),
    ],
)
def test_validate_option_rejects(name: str, value: Any, message: str) -> None:
    """Invalid keyword values raise InvalidPolicyError naming the option and the range."""
    with pytest.raises(InvalidPolicyError, match=message):
        validate_option(name, value)


def test_validate_option_unknown_name() -> None:
    """A name that is not ours is a KeyError (a programming error, not a user one)."""
    with pytest.raises(KeyError):
        validate_option("w", 1)


def test_split_kwargs() -> None:
    """Keyword arguments split into pymongo's and ours; a double spelling is rejected."""
    rest, ours = split_backpressure_kwargs(
        {"w": 1, "maxAdaptiveRetries": 3, "backpressure": "draft", "appname": "x"}
    )
    assert rest == {"w": 1, "appname": "x"}
    assert ours == {MAX_ADAPTIVE_RETRIES: 3, BACKPRESSURE: DRAFT}
    with pytest.raises(InvalidPolicyError, match="enableOverloadRetargeting must be"):
        split_backpressure_kwargs(
            {"enableOverloadRetargeting": True, "ENABLEOVERLOADRETARGETING": 1}
        )


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"maxAdaptiveRetries": 1, "max_adaptive_retries": 2}, 2),
        ({"max_adaptive_retries": 2, "maxAdaptiveRetries": 1}, 2),
        ({"maxAdaptiveRetries": 1, "MAXADAPTIVERETRIES": 3}, 3),
        ({"MAXADAPTIVERETRIES": 3, "maxAdaptiveRetries": 1}, 1),
    ],
)
def test_several_spellings_snake_case_wins_else_the_last(
    kwargs: dict[str, Any], expected: int
) -> None:
    """As in pymongo: the snake_case keyword beats the camelCase one; else the last given wins."""
    assert split_backpressure_kwargs(kwargs)[1] == {MAX_ADAPTIVE_RETRIES: expected}


def test_snake_case_in_a_uri_is_no_option_of_ours() -> None:
    """In a URI only the camelCase names (any case) are options, as in pymongo: a snake_case
    name stays in the URI, for pymongo to report as unknown."""
    uri = "mongodb://h/?max_adaptive_retries=3&MAXADAPTIVERETRIES=4&hedge_delay_ms=5"
    assert parse_backpressure_options(uri) == (
        "mongodb://h/?max_adaptive_retries=3&hedge_delay_ms=5",
        {MAX_ADAPTIVE_RETRIES: 4},
    )


def test_apply_overrides() -> None:
    """maxAdaptiveRetries overrides max_retries, enableOverloadRetargeting overrides retarget."""
    assert apply_overrides(DRAFT, {}) is DRAFT
    changed = apply_overrides(
        CURRENT_SPEC, {MAX_ADAPTIVE_RETRIES: 4, ENABLE_OVERLOAD_RETARGETING: True}
    )
    assert (changed.max_retries, changed.retarget) == (4, True)
    assert changed.first_retry_exponent == CURRENT_SPEC.first_retry_exponent
