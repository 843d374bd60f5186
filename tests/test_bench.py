"""The benchmarks end to end with tiny parameters, and the goal evaluation on synthetic runs."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any, Optional

from backpressure.bench import _generic_md, build_parser, render_markdown, run_bench
from backpressure.bench.core_cost import measure_core_cost
from backpressure.bench.overload import OverloadRun, evaluate_goals
from backpressure.testing import EmbeddedServer
from backpressure.workload.driver import RunResult


def _result(policy: str) -> RunResult:
    """A minimal RunResult for synthetic overload runs."""
    return RunResult(
        policy=policy,
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
    policy: str,
    load: float,
    shape: str,
    *,
    goodput: float = 100.0,
    errors: int = 0,
    amp: Optional[float] = 10.0,
    steady_per_op: Optional[float] = 1.05,
) -> OverloadRun:
    """A synthetic overload run."""
    return OverloadRun(
        policy=policy,
        load=load,
        shape=shape,
        offered_rate=load * 100.0,
        goodput=goodput,
        goodput_vs_capacity=goodput / 100.0,
        app_errors=errors,
        raised=errors,
        skipped=0,
        amplification=amp,
        attempts_per_op=1.3,
        steady_amplification=amp,
        steady_attempts_per_op=steady_per_op,
        latency_p99_ms=1.0,
        refused=None,
        result=_result(policy),
    )


def test_goals_met_and_not_met() -> None:
    """Each goal is judged from the runs it names; missing runs are reported as not measured."""
    runs = [
        _run("draft", 3.0, "sustained", goodput=99.0),
        _run("draft", 10.0, "sustained", goodput=96.0, amp=10.5, steady_per_op=1.02),
        _run("draft", 3.0, "bursty", errors=5),
        _run("no-retries", 3.0, "bursty", errors=1000),
        _run("pymongo-native", 10.0, "sustained", amp=25.0),
    ]
    goals = {g.goal.split(":")[1].split("(")[0].strip(): g for g in evaluate_goals(runs, 100.0)}
    met = [g.met for g in goals.values()]
    assert len(met) == 5
    assert goals["goodput >= 95% of C"].met is True
    assert goals["amplification"].met is False
    assert goals["retry overhead"].met is True
    assert goals[">= 99% fewer app-visible errors than no-retries, 3 s burst at 3x"].met is True
    assert goals["better amplification than pymongo's native policy, sustained 10x"].met is True
    assert all(g.met is None for g in evaluate_goals([], 100.0))


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


def test_bench_end_to_end(replicaset_server: EmbeddedServer, tmp_path: Path) -> None:
    """A tiny benchmark run writes latest.json and latest.md with every section."""
    args = build_parser().parse_args(
        [
            "--output", str(tmp_path),
            "--rounds", "2",
            "--block", "5",
            "--core-iterations", "200",
            "--core-threads", "2",
            "--capacity", "40",
            "--burst-seconds", "0.1",
            "--threads", "8",
            "--loads", "3",
            "--warmup", "0.1",
            "--sustained", "0.3",
            "--burst", "0.2",
            "--recovery", "0.2",
            "--policies", "no-retries,current",
            "--skip-roundtrips",
            "--no-progress",
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
    operations = data["overhead"]["operations"]
    assert [o["operation"] for o in operations] == ["insert_one", "find_one", "find+getMore"]
    assert all(o["ratio_median"] > 0 and o["plain_us"] > 0 for o in operations)
    runs = data["overload"]["runs"]
    assert {(r["policy"], r["shape"]) for r in runs} == {
        ("no-retries", "sustained"),
        ("no-retries", "bursty"),
        ("current", "sustained"),
        ("current", "bursty"),
    }
    for run in runs:
        result = run["result"]
        assert result["server_received"] >= result["successes"]
        assert run["app_errors"] == result["errors"] + result["skipped"]
    assert len(data["overload"]["goals"]) == 4
    assert "### Goals (default preset)" in markdown
