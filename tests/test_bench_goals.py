"""The goals table: the latest two committed runs of each benchmark, the default's column first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backpressure.bench.goals import GOALS, goals_markdown, latest_runs, main
from backpressure.workload.arms import arm_label, default_policy_name

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "adaptive-default"


def test_the_committed_goals_table_is_the_rendering_of_the_committed_runs() -> None:
    """``goals.md`` is what ``goals_markdown`` makes of the folder now: a new run committed
    without the table regenerated fails here."""
    assert (RESULTS / "goals.md").read_text(encoding="utf-8") == goals_markdown(RESULTS)


def test_the_table_covers_every_goal_twice_with_the_defaults_column_first() -> None:
    """Every goal has its two latest runs, and the columns are the default, stock pymongo and
    ``adaptive``, in that order."""
    text = goals_markdown(RESULTS)
    header = next(line for line in text.splitlines() if line.startswith("| goal |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")][2:]
    assert columns[0] == arm_label(default_policy_name())
    assert columns[1:] == ["stock pymongo", "adaptive"]
    for goal in GOALS:
        rows = [line for line in text.splitlines() if line.startswith(f"| {goal.name} |")]
        assert len(rows) == 2, goal.name


def test_the_latest_runs_are_the_highest_numbers_in_order(tmp_path: Path) -> None:
    """Run 10 is later than run 9 (numbers, not names, are compared); other files are ignored."""
    for number in (1, 2, 9, 10):
        (tmp_path / f"fleet-run{number}.json").write_text(json.dumps({"n": number}))
    (tmp_path / "fleet-run3.md").write_text("")
    (tmp_path / "mixed-fleet-run11.json").write_text(json.dumps({"n": 11}))
    runs = latest_runs(tmp_path, "fleet-run")
    assert [(number, data["n"]) for number, data in runs] == [(9, 9), (10, 10)]


def test_a_missing_folder_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--results`` naming no folder exits 2 and names it."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--results", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2
    assert "no such folder" in capsys.readouterr().err
