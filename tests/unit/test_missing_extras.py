"""A missing optional dependency raises MissingExtraError naming the extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

import backpressure
from backpressure.core.extras import MissingExtraError, require


@pytest.mark.parametrize(
    ("blocked", "statement", "extra"),
    [
        ("motor", "backpressure.AsyncIOMotorClient", "motor"),
        ("mongomock", "backpressure.testing.EmbeddedServer", "server"),
        ("mongomock", "backpressure.testing.Deployment", "server"),
        # The server's command line parses without the extra (tests/test_cli_style.py); the
        # layers that serve need it.
        ("mongomock", "import backpressure.testing.server.transport.deployment", "server"),
        ("mongomock", "import backpressure.testing.server.engine", "server"),
        (
            "tqdm",
            "from backpressure.workload.report import progress_bar; "
            "progress_bar(1, desc='demo', disabled=True)",
            "demo",
        ),
    ],
)
def test_missing_extra_is_named(blocked: str, statement: str, extra: str) -> None:
    """With the package hidden, using the feature names the extra (and the package)."""
    code = (
        "import sys\n"
        f"sys.modules[{blocked!r}] = None\n"
        "import backpressure, backpressure.testing\n"
        "backpressure.testing.set_testing(False)  # test mode needs no extra\n"
        "try:\n"
        f"    {statement}\n"
        "except backpressure.MissingExtraError as exc:\n"
        "    print(exc.extra); print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    lines = out.stdout.splitlines()
    assert lines[0] == extra
    assert f"the {blocked!r} package" in lines[1]
    assert f"pip install 'pymongo-backpressure[{extra}]'" in lines[1]


def test_require_returns_the_module_and_is_an_import_error() -> None:
    """require() imports what is there; MissingExtraError is an ImportError with the name."""
    assert require("json", "none", "json").dumps([]) == "[]"
    with pytest.raises(ImportError) as raised:
        require("no_such_package_for_backpressure.sub", "demo", "The demo")
    assert isinstance(raised.value, MissingExtraError)
    assert raised.value is not None
    assert raised.value.name == "no_such_package_for_backpressure"
    assert raised.value.extra == "demo"
    assert backpressure.MissingExtraError is MissingExtraError
