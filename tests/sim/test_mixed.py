"""Mixed fleets: an arm per client group, each half measured apart."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("simpy")

from backpressure.sim import run
from backpressure.sim.mixed import render, run_mixed
from backpressure.sim.model import ClientGroup, ClosedLoop
from backpressure.sim.scenarios import closed_fleet, mixed_fleet


def test_a_group_runs_the_arm_it_names() -> None:
    """A group naming ``no-retries`` sends one attempt per operation whatever the run's arm;
    without a name it runs the run's arm (``current`` retries)."""
    base = closed_fleet(2, 8, step_s=1.0, rates=(5.0, 5.0))
    (group,) = base.clients
    pinned = dataclasses.replace(base, clients=(dataclasses.replace(group, arm="no-retries"),))
    assert run(pinned, ["current"], seed=1).arms["current"].attempts_per_op == 1.0
    assert run(base, ["current"], seed=1).arms["current"].attempts_per_op > 1.5


def test_a_group_arm_must_be_a_name() -> None:
    """An empty or non-string arm is refused, naming the field."""
    for bad in ("", 3):
        with pytest.raises(ValueError, match=r"ClientGroup\.arm"):
            ClientGroup(1, ClosedLoop(1, 1.0), arm=bad)  # type: ignore[arg-type]


def test_the_mixed_fleet_splits_the_processes() -> None:
    """``mixed_fleet(3)``: 3 processes on ``current``, 5 on the run's arm."""
    shape = mixed_fleet(3)
    assert [(g.count, g.arm) for g in shape.clients] == [(3, "current"), (5, None)]
    with pytest.raises(ValueError, match=r"stock must be in 1\.\.7"):
        mixed_fleet(8)


@pytest.mark.slow
def test_each_half_is_reported_stock_first(capsys: pytest.CaptureFixture[str]) -> None:
    """Both halves' operations add up to the run's, and the stock half's row comes first.

    Stock retries on every pushback while ``adaptive`` holds its callers, so the halves differ.
    """
    result = run_mixed(4, seed=1)
    assert (result.stock.processes, result.upgraded.processes) == (4, 4)
    assert result.stock.arm == "current"
    assert result.upgraded.arm == "adaptive"
    assert result.stock.successes_per_process != result.upgraded.successes_per_process
    rows = render([result]).splitlines()[2:]
    assert [row.split("|")[2].strip() for row in rows] == ["current", "adaptive"]


def test_the_seeds_table_gives_each_share_its_mean_range_and_goal_count() -> None:
    """Over seeds, each stock share's row: the upgraded half's mean share of a stock process's
    successes, its range, the mean error gap and the runs that met the goal."""
    from backpressure.sim.mixed import HalfResult, MixedResult, render_seeds

    def result(upgraded: float, errors: int) -> MixedResult:
        stock = HalfResult("current", 4, 1000, 300, 700.0)
        return MixedResult(4, 8, stock, HalfResult("adaptive", 4, 1000, errors, upgraded), None)

    table = render_seeds([[result(700.0, 250)], [result(630.0, 350)]])
    row = table.splitlines()[2]
    assert row.split("|")[1:-1] == [
        " 4/8 ",
        " adaptive ",
        " 2 ",
        " 95% ",
        " 90%-100% ",
        " +0.0 points ",
        " 1 of 2 ",
    ]


def test_the_servers_burst_allowance_can_be_varied() -> None:
    """``burst_seconds`` changes the server's bucket for both halves (the benchmarks' 1 s
    otherwise), and the page's command and text say so; a value that is not positive is a usage
    error naming the option."""
    from backpressure.sim import mixed as mixed_module

    small = run_mixed(4, "current", seed=1, burst_seconds=0.25)
    usual = run_mixed(4, "current", seed=1)
    assert (small.stock.ops, small.stock.errors) != (usual.stock.ops, usual.stock.errors)
    page = mixed_module.render_markdown({"current": [[small]]}, [1], 0.25)
    assert "--arms current --burst-seconds 0.25 --seed 1 --seeds 1`" in page
    assert "The server's bucket holds 0.25 s of its rate" in page
    assert "--burst-seconds" not in mixed_module.render_markdown({"current": [[usual]]}, [1])
    with pytest.raises(SystemExit) as exit_info:
        mixed_module.main(["--burst-seconds", "0"])
    assert exit_info.value.code == 2
