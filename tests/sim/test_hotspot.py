"""The simulator's hot-server page: the committed page is what the simulator gives now, and
every goal of the default is met there."""

from __future__ import annotations

from pathlib import Path

from backpressure.sim.hotspot import SCENARIOS, goals_for, render, run_hotspot

PAGE = Path(__file__).resolve().parents[2] / "bench" / "results" / "sim-hotspot.md"


def test_the_committed_page_is_the_simulators_and_the_default_meets_its_goals() -> None:
    """Regenerated with seed 1 (virtual time: deterministic), the page is the committed one;
    a change to the retry rules or the server choice shows here until the page is rewritten
    (``python -m backpressure.sim.hotspot --seed 1 --md bench/results/sim-hotspot.md``)."""
    results = run_hotspot(1)
    assert list(results) == list(SCENARIOS)
    assert render(results, 1) == PAGE.read_text(encoding="utf-8")
    for name, result in results.items():
        goals = goals_for(name, result)
        assert goals
        assert [goal.name for goal in goals if not goal.met] == [], name
