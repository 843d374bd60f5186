"""The history ledger of the committed runs: one generated line per run, kept when runs go."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backpressure.bench.history import HEADER, LEDGER, ledger_line, main, run_name, update_ledger

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def test_the_committed_ledger_has_the_generated_line_of_every_committed_run() -> None:
    """``history.md`` is what ``update_ledger`` makes of the folder now: a run committed
    without its line, or a line edited by hand, fails here."""
    assert (RESULTS / LEDGER).read_text(encoding="utf-8") == update_ledger(RESULTS)


def test_run_names_fold_the_run_number_out_of_the_benchmark() -> None:
    """Numbered runs of one benchmark share its name; a file with no number is run 1."""
    assert run_name("adaptive-default/fleet-run16.json") == ("adaptive-default/fleet", 16)
    assert run_name("overhead/pymongo-4.20-run3-before.json") == (
        "overhead/pymongo-4.20-before",
        3,
    )
    assert run_name("latest.json") == ("latest", 1)


def test_a_removed_run_keeps_its_line_and_a_new_run_gets_one(tmp_path: Path) -> None:
    """The ledger keeps the line of a run whose file is gone, and adds one for a new file, in
    the order of benchmark and run number (10 after 9)."""
    for number in (9, 10):
        (tmp_path / f"recovery-run{number}.json").write_text(
            json.dumps({"commit": f"abc{number}", "machine": {"date": f"2026-12-{number:02d}"}}),
            encoding="utf-8",
        )
    first = update_ledger(tmp_path)
    (tmp_path / LEDGER).write_text(first, encoding="utf-8")
    (tmp_path / "recovery-run9.json").unlink()
    (tmp_path / "recovery-run11.json").write_text(json.dumps({"runs": []}), encoding="utf-8")
    lines = update_ledger(tmp_path)[len(HEADER) :].splitlines()
    assert [line.split("|")[2].strip() for line in lines] == ["9", "10", "11"]
    assert lines[0] == first[len(HEADER) :].splitlines()[0]
    assert lines[0].startswith("| `recovery` | 9 | `abc9` | 2026-12-09 |")
    assert lines[2] == ledger_line(tmp_path, "recovery-run11.json")


def test_a_missing_folder_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--results`` naming no folder exits 2 and names it."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--results", str(tmp_path / "nowhere")])
    assert exit_info.value.code == 2
    assert "no such folder" in capsys.readouterr().err
