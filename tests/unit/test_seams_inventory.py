"""Every private pymongo name the adapters use is listed in ``adapters/seams.PRIVATE_NAMES``."""

from __future__ import annotations

import ast
from pathlib import Path

from backpressure.adapters.seams import PRIVATE_NAMES

ADAPTERS = Path(__file__).resolve().parents[2] / "backpressure" / "adapters"

OUR_OWN = frozenset(
    {"_backpressure_native", "_backpressure_hedging", "_backpressure_keeps_candidates"}
)
"""Private-looking names that are the package's own (attributes it puts on clients)."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name.isidentifier()


def _scan() -> dict[str, set[str]]:
    """Private names used on objects or imported from pymongo, minus what the adapters define."""
    used: dict[str, set[str]] = {}
    own: set[str] = set(OUR_OWN)
    for path in ADAPTERS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        own.add(target.id)
                    elif (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        own.add(target.attr)
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                used.setdefault(node.attr, set()).add(path.name)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pymongo"):
                for alias in node.names:
                    if _private(alias.name):
                        used.setdefault(alias.name, set()).add(path.name)
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _private(node.value)
            ):
                used.setdefault(node.value, set()).add(path.name)
    return {name: files for name, files in used.items() if name not in own and name != "_"}


def test_every_private_name_the_adapters_use_is_listed() -> None:
    """A private name used by an adapter but missing from PRIVATE_NAMES fails this test."""
    listed = " ".join(PRIVATE_NAMES)
    missing = {name: sorted(files) for name, files in _scan().items() if name not in listed}
    assert missing == {}


def test_the_scan_sees_the_known_seams() -> None:
    """The scan is not vacuous: it finds seams that are known to be used."""
    found = _scan()
    for name in ("_retry_policy", "_checkout", "_transaction", "_unpin", "_topology_settings"):
        assert name in found
