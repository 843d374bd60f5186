"""The URI-options spec files (``valid``/``warning``/``hosts``/``auth``/``options``).

Our options are parsed by ``backpressure.switch.uri_options.parse_backpressure_options`` (every
pymongo era; the files are found by :mod:`tests.spec.sources`);
when pymongo has native backpressure (>= 4.17) the same files are also checked against
``pymongo.uri_parser.parse_uri``, the reference. Hosts and auth, when a test gives them, are
checked with pymongo's parser.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import pytest
from pymongo import uri_parser

from backpressure.adapters import seams
from backpressure.switch.uri_options import parse_backpressure_options
from backpressure.testing.unified.loader import load_document
from tests.spec.sources import locate

URI_OPTIONS = locate("uri-options")

PARSERS = ["backpressure"] + (["pymongo"] if seams.HAS_NATIVE_BACKPRESSURE else [])


def _cases() -> list[Any]:
    """One param per (file, test, parser), or one skipped placeholder without the files."""
    if URI_OPTIONS.path is None:
        reason = URI_OPTIONS.missing
        return [pytest.param(None, "", id="uri-options-missing", marks=pytest.mark.skip(reason))]
    cases = []
    for path in sorted(URI_OPTIONS.path.glob("*.json")):
        for test in load_document(path)["tests"]:
            for parser in PARSERS:
                case_id = f"{parser}-uri-options/{path.name}::{test['description']}"
                cases.append(pytest.param(test, parser, id=case_id))
    return cases


def _parse(uri: str, parser: str) -> Mapping[str, Any]:
    """Options as parsed by our parser or pymongo's (lower-cased keys for pymongo)."""
    if parser == "backpressure":
        return parse_backpressure_options(uri, warn=True)[1]
    return {k.lower(): v for k, v in uri_parser.parse_uri(uri, warn=True)["options"].items()}


@pytest.mark.parametrize(("test", "parser"), _cases())
def test_uri_options(test: Mapping[str, Any], parser: str) -> None:
    """A URI is valid or invalid, warns or not, and yields the expected options."""
    uri = test["uri"]
    if not test["valid"]:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the spec only says "invalid"
            _parse(uri, parser)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options = _parse(uri, parser)
    messages = [str(w.message) for w in caught]
    assert bool(caught) == test["warning"], messages
    if test.get("options") is not None:
        for name, value in test["options"].items():
            key = name if parser == "backpressure" else name.lower()
            assert key in options, f"{name} missing from {options}"
            assert options[key] == value
            assert type(options[key]) is type(value)
    if test.get("hosts") is not None or test.get("auth") is not None:
        parsed = uri_parser.parse_uri(uri, warn=True)
        if test.get("hosts") is not None:
            hosts = [{"host": h, "port": p} for h, p in parsed["nodelist"]]
            for expected in test["hosts"]:
                assert any(all(h.get(k) == v for k, v in expected.items()) for h in hosts)
        if test.get("auth") is not None:
            auth = {"username": parsed["username"], "password": parsed["password"]}
            for key, value in test["auth"].items():
                if key in auth:
                    assert auth[key] == value
