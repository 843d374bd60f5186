"""The hotspot benchmark: one hot server of several, real processes, every arm beside stock."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

import pytest

from backpressure.bench import main as bench_main
from backpressure.bench.hotspot import (
    COOL,
    COOL_GOALS,
    HOT_GOALS,
    QUICK_HOTSPOT,
    ROLLOUT_GOALS,
    ROLLOUT_ROUTER,
    ROUTER,
    SECONDARY,
    HotspotPlan,
    Load,
    Row,
    cool_oracle,
    cool_windows,
    hotspot_arms,
    hotspot_report,
    hotspot_section,
    judge,
    main,
    render_chart,
    render_hotspot_report,
    run_hotspot,
)
from backpressure.workload.arms import NO_ROUTE_AROUND, STOCK, default_policy_name
from backpressure.workload.report import machine_info


def _check_counts(row: Row) -> None:
    """The figures of one row add up."""
    assert row.operations > 0
    assert 0 <= row.errors <= row.operations
    assert sum(row.per_process_successes) == row.successes
    assert sum(row.success_bins) == row.successes
    assert len(row.per_process_successes) == row.processes
    assert sum(row.error_kinds.values()) == row.errors
    assert 0 < row.first_attempts <= row.operations
    assert 0 <= row.first_to_hot <= row.first_attempts
    assert row.attempts >= row.successes  # every success reached a server
    if row.kind != "half":
        assert 0 <= row.hot_received <= row.attempts
    if row.successes:
        assert row.p50_ms is not None
        assert row.p99_ms is not None
        assert 0 < row.p50_ms <= row.p99_ms


@pytest.mark.slow
def test_a_quick_run_of_the_router_shapes_reports_every_row() -> None:
    """Hot router, hot then cool and the router rollout at a few seconds each, the default and
    stock pymongo: every row's counts add up, the default's rows come first, stock pymongo
    sends the hot router a share of its first attempts, and the page renders."""
    arms = [STOCK, default_policy_name()]
    rows = run_hotspot(QUICK_HOTSPOT, [ROLLOUT_ROUTER, COOL, ROUTER], arms)
    assert [(r.shape, r.arm, r.kind) for r in rows] == [
        (ROUTER, default_policy_name(), "run"),
        (ROUTER, STOCK, "run"),
        (ROUTER, STOCK, "quiet"),
        (COOL, default_policy_name(), "run"),
        (COOL, STOCK, "run"),
        (ROLLOUT_ROUTER, STOCK, "half"),
        (ROLLOUT_ROUTER, default_policy_name(), "half"),
        (ROLLOUT_ROUTER, STOCK, "all-stock"),
    ]
    for row in rows:
        _check_counts(row)
    hot_stock = next(r for r in rows if r.shape == ROUTER and r.arm == STOCK)
    assert hot_stock.hot_first_share > 0
    assert hot_stock.hot_received > 0
    quiet = next(r for r in rows if r.kind == "quiet")
    assert quiet.errors == 0 or quiet.error_fraction < 0.05
    halves = [r for r in rows if r.kind == "half"]
    assert sum(r.processes for r in halves) == QUICK_HOTSPOT.processes
    alone = next(r for r in rows if r.kind == "all-stock")
    assert alone.per_process_successes == hot_stock.per_process_successes  # the same run
    data = hotspot_report(rows, QUICK_HOTSPOT, machine_info(), [0.5, 0.6], 30.0, "abc1234")
    data = json.loads(json.dumps(data))  # what the JSON file holds
    text = render_hotspot_report(data)
    assert "**physical limit**" in text
    assert text.count("Goals of the default:") == 3
    assert set(data["cool_oracle"]) == set(cool_windows(QUICK_HOTSPOT))
    section = hotspot_section(data).splitlines()
    assert section[0].startswith("| shape | default (")
    assert len(section) == 3  # the header, its rule and the hot router


def _row(
    shape: str,
    arm: str,
    kind: str = "run",
    *,
    operations: int = 1000,
    errors: int = 0,
    attempts: int = 1000,
    first_to_hot: int = 50,
    p99_ms: Optional[float] = 10.0,
    bins: tuple[int, ...] = (),
    processes: int = 4,
    bin_s: float = 0.1,
) -> Row:
    """A row with the figures the goals read."""
    successes = operations - errors
    return Row(
        shape=shape,
        arm=arm,
        kind=kind,
        processes=processes,
        operations=operations,
        errors=errors,
        not_sent=0,
        attempts=attempts,
        hot_received=first_to_hot,
        first_attempts=operations,
        first_to_hot=first_to_hot,
        p50_ms=1.0,
        p99_ms=p99_ms,
        per_process_successes=(successes,) + (0,) * (processes - 1),
        success_bins=bins or (successes,),
        error_kinds={"OperationFailure": errors} if errors else {},
        client_cpu_s=1.0,
        bin_s=bin_s,
    )


def test_the_goals_are_judged_against_stock_pymongo() -> None:
    """Hot shapes: 1.8x stock's successes, <= 1.02 attempts/op, p99 <= 25 ms, errors no higher,
    <= 10 % of first attempts to the hot server; a goal without its rows is not judged."""
    default = default_policy_name()
    stock = _row(ROUTER, STOCK, operations=500, errors=25, attempts=650, first_to_hot=170)
    good = _row(ROUTER, default, operations=1000, attempts=1010, first_to_hot=40)
    assert judge([good, stock], ROUTER, QUICK_HOTSPOT) == dict.fromkeys(HOT_GOALS, True)
    slow = _row(ROUTER, default, operations=800, attempts=900, first_to_hot=200, p99_ms=30.0)
    assert judge([slow, stock], ROUTER, QUICK_HOTSPOT) == {
        HOT_GOALS[0]: False,  # 800 < 1.8 x 475
        HOT_GOALS[1]: False,
        HOT_GOALS[2]: False,
        HOT_GOALS[3]: True,
        HOT_GOALS[4]: False,
    }
    assert judge([good], ROUTER, QUICK_HOTSPOT) == dict.fromkeys(HOT_GOALS)
    assert judge([], SECONDARY, QUICK_HOTSPOT) == dict.fromkeys(HOT_GOALS)


def test_the_rollout_and_hot_then_cool_goals() -> None:
    """Rollout: the stock half keeps 97 % of an all-stock process's successes and the default's
    half gets at least the stock half's; hot then cool: each window against stock's."""
    default = default_policy_name()
    alone = _row(ROLLOUT_ROUTER, STOCK, "all-stock", operations=1000, processes=4)
    stock = _row(ROLLOUT_ROUTER, STOCK, "half", operations=490, processes=2)
    mine = _row(ROLLOUT_ROUTER, default, "half", operations=600, processes=2)
    assert judge([stock, mine, alone], ROLLOUT_ROUTER, QUICK_HOTSPOT) == dict.fromkeys(
        ROLLOUT_GOALS, True
    )
    worse = _row(ROLLOUT_ROUTER, STOCK, "half", operations=480, processes=2)  # 96 %
    assert not judge([worse, mine, alone], ROLLOUT_ROUTER, QUICK_HOTSPOT)[ROLLOUT_GOALS[0]]
    plan = HotspotPlan(cool_hot_s=2.0, cool_after_s=5.0, bin_s=1.0)
    stock_bins = (10, 10, 20, 20, 20, 20, 20)
    cool_stock = _row(COOL, STOCK, operations=130, bins=stock_bins, bin_s=1.0)
    cool_mine = _row(COOL, default, operations=118, bins=(10, 11, 18, 20, 20, 20, 19), bin_s=1.0)
    windows = cool_windows(plan).values()
    assert [cool_mine.successes_between(*window) for window in windows] == [21, 18, 60]
    assert judge([cool_mine, cool_stock], COOL, plan) == dict(zip(COOL_GOALS, (True, True, True)))
    late = _row(COOL, default, operations=116, bins=(10, 10, 17, 20, 20, 20, 19), bin_s=1.0)
    assert judge([late, cool_stock], COOL, plan)[COOL_GOALS[1]] is False


def test_hot_then_cool_windows_and_oracle() -> None:
    """The windows follow the hot phase (cut at the end of the run), and the oracle admits no
    more than each window's arrivals, fewer while the hot router cannot keep up."""
    plan = HotspotPlan()
    assert cool_windows(plan) == {
        "hot": (0.0, 10.0),
        "first second after": (10.0, 11.0),
        "seconds 1-4 after": (11.0, 14.0),
    }
    short = HotspotPlan(cool_after_s=2.0)
    assert cool_windows(short)["seconds 1-4 after"] == (11.0, 12.0)
    oracle = cool_oracle(plan)
    assert oracle["first second after"] == 700
    assert oracle["seconds 1-4 after"] == 2100
    assert 6500 <= oracle["hot"] <= 7000  # 650/s, the buckets' burst and the 1 s deadline


def test_an_open_loop_spreads_its_arrivals_over_the_processes() -> None:
    """Every process gets an equal, interleaved share of the demand."""
    load = Load(
        threads=2,
        duration_s=1.0,
        deadline_s=1.0,
        think_s=0.0,
        read_fraction=0.5,
        read_preference=None,
        keys=10,
        bin_s=0.1,
        start_timeout_s=10.0,
        open_rate=5.0,
        processes=2,
    )
    first, second = load.arrivals(0), load.arrivals(1)
    assert first == pytest.approx([0.05, 0.25, 0.45, 0.65, 0.85])
    assert second == pytest.approx([0.15, 0.35, 0.55, 0.75, 0.95])
    assert dataclasses.replace(load, open_rate=0.0).arrivals(0) == []


def test_the_arms_and_the_plan_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    """The default's arm comes first; unknown arms, shapes and bad numbers are refused,
    on the command line as usage errors naming the flag."""
    assert hotspot_arms([STOCK, "adaptive", default_policy_name()])[0] == default_policy_name()
    assert NO_ROUTE_AROUND in hotspot_arms()
    with pytest.raises(ValueError, match="unknown arms"):
        hotspot_arms(["bogus"])
    with pytest.raises(ValueError, match="unknown shapes"):
        run_hotspot(QUICK_HOTSPOT, ["bogus"])
    with pytest.raises(ValueError, match="routers"):
        HotspotPlan(routers=1)
    with pytest.raises(ValueError, match="bin_s"):
        HotspotPlan(bin_s=0.3)
    for argv in (["--shapes", "bogus"], ["--read-fraction", "2"], ["--arms", "nope"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
    assert "argument --arms" in capsys.readouterr().err


def _data() -> dict[str, Any]:
    """The raw data of an invented run of every arm in the two hot shapes."""
    default = default_policy_name()
    rows = []
    for shape in (ROUTER, SECONDARY):
        rows += [
            _row(shape, STOCK, operations=600, errors=30, attempts=800, first_to_hot=200),
            _row(shape, default, operations=1200, attempts=1210, first_to_hot=40),
            _row(shape, "adaptive", operations=1150, attempts=1160, first_to_hot=45),
            _row(shape, NO_ROUTE_AROUND, operations=610, attempts=790, first_to_hot=210),
            _row(shape, STOCK, "quiet", operations=1300, attempts=1300, first_to_hot=430),
        ]
    return json.loads(
        json.dumps(hotspot_report(rows, HotspotPlan(), machine_info(), [0.5, 0.6], 1.0, "-"))
    )


def test_the_page_puts_the_default_first_and_the_limit_last(tmp_path: Path) -> None:
    """Each hot table opens with the default's row and closes with the physical limit; the
    section generator prints the summary from a results file."""
    data = _data()
    text = render_hotspot_report(data)
    for title in ("## Hot router", "## Hot secondary"):
        table = text[text.index(title) :].split("\n\n")[1].splitlines()
        assert table[2].startswith(f"| default ({default_policy_name()}) |")
        assert table[-1].startswith("| **physical limit** | <= 1,300 | 0 | 1.000 |")
    path = tmp_path / "hotspot.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert bench_main(["hotspot", "--section", str(path)]) == 0


def test_the_chart_draws_every_shape(tmp_path: Path) -> None:
    """One PNG with a panel per shape and the first attempts' bars."""
    pytest.importorskip("matplotlib")
    path = tmp_path / "hotspot.png"
    render_chart(_data(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
