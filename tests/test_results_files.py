"""The committed benchmark results: every table is what the benchmark renders from its raw data
(none is edited by hand), and every table that compares policies shows the default's row first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backpressure.bench import render_markdown
from backpressure.workload.policies import default_policy_name

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


def test_the_sim_agreement_table_is_generated_from_the_fleet_results() -> None:
    """``sim-fleet.md``'s agreement table is what ``bench.agreement --fleet`` prints for the
    committed ``fleet.json`` (the simulator is deterministic for a seed)."""
    pytest.importorskip("simpy")
    from backpressure.bench.agreement import fleet_agreement_markdown

    report = json.loads((RESULTS / "fleet.json").read_text(encoding="utf-8"))
    table = fleet_agreement_markdown(report, seed=1)
    assert table in (RESULTS / "sim-fleet.md").read_text(encoding="utf-8")


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
