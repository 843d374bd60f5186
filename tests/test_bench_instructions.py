"""The overhead benchmark's instruction mode (``--instructions``): reading callgrind's dumps,
pairing them with the counted segments, the report and its page, the refusal without valgrind,
and one real run under valgrind (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backpressure.bench import build_parser, main, render_markdown
from backpressure.bench.history import ledger_line
from backpressure.bench.overhead import (
    INSTRUCTION_VARIANTS,
    ValgrindMissingError,
    callgrind_total,
    counts_from_dumps,
    instruction_report,
    instruction_segments,
    main_thread_dumps,
    measure_instructions,
)
from backpressure.testing import EmbeddedServer
from tests.prometheus.tools import require_tool

RECORDED_HEADER = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 24438
cmd:  /work/main/.venv/bin/python -c import sys, json; from backpressure.bench.overhead import \
instruction_child; instruction_child(*json.loads(sys.argv[1])) ["mongodb://127.0.0.1:33195,\
127.0.0.1:45127,127.0.0.1:38019/?replicaSet=rs0", ["find_one"], 20, 60, 20, "auto"]
part: 2
thread: 1


desc: I1 cache:
desc: D1 cache:
desc: LL cache:

desc: Timerange: Basic block 323628709 - 328940253
desc: Trigger: --dump-before=os_getppid

positions: line
events: Ir
summary: 21423807

"""
"""The head of a dump callgrind wrote for the main thread (``callgrind.out.2-01``) in a run of
the instruction mode (trailing blanks of its empty ``desc:`` lines dropped); the rest of such
a file is per-function costs, not read."""


def _dump(total: int) -> str:
    """A dump like the recorded one with another total (and its ``totals:`` line at the end)."""
    return (
        RECORDED_HEADER.replace("21423807", str(total)) + f"fl=(1)\n0 {total}\n\ntotals: {total}\n"
    )


def test_the_total_is_read_from_a_recorded_dump() -> None:
    """The event total of a dump is its ``summary:`` line (``totals:`` in older formats)."""
    assert callgrind_total(RECORDED_HEADER) == 21_423_807
    assert callgrind_total("events: Ir\ntotals: 17\n") == 17
    with pytest.raises(ValueError, match="no totals"):
        callgrind_total("events: Ir\n")


def test_only_the_main_threads_dumps_are_read_in_dump_order(tmp_path: Path) -> None:
    """``<base>.<dump>-01`` in numeric dump order, then the final dump ``<base>-01``; other
    threads' files (``-02``...) and the empty base file are left out."""
    for name, total in {
        "callgrind.out.1-01": 1,
        "callgrind.out.2-01": 2,
        "callgrind.out.10-01": 10,
        "callgrind.out.2-02": 999,
        "callgrind.out-01": 11,
        "callgrind.out-02": 998,
    }.items():
        (tmp_path / name).write_text(_dump(total), encoding="utf-8")
    (tmp_path / "callgrind.out").write_text("", encoding="utf-8")
    assert main_thread_dumps(tmp_path) == [1, 2, 10, 11]


def _totals(
    per_op: dict[str, float], fixed: int = 5_000_000, low: int = 100, high: int = 400
) -> list[int]:
    """Dump totals of a run where each side costs ``per_op`` instructions an operation."""
    totals = []
    for side in INSTRUCTION_VARIANTS:
        cost = per_op[side]
        totals += [fixed * 9, fixed + round(cost * low), fixed + round(cost * high)]
    return [*totals, 123]  # the final dump at exit


def test_counts_and_attribution_from_the_dumps() -> None:
    """Per side, (high - low) / (high_ops - low_ops); the wrappers' shares are the
    differences between consecutive sides and add up to the added instructions."""
    per_op = {
        "stock": 400_000.0,
        "enabled": 412_000.0,
        "-_process_response": 409_000.0,
        "-_select_server": 406_500.0,
        "-all": 401_000.0,
    }
    assert instruction_segments(["find_one"])[:3] == [
        ("find_one", "stock", "warm-up"),
        ("find_one", "stock", "low"),
        ("find_one", "stock", "high"),
    ]
    counts = counts_from_dumps(_totals(per_op), ["find_one"], 100, 400)
    assert {c.side: c.per_op for c in counts} == per_op
    report = instruction_report(
        counts, {"find_one": 200.0}, preset="current", pymongo="4.20.1", wrappers="positional"
    )
    (row,) = report["instructions"]
    assert row["added"] == 12_000.0
    assert row["ratio"] == pytest.approx(1.03)
    assert row["instructions_per_us"] == 2_000.0
    shares = {part: value["instructions"] for part, value in row["attribution"].items()}
    assert shares == {
        "_process_response": 3_000.0,
        "_select_server": 2_500.0,
        "_retry_internal": 5_500.0,
        "rest": 1_000.0,
    }
    assert row["attribution"]["_retry_internal"]["us"] == 2.75
    with pytest.raises(ValueError, match="expected at least 15 dumps"):
        counts_from_dumps(_totals(per_op)[:10], ["find_one"], 100, 400)


def test_the_instruction_page_shows_ratio_goal_and_attribution(tmp_path: Path) -> None:
    """The page's overhead section of an instruction run: the ratio table with the goal of
    each operation (1.03 for a transaction) and the attribution table; the history ledger's
    line of such a run gives the instruction ratios."""
    per_op = dict.fromkeys(INSTRUCTION_VARIANTS, 100_000.0)
    per_op["enabled"] = 102_000.0
    counts = counts_from_dumps(_totals(per_op), ["find_one"], 100, 400)
    counts += counts_from_dumps(_totals(per_op), ["transaction"], 100, 400)
    section = instruction_report(
        counts,
        {"find_one": 50.0, "transaction": 50.0},
        preset="current",
        pymongo="4.20.1",
        wrappers="positional",
    )
    report = {
        "machine": {
            "date": "2026-12-08",
            "cpu_count": 2,
            "platform": "Linux",
            "python": "3.11.7",
            "pymongo": "4.20.1",
            "pymongo_c_extensions": True,
            "motor": None,
            "backpressure": "0.1.0",
        },
        "config": {"server": "embedded replica set, 3 members, subprocess"},
        "overhead": section,
    }
    page = render_markdown(report)
    folder = tmp_path / "overhead"
    folder.mkdir()
    (folder / "pymongo-4.20-instructions-run1.json").write_text(json.dumps(report), "utf-8")
    line = ledger_line(tmp_path, "overhead/pymongo-4.20-instructions-run1.json")
    assert line.startswith("| `overhead/pymongo-4.20-instructions` | 1 |")
    assert "find_one: 1.0200 x stock's instructions" in line
    assert "| find_one | 100,000 | 102,000 | +2,000 | 1.0200 | <= 1.01 | NOT met |" in page
    assert "| transaction | 100,000 | 102,000 | +2,000 | 1.0200 | <= 1.03 | met |" in page
    assert (
        "| find_one | +2,000 (+1.00 µs) | +0 (+0.00 µs) | +0 (+0.00 µs) | +0 (+0.00 µs) |" in page
    )


def test_instructions_without_valgrind_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without valgrind on the PATH, ``--instructions`` exits 2 naming the flag."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        main(["--instructions", "--output", str(tmp_path)])
    assert exited.value.code == 2
    assert "argument --instructions: valgrind is not installed" in capsys.readouterr().err
    with pytest.raises(ValgrindMissingError, match="--instructions needs valgrind"):
        measure_instructions("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=1")


def test_instruction_ops_must_be_low_then_high(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--instruction-ops`` takes LOW,HIGH with LOW < HIGH."""
    with pytest.raises(SystemExit) as exited:
        main(["--instructions", "--instruction-ops", "400,100"])
    assert exited.value.code == 2
    assert "argument --instruction-ops: expected LOW,HIGH" in capsys.readouterr().err
    assert build_parser().parse_args(["--instructions"]).instruction_ops == (100, 400)


@pytest.mark.slow
def test_a_real_instruction_count(replicaset_server: EmbeddedServer) -> None:
    """Under callgrind, find_one costs a few hundred thousand instructions on either client,
    and the enabled client's share is within a few percent of stock's."""
    require_tool("valgrind", "valgrind")
    report = measure_instructions(
        replicaset_server.uri, operations=["find_one"], low_ops=10, high_ops=30, warmup=10
    )
    (row,) = report["instructions"]
    assert 100_000 < row["stock"] < 5_000_000
    assert 0.95 < row["ratio"] < 1.2
    assert row["instructions_per_us"] > 0
