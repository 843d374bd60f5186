"""The demo end to end with tiny parameters, and the pure pieces of the workload driver."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from backpressure.bench import DEFAULT_ARMS
from backpressure.bench.fleet import FleetPlan, FleetRun, PhaseShare, default_policy_name
from backpressure.demo import (
    ARRIVALS,
    DEMO_ARMS,
    FEWEST,
    SCENARIOS,
    TABLE_HEADERS,
    TABLE_WIDTH,
    build_parser,
    fewest_errors,
    main,
    result_rows,
    run_demo,
)
from backpressure.demo.chart import PhaseSpan, fleet_series, phase_load, phase_spans
from backpressure.demo.fleet import (
    FLEET_HEADERS,
    PHYSICAL_LIMIT,
    fleet_plan,
    fleet_rows,
    physical_limit,
)
from backpressure.testing import EmbeddedServer
from backpressure.workload import Phase, PhaseResult, RunResult, WorkloadConfig
from backpressure.workload.arms import ARMS_KEY
from backpressure.workload.driver import _operations, _schedule, received_commands
from backpressure.workload.metrics import amplification, bucket_counts, rate_per_second
from backpressure.workload.report import format_table


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


PHASES = [
    Phase("steady", 0.4, 2.0),
    Phase("burst", 2.0, 2.0),
    Phase("recovery", 0.4, 2.0),
    Phase("overload", 5.0, 3.0),
]


def _result(arm: str, scale: int, timeline: Optional[dict[str, list[Any]]] = None) -> RunResult:
    """A RunResult with every count ``scale`` times a small run's (for table layout tests)."""
    phases = [
        PhaseResult(
            name=p.name,
            load=p.load,
            start=0.0,
            duration=p.duration,
            offered=800 * scale,
            issued=700 * scale,
            skipped=100 * scale,
            succeeded=300 * scale,
            failed=400 * scale,
            completed_ok=300 * scale,
            goodput=150.0 * scale,
            latency_p50_ms=1234.5,
            latency_p99_ms=98765.4,
        )
        for p in PHASES
    ]
    return RunResult(
        arm=arm,
        description="",
        integration="",
        capacity=200.0,
        duration=9.0,
        offered=4120 * scale,
        issued=4000 * scale,
        skipped=120 * scale,
        successes=1800 * scale,
        errors=2200 * scale,
        error_types={},
        server_received=12345 * scale,
        server_rejected=0,
        client_attempts=12345 * scale,
        amplification=None,
        attempts_per_issued=None,
        goodput=190.0 * scale,
        latency_p50_ms=1234.5,
        latency_p99_ms=98765.4,
        refused=543 * scale,
        phases=phases,
        timeline=timeline or {"t": [0.0, 0.5], "attempts": [100, 100]},
        never_sent=2000 * scale,
    )


def test_default_arms_are_the_overload_bench_ones() -> None:
    """The demo compares the arms the overload bench compares, adaptive included."""
    assert DEMO_ARMS == DEFAULT_ARMS
    assert "adaptive" in DEMO_ARMS
    assert build_parser().parse_args([]).arms == list(DEMO_ARMS)


@pytest.mark.parametrize("scale", [1, 100])
def test_table_fits_the_width_with_large_figures(scale: int) -> None:
    """Every line of the table fits in TABLE_WIDTH columns, even with six-digit counts."""
    names = ["no-retries", "hand-written", "pymongo-native", "current", "draft", "adaptive"]
    results = [_result(name, scale) for name in names]
    fewest = {"steady": 0, "burst": 1 * scale, "overload": 2000 * scale, "run": 2161 * scale}
    rows = result_rows(results, PHASES, fewest)
    table = format_table(TABLE_HEADERS, rows)
    assert max(len(line) for line in table.splitlines()) <= TABLE_WIDTH
    assert len(rows) == len(names) + 2
    burst = TABLE_HEADERS.index("burst lost")
    assert [rows[-2][0], rows[-2][burst]] == [FEWEST, f"{1 * scale:,}"]
    assert [rows[-1][0], rows[-1][burst]] == [ARRIVALS, f"{800 * scale:,}"]
    assert rows[0][burst] == f"{500 * scale:,}"  # failed + skipped among the burst's arrivals
    assert rows[0][TABLE_HEADERS.index("att/op")] == f"{12345 / 4120:.2f}"
    assert all(len(row) == len(TABLE_HEADERS) for row in rows)


def test_phase_spans_lay_phases_end_to_end_and_shade_every_other() -> None:
    """Each phase gets its span from the run's start, a label with its load, alternate shading."""
    spans = phase_spans(PHASES)
    assert [(s.name, s.start, s.end) for s in spans] == [
        ("steady", 0.0, 2.0),
        ("burst", 2.0, 4.0),
        ("recovery", 4.0, 6.0),
        ("overload", 6.0, 9.0),
    ]
    assert [s.shaded for s in spans] == [False, True, False, True]
    assert spans[3].label == "overload\n5\u00d7C"
    assert spans[1].load == 2.0


def test_phase_load_is_attempts_per_second_over_capacity() -> None:
    """Buckets inside a phase count fully, buckets straddling its edge in proportion."""
    timeline: dict[str, list[Any]] = {"t": [0.0, 1.0, 2.0, 3.0], "attempts": [100, 400, 600, 50]}
    result = _result("x", 1, timeline)
    assert phase_load(result, PhaseSpan("a", 1.0, 1.0, 3.0, "", False), 200.0) == 2.5
    # half of bucket [0, 1) and half of bucket [1, 2): (50 + 200) / 1 s / C
    assert phase_load(result, PhaseSpan("b", 1.0, 0.5, 1.5, "", False), 200.0) == 1.25


def test_fewest_errors_per_phase_and_for_the_run() -> None:
    """A calm phase loses nothing; an overload loses what the limiter cannot admit in time.

    C = 10/s with a 10-token bucket, each operation allowed 1 s: 100 arrivals in 2 s from t = 2
    can use the full bucket plus 10 tokens/s until the last deadline (3.99 + 1 s), 39 in all.
    """
    phases = [Phase("calm", 0.5, 2.0), Phase("overload", 5.0, 2.0)]
    config = WorkloadConfig(capacity=10.0, burst_seconds=1.0, allowed_wait=1.0)
    arrivals = [(j + 0.5) / 5.0 for j in range(10)] + [2.0 + (j + 0.5) / 50.0 for j in range(100)]
    fewest = fewest_errors(arrivals, phases, config)
    assert fewest == {"calm": 0, "overload": 61, "run": 61}
    assert fewest_errors([], phases, config) == {"calm": 0, "overload": 0, "run": 0}


@pytest.mark.slow
def test_demo_end_to_end(replicaset_server: EmbeddedServer, tmp_path: Path) -> None:
    """A tiny demo run prints the table and writes a JSON report and a non-empty PNG."""
    args = build_parser().parse_args(
        [
            "--scenario", "single",
            "--capacity", "40",
            "--burst-seconds", "0.1",
            "--threads", "8",
            "--steady", "0.2",
            "--burst", "0.2",
            "--recovery", "0.2",
            "--overload", "0.3",
            "--arms", "no-retries,current,adaptive",
            "--output", str(tmp_path),
            "--progress", "off",
            "--seed", "3",
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
    assert set(data[ARMS_KEY]) == {"no-retries", "current", "adaptive"}
    assert data["config"]["seed"] == 3
    assert FEWEST in text
    assert set(data["fewest_errors"]) == {"steady", "burst", "recovery", "overload", "run"}
    assert (
        0 <= data["fewest_errors"]["run"] <= min(r["app_errors"] for r in data[ARMS_KEY].values())
    )
    assert set(data["server_load_x_capacity"]) == {"no-retries", "current", "adaptive"}
    assert [p["name"] for p in data["phases"]] == ["steady", "burst", "recovery", "overload"]
    for result in data[ARMS_KEY].values():
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
    assert data[ARMS_KEY]["no-retries"]["refused"] is None
    assert data[ARMS_KEY]["current"]["refused"] is None  # the current spec has no budget
    assert data[ARMS_KEY]["adaptive"]["local_waits"] is not None


def test_demo_draws_no_progress_bar_when_stderr_is_not_a_terminal(
    replicaset_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--progress auto`` (the default), a run whose stderr is not a terminal writes no
    progress bar."""
    args = build_parser().parse_args(
        [
            "--scenario", "single",
            "--capacity", "40",
            "--threads", "4",
            "--steady", "0.1",
            "--burst", "0.1",
            "--recovery", "0.1",
            "--overload", "0.1",
            "--arms", "no-retries",
            "--output", str(tmp_path),
        ]
    )  # fmt: skip
    out = io.StringIO()
    run_demo(args, server_factory=lambda: contextlib.nullcontext(replicaset_server), out=out)
    captured = capsys.readouterr()
    assert "demo:" not in captured.err
    assert "%|" not in captured.err
    assert "no-retries" in out.getvalue()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="scripts/requirements.py needs tomllib")
def test_make_demo_requirements_are_the_package_and_demo_extra_dependencies() -> None:
    """``make demo`` installs the package's dependencies and its demo extra's, from pyproject."""
    path = Path(__file__).resolve().parent.parent / "scripts" / "requirements.py"
    spec = importlib.util.spec_from_file_location("requirements_script", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import tomllib

    project = tomllib.loads(module.PYPROJECT.read_text())["project"]
    listed = module.requirements(["demo"])
    assert listed == list(
        dict.fromkeys([*project["dependencies"], *project["optional-dependencies"]["demo"]])
    )
    assert any(item.startswith("pymongo") for item in listed)
    assert any(item.startswith("matplotlib") for item in listed)
    with pytest.raises(ValueError, match="unknown extras"):
        module.requirements(["no-such-extra"])


# -- the fleet scenario (the default) ---------------------------------------------------------


def _fleet_run(arm: str, scale: int) -> FleetRun:
    """A fleet run with made-up figures, ``scale`` times larger."""
    return FleetRun(
        arm=arm,
        shape="4x8",
        operations=123_456 * scale,
        app_errors=65_432 * scale,
        server_received=234_567 * scale,
        per_process_successes=(100 * scale, 90 * scale, 80 * scale, 70 * scale),
        phases=(PhaseShare(100.0, 99.0), PhaseShare(50.0, 50.5), PhaseShare(150.0, 172.0)),
        p50_ms=1234.0,
        p99_ms=99_999.0,
        local_waits=5,
        local_refusals=123_456 * scale,
        error_kinds={},
        client_cpu_s=1.0,
        duration_s=3.0,
        floor_fraction=0.0,
        success_bins=(1, 2, 3, 4, 5, 6, 7),
        error_bins=(6, 0, 0, 0, 0, 3, 9),
        bin_s=0.5,
    )


def test_fleet_is_the_default_scenario_and_single_is_kept() -> None:
    """No option runs the fleet scenario; ``--scenario single`` the single-client one."""
    assert SCENARIOS == ("fleet", "single")
    assert build_parser().parse_args([]).scenario == "fleet"
    assert build_parser().parse_args(["--scenario", "single"]).scenario == "single"
    plan = fleet_plan(build_parser().parse_args([]))
    assert (plan.processes, plan.threads, plan.rates, plan.step_s, plan.deadline_s) == (
        4,
        8,
        (100.0, 50.0, 150.0),
        4.0,
        1.0,
    )
    quick = fleet_plan(build_parser().parse_args(["--quick"]))
    assert quick.duration_s < plan.duration_s


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--arms", "foo"], "argument --arms: unknown foo; choose from"),
        (["--arms", ","], "argument --arms: expected one or more of"),
        (["--capacity", "-1"], "argument --capacity: must be > 0, got -1"),
        (["--burst-seconds", "0"], "argument --burst-seconds: must be > 0, got 0"),
        (["--rates", "100,x"], "argument --rates: item 2: expected a number, got 'x'"),
        (["--rates", "0"], "argument --rates: item 1: must be > 0, got 0"),
        (["--processes", "0"], "argument --processes: must be >= 1, got 0"),
        (["--threads", "-4"], "argument --threads: must be >= 1, got -4"),
        (["--members", "0"], "argument --members: must be >= 1, got 0"),
        (["--step", "-1"], "argument --step: must be > 0, got -1"),
        (["--deadline", "nan"], "argument --deadline: expected a finite number, got 'nan'"),
        (["--settle", "-1"], "argument --settle: must be >= 0, got -1"),
        (["--settle", "4"], "argument --settle: must be less than --step (4)"),
        (["--steady", "0"], "argument --steady: must be > 0, got 0"),
        (["--burst", "0"], "argument --burst: must be > 0, got 0"),
        (["--recovery", "0"], "argument --recovery: must be > 0, got 0"),
        (["--overload", "0"], "argument --overload: must be > 0, got 0"),
        (["--steady-load", "-1"], "argument --steady-load: must be >= 0, got -1"),
        (["--burst-load", "-1"], "argument --burst-load: must be >= 0, got -1"),
        (["--overload-load", "-1"], "argument --overload-load: must be >= 0, got -1"),
        (["--bucket", "0"], "argument --bucket: must be > 0, got 0"),
        (["--read-fraction", "1.5"], "argument --read-fraction: must be in [0, 1], got 1.5"),
        (["--seed", "x"], "argument --seed: expected an integer, got 'x'"),
        (["--progress", "yes"], "argument --progress: invalid choice: 'yes'"),
        (["--no-progress"], "unrecognized arguments: --no-progress"),
    ],
)
def test_usage_errors_exit_2_and_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad value exits with status 2, the usage line and the flag's name, before any server
    starts (the fleet plan's cross-checks too)."""
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m backpressure.demo")
    assert f"error: {message}" in err


def test_progress_and_seed_are_accepted() -> None:
    """``--progress {auto,on,off}`` (default auto) and ``--seed N`` (default 1) parse."""
    parser = build_parser()
    assert (parser.parse_args([]).progress, parser.parse_args([]).seed) == ("auto", 1)
    args = parser.parse_args(["--scenario", "single", "--progress", "on", "--seed", "7"])
    assert (args.progress, args.seed) == ("on", 7)


def test_physical_limit_of_a_closed_loop() -> None:
    """N workers with deadline D against C ops/s lose nothing while N / C <= D, else 1 - C D / N."""
    assert (
        physical_limit(FleetPlan(processes=4, threads=8, rates=(100.0, 50.0)))["error_fraction"]
        == 0.0
    )
    limit = physical_limit(FleetPlan(processes=4, threads=25, rates=(200.0, 50.0)))
    assert limit["error_fraction_by_step"] == [0.0, 0.5]
    assert limit["error_fraction"] == 0.5
    assert limit["workers_over_capacity_s"] == [0.5, 2.0]


@pytest.mark.parametrize("scale", [1, 100])
def test_fleet_table_fits_the_width(scale: int) -> None:
    """The fleet table fits in TABLE_WIDTH columns with large figures; the limit comes last."""
    plan = FleetPlan(processes=4, threads=8, rates=(100.0, 50.0, 150.0), step_s=4.0)
    names = ["current", "no-retries", "pymongo-native", "draft", "adaptive", "hand-written"]
    rows = fleet_rows([_fleet_run(name, scale) for name in names], plan)
    table = format_table(FLEET_HEADERS, rows)
    assert max(len(line) for line in table.splitlines()) <= TABLE_WIDTH
    assert [row[0] for row in rows][-1] == PHYSICAL_LIMIT
    assert "stock pymongo" in [row[0] for row in rows]
    assert rows[0][FLEET_HEADERS.index("app errors")] == f"53.0% ({65_432 * scale:,})"
    assert rows[0][FLEET_HEADERS.index("goodput/C")] == "99/101/115%"
    assert rows[-1][FLEET_HEADERS.index("app errors")] == "0.0%"


def test_fleet_series_regroups_the_bins() -> None:
    """0.5 s bins regrouped 1 s wide: per-second rates; bins past the run's end are left out."""
    run = _fleet_run("x", 1)
    times, successes, errors = fleet_series(run, 1.0)
    assert times == [0.0, 1.0, 2.0]
    assert successes == [3.0, 7.0, 11.0]
    assert errors == [6.0, 0.0, 3.0]


@pytest.mark.slow
def test_fleet_demo_end_to_end(replicaset_server: EmbeddedServer, tmp_path: Path) -> None:
    """A quick fleet run with real client processes: the table, JSON and PNG hold what the
    processes and the servers counted, the default arm's row first."""
    arms = ["no-retries", "adaptive", "current"]
    args = build_parser().parse_args(
        [
            "--quick",
            "--arms",
            ",".join(arms),
            "--output",
            str(tmp_path),
            "--progress",
            "off",
        ]
    )
    out = io.StringIO()
    report = run_demo(
        args, server_factory=lambda: contextlib.nullcontext(replicaset_server), out=out
    )
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= TABLE_WIDTH
    assert all(header in text for header in FLEET_HEADERS)
    assert PHYSICAL_LIMIT in text
    data: dict[str, Any] = json.loads((tmp_path / "demo.json").read_text())
    assert data == json.loads(json.dumps(report, default=str))
    assert (tmp_path / "demo.png").stat().st_size > 0
    assert data["scenario"] == "fleet"
    default = default_policy_name()
    assert data["default_policy"] == default
    assert sorted(data[ARMS_KEY]) == sorted(arms)
    if default in arms:
        assert data[ARMS_KEY][0] == default
        assert text.index(f"default ({default})") < text.index("no-retries ")
    assert data["physical_limit"]["error_fraction"] == 0.0  # 4 workers, 30/s: 0.13 s < 1 s
    lines = text.splitlines()
    for name, run in data["runs"].items():
        assert run["operations"] > 0
        successes = sum(run["per_process_successes"])
        assert len(run["per_process_successes"]) == 2
        assert successes + run["app_errors"] == run["operations"]
        assert run["error_fraction"] == pytest.approx(run["app_errors"] / run["operations"])
        assert run["attempts_per_op"] == pytest.approx(run["server_received"] / run["operations"])
        assert 0 < sum(run["success_bins"]) <= successes
        assert sum(run["error_bins"]) <= run["app_errors"]
        assert len(run["phases"]) == 2
        row = next(line for line in lines if line.split("  ")[0].strip().endswith(
            name if name != default else f"({default})"
        ))  # fmt: skip
        assert f"{run['operations']:,}" in row
        assert f"({run['app_errors']:,})" in row
    assert (
        data["runs"]["no-retries"]["server_received"] <= data["runs"]["no-retries"]["operations"]
    )  # no retries: at most one attempt each
    assert data["runs"]["adaptive"]["local_refusals"] is not None
