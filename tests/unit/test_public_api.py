"""The public API a user can hold in their head: 28 names, each documented, subpackages lazy."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import backpressure

PUBLIC = {
    "MongoClient",
    "AsyncMongoClient",
    "AsyncIOMotorClient",
    "enable",
    "disable",
    "is_enabled",
    "policy",
    "stats",
    "overrides",
    "Policy",
    "DRAFT",
    "CURRENT_SPEC",
    "ADAPTIVE",
    "Criticality",
    "InvalidPolicyError",
    "register",
    "unregister",
    "RetryEvent",
    "GiveUpEvent",
    "RetryListener",
    "BackpressureStats",
    "LocalOverloadError",
    "MissingExtraError",
    "UntestedPymongoWarning",
    "retry_outside",
    "is_transient",
    "is_retryable_overload",
    "__version__",
}
"""The names ``backpressure.__all__`` holds, exactly."""

FORMERLY_EXPORTED = (
    "A6Budget",
    "ClientPacers",
    "PacingListener",
    "ClientState",
    "HedgeEvent",
    "OperationFinishedEvent",
    "PRESETS",
    "StopReason",
    "budget",
    "parse_backpressure_options",
    "resolve_policy",
    "retry_summary",
    "state",
)
"""Some names the package re-exported before; each stays importable from its own module."""


def test_all_is_exactly_the_public_names() -> None:
    """``__all__`` lists the 28 public names (at most 30), and each one resolves."""
    assert set(backpressure.__all__) == PUBLIC
    assert len(backpressure.__all__) == len(PUBLIC) <= 30
    for name in backpressure.__all__:
        assert getattr(backpressure, name) is not None


@pytest.mark.parametrize("name", FORMERLY_EXPORTED)
def test_internal_names_are_not_reexported(name: str) -> None:
    """A name outside the public API is no attribute of the package."""
    with pytest.raises(AttributeError, match=name):
        getattr(backpressure, name)


def _attribute_docstrings(path: Path) -> dict[str, str]:
    """Map each module-level ``NAME = ...`` followed by a string literal to that string."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node, after in zip(tree.body, tree.body[1:]):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            for target in targets:
                if isinstance(target, ast.Name):
                    found[target.id] = after.value.value
    return found


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_name_has_a_one_line_summary_where_it_is_defined(name: str) -> None:
    """Functions and classes carry their own docstring; constants an attribute docstring."""
    value = getattr(backpressure, name)
    if inspect.isclass(value) or inspect.isfunction(value):
        doc = vars(value).get("__doc__") if inspect.isclass(value) else value.__doc__
        assert doc, f"{name} has no docstring of its own"
    else:
        defined_in = {
            "DRAFT": "backpressure.core.policy",
            "CURRENT_SPEC": "backpressure.core.policy",
            "ADAPTIVE": "backpressure.core.policy",
            "__version__": "backpressure",
        }[name]
        module = sys.modules[defined_in]
        assert module.__file__ is not None
        doc = _attribute_docstrings(Path(module.__file__)).get(name)
        assert doc, f"{name} has no attribute docstring in {defined_in}"
    summary = doc.strip().splitlines()[0]
    assert summary.strip(), f"{name}'s docstring has no summary line"


def test_the_package_docstring_names_the_default_preset() -> None:
    """The package docstring says the default preset is current (not draft)."""
    doc = backpressure.__doc__ or ""
    assert "current" in doc
    assert "default preset, draft" not in doc


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (nothing imported yet)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_importing_the_package_imports_nothing_optional() -> None:
    """``import backpressure`` loads no extra and none of the lazily served subpackages."""
    result = _run(
        """
        import sys
        import backpressure
        optional = ("prometheus_client", "opentelemetry", "simpy", "motor", "mongomock",
                    "backpressure.sim", "backpressure.metrics", "backpressure.testing.server")
        print(sorted(name for name in sys.modules if name.startswith(optional)))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_subpackages_are_attributes_imported_on_first_access() -> None:
    """``backpressure.metrics``/``testing``/``sim`` work after ``import backpressure`` alone,
    each imported only when first used."""
    result = _run(
        """
        import sys
        import backpressure
        assert "backpressure.metrics" not in sys.modules
        assert callable(backpressure.metrics.enable_prometheus)
        assert "backpressure.metrics" in sys.modules
        assert "prometheus_client" not in sys.modules  # the exporter needs it, not the package
        assert callable(backpressure.testing.set_testing)
        assert backpressure.testing.EmbeddedServer.__name__ == "EmbeddedServer"
        assert "backpressure.sim" not in sys.modules
        assert callable(backpressure.sim.physical_limit)
        assert backpressure.sim is sys.modules["backpressure.sim"]
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_sim_attribute_without_simpy_raises_missing_extra_error() -> None:
    """Without SimPy, ``backpressure.sim`` raises MissingExtraError naming the ``sim`` extra."""
    result = _run(
        """
        import sys
        sys.modules["simpy"] = None  # as if SimPy were not installed
        import backpressure
        try:
            backpressure.sim
        except backpressure.MissingExtraError as exc:
            print(exc.extra)
            print(exc)
        """
    )
    assert result.returncode == 0, result.stderr
    extra, message = result.stdout.splitlines()
    assert extra == "sim"
    assert "pip install 'pymongo-backpressure[sim]'" in message
    assert "backpressure.sim" in message


def test_an_unknown_attribute_raises_attribute_error() -> None:
    """The lazy lookup serves only its own names."""
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        backpressure.nosuch  # type: ignore[attr-defined]  # noqa: B018
