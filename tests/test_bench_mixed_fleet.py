"""The mixed-fleet benchmark: real processes, an arm per process, each half reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import backpressure
from backpressure.bench.fleet import QUICK, competed_seconds
from backpressure.bench.goals import run_numbers
from backpressure.bench.mixed_fleet import (
    Half,
    MixedRun,
    main,
    mixed_report,
    render,
    render_mixed_report,
    run_mixed,
    upgraded_arms,
)
from backpressure.testing import EmbeddedServer
from backpressure.workload.arms import ARM_KEY, STOCK
from backpressure.workload.report import machine_info

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "adaptive-default"


def test_a_quick_mixed_fleet_reports_each_half(replicaset_server: EmbeddedServer) -> None:
    """2 processes x 2 threads, one on stock pymongo and one on ``current``: each half's
    figures come from its own processes, and the table shows the stock half's row first."""
    run = run_mixed(replicaset_server, 1, "current", QUICK)
    assert (run.stock.arm, run.upgraded.arm) == (STOCK, "current")
    assert run.stock.processes == run.upgraded.processes == 1
    for half in (run.stock, run.upgraded):
        assert half.operations > 0
        assert half.successes + half.errors == half.operations
    assert run.server_received >= run.stock.operations + run.upgraded.operations
    assert run.stock.competed_s is None  # neither half paces
    assert run.upgraded.competed_s is None
    assert "Seconds competing" not in render([(1, run)], QUICK.processes)
    rows = render([(1, run)], QUICK.processes).splitlines()[2:]
    assert [row.split("|")[2].strip() for row in rows] == ["stock pymongo", "default (current)"]
    with pytest.raises(ValueError, match=r"stock must be in 1\.\.1"):
        run_mixed(replicaset_server, 2, "current", QUICK)


def test_the_goal_needs_both_the_share_and_the_error_rate() -> None:
    """Met at >= 95 % of a stock process's successes with no higher error rate, else missed."""
    stock = Half(STOCK, 4, 1000, 300, 700)
    assert MixedRun(stock, Half("adaptive", 4, 900, 200, 700), 0).met
    assert not MixedRun(stock, Half("adaptive", 4, 800, 200, 600), 0).met  # 86 %
    assert not MixedRun(stock, Half("adaptive", 4, 1100, 400, 700), 0).met  # 36 % errors
    assert MixedRun(stock, Half("adaptive", 4, 900, 200, 700), 0).share == pytest.approx(1.0)


def test_the_default_presets_runs_come_first_and_unknown_names_are_usage_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--arms`` lists the upgraded arms; the default preset's runs come first, a name
    given twice runs once, and a name that is not one of this package's arms is a usage error
    naming it."""
    assert upgraded_arms("adaptive,current") == ["current", "adaptive"]
    assert upgraded_arms("draft, adaptive,draft") == ["draft", "adaptive"]
    for bad in ("", "bogus", STOCK):
        with pytest.raises(ValueError, match="--arms"):
            upgraded_arms(bad)
    with pytest.raises(SystemExit) as exit_info:
        main(["--arms", "adaptive,bogus"])
    assert exit_info.value.code == 2
    assert "'bogus' is not one of this package's arms" in capsys.readouterr().err


def test_the_page_is_rendered_from_the_raw_data_with_the_run_line() -> None:
    """The JSON keeps each run's stock share and both halves; the page is the run's line, then
    the table the runs give, the default's runs first as they were run."""
    stock = Half(STOCK, 1, 100, 10, 90)
    runs = [
        (1, MixedRun(stock, Half("current", 7, 700, 70, 630), 900)),
        (1, MixedRun(stock, Half("adaptive", 7, 650, 50, 600), 850)),
    ]
    info = machine_info()
    data = mixed_report(runs, QUICK, info, [1.0, 2.0], 12.5, "abc1234")
    assert [entry["stock_processes"] for entry in data["runs"]] == [1, 1]
    assert data["runs"][1]["upgraded"][ARM_KEY] == "adaptive"
    page = render_mixed_report(data)
    line, table = page.split("\n\n", 1)
    assert "abc1234" in line
    assert table == render(runs, QUICK.processes)


def test_a_smaller_burst_allowance_is_recorded_and_said() -> None:
    """``--burst-seconds`` goes into the fleet plan; the JSON keeps it, and the page says it
    when it is not the plan's 1 s (a page of an older JSON, without it, says nothing)."""
    from dataclasses import replace

    stock = Half(STOCK, 1, 100, 10, 90)
    runs = [(1, MixedRun(stock, Half("current", 7, 700, 70, 630), 900))]
    data = mixed_report(runs, replace(QUICK, burst_seconds=0.25), {}, [1.0], 1.0, "abc1234")
    assert data["burst_seconds"] == 0.25
    page = render_mixed_report({**data, "machine": machine_info()})
    assert (
        "The server's bucket holds 0.25 s of its rate (`--burst-seconds`; 1 s otherwise)." in page
    )
    usual = mixed_report(runs, QUICK, machine_info(), [1.0], 1.0, "abc1234")
    assert "bucket" not in render_mixed_report(usual)
    del usual["burst_seconds"]
    assert "bucket" not in render_mixed_report(usual)
    with pytest.raises(SystemExit) as exit_info:
        main(["--burst-seconds", "0"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("stem", ["mixed-fleet-burst0.25-run1"])
def test_the_committed_burst_page_is_the_rendering_of_its_raw_data(stem: str) -> None:
    """The mixed fleet run at a smaller bucket: its page is its JSON's, and says the bucket."""
    data = json.loads((RESULTS / f"{stem}.json").read_text(encoding="utf-8"))
    page = (RESULTS / f"{stem}.md").read_text(encoding="utf-8")
    assert page == render_mixed_report(data)
    assert data["burst_seconds"] < 1.0
    assert "The server's bucket holds" in page


@pytest.mark.parametrize(
    "run", [n for n in run_numbers(RESULTS, "mixed-fleet-run") if n >= 4]
)  # runs 1-3 are in an earlier format (a bare list of runs)
def test_the_committed_mixed_fleet_page_is_the_rendering_of_its_raw_data(run: int) -> None:
    """``mixed-fleet-run<N>.md`` is what ``render_mixed_report`` makes of its JSON, and the
    default's runs come before ``adaptive``'s."""
    folder = Path(__file__).resolve().parents[1] / "bench" / "results" / "adaptive-default"
    data = json.loads((folder / f"mixed-fleet-run{run}.json").read_text(encoding="utf-8"))
    page = (folder / f"mixed-fleet-run{run}.md").read_text(encoding="utf-8")
    assert page == render_mixed_report(data)
    upgraded = [run["upgraded"][ARM_KEY] for run in data["runs"]]
    assert upgraded == sorted(upgraded, key=lambda name: name != "current")
    assert upgraded[0] == "current"
    assert "adaptive" in upgraded


def test_competing_seconds_come_from_the_pacers_of_an_adaptive_client(
    replicaset_server: EmbeddedServer,
) -> None:
    """A fleet process reports how long its pacers competed: 0.0 for an adaptive client that
    never did, None for clients without pacers (stock, or a preset that does not pace)."""
    import pymongo

    with backpressure.MongoClient(replicaset_server.uri, backpressure="adaptive") as client:
        client.db.c.insert_one({"x": 1})
        assert competed_seconds(client) == 0.0
    with backpressure.MongoClient(replicaset_server.uri, backpressure="current") as client:
        assert competed_seconds(client) is None
    with pymongo.MongoClient(replicaset_server.uri) as plain:
        assert competed_seconds(plain) is None


def test_the_page_names_the_seconds_each_upgraded_half_competed() -> None:
    """With the count recorded, a line after the table gives each upgraded half's competing
    seconds per run; halves that do not pace are left out, and old runs render as before."""
    stock = Half(STOCK, 1, 100, 10, 90)
    runs = [
        (1, MixedRun(stock, Half("current", 7, 700, 70, 630), 900)),
        (1, MixedRun(stock, Half("adaptive", 7, 650, 50, 600, 12.25), 850)),
    ]
    page = render(runs, 8)
    assert page.endswith(
        "Seconds competing (the neighbour test's mode), summed over the upgraded half's "
        "processes: adaptive at 1 of 8: 12.2.\n"
    )
