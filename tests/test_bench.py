"""The benchmarks' machinery: statistics, the work counter, goal evaluation, tiny end-to-end runs.

These tests check shapes and arithmetic, never speed: performance lives in ``make bench``.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import pymongo
import pytest

from backpressure.adapters import seams
from backpressure.bench import (
    _generic_md,
    build_parser,
    main,
    overhead_goals,
    render_markdown,
    run_bench,
)
from backpressure.bench.core_cost import measure_core_cost
from backpressure.bench.fleet import (
    FLEET_GOALS,
    QUICK,
    FleetPlan,
    FleetRun,
    fleet_arms,
    plan_from_dict,
    render_fleet_markdown,
    summarize,
)
from backpressure.bench.overhead import _settrace_counter, _Tally, bootstrap_ratio_ci, verdict
from backpressure.bench.overload import (
    BASELINE,
    OverloadPlan,
    ScenarioRun,
    closed_loop_floor,
    evaluate_goals,
    oracle_min_errors,
)
from backpressure.bench.transient import QUICK_TRANSIENT, TransientRun
from backpressure.core.backoff import backoff_ceiling
from backpressure.core.policy import DEFAULT_POLICY, DRAFT
from backpressure.testing import EmbeddedServer
from backpressure.workload import ARMS, WorkloadConfig
from backpressure.workload.arms import ARM_KEY
from backpressure.workload.driver import RunResult, run_closed_loop


def test_bootstrap_ci_of_identical_samples_is_a_point() -> None:
    """Pairs whose halves are equal give ratio 1 with a zero-width interval."""
    stock = [1.0 + 0.01 * k for k in range(50)]
    assert bootstrap_ratio_ci(stock, stock) == (1.0, 1.0, 1.0)


def test_bootstrap_ci_brackets_a_known_ratio_and_is_seeded() -> None:
    """A 5 % overhead with noise is bracketed; the same seed gives the same interval."""
    noise = random.Random(7)
    stock = [100.0 + noise.gauss(0, 5) for _ in range(200)]
    enabled = [s * 1.05 * (1 + noise.gauss(0, 0.01)) for s in stock]
    ratio, low, high = bootstrap_ratio_ci(enabled, stock, rng=random.Random(1))
    assert low <= ratio <= high
    assert low < 1.05 < high
    assert high - low < 0.01
    assert bootstrap_ratio_ci(enabled, stock, rng=random.Random(1)) == (ratio, low, high)


def test_bootstrap_ci_refuses_bad_input() -> None:
    """Mismatched, empty or non-positive samples and bad settings are refused by name."""
    with pytest.raises(ValueError, match="equal length"):
        bootstrap_ratio_ci([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        bootstrap_ratio_ci([1.0], [0.0])
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_ratio_ci([1.0], [1.0], resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ratio_ci([1.0], [1.0], confidence=1.0)


def _not_ours(x: int) -> int:
    """A function outside the package."""
    return x + 1


def test_settrace_counter_counts_our_calls_and_lines_only() -> None:
    """Calls of any code are counted; calls and lines only for the package's own code."""
    empty = _Tally()
    with _settrace_counter(empty):
        pass  # the context manager's own exit is counted too
    tally = _Tally()
    with _settrace_counter(tally):
        _not_ours(1)
    assert (tally.calls - empty.calls, tally.our_calls, tally.our_lines) == (1, 0, 0)
    tally = _Tally()
    with _settrace_counter(tally):
        backoff_ceiling(DRAFT, 1)
    assert tally.our_calls >= 1
    assert tally.our_lines >= 1
    assert tally.calls >= tally.our_calls


def test_oracle_and_closed_loop_floor() -> None:
    """The oracle's minimum for a simple log, and the closed-loop floor's formula."""
    # 10 arrivals at t=0 that cannot wait, one token in the bucket: 9 errors at least.
    assert oracle_min_errors([0.0] * 10, 0.0, 1.0, 1.0) == 9
    # The same arrivals allowed 4 s: 4 more tokens arrive in time.
    assert oracle_min_errors([0.0] * 10, 4.0, 1.0, 1.0) == 5
    assert closed_loop_floor(32, 1.0, 200.0) == 0.0
    assert closed_loop_floor(512, 1.0, 200.0) == pytest.approx(1 - 200 / 512)


def _result(arm: str) -> RunResult:
    """A minimal RunResult for synthetic runs."""
    return RunResult(
        arm=arm,
        description="",
        integration="pymongo",
        capacity=100.0,
        duration=1.0,
        offered=0,
        issued=0,
        skipped=0,
        successes=0,
        errors=0,
        error_types={},
        server_received=0,
        server_rejected=0,
        client_attempts=0,
        amplification=None,
        attempts_per_issued=None,
        goodput=0.0,
        latency_p50_ms=None,
        latency_p99_ms=None,
        refused=None,
        phases=[],
    )


def _run(
    scenario: str,
    kind: str,
    arm: str,
    *,
    workers: int = 32,
    errors: int = 0,
    minimum: int = 0,
    attempts: float = 1.0,
    goodput: float = 200.0,
    p99: Optional[float] = 50.0,
    refused: Optional[int] = None,
) -> ScenarioRun:
    """A synthetic scenario run of 1000 operations at C = 200."""
    return ScenarioRun(
        scenario=scenario,
        kind=kind,
        arm=arm,
        workers=workers,
        capacity=200.0,
        operations=1000,
        app_errors=errors,
        physical_min=minimum,
        floor_fraction=closed_loop_floor(workers, 1.0, 200.0) if kind == "closed" else None,
        attempts_per_op=attempts,
        goodput=goodput,
        p50_ms=1.0,
        p99_ms=p99,
        never_sent=0,
        local_waits=None,
        local_refusals=None,
        budget_refused=refused,
        result=_result(arm),
    )


def test_goals_are_judged_per_arm_and_dropped_when_no_retries_meets_them() -> None:
    """Closed, open and hot-member goals; a goal no-retries meets is marked dropped."""
    runs = [
        _run("closed 32w", "closed", BASELINE, errors=840),
        _run("closed 32w", "closed", "draft", errors=5, attempts=1.05, p99=300.0),
        _run("closed 32w", "closed", "current", errors=5, attempts=1.9),
        _run("closed 512w", "closed", BASELINE, workers=512, errors=600),
        _run("closed 512w", "closed", "draft", workers=512, errors=650),
        _run("open 3x", "open", BASELINE, errors=600, minimum=500),
        _run("open 3x", "open", "draft", errors=540, minimum=500, attempts=1.08),
        _run("hot member", "hot", BASELINE, errors=400),
        _run("hot member", "hot", "draft", errors=0, refused=3),
    ]
    goals = {g.scenario: g for g in evaluate_goals(runs, OverloadPlan())}
    assert list(goals) == ["closed 32w", "closed 512w", "open 3x", "hot member"]
    closed = goals["closed 32w"]
    assert closed.met == {BASELINE: False, "draft": True, "current": False}
    assert not closed.dropped
    assert "errors 0.5% (<= 1%: met)" in closed.figures["draft"]
    assert "attempts/op 1.90 (NOT met)" in closed.figures["current"]
    # 512 workers: N/C = 2.56 s > 1 s, so errors are not judged (60% and 65% alike); the
    # other goals no-retries meets, so the goal is dropped.
    assert goals["closed 512w"].met == {BASELINE: True, "draft": True}
    assert "not judged; floor 60.9%" in goals["closed 512w"].figures["draft"]
    assert "errors not judged" in goals["closed 512w"].goal
    assert goals["closed 512w"].dropped
    assert goals["open 3x"].met == {BASELINE: False, "draft": True}
    assert "x1.08" in goals["open 3x"].figures["draft"]
    assert goals["hot member"].met == {BASELINE: False, "draft": False}  # a refused retry


def test_overhead_goal_is_decided_on_the_upper_bound() -> None:
    """The overhead goal is met only when the CI's upper bound is within the goal."""
    section: dict[str, Any] = {
        "goal_ratio": 1.01,
        "cpu": [
            {"operation": "a", "ratio": 1.0, "ratio_ci_low": 0.99, "ratio_ci_high": 1.009},
            {"operation": "b", "ratio": 1.0, "ratio_ci_low": 0.99, "ratio_ci_high": 1.02},
        ],
    }
    assert [(op, met) for op, met, _ in overhead_goals(section)] == [("a", True), ("b", False)]


def test_overhead_verdict_says_when_the_ci_cannot_decide() -> None:
    """A CI wholly below the goal meets it, wholly above fails it, straddling it decides nothing."""
    assert verdict(0.99, 1.01, 1.01) == "met"
    assert verdict(1.011, 1.05, 1.01) == "NOT met"
    assert verdict(1.0, 1.02, 1.01) == "undecided (CI too wide)"


def test_core_cost_structure() -> None:
    """Both paths are measured at each thread count with positive costs."""
    costs = measure_core_cost(200, (1, 2))
    assert [(c.path, c.threads) for c in costs] == [
        ("success", 1),
        ("success", 2),
        ("retry", 1),
        ("retry", 2),
    ]
    assert all(c.cpu_ns_per_op >= 0 and c.wall_ops_per_s > 0 for c in costs)


def test_generic_markdown_renders_nested_tables() -> None:
    """Unknown result shapes become key/value and per-row tables."""
    lines = _generic_md({"ops": 3, "operations": {"ping": {"rate": 1.5}, "find": {"rate": 2}}})
    text = "\n".join(lines)
    assert "| ops | 3 |" in text
    assert "| operations | rate |" in text
    assert "| find | 2 |" in text


def test_closed_loop_records_every_operation(replicaset_server: EmbeddedServer) -> None:
    """A closed loop's arrival log, counters and per-operation attempts add up."""
    config = WorkloadConfig(capacity=30.0, burst_seconds=0.1, allowed_wait=0.2)
    result = run_closed_loop(replicaset_server, ARMS["no-retries"], 4, 0.5, config)
    assert result.loop == "closed"
    assert result.workers == 4
    assert result.offered == result.issued == result.successes + result.errors > 0
    assert len(result.arrivals) == result.offered
    assert result.arrivals == sorted(result.arrivals)
    assert result.server_received >= result.successes
    assert result.local_waits is None  # stock pymongo reports none
    assert sum(result.timeline["sent_by_arrival"]) == result.client_attempts


@pytest.mark.slow
def test_bench_end_to_end(replicaset_server: EmbeddedServer, tmp_path: Path) -> None:
    """A tiny benchmark run writes latest.json and latest.md with every section and goal."""
    args = build_parser().parse_args(
        [
            "--output", str(tmp_path),
            "--pairs", "3",
            "--block", "1",
            "--count-ops", "1",
            "--core-iterations", "200",
            "--core-threads", "2",
            "--capacity", "40",
            "--burst-seconds", "0.1",
            "--workers", "2",
            "--closed-seconds", "0.3",
            "--open-capacity", "40",
            "--loads", "3",
            "--open-threads", "8",
            "--warmup", "0.1",
            "--sustained", "0.3",
            "--burst", "0.2",
            "--recovery", "0.1",
            "--hot-capacity", "20",
            "--hot-workers", "2",
            "--hot-seconds", "0.3",
            "--allowed-wait", "0.2",
            "--arms", "no-retries,current",
            "--skip-roundtrips",
            "--skip-fleet",
            "--skip-transient",
            "--progress", "off",
        ]
    )  # fmt: skip
    out = io.StringIO()
    report = run_bench(
        args, server_factory=lambda: contextlib.nullcontext(replicaset_server), out=out
    )
    data: dict[str, Any] = json.loads((tmp_path / "latest.json").read_text())
    markdown = (tmp_path / "latest.md").read_text()
    assert markdown == render_markdown(report)
    assert "## Overhead without overload" in out.getvalue()
    for key in ("machine", "config", "overhead", "core", "overload", "wall_seconds"):
        assert key in data
    assert data["machine"]["cpu_count"] >= 1
    overhead = data["overhead"]
    assert overhead["pymongo"] == pymongo.version
    assert f"pymongo {pymongo.version}, the native adapter's {overhead['wrappers']} wrappers" in (
        markdown
    )
    names = ["insert_one", "find_one", "find+getMore", "aggregate", "transaction"]
    assert [c["operation"] for c in overhead["cpu"]] == names
    assert all(c["ratio_ci_low"] <= c["ratio"] <= c["ratio_ci_high"] for c in overhead["cpu"])
    work = {(w["operation"], w["client"]): w for w in overhead["work"]}
    for name in names:
        assert work[(name, "stock")]["our_calls"] == 0
        assert work[(name, "enabled")]["our_calls"] > 0
    runs = data["overload"]["runs"]
    assert [(r["scenario"], r[ARM_KEY]) for r in runs] == [
        (scenario, arm)
        for scenario in ("closed 2w", "open 3x", "burst 3x 0.2s", "hot member")
        for arm in ("no-retries", "current")
    ]
    for run in runs:
        result = run["result"]
        assert run["app_errors"] == result["errors"] + result["skipped"]
        assert result["server_received"] >= result["successes"]
        assert run["physical_min"] >= 0
    assert len(data["overload"]["goals"]) == 4
    assert "### Goals (all comparisons within this run)" in markdown
    assert "Load average" in markdown


@pytest.mark.skipif(not seams.HAS_NATIVE_BACKPRESSURE, reason="the backport has no wrappers")
def test_overhead_names_the_wrappers_it_measures(replicaset_server: EmbeddedServer) -> None:
    """``auto`` measures the positional wrappers of pymongo's signature; ``forwarding`` forces
    the forwarding ones, and the flavour is read off the enabled client, not assumed."""
    from backpressure.adapters.native import wrapper_flavour
    from backpressure.bench.overhead import open_targets

    signature = seams.native_signature(pymongo.MongoClient(connect=False))
    assert signature is not None
    for wrappers, expected in (("auto", f"positional ({signature})"), ("forwarding", "forwarding")):
        with open_targets(replicaset_server.uri, wrappers) as (_, enabled, _):
            assert wrapper_flavour(enabled.client) == expected
    refused = "wrappers must be one of auto, forwarding; got 'lean'"
    with pytest.raises(ValueError, match=refused), open_targets(replicaset_server.uri, "lean"):
        pass


@pytest.mark.slow
def test_fleet_quick_mode_runs_real_processes(
    replicaset_server: EmbeddedServer, tmp_path: Path
) -> None:
    """``--only fleet --fleet-quick``: 2 client processes x 2 threads against the embedded
    replica set; the report holds every arm asked for, the default's first, and figures
    that come from the run (server counters, per-process successes), not from constants."""
    args = build_parser().parse_args(
        [
            "--output", str(tmp_path),
            "--only", "fleet",
            "--fleet-quick",
            "--arms", "no-retries,current",
            "--progress", "off",
        ]
    )  # fmt: skip
    out = io.StringIO()
    report = run_bench(
        args, server_factory=lambda: contextlib.nullcontext(replicaset_server), out=out
    )
    assert not (tmp_path / "latest.json").exists()
    data: dict[str, Any] = json.loads((tmp_path / "fleet.json").read_text())
    markdown = (tmp_path / "fleet.md").read_text()
    assert markdown == render_markdown(report)
    assert "overload" not in data
    assert "overhead" not in data
    [shape] = data["fleet"]
    plan = plan_from_dict(shape["plan"])
    assert plan == QUICK
    runs = [FleetRun.from_dict(run) for run in shape["runs"]]
    assert [run.arm for run in runs] == fleet_arms(["no-retries", "current"])
    for run in runs:
        assert len(run.per_process_successes) == QUICK.processes
        assert sum(run.per_process_successes) == run.operations - run.app_errors
        assert run.operations > 0
        assert run.server_received >= run.operations - run.app_errors  # counted by the server
        assert len(run.phases) == len(QUICK.rates)
        assert 0 < run.jain <= 1.0
        assert run.p99_ms is not None
        assert set(run.judge()) == set(FLEET_GOALS)
        assert run.per_process_competed_s == (None,) * QUICK.processes  # neither paces
    assert "Seconds competing" not in markdown
    no_retries = next(run for run in runs if run.arm == "no-retries")
    assert no_retries.attempts_per_op == pytest.approx(1.0, abs=0.01)
    header = "| arm | ops | app errors | attempts/op | Jain |"
    assert header in markdown
    [transient] = data["transient"]
    assert transient["plan"] == asdict(QUICK_TRANSIENT)
    transient_runs = [TransientRun.from_dict(run) for run in transient["runs"]]
    assert [run.arm for run in transient_runs] == fleet_arms(["no-retries", "current"])
    for transient_run in transient_runs:
        assert transient_run.operations == len(QUICK_TRANSIENT.arrivals())
        assert transient_run.server_rejected >= QUICK_TRANSIENT.rejections  # the fail point
        assert 0 < transient_run.after_successes <= transient_run.operations
    assert "## Transient" in markdown
    assert "## Fleet" in markdown
    assert markdown.count("- **") == len(runs) + len(transient_runs)


def test_fleet_summary_arithmetic() -> None:
    """Goodput per phase, Jain and attempts/op from hand-made process reports."""
    plan = FleetPlan(processes=2, threads=1, rates=(10.0, 20.0), step_s=1.0, settle_s=0.5)
    bins = [0] * 22
    for slot in range(5, 10):
        bins[slot] = 2  # 10 successes in 0.5-1.0 s: 20/s over a 10/s capacity
    for slot in range(15, 20):
        bins[slot] = 1  # 5 in 1.5-2.0 s: 10/s over 20/s
    reports = [
        {
            "index": i,
            "ops": 10,
            "errors": 0 if i == 0 else 5,
            "successes": 10 if i == 0 else 5,
            "success_bins": bins if i == 0 else [0] * 22,
            "latencies_ms": [1.0] * 10,
            "error_kinds": {} if i == 0 else {"OperationFailure": 5},
            "local_waits": None,
            "local_refusals": None,
            "cpu_s": 0.5,
        }
        for i in range(2)
    ]
    run = summarize("current", plan, reports, received=30)
    assert [phase.share for phase in run.phases] == [pytest.approx(2.0), pytest.approx(0.5)]
    assert run.attempts_per_op == 1.5
    assert run.jain == pytest.approx(15**2 / (2 * (100 + 25)))
    assert run.error_fraction == 0.25
    assert run.judge()[FLEET_GOALS[3]] is False
    assert run.floor_fraction == 0.0
    assert run.per_process_competed_s == (None, None)  # reports without the count
    assert run.phase_successes == ((10, 0), (5, 0))  # whole steps, by process
    assert run.phase_jain == (0.5, 0.5)  # one of two processes took everything
    paced = summarize(
        "adaptive", plan, [{**r, "competed_s": 2.5 * r["index"]} for r in reports], received=30
    )
    assert paced.per_process_competed_s == (0.0, 2.5)
    assert FleetRun.from_dict(paced.to_dict()) == paced
    page = render_fleet_markdown([run, paced], plan)
    assert "Seconds competing per process (the neighbour test's mode): adaptive: 0.0, 2.5." in page
    assert "Jain within each phase (10/s -> 20/s): default (current): 0.500, 0.500;" in page


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--members", "0"], "argument --members: must be >= 1, got 0"),
        (["--pairs", "0"], "argument --pairs: must be >= 1, got 0"),
        (["--block", "x"], "argument --block: expected an integer, got 'x'"),
        (["--count-ops", "-1"], "argument --count-ops: must be >= 1, got -1"),
        (["--core-iterations", "0"], "argument --core-iterations: must be >= 1, got 0"),
        (["--core-threads", "0"], "argument --core-threads: must be >= 1, got 0"),
        (["--capacity", "-1"], "argument --capacity: must be > 0, got -1"),
        (["--workers", "2,0"], "argument --workers: item 2: must be >= 1, got 0"),
        (["--closed-seconds", "0"], "argument --closed-seconds: must be > 0, got 0"),
        (["--open-capacity", "0"], "argument --open-capacity: must be > 0, got 0"),
        (["--loads", "3,x"], "argument --loads: item 2: expected a number, got 'x'"),
        (["--open-threads", "0"], "argument --open-threads: must be >= 1, got 0"),
        (["--warmup", "0"], "argument --warmup: must be > 0, got 0"),
        (["--sustained", "-1"], "argument --sustained: must be > 0, got -1"),
        (["--burst-load", "-1"], "argument --burst-load: must be >= 0, got -1"),
        (["--burst", "0"], "argument --burst: must be > 0, got 0"),
        (["--recovery", "0"], "argument --recovery: must be > 0, got 0"),
        (["--hot-capacity", "0"], "argument --hot-capacity: must be > 0, got 0"),
        (["--hot-workers", "0"], "argument --hot-workers: must be >= 1, got 0"),
        (["--hot-seconds", "0"], "argument --hot-seconds: must be > 0, got 0"),
        (["--allowed-wait", "inf"], "argument --allowed-wait: expected a finite number"),
        (["--burst-seconds", "0"], "argument --burst-seconds: must be > 0, got 0"),
        (["--arms", "foo"], "argument --arms: unknown foo; choose from"),
        (["--fleet-step", "0"], "argument --fleet-step: must be > 0, got 0"),
        (["--fleet-shapes", "8y8"], "argument --fleet-shapes: a fleet shape is PROCESSESxTHREADS"),
        (["--fleet-shapes", ","], "argument --fleet-shapes: expected at least one value"),
        (["--transient-rejections", "0"], "argument --transient-rejections: item 1: must be >= 1"),
        (["--progress", "yes"], "argument --progress: invalid choice: 'yes'"),
        (["--no-progress"], "unrecognized arguments: --no-progress"),
    ],
)
def test_usage_errors_exit_2_and_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad value exits with status 2, the usage line and the flag's name, before any run."""
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m backpressure.bench")
    assert f"error: {message}" in err


def test_progress_is_accepted() -> None:
    """``--progress {auto,on,off}``, auto by default, as in every command line of the package."""
    assert build_parser().parse_args([]).progress == "auto"
    assert build_parser().parse_args(["--progress", "on"]).progress == "on"


def test_hedging_bench_runs_every_row_and_renders_its_report(tmp_path: Path) -> None:
    """``bench.hedging``: each scenario's rows (the default first, stock pymongo, the default
    hedged), one find per read without hedging, and a page rendered from the written JSON."""
    from backpressure.bench import hedging

    out = tmp_path / "hedging"
    stdout = io.StringIO()
    argv = ["--reads", "20", "--delay-ms", "5", "--slow-ms", "30", "--runs", "1"]
    with contextlib.redirect_stdout(stdout):
        assert hedging.main([*argv, "--progress", "off", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    assert out.with_suffix(".md").read_text(encoding="utf-8") == hedging.render_markdown(report)
    assert stdout.getvalue() == hedging.render_markdown(report)
    default = DEFAULT_POLICY.name
    assert [(row["scenario"], row[ARM_KEY]) for row in report["rows"]] == [
        (scenario, arm)
        for scenario in hedging.SCENARIOS
        for arm in (
            f"default ({default}), no hedging",
            "stock pymongo",
            f"default ({default}) + hedge_delay 5 ms",
        )
    ]
    for row in report["rows"]:
        (figures,) = row["runs"]
        assert 0 < figures["p50_ms"] <= figures["p90_ms"] <= figures["p99_ms"] <= figures["max_ms"]
        if "hedge_delay" in row[ARM_KEY]:
            assert figures["finds_per_read"] >= 1.0
        else:  # nothing retries a held find: exactly one find per read
            assert figures["finds_per_read"] == 1.0
    assert report["reads"] == 20
    assert report["hedge_delay_ms"] == 5
    assert report["slow_ms"] == 30
    assert report["pymongo"] == pymongo.version


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--reads", "0"], "argument --reads: must be >= 1, got 0"),
        (["--delay-ms", "x"], "argument --delay-ms: expected an integer, got 'x'"),
        (["--delay-ms", "3600001"], "argument --delay-ms: at most 3600000"),
        (["--runs", "-1"], "argument --runs: must be >= 1, got -1"),
    ],
)
def test_hedging_bench_usage_errors_exit_2_and_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad value exits with status 2, the usage line and the flag's name, before any run."""
    from backpressure.bench import hedging

    with pytest.raises(SystemExit) as raised:
        hedging.main(argv)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m backpressure.bench.hedging")
    assert f"error: {message}" in err
