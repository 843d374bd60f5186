"""The command line: listing, table, JSON shape, chart, progress bar only on a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("simpy")

from backpressure.sim.__main__ import main
from backpressure.sim.yardsticks import main as yardsticks_main
from backpressure.workload.arms import ARMS_KEY


def test_list_names_every_scenario_and_arm(capsys: pytest.CaptureFixture[str]) -> None:
    """--list shows the scenarios and the arms, within 100 columns."""
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in ("fleet", "burst", "sustained-10x", "no-retries", "current", "draft"):
        assert name in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_a_run_writes_the_json_other_tools_read(tmp_path: Path) -> None:
    """The JSON has exactly the documented keys, and the PNG is a real image."""
    json_path = tmp_path / "out.json"
    png_path = tmp_path / "out.png"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "backpressure.sim",
            "bench-burst-3x",
            "--arms",
            "no-retries,draft",
            "--seed",
            "3",
            "--json",
            str(json_path),
            "--png",
            str(png_path),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "\r" not in completed.stdout  # no progress bar when stdout is not a terminal
    assert "sim s" not in completed.stderr
    assert all(len(line) <= 100 for line in completed.stdout.splitlines())
    data = json.loads(json_path.read_text())
    assert data["scenario"] == "bench-burst-3x"
    assert data["seed"] == 3
    assert list(data[ARMS_KEY]) == ["no-retries", "draft"]
    for entry in data[ARMS_KEY].values():
        assert set(entry) == {
            "ops",
            "app_errors",
            "physical_min_errors",
            "server_attempts",
            "attempts_per_op",
            "goodput_per_s",
            "p99_ms",
        }
        assert entry["app_errors"] >= entry["physical_min_errors"]
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_exit_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown scenario or arm is a usage error naming the known ones."""
    with pytest.raises(SystemExit) as exit_info:
        main(["nope"])
    assert exit_info.value.code == 2
    assert "known scenarios" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["burst", "--arms", "fastest"])
    assert "--arms: unknown fastest" in capsys.readouterr().err


def test_the_progress_bar_shows_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """--progress on draws the bar (on stderr) even when stdout is not a terminal."""
    assert main(["bench-burst-3x", "--arms", "no-retries", "--progress", "on"]) == 0
    assert "sim s" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["burst", "--seed", "x"], "argument --seed: expected an integer, got 'x'"),
        (["burst", "--progress", "maybe"], "argument --progress: invalid choice: 'maybe'"),
        (["burst", "--arms", ","], "argument --arms: expected one or more of"),
        (["nope"], "argument scenario: unknown scenario 'nope'"),
    ],
)
def test_usage_errors_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad value exits 2 with the usage line and names its flag."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m backpressure.sim")
    assert f"error: {message}" in err


@pytest.mark.slow
def test_the_seed_defaults_to_1_and_progress_off_draws_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--seed`` a run uses seed 1 (as every command line of the package does), and the
    same seed gives the same figures; ``--progress off`` draws no bar."""
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    base = ["bench-burst-3x", "--arms", "no-retries,current", "--progress", "off"]
    assert main([*base, "--json", str(first)]) == 0
    assert main([*base, "--seed", "1", "--json", str(second)]) == 0
    assert "(seed 1)" in capsys.readouterr().out
    data = json.loads(first.read_text())
    assert data["seed"] == 1
    assert data[ARMS_KEY] == json.loads(second.read_text())[ARMS_KEY]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenarios", "faults,nope"], "argument --scenarios: unknown nope; choose from"),
        (["--arms", "fastest"], "argument --arms: unknown fastest; choose from"),
        (["--seed", "1.5"], "argument --seed: expected an integer, got '1.5'"),
    ],
)
def test_yardstick_usage_errors_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m backpressure.sim.yardsticks``: a bad value exits 2 naming its flag."""
    with pytest.raises(SystemExit) as exit_info:
        yardsticks_main(argv)
    assert exit_info.value.code == 2
    assert f"error: {message}" in capsys.readouterr().err
