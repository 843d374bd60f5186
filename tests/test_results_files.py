"""The committed benchmark results: every table is what the benchmark renders from its raw data
(none is edited by hand), and every table that compares policies shows the default's row first."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from backpressure.bench import render_markdown
from backpressure.workload.policies import default_policy_name, policy_label

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


@pytest.mark.parametrize("stem", ["latest", "overload", "fleet-run2"])
def test_a_results_page_is_the_rendering_of_its_raw_data(stem: str) -> None:
    """``<stem>.md`` is exactly what ``render_markdown`` makes of ``<stem>.json``."""
    report = json.loads((RESULTS / f"{stem}.json").read_text(encoding="utf-8"))
    assert (RESULTS / f"{stem}.md").read_text(encoding="utf-8") == render_markdown(report)


def test_the_fleet_page_tables_are_the_rendering_of_its_raw_data() -> None:
    """``fleet.md`` is a written preamble followed by the rendering of ``fleet.json`` (its title
    line replaced)."""
    report = json.loads((RESULTS / "fleet.json").read_text(encoding="utf-8"))
    rendered = render_markdown(report).split("\n", 1)[1]
    assert (RESULTS / "fleet.md").read_text(encoding="utf-8").endswith(rendered)


@pytest.mark.parametrize("stem", ["latest", "overload"])
def test_the_overload_table_shows_the_default_first_in_every_scenario(stem: str) -> None:
    """In the overload table, each scenario's first row is the default policy's."""
    text = (RESULTS / f"{stem}.md").read_text(encoding="utf-8")
    header = "| scenario | policy |"
    lines = text[text.index(header) :].splitlines()[2:]
    first: dict[str, str] = {}
    for line in lines:
        if not line.startswith("|"):
            break
        scenario, policy = (cell.strip() for cell in line.strip("|").split("|")[:2])
        first.setdefault(scenario, policy)
    assert len(first) >= 5
    assert set(first.values()) == {default_policy_name()}


def _fleet_runs() -> list[tuple[int, int]]:
    """(shape index, run index) of every run in the committed ``fleet.json``."""
    report = json.loads((RESULTS / "fleet.json").read_text(encoding="utf-8"))
    return [
        (shape, index)
        for shape, entry in enumerate(report["fleet"])
        for index in range(len(entry["runs"]))
    ]


def _agreement_table() -> list[str]:
    """The agreement table's lines in ``sim-fleet.md``: its header, then one row per run."""
    from backpressure.bench.agreement import fleet_agreement_markdown

    header = fleet_agreement_markdown({"fleet": []}).splitlines()  # no run: nothing simulated
    text = (RESULTS / "sim-fleet.md").read_text(encoding="utf-8")
    lines = text[text.index("\n".join(header)) :].splitlines()
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines))
    assert rows[: len(header)] == header
    return rows


def test_the_sim_agreement_table_has_a_row_per_fleet_run_in_order() -> None:
    """``sim-fleet.md``'s agreement table has one row per run of the committed ``fleet.json``,
    in its order (the default's first in each shape); each row is checked below."""
    pytest.importorskip("simpy")
    from backpressure.bench.fleet import FleetRun

    report = json.loads((RESULTS / "fleet.json").read_text(encoding="utf-8"))
    rows = _agreement_table()[2:]
    runs = [FleetRun.from_dict(run) for shape in report["fleet"] for run in shape["runs"]]
    assert [row.split("|")[1:3] for row in rows] == [
        [f" {run.shape} ", f" {policy_label(run.policy)} "] for run in runs
    ]


@pytest.mark.parametrize(("shape", "index"), _fleet_runs())
def test_the_sim_agreement_table_is_generated_from_the_fleet_results(
    shape: int, index: int
) -> None:
    """Each row of ``sim-fleet.md``'s agreement table is what ``bench.agreement --fleet`` prints
    for that run of the committed ``fleet.json`` (the simulator is deterministic for a seed, and
    each policy is simulated on its own). One run per test, so the simulations spread over the
    workers."""
    pytest.importorskip("simpy")
    from backpressure.bench.agreement import fleet_agreement_markdown

    report = json.loads((RESULTS / "fleet.json").read_text(encoding="utf-8"))
    entry = report["fleet"][shape]
    one = {**report, "fleet": [{**entry, "runs": [entry["runs"][index]]}]}
    table = fleet_agreement_markdown(one, seed=1).splitlines()
    rows = _agreement_table()
    assert table[:2] == rows[:2]
    position = 2 + _fleet_runs().index((shape, index))
    assert table[2:] == [rows[position]]


def test_the_hedging_page_is_the_rendering_of_its_raw_data() -> None:
    """``hedging.md`` is what ``bench.hedging.render_markdown`` makes of ``hedging.json``, and
    each scenario's first row is the default policy's."""
    from backpressure.bench.hedging import SCENARIOS
    from backpressure.bench.hedging import render_markdown as render_hedging

    report = json.loads((RESULTS / "hedging.json").read_text(encoding="utf-8"))
    assert (RESULTS / "hedging.md").read_text(encoding="utf-8") == render_hedging(report)
    firsts = [
        next(row["policy"] for row in report["rows"] if row["scenario"] == scenario)
        for scenario in SCENARIOS
    ]
    assert firsts == [f"default ({default_policy_name()}), no hedging"] * len(SCENARIOS)
