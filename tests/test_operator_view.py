"""The operator view's run file: its summary is what its samples and log lines give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backpressure.demo.operator_view import (
    PACED_LINE,
    REOPENED_LINE,
    OperatorViewPlan,
    draw_operator_view,
    summarize,
    transition_lines,
)

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def test_the_committed_summary_is_computed_from_the_committed_samples() -> None:
    """No figure of ``operator-view.json``'s summary is edited by hand; the chart is there."""
    report = json.loads((RESULTS / "operator-view.json").read_text(encoding="utf-8"))
    plan = OperatorViewPlan(**report["plan"])
    assert report["summary"] == summarize(plan, report["samples"], report["log"])
    assert (RESULTS / "operator-view.png").stat().st_size > 10_000
    lines = transition_lines(report["log"])
    assert [str(line["message"]).startswith(PACED_LINE) for line in lines] == [True, False]


def test_summary_of_a_paced_then_reopened_server() -> None:
    """When the lines came, relative to the overload, and the extremes of the gauges."""
    plan = OperatorViewPlan(before_s=1.0, overload_s=2.0, after_s=2.0)
    samples = [
        {"t": 0.5, "succeeded": 10, "failed": 0},
        {
            "t": 1.5,
            "backpressure_pacing_rate_per_second": 250.0,
            "backpressure_pacing_waiting": 5.0,
            "backpressure_pacing_backlog_seconds": 0.02,
            "backpressure_pacing_pushbacks_total": 7.0,
            "succeeded": 20,
            "failed": 1,
        },
        {
            "t": 2.5,
            "backpressure_pacing_rate_per_second": 310.0,
            "backpressure_pacing_waiting": 2.0,
            "backpressure_pacing_pushbacks_total": 9.0,
            "backpressure_local_refusals_total": 1.0,
            "succeeded": 30,
            "failed": 1,
        },
    ]
    log = [
        {"t": 1.2, "level": "INFO", "message": "retrying insert after attempt 1"},
        {"t": 1.4, "level": "INFO", "message": PACED_LINE + "h:1 at 250.0/s: ..."},
        {"t": 4.5, "level": "INFO", "message": REOPENED_LINE + "h:1: ..."},
    ]
    assert summarize(plan, samples, log) == {
        "first_paced_s": 1.4,
        "last_reopened_s": 4.5,
        "paced_after_overload_start_s": 0.4,
        "reopened_after_overload_end_s": 1.5,
        "rate_above_demand_after_overload_end_s": None,
        "transition_lines": 2,
        "lowest_rate": 250.0,
        "highest_rate": 310.0,
        "most_waiting": 5.0,
        "longest_backlog_s": 0.02,
        "pushbacks": 9,
        "local_refusals": 1,
        "succeeded": 30,
        "failed": 1,
    }


@pytest.mark.slow
def test_the_chart_is_drawn_from_a_report(tmp_path: Path) -> None:
    """The committed report draws (the module's ``--chart-only`` path)."""
    report = json.loads((RESULTS / "operator-view.json").read_text(encoding="utf-8"))
    draw_operator_view(report, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("threads", 0, "threads must be 1..64"),
        ("capacity", 600, "capacity must be >= 1 and below demand"),
        ("overload_s", 0.0, "overload_s must be > 0 seconds"),
    ],
)
def test_plan_ranges(field: str, value: object, message: str) -> None:
    """A bad plan names the field and its range."""
    with pytest.raises(ValueError, match=message):
        OperatorViewPlan(**{field: value})  # type: ignore[arg-type]
