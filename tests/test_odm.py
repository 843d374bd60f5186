"""The ODM examples of the docs (docs/examples/odm_*.py) run as written, each against its own
embedded server, in a process of its own (Django's settings are process-wide).

Each needs its ODM (the ``odm`` extra, installed by ``make test``) and is skipped without it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
ODMS = {
    "odm_mongoengine.py": "mongoengine",
    "odm_beanie.py": "beanie",
    "odm_django.py": "django_mongodb_backend",
}
"""Example file -> the module it needs."""


def test_every_example_is_tested() -> None:
    """A new ODM example needs an entry above."""
    assert sorted(path.name for path in EXAMPLES.glob("odm_*.py")) == sorted(ODMS)


@pytest.mark.parametrize("example", sorted(ODMS))
def test_odm_example_retries_under_the_odm(example: str) -> None:
    """The example's ODM saves through an enabled client: 2 overloads retried, 1 document."""
    module = ODMS[example]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install 'pymongo-backpressure[odm]')")
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / example)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=EXAMPLES,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["retries: 2", "orders: 1"], result.stdout
