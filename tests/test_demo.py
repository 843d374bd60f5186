"""The demo end to end with tiny parameters, and the pure pieces of the workload driver."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from backpressure.demo import TABLE_HEADERS, TABLE_WIDTH, build_parser, run_demo
from backpressure.testing import EmbeddedServer
from backpressure.workload import Phase, WorkloadConfig
from backpressure.workload.driver import _operations, _schedule, received_commands
from backpressure.workload.metrics import (
    amplification,
    bucket_counts,
    iqr,
    median,
    percentile,
    rate_per_second,
)
from backpressure.workload.report import format_table


def test_percentile_interpolates_linearly() -> None:
    """Percentiles interpolate between order statistics; empty input gives None."""
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 25) == pytest.approx(1.75)
    assert median([7.0]) == 7.0
    assert iqr(values) == pytest.approx(1.5)
    assert percentile([], 50) is None
    assert iqr([]) is None
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile(values, 101)


def test_amplification_and_rate() -> None:
    """Amplification is attempts per success (None without successes)."""
    assert amplification(30, 10) == 3.0
    assert amplification(5, 0) is None
    with pytest.raises(ValueError, match=">= 0"):
        amplification(-1, 1)
    assert rate_per_second(10, 2.0) == 5.0
    assert rate_per_second(10, 0.0) == 0.0


def test_bucket_counts() -> None:
    """Times fall into width-wide buckets; early ones are dropped, late ones clamp to the last."""
    counts = bucket_counts([9.0, 10.0, 10.5, 11.2, 12.9, 20.0], start=10.0, width=1.0, buckets=3)
    assert counts == [2, 1, 2]
    with pytest.raises(ValueError, match="width"):
        bucket_counts([], 0.0, 0.0, 1)
    with pytest.raises(ValueError, match="buckets"):
        bucket_counts([], 0.0, 1.0, 0)


def test_schedule_paces_each_phase() -> None:
    """Arrivals are evenly spaced at load x capacity inside each phase."""
    times, owners = _schedule([Phase("a", 0.5, 2.0), Phase("b", 2.0, 1.0)], capacity=10.0)
    assert owners.count(0) == 10
    assert owners.count(1) == 20
    assert times == sorted(times)
    assert all(0.0 <= t < 2.0 for t, o in zip(times, owners) if o == 0)
    assert all(2.0 <= t < 3.0 for t, o in zip(times, owners) if o == 1)


def test_operation_mix_is_seeded() -> None:
    """The operation mix is reproducible and roughly matches the read fraction."""
    config = WorkloadConfig(read_fraction=0.5, keys=10, seed=3)
    ops = _operations(2000, config)
    assert ops == _operations(2000, config)
    reads = sum(1 for kind, _ in ops if kind == 0)
    assert 800 < reads < 1200
    assert all(key < 10 for kind, key in ops if kind != 2)


def test_phase_and_config_validation() -> None:
    """Invalid phases and configurations are refused."""
    with pytest.raises(ValueError, match="duration"):
        Phase("x", 1.0, 0.0)
    with pytest.raises(ValueError, match="load"):
        Phase("x", -1.0, 1.0)
    with pytest.raises(ValueError, match="threads"):
        WorkloadConfig(threads=0)
    with pytest.raises(ValueError, match="allowed_wait"):
        WorkloadConfig(allowed_wait=0.0)


def test_received_commands_sums_workload_commands() -> None:
    """Only the workload's commands count as received attempts."""
    stats = {
        "commands": {"find": {"received": 3}, "insert": {"received": 2}, "hello": {"received": 9}}
    }
    assert received_commands(stats) == 5


def test_format_table() -> None:
    """Plain tables align columns; Markdown tables have a separator row."""
    text = format_table(["a", "bb"], [["x", "1"], ["yy", "22"]])
    assert text.splitlines()[0].startswith("a ")
    markdown = format_table(["a", "b"], [["1", "2"]], markdown=True)
    assert markdown.splitlines()[1] == "|---|---|"


def test_demo_end_to_end(replicaset_server: EmbeddedServer, tmp_path: Path) -> None:
    """A tiny demo run prints the table and writes a JSON report and a non-empty PNG."""
    args = build_parser().parse_args(
        [
            "--capacity", "40",
            "--burst-seconds", "0.1",
            "--threads", "8",
            "--steady", "0.2",
            "--burst", "0.2",
            "--recovery", "0.2",
            "--overload", "0.3",
            "--policies", "no-retries,current",
            "--output", str(tmp_path),
            "--no-progress",
        ]
    )  # fmt: skip
    out = io.StringIO()
    report = run_demo(
        args, server_factory=lambda: contextlib.nullcontext(replicaset_server), out=out
    )
    text = out.getvalue()
    assert all(header in text for header in TABLE_HEADERS)
    assert "chart:" in text
    assert max(len(line) for line in text.splitlines()) <= TABLE_WIDTH
    png = tmp_path / "demo.png"
    assert png.exists()
    assert png.stat().st_size > 0
    data: dict[str, Any] = json.loads((tmp_path / "demo.json").read_text())
    assert data == json.loads(json.dumps(report, default=str))
    assert set(data["policies"]) == {"no-retries", "current"}
    assert [p["name"] for p in data["phases"]] == ["steady", "burst", "recovery", "overload"]
    for result in data["policies"].values():
        assert result["offered"] == result["issued"] + result["skipped"]
        assert result["issued"] == result["successes"] + result["errors"]
        assert result["server_received"] >= result["successes"]
        assert result["client_attempts"] >= result["successes"]
        timeline = result["timeline"]
        lengths = {len(series) for series in timeline.values()}
        assert len(lengths) == 1
        assert sum(timeline["successes"]) == result["successes"]
        assert sum(timeline["arrived"]) == result["offered"]
        assert sum(timeline["skipped"]) == result["skipped"]
        assert sum(timeline["sent_by_arrival"]) == result["client_attempts"]
        assert result["app_errors"] == result["errors"] + result["skipped"]
        assert 0 <= result["never_sent"] <= result["errors"]
        assert result["loop"] == "open"
        assert result["allowed_wait"] == 1.0
        assert [p["name"] for p in result["phases"]] == ["steady", "burst", "recovery", "overload"]
        for phase in result["phases"]:
            assert phase["offered"] == phase["issued"] + phase["skipped"]
            assert phase["succeeded"] + phase["failed"] <= phase["issued"]
    assert data["policies"]["no-retries"]["refused"] is None
    assert data["policies"]["current"]["refused"] is None  # the current spec has no budget


def test_demo_draws_no_progress_bar_when_stdout_is_not_a_terminal(
    replicaset_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --no-progress, a run whose stdout is not a terminal writes no progress bar."""
    args = build_parser().parse_args(
        [
            "--capacity", "40",
            "--threads", "4",
            "--steady", "0.1",
            "--burst", "0.1",
            "--recovery", "0.1",
            "--overload", "0.1",
            "--policies", "no-retries",
            "--output", str(tmp_path),
        ]
    )  # fmt: skip
    out = io.StringIO()
    run_demo(args, server_factory=lambda: contextlib.nullcontext(replicaset_server), out=out)
    captured = capsys.readouterr()
    assert "demo:" not in captured.err
    assert "%|" not in captured.err
    assert "no-retries" in out.getvalue()
