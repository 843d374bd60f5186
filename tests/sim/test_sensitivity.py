"""The sensitivity sweep: competing spells among polite peers, with one pacing or server option
varied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("simpy")

from backpressure.sim.arms import resolve
from backpressure.sim.engine import simulate
from backpressure.sim.scenarios import mixed_fleet
from backpressure.sim.sensitivity import (
    FLEETS,
    fleet_scenario,
    load_rows,
    main,
    render,
    render_markdown,
    run_sensitivity,
)

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "adaptive-default"


def test_a_run_records_each_clients_competing_spells() -> None:
    """Next to 7 stock processes the adaptive one competes (seed 1): its spells and seconds are
    recorded; the stock processes have no pacing, so theirs are 0."""
    data = simulate(mixed_fleet(7), resolve("adaptive"), 1)
    assert len(data.client_competing_spells) == len(data.client_successes) == 8
    assert data.client_competing_spells[:7] == [0] * 7
    assert data.client_competed_s[:7] == [0.0] * 7
    assert data.client_competing_spells[7] >= 1
    assert 0.0 < data.client_competed_s[7] <= 31.0


def test_the_default_row_comes_first_and_each_value_gets_a_row() -> None:
    """One fleet, one seed, two values: the default's row (no pacing, nothing competes), then
    ``adaptive`` at each value, each with its figures over the seeds."""
    rows = run_sensitivity(["4x16"], "adaptive_quiet", (1.0, 1.2), (1,), jobs=1)
    assert [(row.arm, row.option, row.value) for row in rows] == [
        ("current", None, None),
        ("adaptive", "adaptive_quiet", 1.0),
        ("adaptive", "adaptive_quiet", 1.2),
    ]
    current, *adaptive = rows
    assert current.competing_runs == current.spells == 0
    assert current.errors > 0.2  # stock's loop in an overloaded fleet
    for row in adaptive:
        assert row.runs == 1
        assert 0.0 <= row.errors < current.errors
        assert 1.0 <= row.attempts_per_op < current.attempts_per_op
        assert 0.0 < row.jain_min <= row.jain_mean <= 1.0
    table = render(rows).splitlines()
    assert [line.split("|")[2].strip() for line in table[2:]] == ["current", "adaptive", "adaptive"]


def test_a_server_option_changes_every_arms_fleet() -> None:
    """``burst_seconds`` sets every limited member's bucket (the fleets' own is 1 s) and changes
    the fleet for both arms: each value gets the default's row, then ``adaptive``'s."""
    assert {
        server.limiter.burst_seconds for server in fleet_scenario("8x8").servers if server.limiter
    } == {1.0}
    changed = fleet_scenario("8x8", "burst_seconds", 0.25)
    limiters = [server.limiter for server in changed.servers if server.limiter is not None]
    assert limiters
    assert {limiter.burst_seconds for limiter in limiters} == {0.25}
    assert [limiter.changes for limiter in limiters] == [
        server.limiter.changes for server in fleet_scenario("8x8").servers if server.limiter
    ]
    rows = run_sensitivity(["4x16"], "burst_seconds", (0.25, 1.0), (1,), jobs=1)
    assert [(row.arm, row.option, row.value) for row in rows] == [
        ("current", "burst_seconds", 0.25),
        ("adaptive", "burst_seconds", 0.25),
        ("current", "burst_seconds", 1.0),
        ("adaptive", "burst_seconds", 1.0),
    ]
    small, large = rows[0], rows[2]
    assert small.errors != large.errors  # the server changed for the default too
    assert rows[1].errors < small.errors
    assert rows[3].errors < large.errors
    page = render_markdown(rows, (1,), "x")
    assert page.startswith("# Simulated all-adaptive fleets with one server option varied")
    assert "`burst_seconds=0.25`" in render(rows)


def test_bad_options_values_and_fleets_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """A value outside the option's range is refused naming the option and the range; so is an
    unknown fleet; nothing runs."""
    for argv, message in (
        (["--values", "0.01"], "adaptive_quiet must be a number in 0.05..60, got 0.01"),
        (["--option", "adaptive_decrease", "--values", "1.5"], "adaptive_decrease"),
        (["--fleet", "8x9"], "unknown 8x9"),
        (["--values", "-1"], "must be > 0"),
        (["--option", "burst_seconds", "--values", "0"], "must be > 0"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown fleet"):
        run_sensitivity(["8x9"])
    with pytest.raises(ValueError, match="unknown option"):
        run_sensitivity(option="adaptive_min_rate")


@pytest.mark.parametrize(
    ("page_name", "option"),
    [("quiet", "adaptive_quiet"), ("increase", "adaptive_increase"), ("burst", "burst_seconds")],
)
def test_the_committed_pages_render_from_their_json(page_name: str, option: str) -> None:
    """Each committed page is its JSON's table, over seeds 1-24, every fleet with its default row
    first (a server option's: at every value)."""
    rows = load_rows(json.loads((RESULTS / f"sim-sensitivity-{page_name}.json").read_text("utf-8")))
    page = (RESULTS / f"sim-sensitivity-{page_name}.md").read_text("utf-8")
    assert render(rows) in page
    assert page.startswith(render_markdown(rows, range(1, 25), "x").split("`x`")[0])
    for fleet in FLEETS:
        fleet_rows = [row for row in rows if row.fleet == fleet]
        assert fleet_rows[0].arm == "current"
        assert {row.runs for row in fleet_rows} == {24}
        if option.startswith("adaptive_"):
            assert all(row.option == option for row in fleet_rows[1:])
        else:
            assert [row.arm for row in fleet_rows] == ["current", "adaptive"] * (
                len(fleet_rows) // 2
            )
            assert all(row.option == option for row in fleet_rows)
