"""An invalid URI option warns at the user's line, not inside the package."""

from __future__ import annotations

import pytest

import backpressure
from backpressure.switch.uri_options import parse_backpressure_options


def test_invalid_uri_option_warning_points_at_the_callers_line() -> None:
    """The UserWarning's filename is this test file (the MongoClient(...) call)."""
    with pytest.warns(UserWarning, match="maxAdaptiveRetries") as record:
        client = backpressure.MongoClient(
            "mongodb://localhost:1/?maxAdaptiveRetries=many", connect=False
        )
    client.close()
    assert record[0].filename == __file__


def test_duplicate_uri_option_warning_points_at_the_callers_line() -> None:
    """The duplicate-option warning also names the caller."""
    with pytest.warns(UserWarning, match="Duplicate") as record:
        parse_backpressure_options("mongodb://localhost/?maxAdaptiveRetries=1&maxAdaptiveRetries=2")
    assert record[0].filename == __file__
