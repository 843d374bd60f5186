"""The sync backport is generated from the async one and must stay in step with it."""

from __future__ import annotations

import importlib.util
import os
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


def test_hand_edited_twin_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A twin newer than its source and different from it is kept unless --force is given."""
    unasync = _unasync()
    source = tmp_path / "a.py"
    target = tmp_path / "s.py"
    source.write_text("".join(f"{pattern}\n" for pattern, _ in unasync.SUBS), encoding="utf-8")
    target.write_text("hand edit\n", encoding="utf-8")
    os.utime(source, (1_000_000, 1_000_000))  # the source is older than the twin
    monkeypatch.setattr(unasync, "ROOT", tmp_path)
    monkeypatch.setattr(unasync, "FILES", {"a.py": "s.py"})
    monkeypatch.setattr(
        unasync, "_COMPILED", [(re.compile(re.escape(p)), r) for p, r in unasync.SUBS]
    )
    assert unasync.main([]) == 1
    assert "Refusing to overwrite" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8") == "hand edit\n"
    assert unasync.main(["--force"]) == 0
    assert unasync.main(["--check"]) == 0
    assert target.read_text(encoding="utf-8") != "hand edit\n"
