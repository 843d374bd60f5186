"""The sync backport is generated from the async one and must stay in step with it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _unasync() -> ModuleType:
    """Import scripts/unasync.py as a module."""
    spec = importlib.util.spec_from_file_location("unasync_script", ROOT / "scripts" / "unasync.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_sync_twin_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    """``scripts/unasync.py --check`` passes: the sync twin is current, every pattern used."""
    assert _unasync().main(["--check"]) == 0, capsys.readouterr().err


def test_generation_preserves_lines() -> None:
    """The generated file has exactly the source's line count (tracebacks line up)."""
    unasync = _unasync()
    for source, target in unasync.FILES.items():
        source_lines = (ROOT / source).read_text(encoding="utf-8").splitlines()
        target_lines = (ROOT / target).read_text(encoding="utf-8").splitlines()
        assert len(source_lines) == len(target_lines)


def test_unused_pattern_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A substitution that matches nothing makes ``--check`` fail and names the pattern."""
    unasync = _unasync()
    extra = (r"\bNeverUsedName\b", "Other")
    monkeypatch.setattr(unasync, "SUBS", [*unasync.SUBS, extra])
    monkeypatch.setattr(
        unasync, "_COMPILED", [*unasync._COMPILED, (re.compile(extra[0]), extra[1])]
    )
    assert unasync.main(["--check"]) == 1
    assert "NeverUsedName" in capsys.readouterr().err
