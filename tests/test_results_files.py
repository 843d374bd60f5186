"""The committed benchmark results: every table is what the benchmark renders from its raw data
(none is edited by hand), and every table that compares arms shows the default's row first."""

from __future__ import annotations

import functools
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from backpressure.bench import render_markdown
from backpressure.bench.faults import kind_ratios, rounds_from_report
from backpressure.bench.goals import latest_runs
from backpressure.bench.history import LEDGER, run_name
from backpressure.workload.arms import ARM_KEY, arm_label, default_policy_name

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def _fleet_pages() -> list[str]:
    """``latest`` and every committed run of the fleet benchmark, by stem."""
    runs = (RESULTS / "adaptive-default").glob("fleet-*run*.json")
    return ["latest", *sorted(f"adaptive-default/{path.stem}" for path in runs)]


@pytest.mark.parametrize("stem", _fleet_pages())
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


@pytest.mark.parametrize("stem", ["latest"])
def test_the_overload_table_shows_the_default_first_in_every_scenario(stem: str) -> None:
    """In the overload table, each scenario's first row is the default arm's."""
    text = (RESULTS / f"{stem}.md").read_text(encoding="utf-8")
    header = "| scenario | arm |"
    lines = text[text.index(header) :].splitlines()[2:]
    first: dict[str, str] = {}
    for line in lines:
        if not line.startswith("|"):
            break
        scenario, arm = (cell.strip() for cell in line.strip("|").split("|")[:2])
        first.setdefault(scenario, arm)
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
        [f" {run.shape} ", f" {arm_label(run.arm)} "] for run in runs
    ]


UNMEASURED_AGREEMENT = ("no-retries", "draft", "pymongo-native")
"""Arms whose agreement rows run without coverage's tracer, which makes the simulator several
times slower: those rows only re-check committed figures. The closed-fleet simulations of
no-retries and draft are the long ones (several times the others); stock pymongo's row is the
very simulation of the measured ``current`` row (same scenario, seed and simulated arm). The
other rows and the simulator's own tests run the same simulator paths measured."""


def _agreement_params() -> list[Any]:
    """Every fleet run as ``(shape, index)``, unmeasured when its arm is one of the above."""
    report = json.loads((RESULTS / "fleet.json").read_text(encoding="utf-8"))
    return [
        pytest.param(
            shape,
            index,
            marks=[pytest.mark.unmeasured]
            if report["fleet"][shape]["runs"][index][ARM_KEY] in UNMEASURED_AGREEMENT
            else [],
        )
        for shape, index in _fleet_runs()
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "index"), _agreement_params())
def test_the_sim_agreement_table_is_generated_from_the_fleet_results(
    shape: int, index: int
) -> None:
    """Each row of ``sim-fleet.md``'s agreement table is what ``bench.agreement --fleet`` prints
    for that run of the committed ``fleet.json`` (the simulator is deterministic for a seed, and
    each arm is simulated on its own). One run per test, so the simulations spread over the
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
    each scenario's first row is the default arm's."""
    from backpressure.bench.hedging import SCENARIOS
    from backpressure.bench.hedging import render_markdown as render_hedging

    report = json.loads((RESULTS / "hedging.json").read_text(encoding="utf-8"))
    assert (RESULTS / "hedging.md").read_text(encoding="utf-8") == render_hedging(report)
    firsts = [
        next(row[ARM_KEY] for row in report["rows"] if row["scenario"] == scenario)
        for scenario in SCENARIOS
    ]
    assert firsts == [f"default ({default_policy_name()}), no hedging"] * len(SCENARIOS)


def test_the_hotspot_page_is_the_rendering_of_its_raw_data() -> None:
    """``hotspot.md`` is what ``render_hotspot_report`` makes of ``hotspot.json``: every shape
    ran, each shape's first row is the default arm's, and its chart is committed beside it."""
    from backpressure.bench.hotspot import SHAPES, render_hotspot_report

    report = json.loads((RESULTS / "hotspot.json").read_text(encoding="utf-8"))
    assert (RESULTS / "hotspot.md").read_text(encoding="utf-8") == render_hotspot_report(report)
    rows = report["rows"]
    assert [shape for shape in SHAPES if any(r["shape"] == shape for r in rows)] == list(SHAPES)
    for shape in SHAPES:
        runs = [r for r in rows if r["shape"] == shape and r["kind"] == "run"]
        assert not runs or runs[0][ARM_KEY] == default_policy_name()
    assert (RESULTS / report["chart"]).read_bytes()[:4] == b"\x89PNG"


# -- figures quoted in prose -------------------------------------------------------------------

ADAPTIVE_DEFAULT = RESULTS / "adaptive-default"
"""The real-process runs the goals table judges, and the simulator's runs beside them."""

LATEST = ("fleet", "mixed-fleet", "recovery", "faults", "criticality")
"""The benchmarks whose latest two runs the pages quote (``adaptive-default/<name>-run<N>``),
as the goals table judges them; every other benchmark is quoted from its one latest run."""


def _latest(stem: str) -> list[tuple[int, dict[str, Any]]]:
    """The latest two runs of ``adaptive-default/<stem>-run<N>.json``, oldest first."""
    return latest_runs(ADAPTIVE_DEFAULT, f"{stem}-run")


def _named(stem: str) -> str:
    """``runs 15 and 16 (`fleet-run15.md`, `fleet-run16.md`)``: the latest runs, named."""
    numbers = [number for number, _ in _latest(stem)]
    files = ", ".join(f"`{stem}-run{number}.md`" for number in numbers)
    return f"runs {_and_list([str(n) for n in numbers])} ({files})"


def _span(values: list[float], digits: int, unit: str = "") -> str:
    """``low-high`` (or one value when they round alike), with ``digits`` decimals and a unit."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return (low if low == high else f"{low}-{high}") + unit


def _sim_agreement(arm: str) -> list[tuple[float, float]]:
    """(error %, attempts/op) the simulator gives ``arm`` in ``sim-fleet.md``'s agreement
    table (which a test above holds to the simulator and ``fleet.json``), one per shape."""
    text = (RESULTS / "sim-fleet.md").read_text(encoding="utf-8")
    found = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) >= 5 and cells[1] == arm and " / " in cells[2]:
            errors = float(cells[2].split(" / ")[1].rstrip("%"))
            attempts = float(cells[4].split(" / ")[1])
            found.append((errors, attempts))
    assert found, arm
    return found


@functools.cache
def prose_figures() -> dict[str, str]:
    """The figures the README and the docs quote in prose, from the latest committed runs."""
    latest = json.loads((RESULTS / "latest.json").read_text(encoding="utf-8"))
    (_, fleet), *_ = _latest("fleet")[-1:]
    bench_s, fleet_s = latest["wall_seconds"], fleet["wall_seconds"]
    return {
        "bench_seconds": f"{bench_s:.0f}",
        "bench_minutes": f"{bench_s / 60:.0f}",
        "fleet_seconds": f"{fleet_s:.0f}",
        "fleet_minutes": f"{fleet_s / 60:.0f}",
        "total_minutes": f"{(bench_s + fleet_s) / 60:.0f}",
        "goals_met": (ADAPTIVE_DEFAULT / "goals.md")
        .read_text(encoding="utf-8")
        .rsplit("Goals `adaptive` met in both of their latest runs: ", 1)[1]
        .strip()
        .removesuffix("."),
        **_fleet_figures(),
        **_hedging_figures(),
        **_sim_sparse_fleet_figures(),
        **_burst_fleet_figures(),
        **_rollout_figures(),
        **_recovery_figures(),
        **_soak_figures(),
        **_criticality_figures(),
        **_overhead_figures(),
        **_operator_view_figures(),
        **_pymongo_tests_figures(),
        **_end_detection_figures(),
        **_quiet_sensitivity_figures(),
    }


def _sim_sparse_fleet_figures() -> dict[str, str]:
    """The simulated sparse fleet (the ``fleet`` section of ``sim-fleet.md``, generated by the
    yardsticks): the floor and each arm's attempts per operation."""
    text = (RESULTS / "sim-fleet.md").read_text(encoding="utf-8")
    section = text[text.index("## `fleet`") : text.index("## `retry-storm`")]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) > 4 and cells[4][:1].isdigit():
            rows[cells[0]] = cells
    floors = {cells[3].split("(")[1].rstrip(")") for cells in rows.values()}
    assert len(floors) == 1
    return {
        "sim_fleet_floor": floors.pop(),
        "sim_fleet_draft": rows["draft"][4],
        "sim_fleet_current": rows["default (current)"][4],
        "sim_fleet_adaptive": rows["adaptive"][4],
    }


def _hedging_figures() -> dict[str, str]:
    """The committed hedged-reads run (``hedging.json``): each scenario's rows without hedging
    (the default's and stock's) and hedged, over its runs."""
    report = json.loads((RESULTS / "hedging.json").read_text(encoding="utf-8"))
    one, tails = "one slow secondary", "5% slow finds on every member"

    def runs(scenario: str, hedged: bool) -> list[dict[str, float]]:
        found = [
            run
            for row in report["rows"]
            if row["scenario"] == scenario and ("hedge_delay" in row[ARM_KEY]) == hedged
            for run in row["runs"]
        ]
        assert found, (scenario, hedged)
        return found

    def values(scenario: str, hedged: bool, field: str) -> list[float]:
        return [run[field] for run in runs(scenario, hedged)]

    hedged_one = values(one, True, "finds_per_read")
    p50_added = [
        hedged - plain
        for hedged, plain in zip(values(tails, True, "p50_ms"), values(tails, False, "p50_ms"))
    ]
    return {
        "hedge_slow_p90": _span(values(one, False, "p90_ms"), 0, " ms"),
        "hedge_tails_p99": _span(values(tails, False, "p99_ms"), 0, " ms"),
        "hedge_needed": _span([(f - 1) * report["reads"] for f in hedged_one], 0),
        "hedge_reads": str(report["reads"]),
        "hedge_finds_one": _and_list([f"{f:.3f}" for f in hedged_one]),
        "hedge_one_p99": _span(values(one, True, "p99_ms"), 1, " ms"),
        "hedge_one_max": _span(values(one, True, "max_ms"), 1, " ms"),
        "hedge_tails_hedged_p99": _span(values(tails, True, "p99_ms"), 0, " ms"),
        "hedge_tails_more": _span(
            [(f - 1) * 100 for f in values(tails, True, "finds_per_read")], 0, " %"
        ),
        "hedge_p50_added": _span(p50_added, 1, " ms"),
    }


def _fleet_figures() -> dict[str, str]:
    """The latest two real fleet runs (both shapes, every arm)."""
    reports = [data for _, data in _latest("fleet")]

    def rows(arms: set[str], shape: str = "") -> list[dict[str, Any]]:
        found = [
            run
            for report in reports
            for entry in report["fleet"]
            for run in entry["runs"]
            if run[ARM_KEY] in arms and (not shape or run["shape"] == shape)
        ]
        assert found, (arms, shape)
        return found

    adaptive, like_stock = rows({"adaptive"}), rows({"current", "pymongo-native"})
    simulated = _sim_agreement("adaptive")
    figures = {
        "fleet_runs": _named("fleet"),
        "adaptive_errors": _span([r["error_fraction"] * 100 for r in adaptive], 1, " %"),
        "adaptive_attempts": _span([r["attempts_per_op"] for r in adaptive], 2),
        "adaptive_jain": _span([r["jain"] for r in adaptive], 3),
        "adaptive_p99": _span([r["p99_ms"] for r in adaptive], 0, " ms"),
        "stock_p99": _span([r["p99_ms"] for r in rows({"pymongo-native"})], 0, " ms"),
        "current_errors": _span([r["error_fraction"] * 100 for r in like_stock], 0, " %"),
        "current_attempts": _span([r["attempts_per_op"] for r in like_stock], 1),
        "sim_adaptive_errors": _span([errors for errors, _ in simulated], 1, " %"),
        "sim_adaptive_attempts": _span([attempts for _, attempts in simulated], 2),
    }
    for shape in ("8x8", "4x16"):
        runs = rows({"adaptive"}, shape)
        figures[f"fleet_{shape}"] = _runs_figures(runs, " errors")
        figures[f"adaptive_errors_{shape}"] = _span(
            [r["error_fraction"] * 100 for r in runs], 1, " %"
        )
    return figures


def _burst_fleet_figures() -> dict[str, str]:
    """The real fleet runs at a smaller burst allowance: each shape's figures, 0.25 s then
    0.1 s, per arm (``burst_<arm>_<shape>``)."""
    stems = ("fleet-burst0.25-run1", "fleet-burst0.1-run1")
    figures = {}
    for arm in ("adaptive", "current", "pymongo-native"):
        runs = [fleets_of(stem, arm) for stem in stems]
        if arm == "adaptive":
            competed = sum(sum(run["per_process_competed_s"]) for r in runs for run in r.values())
            figures["burst_competing"] = (
                "no pacer competed in any of them"
                if not competed
                else f"pacers competed {competed:.0f} s"
            )
        for shape in ("8x8", "4x16"):
            figures[f"burst_{arm.replace('-', '_')}_{shape}"] = _runs_figures(
                [run[shape] for run in runs], jain=arm == "adaptive"
            )
    mixed = json.loads(
        (RESULTS / "adaptive-default" / "mixed-fleet-burst0.25-run1.json").read_text("utf-8")
    )
    for arm in ("current", "adaptive"):
        runs = [run for run in mixed["runs"] if run["upgraded"][ARM_KEY] == arm]
        assert [run["stock_processes"] for run in runs] == [1, 4, 7]
        figures[f"burst_mixed_{arm}"] = _and_list([f"{run['share'] * 100:.0f} %" for run in runs])
    figures["burst_mixed_competed"] = _and_list(
        [
            f"{run['upgraded']['competed_s'] / run['upgraded']['processes']:.0f} s"
            for run in mixed["runs"]
            if run["upgraded"][ARM_KEY] == "adaptive"
        ]
    )
    return figures


def _rollout_figures() -> dict[str, str]:
    """The latest two real mixed fleets: an upgraded process's share of a stock process's
    successes at each stock count, per run, and the adaptive processes' competing seconds."""
    runs = _latest("mixed-fleet")

    def upgraded(data: dict[str, Any], arm: str) -> list[dict[str, Any]]:
        return [run for run in data["runs"] if run["upgraded"][ARM_KEY] == arm]

    def shares(arm: str) -> str:
        return "; ".join(
            _and_list([f"{run['share'] * 100:.0f} %" for run in upgraded(data, arm)])
            + f" in run {number}"
            for number, data in runs
        )

    return {
        "rollout_runs": _named("mixed-fleet"),
        "rollout_adaptive": shares("adaptive"),
        "rollout_current": shares("current"),
    }


def _recovery_figures() -> dict[str, str]:
    """The latest two real recovery runs: the first and second seconds' shares of the demand,
    and ``adaptive``'s successes from 1 s to 4 s against stock's."""
    runs = [data["runs"] for _, data in _latest("recovery")]

    def share(arm: str, second: int) -> str:
        return _and_list([f"{_row(rows, arm)['shares'][second] * 100:.0f} %" for rows in runs])

    return {
        "recovery_runs": _named("recovery"),
        "recovery_first": share("adaptive", 0),
        "recovery_second": share("adaptive", 1),
        "recovery_stock": share("pymongo-native", 0),
        "recovery_current": share("current", 0),
        "recovery_ratio": _and_list(
            [f"{_row(rows, 'adaptive')['ratio_to_stock']:.2f}" for rows in runs]
        ),
    }


def _soak_figures() -> dict[str, str]:
    """The latest two real fault soaks."""
    numbers = [number for number, _ in _latest("faults")]
    first, second = numbers
    fewer = [
        (1 - _row(data["runs"], "adaptive")["ratio_mean"]) * 100 for _, data in _latest("faults")
    ]
    return {
        "soak_runs": _named("faults"),
        "soak_fewer": _span(fewer, 0, " %"),
        **_soak_pair_figures((first, second), "soak"),
    }


def _criticality_figures() -> dict[str, str]:
    """The latest two real criticality runs: the critical and sheddable operations' errors,
    and the arrivals of the first second after the end that were served."""
    runs = [data["runs"] for _, data in _latest("criticality")]

    def critical(arm: str) -> str:
        return _and_list([f"{_row(rows, arm)['critical_error_rate'] * 100:.1f} %" for rows in runs])

    def after_end(arm: str) -> str:
        return _and_list([f"{_row(rows, arm)['after_end'][0] * 100:.0f} %" for rows in runs])

    return {
        "crit_runs": _named("criticality"),
        "crit_adaptive": critical("adaptive"),
        "crit_current": critical("current"),
        "crit_stock": critical("pymongo-native"),
        "crit_sheddable": _and_list(
            [f"{_row(rows, 'adaptive')['sheddable_error_rate'] * 100:.0f} %" for rows in runs]
        ),
        "crit_after_adaptive": after_end("adaptive"),
        "crit_after_stock": after_end("pymongo-native"),
        "crit_stock_span": _span(
            [_row(rows, "pymongo-native")["critical_error_rate"] * 100 for rows in runs], 0, " %"
        ),
    }


def _overhead_figures() -> dict[str, str]:
    """The latest overhead runs on pymongo 4.20 and on 4.16 (the backport): what enabling
    costs in client CPU per single command and per transaction."""
    folder = RESULTS / "overhead"
    figures = {}
    for key, stem in (
        ("overhead", "pymongo-4.20-run"),
        ("overhead_416", "pymongo-4.16-backport-run"),
    ):
        ((number, data),) = latest_runs(folder, stem, 1)
        cpu = {row["operation"]: (row["ratio"] - 1) * 100 for row in data["overhead"]["cpu"]}
        single = [value for operation, value in cpu.items() if operation != "transaction"]
        figures |= {
            f"{key}_run": f"`overhead/{stem}{number}.md`",
            f"{key}_single": _span(single, 0, " %"),
            f"{key}_transaction": f"{cpu['transaction']:.0f} %",
        }
    return figures


def _pymongo_tests_figures() -> dict[str, str]:
    """How pymongo's own backpressure tests fared: every preset in ``pymongo-tests.json`` (the
    default's counts are stock's), and ``adaptive`` in its later run."""
    every = json.loads((RESULTS / "pymongo-tests.json").read_text(encoding="utf-8"))
    runs = {run["preset"]: run for run in every["presets"]}
    current, draft = runs["current"], runs["draft"]
    assert (current["passed"], current["failed"]) == (
        runs["stock"]["passed"],
        runs["stock"]["failed"],
    )
    tests = json.loads(
        (RESULTS / "adaptive-default" / "pymongo-tests-adaptive.json").read_text(encoding="utf-8")
    )
    (adaptive,) = [run for run in tests["presets"] if run["preset"] == "adaptive"]
    return {
        "pymongo_tests_adaptive": f"{adaptive['passed']} passed, {adaptive['failed']} failed",
        "pymongo_tests_adaptive_passes": f"{adaptive['passed']} and fails {adaptive['failed']}",
        "pymongo_tests_current": str(current["passed"]),
        "pymongo_tests_current_failed": str(current["failed"]),
        "pymongo_tests_draft": str(draft["passed"]),
        "pymongo_tests_draft_failed": str(draft["failed"]),
    }


def _end_detection_figures() -> dict[str, str]:
    """When a pacer could tell the simulated recovery fleet's overload ended
    (``sim-end-detection.json``): the gaps between one client's pushbacks, and the rows for a
    quiet of 1 s and of 0.3 s."""
    result = json.loads(
        (RESULTS / "adaptive-default" / "sim-end-detection.json").read_text(encoding="utf-8")
    )
    rows = {row["quiet_s"]: row for row in result["rows"]}
    second, short = rows[1.0], rows[0.3]
    return {
        "end_gap_median": f"{result['gap_median_s'] * 1000:.0f} ms",
        "end_longer_1s": f"{second['gaps_longer'] * 100:.0f} %",
        "end_bound_1s": f"{second['first_second_bound'] * 100:.0f} %",
        "end_paced": f"{result['paced_share'] * 100:.0f} %",
        "end_delay_1s": f"{second['mean_delay_s'] * 1000:.0f} ms",
        "end_bound_short": f"{short['first_second_bound'] * 100:.0f} %",
        "end_longer_short": f"{short['gaps_longer'] * 100:.0f} %",
    }


def _quiet_sensitivity_figures() -> dict[str, str]:
    """The simulated 8 x 8 fleets with a shorter quiet before the climb
    (``sim-sensitivity-quiet.json``): the default's errors, and ``adaptive_quiet=0.8``'s
    competing runs, errors, attempts and lowest Jain index."""
    result = json.loads(
        (RESULTS / "adaptive-default" / "sim-sensitivity-quiet.json").read_text(encoding="utf-8")
    )
    rows = [row for row in result if row["fleet"] == "8x8"]
    current = next(row for row in rows if row[ARM_KEY] == "current")
    short = next(row for row in rows if row[ARM_KEY] == "adaptive" and row["value"] == 0.8)
    return {
        "quiet_current_8x8": f"{current['errors'] * 100:.1f} %",
        "quiet_short_runs": f"{short['competing_runs']} of {short['runs']}",
        "quiet_short_errors": f"{short['errors'] * 100:.2f} %",
        "quiet_short_attempts": f"{short['attempts_per_op']:.3f}",
        "quiet_short_jain_min": f"{short['jain_min']:.3f}",
    }


def _row(rows: list[dict[str, Any]], arm: str) -> dict[str, Any]:
    """The row of ``arm`` in one run."""
    return next(row for row in rows if row[ARM_KEY] == arm)


def fleets_of(stem: str, arm: str) -> dict[str, dict[str, Any]]:
    """``arm``'s run of each fleet shape in ``adaptive-default/<stem>.json``, by shape."""
    page = RESULTS / "adaptive-default" / f"{stem}.json"
    return {
        run["shape"]: run
        for shape in json.loads(page.read_text(encoding="utf-8"))["fleet"]
        for run in shape["runs"]
        if run[ARM_KEY] == arm
    }


def _runs_figures(runs: list[dict[str, Any]], label: str = "", jain: bool = True) -> str:
    """Fleet runs' errors (followed by ``label``), attempts per operation and, if ``jain``,
    Jain indexes: ``1.2 % and 1.0 %{label} at 1.13 and 1.12 attempts per operation, Jain ...``."""
    text = (
        _and_list([f"{run['error_fraction'] * 100:.1f} %" for run in runs])
        + f"{label} at "
        + _and_list([f"{run['attempts_per_op']:.2f}" for run in runs])
        + " attempts per operation"
    )
    if jain:
        text += ", Jain " + _and_list([f"{run['jain']:.3f}" for run in runs])
    return text


def _and_list(items: list[str]) -> str:
    """``a, b and c``."""
    return ", ".join(items[:-1]) + " and " + items[-1]


def _per_round(reports: list[dict[str, Any]], arm: str) -> str:
    """``arm``'s acked writes over the default's in each soak of ``reports``: the mean of
    the rounds' ratios and its 95 % interval."""
    texts = []
    for report in reports:
        row = _row(report["runs"], arm)
        texts.append(f"{row['ratio_mean']:.3f} ({row['ratio_low']:.3f}-{row['ratio_high']:.3f})")
    return " and ".join(texts)


def _soak_pair_figures(numbers: tuple[int, int], key: str) -> dict[str, str]:
    """The figures of two interleaved fault soaks (``faults-run<N>``) under keys ``key_*``:
    each arm's acked writes over the default's (mean of the rounds and its interval), the
    errors beside the default's, and the acks around tight limits and all-reject windows."""
    reports = [
        json.loads(
            (RESULTS / "adaptive-default" / f"faults-run{n}.json").read_text(encoding="utf-8")
        )
        for n in numbers
    ]
    rounds = [rounds_from_report(report) for report in reports]

    def kind(arm: str, name: str) -> str:
        return " and ".join(f"{kind_ratios(one, arm)[name]:.2f}" for one in rounds)

    return {
        f"{key}_adaptive": _per_round(reports, "adaptive"),
        f"{key}_stock": _per_round(reports, "pymongo-native"),
        f"{key}_errors": " and ".join(
            f"{_row(r['runs'], 'adaptive')['errors']:,} against "
            f"{_row(r['runs'], 'current')['errors']:,}"
            for r in reports
        ),
        f"{key}_limit": kind("adaptive", "limit"),
        f"{key}_overload": kind("adaptive", "overload"),
        f"{key}_close": kind("adaptive", "close"),
    }


def _operator_view_figures() -> dict[str, str]:
    """The figures of the committed operator-view run (``operator-view.json``)."""
    report = json.loads((RESULTS / "operator-view.json").read_text(encoding="utf-8"))
    summary, plan = report["summary"], report["plan"]
    lines = [str(line["message"]) for line in report["log"]]
    return {
        "ov_threads": str(plan["threads"]),
        "ov_demand": f"{plan['demand']:.0f}",
        "ov_capacity": str(plan["capacity"]),
        "ov_paced_line": next(m for m in lines if m.startswith("pacing attempts to ")),
        "ov_reopened_line": next(m for m in lines if m.startswith("no longer pacing ")),
        "ov_paced_after": f"{summary['paced_after_overload_start_s']:.1f}",
        "ov_lowest_rate": f"{summary['lowest_rate']:.0f}",
        "ov_waiting": f"{summary['most_waiting']:.0f}",
        "ov_backlog_ms": f"{summary['longest_backlog_s'] * 1000:.0f}",
        "ov_failed": str(summary["failed"]),
        "ov_refusals": str(summary["local_refusals"]),
        "ov_pushbacks": str(summary["pushbacks"]),
        "ov_rate_back": f"{summary['rate_above_demand_after_overload_end_s']:.1f}",
        "ov_reopened_after": f"{summary['reopened_after_overload_end_s']:.1f}",
    }


PROSE: list[tuple[str, str]] = [
    (
        "docs/adaptive.md",
        "in fleet {fleet_runs} `adaptive` failed {adaptive_errors} of the operations at "
        "{adaptive_attempts} attempts per operation, where the default and stock pymongo failed "
        "{current_errors} at {current_attempts} attempts each. The price: a caller may wait (the "
        "p99 of successful operations was {adaptive_p99}, stock pymongo's {stock_p99})",
    ),
    (
        "docs/adaptive.md",
        "pass with every client on `adaptive` ({pymongo_tests_adaptive}:",
    ),
    (
        "docs/adaptive.md",
        "in the latest criticality {crit_runs} `adaptive` failed {crit_adaptive} of the critical "
        "operations and {crit_sheddable} of the sheddable ones, the default {crit_current} of "
        "the critical ones and stock pymongo {crit_stock}.",
    ),
    (
        "docs/adaptive.md",
        "in the latest mixed-fleet {rollout_runs} an adaptive process got {rollout_adaptive} of "
        "a stock process's successes (a process on the default {rollout_current}).",
    ),
    (
        "docs/adaptive.md",
        "in recovery {recovery_runs} it served {recovery_first} of the demand in the first second "
        "after the end (stock pymongo {recovery_stock}) and {recovery_second} in the second.",
    ),
    (
        "docs/adaptive.md",
        "in soak {soak_runs} `adaptive` lost no write and duplicated none, with fewer errors "
        "({soak_errors}), but acknowledged {soak_adaptive} of the default's writes",
    ),
    (
        "docs/adaptive.md",
        "an `adaptive_quiet` of 0.8 windows made pacers compete among peers in "
        "{quiet_short_runs} simulated 8 x 8 fleets",
    ),
    (
        "docs/benchmarks.md",
        "about {bench_minutes} minutes: {bench_seconds} s in the committed run, `latest.json`, "
        "plus about {fleet_minutes} more for the fleet and transient parts: {fleet_seconds} s "
        "in the latest fleet run)",
    ),
    (
        "docs/benchmarks.md",
        "In the latest run on pymongo 4.20.1 ({overhead_run}) enabling cost {overhead_single} of "
        "client CPU per single command and {overhead_transaction} per transaction; on pymongo "
        "4.16, through the backport of the overload loop ({overhead_416_run}), "
        "{overhead_416_single} and {overhead_416_transaction}.",
    ),
    (
        "docs/benchmarks.md",
        "In the latest fleet {fleet_runs} the 8 x 8 fleet on `adaptive` had {fleet_8x8}, and the "
        "4 x 16 fleet {fleet_4x16}; the default and stock pymongo failed {current_errors} at "
        "{current_attempts} attempts each.",
    ),
    (
        "docs/benchmarks.md",
        "the 8 x 8 fleet on `adaptive` failed {burst_adaptive_8x8}, and the 4 x 16 fleet "
        "{burst_adaptive_4x16} ({burst_competing}); the default failed {burst_current_8x8} "
        "(8 x 8).",
    ),
    (
        "docs/benchmarks.md",
        "In the latest mixed-fleet {rollout_runs} an adaptive process got {rollout_adaptive}, "
        "and a process on the default {rollout_current}. With a bucket of a quarter of a second "
        "(`mixed-fleet-burst0.25-run1.md`, one run) an adaptive process got "
        "{burst_mixed_adaptive}.",
    ),
    (
        "docs/benchmarks.md",
        "In the latest recovery {recovery_runs} `adaptive` served {recovery_first} of the demand "
        "in the first second and {recovery_second} in the second, stock pymongo "
        "{recovery_stock}, the default {recovery_current}; from 1 s to 4 s `adaptive` had "
        "{recovery_ratio} of stock's successes.",
    ),
    (
        "docs/benchmarks.md",
        "In the latest soak {soak_runs} no arm lost or duplicated a write; `adaptive` acked "
        "{soak_adaptive} of the default's writes (stock pymongo {soak_stock}) with {soak_errors} "
        "errors; from a tight limit's start to 1 s after its end {soak_limit} of the default's "
        "acks, around the all-reject windows {soak_overload} and around closed connections "
        "{soak_close}.",
    ),
    (
        "docs/benchmarks.md",
        "latest criticality {crit_runs} `adaptive` failed {crit_adaptive} of the critical "
        "operations and {crit_sheddable} of the sheddable ones, stock pymongo {crit_stock} and "
        "the default {crit_current}; it served {crit_after_adaptive} of the arrivals of the "
        "first second after the end (stock pymongo {crit_after_stock}).",
    ),
    (
        "README.md",
        "In the real process fleets (8 x 8 and 4 x 16 processes x threads; fleet {fleet_runs}) "
        "`adaptive` fails {adaptive_errors} of the operations where `current` and stock pymongo "
        "fail {current_errors}",
    ),
    ("README.md", "in closed-loop fleets (the 8 x 8 fleet has {adaptive_errors_8x8})"),
    ("README.md", "(it loses none, but acknowledges {soak_fewer} fewer)"),
    (
        "README.md",
        "{crit_adaptive} of the critical operations failed in its two latest real runs, against "
        "{crit_stock_span} under stock pymongo",
    ),
    ("README.md", "| `make bench` | the benchmarks (about {total_minutes} minutes;"),
    (
        "docs/presets.md",
        "{adaptive_errors} errors where stock pymongo loses {current_errors} in the latest "
        "measured fleets",
    ),
    ("docs/presets.md", "attempts per operation are {adaptive_attempts},"),
    (
        "docs/simulator.md",
        "the latest real runs (fleet {fleet_runs}) have the default `current` failing "
        "{current_errors} of the operations at {current_attempts} attempts each, exactly as stock "
        "pymongo does, and `adaptive` {adaptive_errors} at {adaptive_attempts}; the simulator "
        "gives `adaptive` {sim_adaptive_errors} at {sim_adaptive_attempts}",
    ),
    (
        "docs/overrides.md",
        "gives adaptive's critical operations {crit_adaptive} errors in its latest {crit_runs}, "
        "stock pymongo's {crit_stock}",
    ),
    ("docs/overrides.md", "Sheddable work pays for it: {crit_sheddable} of it failed"),
    (
        "docs/testing.md",
        "the default `current` and stock pymongo pass {pymongo_tests_current} tests and fail "
        "{pymongo_tests_current_failed}, `draft` passes {pymongo_tests_draft} and fails "
        "{pymongo_tests_draft_failed}",
    ),
    ("docs/testing.md", "and `adaptive` passes {pymongo_tests_adaptive_passes}"),
    (
        "docs/adaptive.md",
        "Goals `adaptive` met in both of their latest runs: {goals_met}. It misses the others:",
    ),
    (
        "docs/simulator.md",
        "During the failover every arm fails about the same share of operations (the floor is "
        "{sim_fleet_floor}), while `draft` sends the servers {sim_fleet_draft} requests per "
        "operation and `current`, the default, {sim_fleet_current}.",
    ),
    ("docs/simulator.md", "`adaptive` sends {sim_fleet_adaptive} too:"),
    (
        "docs/compatibility.md",
        "On pymongo 4.20.1 the positional wrappers cost {overhead_single} of client CPU per single "
        "command and {overhead_transaction} per transaction in the latest overhead run "
        "({overhead_run});",
    ),
    (
        "docs/hedging.md",
        "a third of the reads land on the slow secondary (p90 {hedge_slow_p90}), and 5 % slow "
        "finds give a p99 of {hedge_tails_p99}.",
    ),
    (
        "docs/hedging.md",
        "with one slow secondary only {hedge_needed} of the {hedge_reads} reads needed a hedge "
        "(finds per read {hedge_finds_one})",
    ),
    (
        "docs/hedging.md",
        "The p99 is a fast read's ({hedge_one_p99}); the max ({hedge_one_max}) is the hedge "
        "delay plus a fast read.",
    ),
    (
        "docs/hedging.md",
        "the p99 falls to the hedge delay plus a fast read ({hedge_tails_hedged_p99}), for "
        "{hedge_tails_more} more finds on the servers",
    ),
    ("docs/hedging.md", "adds about {hedge_p50_added} to the p50"),
    (
        "docs/observability.md",
        "drives one client with {ov_threads} threads offering {ov_demand} operations/s",
    ),
    ("docs/observability.md", "lowers the server's capacity to {ov_capacity} requests/s"),
    ("docs/observability.md", "> `{ov_paced_line}`"),
    ("docs/observability.md", "In this run that came {ov_paced_after} s after the capacity fell"),
    ("docs/observability.md", "(its lowest sample: {ov_lowest_rate}/s)"),
    ("docs/observability.md", "up to {ov_waiting} attempts waited at once"),
    ("docs/observability.md", "would have waited at most {ov_backlog_ms} ms"),
    (
        "docs/observability.md",
        "In all: app errors {ov_failed}, local refusals {ov_refusals}, pushbacks {ov_pushbacks}.",
    ),
    (
        "docs/observability.md",
        "it passed the {ov_demand}/s demand {ov_rate_back} s after the limit was lifted",
    ),
    ("docs/observability.md", "({ov_reopened_after} s after the limit was lifted here)"),
    ("docs/observability.md", "> `{ov_reopened_line}`"),
]
"""(page, sentence with placeholders of ``prose_figures``): each page says exactly that."""


USER_PAGES = (
    RESULTS.parents[1] / "README.md",
    *sorted((RESULTS.parents[1] / "docs").glob("*.md")),
    *sorted((RESULTS.parents[1] / "docs" / "results").glob("*.md")),
)
"""The pages a user reads: the README, the docs and their results pages (not ``bench/notes/``,
the lab record, which names the runs of its time)."""

_RUN_FILE = re.compile(r"[\w./-]*?([\w.-]+-run\d+(?:-[a-z]+)?)\.(?:md|json)\b")


def _ledger_runs(folder: Path) -> dict[str, list[int]]:
    """Every run number the history ledger lists (removed runs included), by benchmark."""
    text = (folder / LEDGER).read_text(encoding="utf-8")
    runs: dict[str, list[int]] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| `"):
            runs.setdefault(cells[0].strip("`"), []).append(int(cells[1]))
    return runs


def stale_run_names(text: str, folder: Path = RESULTS) -> list[str]:
    """The run files ``text`` names that are not the latest of their benchmark: a file no longer
    committed, or one older than the latest two (of a benchmark in ``LATEST``, which the goals
    judge on two runs) or than the latest one (of any other), by the history ledger's runs."""
    ledger = _ledger_runs(folder)
    stale = []
    for match in _RUN_FILE.finditer(text):
        found = sorted(folder.rglob(f"{match[1]}.json"))
        if len(found) != 1:
            stale.append(f"{match[0]} (no such committed run)")
            continue
        benchmark, number = run_name(found[0].relative_to(folder).as_posix())
        keep = 2 if benchmark.removeprefix("adaptive-default/") in LATEST else 1
        if number not in sorted(ledger[benchmark])[-keep:]:
            stale.append(f"{match[0]} (superseded: {benchmark} runs {ledger[benchmark]})")
    return stale


@pytest.mark.parametrize(
    "page", USER_PAGES, ids=lambda page: page.relative_to(RESULTS.parents[1]).as_posix()
)
def test_a_user_page_names_only_the_latest_runs(page: Path) -> None:
    """A run a user page names, in prose or in an include, is the latest of its benchmark: once
    a newer run is committed (and its line added to the ledger), a page still quoting the run
    it supersedes fails here, as its figures fail the prose test below."""
    assert stale_run_names(page.read_text(encoding="utf-8")) == []


def test_a_superseded_or_removed_run_is_found_stale(tmp_path: Path) -> None:
    """The check above finds a committed run older than the latest two (or one) the ledger
    lists, and a run no longer committed."""
    from backpressure.bench.history import update_ledger

    folder = tmp_path / "adaptive-default"
    folder.mkdir()
    for name in ("recovery-run7", "recovery-run8", "recovery-run9", "sim-x-run1", "sim-x-run2"):
        (folder / f"{name}.json").write_text(json.dumps({"runs": []}), encoding="utf-8")
    (tmp_path / LEDGER).write_text(update_ledger(tmp_path), encoding="utf-8")
    fresh = (
        "`recovery-run8.md`, ../bench/results/adaptive-default/recovery-run9.md, sim-x-run2.json"
    )
    assert stale_run_names(fresh, tmp_path) == []
    for old in ("`recovery-run7.md`", "`sim-x-run1.md`", "`recovery-run6.md`"):
        assert len(stale_run_names(f"{fresh} {old}", tmp_path)) == 1, old


def test_every_results_page_is_shown_on_a_docs_page() -> None:
    """Each committed results page (``bench/results/**/*.md``) is included by a page of the
    site, so no committed run, and no run the goals are judged on, is shown nowhere."""
    included = "\n".join(page.read_text(encoding="utf-8") for page in USER_PAGES)
    pages = sorted(path.relative_to(RESULTS).as_posix() for path in RESULTS.rglob("*.md"))
    assert len(pages) > 30
    assert [page for page in pages if f"bench/results/{page}\n" not in included] == []


@pytest.mark.parametrize(("page", "template"), PROSE)
def test_a_figure_quoted_in_prose_is_the_committed_results(page: str, template: str) -> None:
    """The page quotes the figure as the committed results give it (line breaks aside), so a
    new results file, or an edited sentence, fails here until both agree."""
    text = " ".join((RESULTS.parents[1] / page).read_text(encoding="utf-8").split())
    expected = template.format(**prose_figures())
    assert expected in text, f"{page} should say: {expected}"


def test_the_adaptive_figures_agree_between_pages() -> None:
    """README, presets, adaptive and simulator quote the same fleet range for ``adaptive``."""
    pages = {page for page, template in PROSE if "{adaptive_errors}" in template}
    assert pages == {"README.md", "docs/presets.md", "docs/simulator.md", "docs/adaptive.md"}


def test_the_simulated_mixed_fleets_page_and_table_are_the_committed_runs() -> None:
    """``sim-mixed-fleet.md`` is the rendering of ``sim-mixed-fleet.json`` (the default's runs
    first)."""
    pytest.importorskip("simpy")
    from backpressure.sim.mixed import load_runs, render_markdown

    folder = RESULTS / "adaptive-default"
    rows = json.loads((folder / "sim-mixed-fleet.json").read_text(encoding="utf-8"))
    runs = load_runs(rows)
    assert list(runs) == ["current", "adaptive"]
    seeds = sorted({row["seed"] for row in rows})
    page = (folder / "sim-mixed-fleet.md").read_text(encoding="utf-8")
    assert page == render_markdown(runs, seeds)


@pytest.mark.parametrize("burst", [0.25, 0.1])
def test_the_simulated_mixed_fleets_at_another_burst_are_the_committed_runs(burst: float) -> None:
    """``sim-mixed-fleet-burst<S>.md`` is the rendering of its JSON at that burst allowance, the
    default's runs first, over seeds 1-24."""
    pytest.importorskip("simpy")
    from backpressure.sim.mixed import load_runs, render_markdown

    folder = RESULTS / "adaptive-default"
    rows = json.loads((folder / f"sim-mixed-fleet-burst{burst:g}.json").read_text("utf-8"))
    runs = load_runs(rows)
    assert list(runs) == ["current", "adaptive"]
    seeds = sorted({row["seed"] for row in rows})
    assert seeds == list(range(1, 25))
    page = (folder / f"sim-mixed-fleet-burst{burst:g}.md").read_text(encoding="utf-8")
    assert page == render_markdown(runs, seeds, burst)
