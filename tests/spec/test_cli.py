"""The runner's command line: one line per test, a summary, exit code 1 on any failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from backpressure.testing.unified import PRESET_NAMES
from backpressure.testing.unified.__main__ import main

SCENARIO = """\
description: cli-check
schemaVersion: "1.3"
runOnRequirements: [{topologies: [single]}]
createEntities:
  - client: {id: client, observeEvents: [commandStartedEvent]}
  - client: {id: failPointClient}
  - database: {id: db, client: client, databaseName: cli-check}
  - collection: {id: coll, database: db, collectionName: coll}
initialData: [{databaseName: cli-check, collectionName: coll, documents: [{_id: 1}]}]
tests:
  - description: passes
    operations:
      - {name: find, object: coll, arguments: {filter: {}}, expectResult: [{_id: 1}]}
  - description: fails
    operations:
      - {name: find, object: coll, arguments: {filter: {}}, expectResult: [{_id: 2}]}
  - description: skipped
    skipReason: not today
    operations: []
  - description: unsupported
    operations:
      - {name: rename, object: coll, arguments: {to: renamed}}
  - description: overloaded once then retried by the current preset
    operations:
      - name: failPoint
        object: testRunner
        arguments:
          client: failPointClient
          failPoint:
            configureFailPoint: failCommand
            mode: {times: 1}
            data:
              failCommands: [find]
              errorLabels: [RetryableError, SystemOverloadedError]
              errorCode: 462
      - {name: find, object: coll, arguments: {filter: {}}}
    expectEvents:
      - client: client
        events:
          - commandStartedEvent: {commandName: find}
          - commandStartedEvent: {commandName: find}
"""


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small YAML file on a standalone embedded server (no MONGODB_URI)."""
    monkeypatch.delenv("MONGODB_URI", raising=False)
    path = tmp_path / "cli-check.yml"
    path.write_text(SCENARIO)
    return path


def test_cli_reports_each_test_and_fails_on_failure(
    scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PASS/FAIL/SKIP lines with reasons, a summary, and exit code 1."""
    assert main(["--preset", "current", "--fast-backoff", str(scenario)]) == 1
    out = capsys.readouterr().out.splitlines()
    prefix = f"{scenario.parent.name}/cli-check.yml::"
    assert out[0].startswith(f"PASS {prefix}passes")
    assert out[1].startswith(f"FAIL {prefix}fails")
    assert "expected" in out[1]
    assert out[2].startswith(f"SKIP {prefix}skipped")
    assert out[2].endswith("skipReason: not today")
    assert out[3].startswith(f"SKIP {prefix}unsupported")
    assert "rename" in out[3]
    assert out[4].startswith(f"PASS {prefix}overloaded once")
    assert out[5].startswith("2 passed, 1 failed, 2 skipped")


def test_cli_keyword_filter_and_success_exit(
    scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-k keeps matching tests only; no failure means exit code 0."""
    assert main(["--async", "--preset", "current", "-k", "overloaded", str(scenario)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert out[1].startswith("1 passed, 0 failed, 0 skipped")
    assert out[1].endswith("(preset current, async)")


def test_cli_rejects_missing_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path that does not exist is a usage error naming it (exit 2), not an empty run or a
    traceback."""
    missing = os.fspath(tmp_path / "missing.json")
    with pytest.raises(SystemExit) as raised:
        main([os.fspath(tmp_path), missing])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m backpressure.testing.unified")
    assert f"error: argument PATH: no such file or folder: {missing}" in err


def test_cli_missing_path_in_a_subprocess(tmp_path: Path) -> None:
    """``python -m backpressure.testing.unified MISSING``: usage line, exit 2, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "backpressure.testing.unified", os.fspath(tmp_path / "nope.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "error: argument PATH: no such file or folder:" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("preset", ["adaptive", None])
def test_cli_runs_the_package_presets(
    scenario: Path, preset: Optional[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--preset adaptive`` runs a file with backpressure clients of that preset; without
    ``--preset`` the clients have the package's default preset, ``current``."""
    argv = ["--preset", preset] if preset else []
    assert main([*argv, "--fast-backoff", "-k", "overloaded", str(scenario)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PASS ")
    assert out[1].startswith("1 passed, 0 failed, 0 skipped")
    assert out[1].endswith(f"(preset {preset or 'current'}, sync)")


def test_cli_preset_choices(capsys: pytest.CaptureFixture[str]) -> None:
    """``--preset`` takes the package's presets and ``none`` (stock pymongo), nothing else."""
    assert PRESET_NAMES == ("draft", "current", "adaptive", "none")
    with pytest.raises(SystemExit) as raised:
        main(["--preset", "fastest", "x"])
    assert raised.value.code == 2
    assert "argument --preset: invalid choice: 'fastest'" in capsys.readouterr().err


def test_cli_server_version_runs_the_base_backoff_scenario(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--server-version 9.0``: the embedded server has ``externalClientBaseBackoffMS``, so the
    base-backoff scenario runs (on the default 8.2.6 profile it is skipped)."""
    monkeypatch.delenv("MONGODB_URI", raising=False)
    path = os.fspath(
        Path(__file__).resolve().parents[2] / "spec-tests" / "backpressure-base-backoff.yml"
    )
    assert main(["--preset", "draft", "--fast-backoff", path]) == 0
    skipped = capsys.readouterr().out.splitlines()
    assert skipped[-1].startswith("0 passed, 0 failed,")
    assert main(["--preset", "draft", "--fast-backoff", "--server-version", "9.0", path]) == 0
    ran = capsys.readouterr().out.splitlines()
    assert ran[-1].startswith(f"{len(ran) - 1} passed, 0 failed, 0 skipped")


def test_cli_server_version_needs_an_embedded_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--server-version`` with ``--uri`` is a usage error naming the flag."""
    monkeypatch.delenv("MONGODB_URI", raising=False)
    with pytest.raises(SystemExit) as raised:
        main(["--uri", "mongodb://127.0.0.1:1", "--server-version", "9.0", os.fspath(tmp_path)])
    assert raised.value.code == 2
