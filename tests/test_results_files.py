"""The committed benchmark results: every table is what the benchmark renders from its raw data
(none is edited by hand), and every table that compares policies shows the default's row first."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from backpressure.bench import render_markdown
from backpressure.bench.faults import kind_ratios, rounds_from_report
from backpressure.workload.arms import default_policy_name, policy_label

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


@pytest.mark.parametrize(
    "stem",
    [
        "latest",
        "overload",
        "fleet-run2",
        "adaptive-default/fleet-run2",
        "adaptive-default/fleet-run3",
        "adaptive-default/fleet-run4",
        "adaptive-default/fleet-run5",
        "adaptive-default/fleet-run6",
        "adaptive-default/fleet-run7",
        "adaptive-default/fleet-run8",
        "adaptive-default/fleet-run9",
        "adaptive-default/fleet-run10",
        "adaptive-default/fleet-run11",
        "adaptive-default/fleet-run12",
        "adaptive-default/fleet-run13",
        "adaptive-default/fleet-run14",
        "adaptive-default/fleet-run15",
        "adaptive-default/fleet-run16",
        "adaptive-default/fleet-burst0.25-run1",
        "adaptive-default/fleet-burst0.1-run1",
    ],
)
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


UNMEASURED_AGREEMENT = ("no-retries", "draft", "pymongo-native")
"""Policies whose agreement rows run without coverage's tracer, which makes the simulator several
times slower: those rows only re-check committed figures. The closed-fleet simulations of
no-retries and draft are the long ones (several times the others); stock pymongo's row is the
very simulation of the measured ``current`` row (same scenario, seed and simulated policy). The
other rows and the simulator's own tests run the same simulator paths measured."""


def _agreement_params() -> list[Any]:
    """Every fleet run as ``(shape, index)``, unmeasured when its policy is one of the above."""
    report = json.loads((RESULTS / "fleet.json").read_text(encoding="utf-8"))
    return [
        pytest.param(
            shape,
            index,
            marks=[pytest.mark.unmeasured]
            if report["fleet"][shape]["runs"][index]["policy"] in UNMEASURED_AGREEMENT
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


def test_the_hotspot_page_is_the_rendering_of_its_raw_data() -> None:
    """``hotspot.md`` is what ``render_hotspot_report`` makes of ``hotspot.json``: every shape
    ran, each shape's first row is the default policy's, and its chart is committed beside it."""
    from backpressure.bench.hotspot import SHAPES, render_hotspot_report

    report = json.loads((RESULTS / "hotspot.json").read_text(encoding="utf-8"))
    assert (RESULTS / "hotspot.md").read_text(encoding="utf-8") == render_hotspot_report(report)
    rows = report["rows"]
    assert [shape for shape in SHAPES if any(r["shape"] == shape for r in rows)] == list(SHAPES)
    for shape in SHAPES:
        runs = [r for r in rows if r["shape"] == shape and r["kind"] == "run"]
        assert not runs or runs[0]["policy"] == default_policy_name()
    assert (RESULTS / report["chart"]).read_bytes()[:4] == b"\x89PNG"


# -- figures quoted in prose -------------------------------------------------------------------

FLEET_RUNS = ("fleet.json", "fleet-run2.json")
"""The committed real fleet runs the prose quotes (each: both shapes, every policy)."""
_NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four"}


def _fleet_rows(policies: set[str], shape: str = "") -> list[dict[str, float]]:
    """The fleet rows of ``policies`` (of one shape, when given) over every committed run."""
    rows = []
    for name in FLEET_RUNS:
        report = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        for fleet in report["fleet"]:
            rows += [
                run
                for run in fleet["runs"]
                if run["policy"] in policies and (not shape or run["shape"] == shape)
            ]
    assert rows, (policies, shape)
    return rows


def _span(values: list[float], digits: int, unit: str = "") -> str:
    """``low-high`` (or one value when they round alike), with ``digits`` decimals and a unit."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return (low if low == high else f"{low}-{high}") + unit


def _sim_agreement(policy: str) -> list[tuple[float, float]]:
    """(error %, attempts/op) the simulator gives ``policy`` in ``sim-fleet.md``'s agreement
    table (which a test above holds to the simulator and ``fleet.json``), one per shape."""
    text = (RESULTS / "sim-fleet.md").read_text(encoding="utf-8")
    found = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) >= 5 and cells[1] == policy and " / " in cells[2]:
            errors = float(cells[2].split(" / ")[1].rstrip("%"))
            attempts = float(cells[4].split(" / ")[1])
            found.append((errors, attempts))
    assert found, policy
    return found


def prose_figures() -> dict[str, str]:
    """The figures the README and the docs quote in prose, from the committed results."""
    adaptive = _fleet_rows({"adaptive"})
    like_stock = _fleet_rows({"current", "pymongo-native"})
    simulated = _sim_agreement("adaptive")
    latest = json.loads((RESULTS / "latest.json").read_text(encoding="utf-8"))
    fleet = json.loads((RESULTS / "fleet.json").read_text(encoding="utf-8"))
    bench_s, fleet_s = latest["wall_seconds"], fleet["wall_seconds"]
    return {
        "fleet_runs": _NUMBER_WORDS[len(FLEET_RUNS)],
        "adaptive_errors": _span([r["error_fraction"] * 100 for r in adaptive], 1, " %"),
        "adaptive_attempts": _span([r["attempts_per_op"] for r in adaptive], 2),
        "adaptive_attempts_8x8": _span(
            [r["attempts_per_op"] for r in _fleet_rows({"adaptive"}, "8x8")], 2
        ),
        "adaptive_jain_4x16": _span([r["jain"] for r in _fleet_rows({"adaptive"}, "4x16")], 3),
        "adaptive_p99": _span([r["p99_ms"] for r in adaptive], 0, " ms"),
        "stock_p99": _span([r["p99_ms"] for r in _fleet_rows({"pymongo-native"})], 0, " ms"),
        "current_errors": _span([r["error_fraction"] * 100 for r in like_stock], 0, " %"),
        "current_attempts": _span([r["attempts_per_op"] for r in like_stock], 1),
        "sim_adaptive_errors": _span([errors for errors, _ in simulated], 1, " %"),
        "sim_adaptive_attempts": _span([attempts for _, attempts in simulated], 2),
        "bench_seconds": f"{bench_s:.0f}",
        "bench_minutes": f"{bench_s / 60:.0f}",
        "fleet_seconds": f"{fleet_s:.0f}",
        "fleet_minutes": f"{fleet_s / 60:.0f}",
        "total_minutes": f"{(bench_s + fleet_s) / 60:.0f}",
        **_operator_view_figures(),
        **_real_goal_figures(),
        **_criticality_figures(),
        **_pymongo_tests_figures(),
        **_end_detection_figures(),
        **_quiet_sensitivity_figures(),
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
    current = next(row for row in rows if row["policy"] == "current")
    short = next(row for row in rows if row["policy"] == "adaptive" and row["value"] == 0.8)
    return {
        "quiet_current_8x8": f"{current['errors'] * 100:.1f} %",
        "quiet_short_runs": f"{short['competing_runs']} of {short['runs']}",
        "quiet_short_errors": f"{short['errors'] * 100:.2f} %",
        "quiet_short_attempts": f"{short['attempts_per_op']:.3f}",
        "quiet_short_jain_min": f"{short['jain_min']:.3f}",
    }


def _pymongo_tests_figures() -> dict[str, str]:
    """How pymongo's own backpressure tests fared with every client on ``adaptive``."""
    tests = json.loads(
        (RESULTS / "adaptive-default" / "pymongo-tests-adaptive.json").read_text(encoding="utf-8")
    )
    (adaptive,) = [run for run in tests["presets"] if run["preset"] == "adaptive"]
    return {"pymongo_tests_adaptive": f"{adaptive['passed']} passed, {adaptive['failed']} failed"}


def _criticality_figures() -> dict[str, str]:
    """The figures of the committed real criticality runs: ``crit_*`` of runs 1 and 2 (before
    the last chance), ``crit_*_bound`` of runs 3 and 4 (a last chance sent at its bound),
    ``crit_*_lc`` of runs 5 and 6 (sent a fifth of a window before it), ``crit_*_retries``
    of runs 7 and 8 (critical retries kept too) and ``crit_*_split`` of runs 9 and 10 (the
    same code, with the critical half's errors by kind: ``crit_server_split`` and
    ``crit_local_split``)."""
    figures: dict[str, str] = {}
    for suffix, numbers in (
        ("", (1, 2)),
        ("_bound", (3, 4)),
        ("_lc", (5, 6)),
        ("_retries", (7, 8)),
        ("_split", (9, 10)),
        ("_uncapped", (11, 12)),
        ("_young", (13, 14)),
        ("_whole", (15, 16)),
    ):
        runs = _both_runs("criticality", numbers)

        def critical(policy: str, digits: int = 1, runs: list[list[dict[str, Any]]] = runs) -> str:
            return " and ".join(
                f"{_row(rows, policy)['critical_error_rate'] * 100:.{digits}f} %" for rows in runs
            )

        def after_end(policy: str, runs: list[list[dict[str, Any]]] = runs) -> str:
            return " and ".join(
                f"{_row(rows, policy)['after_end'][0] * 100:.0f} %" for rows in runs
            )

        figures |= {
            f"crit_adaptive{suffix}": critical("adaptive"),
            f"crit_adaptive2{suffix}": critical("adaptive", 2),
            f"crit_current{suffix}": critical("current"),
            f"crit_stock{suffix}": critical("pymongo-native"),
            f"crit_sheddable{suffix}": " and ".join(
                f"{_row(rows, 'adaptive')['sheddable_error_rate'] * 100:.0f} %" for rows in runs
            ),
            f"crit_after_adaptive{suffix}": after_end("adaptive"),
            f"crit_after_stock{suffix}": after_end("pymongo-native"),
        }
        # Runs 9 and 10 are the first to record the critical half's errors by kind.
        if all("critical_error_kinds" in _row(rows, "adaptive") for rows in runs):
            for key, kind in (("server", "OperationFailure"), ("local", "LocalOverloadError")):
                figures[f"crit_{key}{suffix}"] = " and ".join(
                    f"{_row(rows, 'adaptive')['critical_error_kinds'].get(kind, 0):,}"
                    for rows in runs
                )
    return figures


def _both_runs(stem: str, numbers: tuple[int, int] = (1, 2)) -> list[list[dict[str, Any]]]:
    """The policies' rows of ``adaptive-default/<stem>-run<N>.json`` for the two ``numbers``."""
    folder = RESULTS / "adaptive-default"
    return [
        json.loads((folder / f"{stem}-run{n}.json").read_text(encoding="utf-8"))["runs"]
        for n in numbers
    ]


def _row(rows: list[dict[str, Any]], policy: str) -> dict[str, Any]:
    """The row of ``policy`` in one run."""
    return next(row for row in rows if row["policy"] == policy)


def fleets_of(stem: str, policy: str) -> dict[str, dict[str, Any]]:
    """``policy``'s run of each fleet shape in ``adaptive-default/<stem>.json``, by shape."""
    page = RESULTS / "adaptive-default" / f"{stem}.json"
    return {
        run["shape"]: run
        for shape in json.loads(page.read_text(encoding="utf-8"))["fleet"]
        for run in shape["runs"]
        if run["policy"] == policy
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


def _burst_fleet_figures() -> dict[str, str]:
    """The real fleet runs at a smaller burst allowance: each shape's figures, 0.25 s then
    0.1 s, per policy (``burst_<policy>_<shape>``)."""
    stems = ("fleet-burst0.25-run1", "fleet-burst0.1-run1")
    figures = {}
    for policy in ("adaptive", "current", "pymongo-native"):
        runs = [fleets_of(stem, policy) for stem in stems]
        if policy == "adaptive":
            competed = sum(sum(run["per_process_competed_s"]) for r in runs for run in r.values())
            figures["burst_competing"] = (
                "no pacer competed in any of them"
                if not competed
                else f"pacers competed {competed:.0f} s"
            )
        for shape in ("8x8", "4x16"):
            figures[f"burst_{policy.replace('-', '_')}_{shape}"] = _runs_figures(
                [run[shape] for run in runs], jain=policy == "adaptive"
            )
    mixed = json.loads(
        (RESULTS / "adaptive-default" / "mixed-fleet-burst0.25-run1.json").read_text("utf-8")
    )
    for policy in ("current", "adaptive"):
        runs = [run for run in mixed["runs"] if run["upgraded"]["policy"] == policy]
        assert [run["stock_processes"] for run in runs] == [1, 4, 7]
        figures[f"burst_mixed_{policy}"] = _and_list(
            [f"{run['share'] * 100:.0f} %" for run in runs]
        )
    figures["burst_mixed_competed"] = _and_list(
        [
            f"{run['upgraded']['competed_s'] / run['upgraded']['processes']:.0f} s"
            for run in mixed["runs"]
            if run["upgraded"]["policy"] == "adaptive"
        ]
    )
    return figures


def _and_list(items: list[str]) -> str:
    """``a, b and c``."""
    return ", ".join(items[:-1]) + " and " + items[-1]


def _real_goal_figures() -> dict[str, str]:
    """The figures of the committed real recovery, fault-soak and mixed-fleet runs."""
    recovery, soaks = _both_runs("recovery"), _both_runs("faults")

    def first_second(policy: str) -> str:
        return " and ".join(f"{_row(rows, policy)['shares'][0] * 100:.0f} %" for rows in recovery)

    def acked(policy: str) -> str:
        return " and ".join(
            f"{_row(rows, policy)['acked'] / _row(rows, 'current')['acked']:.2f}" for rows in soaks
        )

    mixed = [
        json.loads(
            (RESULTS / "adaptive-default" / f"mixed-fleet-run{n}.json").read_text(encoding="utf-8")
        )
        for n in (5, 6)
    ]

    def shares(policy: str) -> str:
        runs = []
        for report in mixed:
            found = [
                f"{run['share'] * 100:.0f} %"
                for run in report["runs"]
                if run["upgraded"]["policy"] == policy
            ]
            runs.append(_and_list(found))
        return " in run 5; ".join(runs) + " in run 6"

    def run_pairs(rows_of_runs: list[list[dict[str, Any]]], text: Any) -> str:
        return "; ".join(text(rows) for rows in rows_of_runs)

    def adaptive_fleets(number: int) -> dict[str, dict[str, Any]]:
        return fleets_of(f"fleet-run{number}", "adaptive")

    fleets, fleets4 = adaptive_fleets(5), adaptive_fleets(4)

    def fleet(shape: str, runs: dict[str, dict[str, Any]] = fleets) -> str:
        run = runs[shape]
        return (
            f"{run['error_fraction'] * 100:.1f} % errors at {run['attempts_per_op']:.2f} "
            f"attempts per operation, Jain {run['jain']:.3f}"
        )

    def phase_jain(shape: str, runs: dict[str, dict[str, Any]] = fleets) -> str:
        return _and_list([f"{j:.3f}" for j in runs[shape]["phase_jain"]])

    def upgraded(number: int) -> list[dict[str, Any]]:
        page = RESULTS / "adaptive-default" / f"mixed-fleet-run{number}.json"
        runs = json.loads(page.read_text(encoding="utf-8"))["runs"]
        return [run for run in runs if run["upgraded"]["policy"] == "adaptive"]

    def mixed_shares(runs: list[dict[str, Any]]) -> str:
        return _and_list([f"{run['share'] * 100:.0f} %" for run in runs])

    def mixed_competed(runs: list[dict[str, Any]]) -> str:
        seconds = [run["upgraded"]["competed_s"] / run["upgraded"]["processes"] for run in runs]
        return _and_list([f"{value:.0f} s" for value in seconds])

    def recovery_run(number: int) -> dict[str, str]:
        page = RESULTS / "adaptive-default" / f"recovery-run{number}.json"
        rows = json.loads(page.read_text(encoding="utf-8"))["runs"]
        adaptive = _row(rows, "adaptive")
        first = _and_list(
            [
                f"{_row(rows, policy)['shares'][0] * 100:.0f} % with {name}"
                for policy, name in (
                    ("adaptive", "`adaptive`"),
                    ("pymongo-native", "stock pymongo"),
                    ("current", "the default"),
                )
            ]
        )
        return {
            f"recovery_run{number}_first": first,
            f"recovery_run{number}_adaptive": (
                f"{adaptive['shares'][1] * 100:.0f} % in the second, and "
                f"{adaptive['ratio_to_stock']:.2f} of stock's successes from 1 s to 4 s"
            ),
        }

    def recovery_pair(numbers: tuple[int, int], key: str = "recovery_latest") -> dict[str, str]:
        runs = [
            json.loads(
                (RESULTS / "adaptive-default" / f"recovery-run{n}.json").read_text(encoding="utf-8")
            )["runs"]
            for n in numbers
        ]

        def share(policy: str, second: int) -> str:
            return _and_list(
                [f"{_row(rows, policy)['shares'][second] * 100:.0f} %" for rows in runs]
            )

        return {
            f"{key}_first": share("adaptive", 0),
            f"{key}_second": share("adaptive", 1),
            f"{key}_stock": share("pymongo-native", 0),
            f"{key}_current": share("current", 0),
            f"{key}_ratio": _and_list(
                [f"{_row(rows, 'adaptive')['ratio_to_stock']:.2f}" for rows in runs]
            ),
        }

    upgraded7, upgraded8, upgraded9, upgraded10 = (upgraded(n) for n in (7, 8, 9, 10))
    upgraded17, upgraded18, upgraded19, upgraded20 = (upgraded(n) for n in (17, 18, 19, 20))

    def fleet_pair(numbers: tuple[int, int], key: str) -> dict[str, str]:
        """Both fleets of two runs under ``key_8x8`` and ``key_4x16``, and the 4 x 16 fleet's
        Jain within the 300/s step under ``key_4x16_step``."""
        pair = [adaptive_fleets(n) for n in numbers]
        figures = {
            f"{key}_{shape}": _runs_figures([fleets[shape] for fleets in pair], " errors")
            for shape in ("8x8", "4x16")
        }
        figures[f"{key}_4x16_step"] = _and_list(
            [f"{fleets['4x16']['phase_jain'][2]:.3f}" for fleets in pair]
        )
        return figures

    lone_stock = next(run for run in upgraded7 if run["stock_processes"] == 1)
    equal = (lone_stock["stock"]["successes"] + lone_stock["upgraded"]["successes"]) / (
        lone_stock["stock"]["processes"] + lone_stock["upgraded"]["processes"]
    )

    adaptive_share = lone_stock["upgraded"]["successes"] / lone_stock["upgraded"]["processes"]
    low = fleets["8x8"]["phases"][1]

    return {
        "real_mixed_run7_equal": (
            f"{adaptive_share / equal * 100:.0f} % of an equal share of the fleet's successes "
            f"and the stock process {lone_stock['stock']['successes'] / equal * 100:.0f} %"
        ),
        "today_8x8": fleet("8x8"),
        "today_4x16": fleet("4x16"),
        "today_4x16_phases": phase_jain("4x16"),
        "today_8x8_phases": phase_jain("8x8"),
        "run4_8x8": fleet("8x8", fleets4),
        "run4_4x16": fleet("4x16", fleets4),
        "run4_4x16_phases": phase_jain("4x16", fleets4),
        "today_8x8_low_phase": f"{low['goodput_per_s'] / low['rate'] * 100:.1f} %",
        "real_mixed_run7": mixed_shares(upgraded7),
        "real_mixed_run7_competed": mixed_competed(upgraded7),
        "real_mixed_run8": mixed_shares(upgraded8),
        "real_mixed_run8_competed": mixed_competed(upgraded8),
        "real_mixed_run9": mixed_shares(upgraded9),
        "real_mixed_run9_competed": mixed_competed(upgraded9),
        "real_mixed_run10": mixed_shares(upgraded10),
        "real_mixed_run10_competed": mixed_competed(upgraded10),
        "real_mixed_run17": mixed_shares(upgraded17),
        "real_mixed_run17_competed": mixed_competed(upgraded17),
        "real_mixed_run18": mixed_shares(upgraded18),
        "real_mixed_run18_competed": mixed_competed(upgraded18),
        "real_mixed_run19": mixed_shares(upgraded19),
        "real_mixed_run19_competed": mixed_competed(upgraded19),
        "real_mixed_run20": mixed_shares(upgraded20),
        "real_mixed_run20_competed": mixed_competed(upgraded20),
        **fleet_pair((13, 14), "young"),
        **fleet_pair((15, 16), "whole"),
        **_burst_fleet_figures(),
        **recovery_run(3),
        **recovery_run(4),
        **recovery_pair((7, 8)),
        **recovery_pair((9, 10), "recovery_uncapped"),
        **recovery_pair((11, 12), "recovery_young"),
        **recovery_pair((13, 14), "recovery_whole"),
        **_soak_pair_figures((12, 13), "soak_young"),
        **_soak_pair_figures((14, 15), "soak_whole"),
        **_soak_pair_figures((17, 18), "soak_stall"),
        **_interleaved_soak_figures(),
        "soak_stock_old": acked("pymongo-native"),
        "recovery_current_vs_stock": " in the first run, ".join(
            f"{_row(rows, 'current')['shares'][0] * 100:.0f} % against "
            + ("stock's " if n == 0 else "")
            + f"{_row(rows, 'pymongo-native')['shares'][0] * 100:.0f} %"
            for n, rows in enumerate(recovery)
        ),
        "recovery_adaptive_ratio": " and ".join(
            f"{_row(rows, 'adaptive')['ratio_to_stock']:.2f}" for rows in recovery
        ),
        "real_recovery_adaptive": first_second("adaptive"),
        "real_recovery_stock": first_second("pymongo-native"),
        "real_recovery_current": first_second("current"),
        "real_mixed_adaptive": shares("adaptive"),
        "real_mixed_run4": mixed_shares(upgraded(4)),
        "real_mixed_current": shares("current"),
    }


SOAK_RUNS = (3, 4)
"""The interleaved real fault soaks the pages quote."""


def _per_round(reports: list[dict[str, Any]], policy: str) -> str:
    """``policy``'s acked writes over the default's in each soak of ``reports``: the mean of
    the rounds' ratios and its 95 % interval."""
    texts = []
    for report in reports:
        row = _row(report["runs"], policy)
        texts.append(f"{row['ratio_mean']:.3f} ({row['ratio_low']:.3f}-{row['ratio_high']:.3f})")
    return " and ".join(texts)


def _soak_pair_figures(numbers: tuple[int, int], key: str) -> dict[str, str]:
    """The figures of two interleaved fault soaks (``faults-run<N>``) under keys ``key_*``:
    each policy's acked writes over the default's (mean of the rounds and its interval), the
    errors beside the default's, and the acks around tight limits and all-reject windows."""
    reports = [
        json.loads(
            (RESULTS / "adaptive-default" / f"faults-run{n}.json").read_text(encoding="utf-8")
        )
        for n in numbers
    ]
    rounds = [rounds_from_report(report) for report in reports]

    def kind(policy: str, name: str) -> str:
        return " and ".join(f"{kind_ratios(one, policy)[name]:.2f}" for one in rounds)

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


def _interleaved_soak_figures() -> dict[str, str]:
    """The figures of the interleaved fault soaks (``faults-run3``/``run4``) and of the
    simulator's calibrated ``faults`` section of ``sim-fleet.md``."""
    reports = [
        json.loads(
            (RESULTS / "adaptive-default" / f"faults-run{n}.json").read_text(encoding="utf-8")
        )
        for n in SOAK_RUNS
    ]
    rounds = [rounds_from_report(report) for report in reports]

    def of_totals(policy: str) -> str:
        return " and ".join(
            f"{_row(r['runs'], policy)['acked'] / _row(r['runs'], 'current')['acked']:.3f}"
            for r in reports
        )

    def kind(policy: str, name: str) -> str:
        return " and ".join(f"{kind_ratios(one, policy)[name]:.3f}" for one in rounds)

    def cpu(policy: str, field: str = "cpu_ms_per_ack") -> str:
        return " and ".join(f"{_row(r['runs'], policy)[field]:.2f}" for r in reports)

    text = (RESULTS / "sim-fleet.md").read_text(encoding="utf-8")
    section = text[text.index("## `faults`") : text.index("## `fleet`")]
    goal = next(line for line in section.splitlines() if line.startswith("- **adaptive**"))
    share = goal.split("acked >= 98% of current's: ")[1].split("(")[1].split(")")[0]
    table = section[section.index("Successes by fault kind") :].splitlines()
    header = next(line for line in table if line.startswith("| policy |"))
    row = next(line for line in table if line.startswith("| adaptive |"))
    cells = dict(zip(header.split("|")[2:-1], row.split("|")[2:-1]))

    def simulated(name: str) -> str:
        return cells[f" {name} "].split("(")[1].split(")")[0]

    return {
        "soak_adaptive_rounds": _per_round(reports, "adaptive"),
        "soak_stock_rounds": _per_round(reports, "pymongo-native"),
        "soak_adaptive_totals": of_totals("adaptive"),
        "soak_error_pairs": "; ".join(
            f"{_row(r['runs'], 'adaptive')['errors']:,} against "
            f"{_row(r['runs'], 'current')['errors']:,}"
            for r in reports
        ),
        "soak_limit_adaptive": kind("adaptive", "limit"),
        "soak_limit_stock": kind("pymongo-native", "limit"),
        "soak_overload_adaptive": kind("adaptive", "overload"),
        "soak_overload_stock": kind("pymongo-native", "overload"),
        "soak_none_adaptive": kind("adaptive", "none"),
        "soak_none_stock": kind("pymongo-native", "none"),
        "soak_cpu_adaptive": cpu("adaptive"),
        "soak_cpu_current": cpu("current"),
        "soak_cores_adaptive": cpu("adaptive", "cpu_cores"),
        "soak_cores_current": cpu("current", "cpu_cores"),
        "sim_soak_adaptive": share,
        "sim_soak_limit": simulated("limit"),
        "sim_soak_overload": simulated("overload"),
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


_SOAK_STALL = (
    "In soaks 17 and 18 (`faults-run17.md`, `faults-run18.md`: 192 s of schedule 1 in 16 "
    "rounds, after a paced attempt whose pool was reset selects again and a pacer takes no test "
    "from a stall, `81df428`) `adaptive` acked {soak_stall_adaptive} of the default's writes "
    "(stock pymongo {soak_stall_stock}) with {soak_stall_errors} errors; from a tight limit's "
    "start to 1 s after its end {soak_stall_limit} of the default's acks, around the all-reject "
    "windows {soak_stall_overload} and around closed connections {soak_stall_close}"
)
"""The sentence both pages give fault soaks 17 and 18 in."""

PROSE: list[tuple[str, str]] = [
    (
        "docs/adaptive.md",
        "On real processes, with the fleet benchmark's `--burst-seconds` at 0.25 and 0.1 "
        "(`fleet-burst0.25-run1.md`, `fleet-burst0.1-run1.md`, one run each), the 8 x 8 fleet "
        "on `adaptive` failed {burst_adaptive_8x8}, and the 4 x 16 fleet {burst_adaptive_4x16} "
        "({burst_competing}); the default failed {burst_current_8x8} (8 x 8) and "
        "{burst_current_4x16} (4 x 16), stock pymongo {burst_pymongo_native_8x8} and "
        "{burst_pymongo_native_4x16}.",
    ),
    (
        "docs/adaptive.md",
        "In a real mixed fleet with a bucket of a quarter of a second (`--burst-seconds 0.25`, "
        "`mixed-fleet-burst0.25-run1.md`, one run) an adaptive "
        "process got {burst_mixed_adaptive} of a stock process's successes at 1, 4 and 7 stock "
        "processes of 8, competing for {burst_mixed_competed} on average, and a process on the "
        "default {burst_mixed_current}.",
    ),
    (
        "README.md",
        "In the real process fleets (8 x 8 and 4 x 16, {fleet_runs} committed runs each) "
        "`adaptive` fails {adaptive_errors} of the operations where `current` and stock pymongo "
        "fail {current_errors}",
    ),
    ("README.md", "| `make bench` | the benchmarks (about {total_minutes} minutes;"),
    (
        "docs/presets.md",
        "{adaptive_errors} errors where stock pymongo loses {current_errors} in the measured "
        "fleets",
    ),
    ("docs/presets.md", "attempts per operation are {adaptive_attempts},"),
    (
        "docs/simulator.md",
        "the real runs have the default `current` failing {current_errors} of the operations at "
        "{current_attempts} attempts each, exactly as stock pymongo does, and `adaptive` "
        "{adaptive_errors} at {adaptive_attempts}; the simulator gives `adaptive` "
        "{sim_adaptive_errors} at {sim_adaptive_attempts}",
    ),
    (
        "docs/adaptive.md",
        "{fleet_runs} committed real runs of each) the default `current` fails {current_errors} "
        "of the operations at {current_attempts} attempts each, exactly as stock pymongo does, "
        "and `adaptive` {adaptive_errors} at {adaptive_attempts} attempts (the simulator gives "
        "`adaptive` {sim_adaptive_errors} at {sim_adaptive_attempts})",
    ),
    ("docs/adaptive.md", "({adaptive_errors} errors in both real fleets"),
    ("docs/adaptive.md", "attempts per operation in the 8 x 8 fleet ({adaptive_attempts_8x8},"),
    ("docs/adaptive.md", "Jain's fairness index in the 4 x 16 fleet ({adaptive_jain_4x16},"),
    ("docs/adaptive.md", "p99 ({adaptive_p99} against stock's {stock_p99} in the fleets"),
    (
        "docs/benchmarks.md",
        "about {bench_minutes} minutes: {bench_seconds} s in the committed run, `latest.json`, "
        "plus about {fleet_minutes} more for the fleet and transient parts: {fleet_seconds} s "
        "in theirs, `fleet.json`",
    ),
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
    (
        "docs/benchmarks.md",
        "`adaptive` acked {soak_adaptive_rounds} of `current`'s writes per round (mean and "
        "95 % interval; {soak_adaptive_totals} of the totals), with fewer errors "
        "({soak_error_pairs}); stock pymongo, which runs `current`'s loop, acked "
        "{soak_stock_rounds}.",
    ),
    (
        "docs/benchmarks.md",
        "from a tight limit's start to 1 s after its end it acked {soak_limit_adaptive} of "
        "`current`'s writes (stock pymongo {soak_limit_stock}), around the all-reject windows "
        "{soak_overload_adaptive} (stock {soak_overload_stock}), and outside the faults "
        "{soak_none_adaptive} (stock {soak_none_stock}). Its client processes spent "
        "{soak_cpu_adaptive} ms of CPU per acked write against `current`'s {soak_cpu_current}, "
        "using {soak_cores_adaptive} cores against {soak_cores_current}",
    ),
    (
        "docs/benchmarks.md",
        "so their ratios (stock pymongo {soak_stock_old} of `current`'s, the same loop)",
    ),
    (
        "docs/benchmarks.md",
        "(`current` has stock pymongo's retry loop: {recovery_current_vs_stock} in the second)",
    ),
    (
        "docs/benchmarks.md",
        "`adaptive`'s first second was {real_recovery_adaptive} of the demand",
    ),
    ("docs/benchmarks.md", "its 1-4 s ratio to stock was {recovery_adaptive_ratio}."),
    (
        "docs/adaptive.md",
        "one client's consecutive pushbacks over the last 7 s of the overload were a median "
        "{end_gap_median} apart, and {end_longer_1s} of the gaps were longer than 1 s. A client "
        "that took 1 s without a pushback for the end could serve at most {end_bound_1s} of the "
        "first second even if it then sent its whole demand at once (it is paced at {end_paced} "
        "of the demand until then, on average {end_delay_1s} into that second). To serve 90 % it "
        "would have to take 300 ms of quiet for the end, and {end_longer_short} of the gaps",
    ),
    (
        "docs/adaptive.md",
        "first second and {recovery_latest_second} in the second, stock pymongo "
        "{recovery_latest_stock} in the first, and `adaptive` had {recovery_latest_ratio} of "
        "stock's successes from 1 s to 4 s",
    ),
    (
        "docs/benchmarks.md",
        "`adaptive` served {recovery_latest_first} of the demand in the first second and "
        "{recovery_latest_second} in the second, stock pymongo {recovery_latest_stock}, the "
        "default {recovery_latest_current}; from 1 s to 4 s `adaptive` had {recovery_latest_ratio} "
        "of stock's successes",
    ),
    (
        "docs/benchmarks.md",
        "`adaptive` served {recovery_uncapped_first} of the demand in the first second and "
        "{recovery_uncapped_second} in the second, stock pymongo {recovery_uncapped_stock}, the "
        "default {recovery_uncapped_current}; from 1 s to 4 s `adaptive` had "
        "{recovery_uncapped_ratio} of stock's successes",
    ),
    (
        "docs/adaptive.md",
        "`adaptive` then served {recovery_uncapped_first} of the demand in the first second and "
        "{recovery_uncapped_second} in the second, and {recovery_uncapped_ratio} of stock's "
        "successes from 1 s to 4 s",
    ),
    (
        "docs/adaptive.md",
        "8 x 8 fleet {today_8x8}, and in the 4 x 16 fleet {today_4x16}",
    ),
    (
        "docs/adaptive.md",
        "Jain within the 200/s, 100/s and 300/s steps of the 4 x 16 fleet was {run4_4x16_phases}",
    ),
    (
        "docs/adaptive.md",
        "Run 4 (`fleet-run4.md`, before that change) gave {run4_8x8} and {run4_4x16}",
    ),
    (
        "docs/adaptive.md",
        "Jain within the steps was {today_8x8_phases} in the 8 x 8 fleet and {today_4x16_phases} "
        "in the 4 x 16 one",
    ),
    ("docs/adaptive.md", "served {today_8x8_low_phase} of the capacity in the 100/s step"),
    (
        "docs/adaptive.md",
        "With one stock process of 8, an adaptive process got {real_mixed_run7_equal}",
    ),
    (
        "docs/adaptive.md",
        "In run 8 (`mixed-fleet-run8.md`, a quiet machine, after the fix of the test's window) an "
        "adaptive process got {real_mixed_run8}, competing for {real_mixed_run8_competed}",
    ),
    (
        "docs/adaptive.md",
        "the first second after the overload served {recovery_run3_first}, and `adaptive` "
        "{recovery_run3_adaptive}",
    ),
    (
        "docs/adaptive.md",
        "In a fourth (`recovery-run4.md`, load average 0.9-1.1, after the neighbour test's cut "
        "acted at once) it served {recovery_run4_first}, and `adaptive` {recovery_run4_adaptive}",
    ),
    (
        "docs/adaptive.md",
        "In run 9 (`mixed-fleet-run9.md`, after the neighbour test's cut acted at once) an "
        "adaptive process got {real_mixed_run9}, competing for {real_mixed_run9_competed}, and in "
        "run 10 {real_mixed_run10}, competing for {real_mixed_run10_competed}",
    ),
    (
        "docs/adaptive.md",
        "In run 7 an adaptive process got {real_mixed_run7} of a stock process's successes at 1, "
        "4 and 7 stock processes of 8, its pacers competing for {real_mixed_run7_competed}",
    ),
    (
        "docs/adaptive.md",
        "at 1, 4 and 7 stock processes of 8 an adaptive process got {real_mixed_adaptive} of a "
        "stock process's successes, where a process on the default got {real_mixed_current}",
    ),
    (
        "docs/benchmarks.md",
        "The run before that test (`mixed-fleet-run4.md`) gave an adaptive process "
        "{real_mixed_run4} of a stock process's successes.",
    ),
    (
        "docs/adaptive.md",
        "serves {real_recovery_adaptive} of the demand with `adaptive`, {real_recovery_stock} with "
        "stock pymongo and {real_recovery_current} with the default",
    ),
    (
        "docs/adaptive.md",
        "`adaptive` acked {soak_adaptive_rounds} of the default's writes per round (mean and 95 % "
        "interval; {soak_adaptive_totals} of the totals), with fewer errors ({soak_error_pairs}); "
        "stock pymongo, which runs the default's loop, acked {soak_stock_rounds}.",
    ),
    (
        "docs/adaptive.md",
        "from a tight limit's start to 1 s after its end it acked {soak_limit_adaptive} of the "
        "default's writes, around all-reject windows {soak_overload_adaptive}, where stock "
        "pymongo got {soak_limit_stock} around tight limits and {soak_overload_stock} around "
        "all-reject windows.",
    ),
    (
        "docs/adaptive.md",
        "Its client processes also spent {soak_cpu_adaptive} ms of CPU per acked write against "
        "the default's {soak_cpu_current}, using {soak_cores_adaptive} cores against "
        "{soak_cores_current}",
    ),
    (
        "docs/adaptive.md",
        "gives `adaptive` {sim_soak_adaptive} of the default's acks, {sim_soak_limit} around "
        "tight limits and {sim_soak_overload} around all-reject windows",
    ),
    (
        "docs/adaptive.md",
        "pymongo's own backpressure tests, sync and async, pass with every client on `adaptive` "
        "({pymongo_tests_adaptive}:",
    ),
    (
        "docs/adaptive.md",
        "`adaptive` failed {crit_adaptive} of the critical operations, the default "
        "{crit_current} and stock pymongo {crit_stock}, and served {crit_after_adaptive} of the "
        "arrivals of the first second after the end (stock pymongo {crit_after_stock})",
    ),
    (
        "docs/adaptive.md",
        "`adaptive` failed {crit_adaptive_lc} of the critical operations, the default "
        "{crit_current_lc} and stock pymongo {crit_stock_lc}, and served "
        "{crit_after_adaptive_lc} of the arrivals of the first second after the end (stock "
        "pymongo {crit_after_stock_lc})",
    ),
    (
        "docs/adaptive.md",
        "`adaptive` failed {crit_adaptive_retries} of the critical operations, the default "
        "{crit_current_retries} and stock pymongo {crit_stock_retries}, and served "
        "{crit_after_adaptive_retries} of the arrivals of the first second after the end (stock "
        "pymongo {crit_after_stock_retries})",
    ),
    (
        "docs/adaptive.md",
        "In runs 9 and 10 (`criticality-run9.md`, `criticality-run10.md`, the same code) "
        "`adaptive` failed {crit_adaptive_split} of the critical operations, the default "
        "{crit_current_split} and stock pymongo {crit_stock_split}, and served "
        "{crit_after_adaptive_split} of the arrivals of the first second after the end (stock "
        "pymongo {crit_after_stock_split}); of its critical errors, {crit_server_split} were the "
        "server's overload error and {crit_local_split} local refusals",
    ),
    (
        "docs/benchmarks.md",
        "In runs 9 and 10 (`criticality-run9.md`, `criticality-run10.md`, the same code as "
        "runs 7 and 8, the first to list the critical half's errors by kind) `adaptive` failed "
        "{crit_adaptive_split} of the critical operations and {crit_sheddable_split} of the "
        "sheddable ones, stock pymongo {crit_stock_split} and the default "
        "{crit_current_split}. Of its critical errors {crit_server_split} were the server's "
        "overload error and {crit_local_split} local refusals. It served "
        "{crit_after_adaptive_split} of the arrivals of the first second after the end (stock "
        "pymongo {crit_after_stock_split}).",
    ),
    (
        "docs/benchmarks.md",
        "`adaptive` failed {crit_adaptive2_uncapped} of the critical operations",
    ),
    (
        "docs/benchmarks.md",
        "stock pymongo {crit_stock_uncapped} and the default {crit_current_uncapped}. Of its "
        "critical errors {crit_server_uncapped} were the server's overload error and "
        "{crit_local_uncapped} local refusals. It served {crit_after_adaptive_uncapped} of the "
        "arrivals of the first second after the end ({crit_after_adaptive_split} in runs 9 and "
        "10; stock pymongo {crit_after_stock_uncapped})",
    ),
    (
        "docs/adaptive.md",
        "`adaptive` failed {crit_adaptive2_uncapped} of the critical operations, the default "
        "{crit_current_uncapped} and stock pymongo {crit_stock_uncapped}, and served "
        "{crit_after_adaptive_uncapped} of the arrivals of the first second after the end (stock "
        "pymongo {crit_after_stock_uncapped})",
    ),
    (
        "docs/adaptive.md",
        "In fleet runs 13 and 14 (`fleet-run13.md`, `fleet-run14.md`, after a young overload "
        "ends sooner, `f3e1502`) the 8 x 8 fleet had {young_8x8}, and the 4 x 16 fleet "
        "{young_4x16} ({young_4x16_step} within the 300/s step)",
    ),
    (
        "docs/benchmarks.md",
        "the 8 x 8 fleet had {young_8x8}, and the 4 x 16 fleet {young_4x16} "
        "({young_4x16_step} within the 300/s step)",
    ),
    (
        "docs/adaptive.md",
        "In fleet runs 15 and 16 (`fleet-run15.md`, `fleet-run16.md`, after every test's cut "
        "lasts the whole half window, `4ebf3d2`) the 8 x 8 fleet had {whole_8x8}, and the 4 x 16 "
        "fleet {whole_4x16} ({whole_4x16_step} within the 300/s step)",
    ),
    (
        "docs/benchmarks.md",
        "In runs 15 and 16, after every test's cut lasts the whole half window (`4ebf3d2`), the "
        "8 x 8 fleet had {whole_8x8}, and the 4 x 16 fleet {whole_4x16} ({whole_4x16_step} "
        "within the 300/s step)",
    ),
    (
        "docs/adaptive.md",
        "In recovery runs 13 and 14 (`recovery-run13.md`, `recovery-run14.md`, after `4ebf3d2`) "
        "`adaptive` served {recovery_whole_first} of the demand in the first second and "
        "{recovery_whole_second} in the second, and {recovery_whole_ratio} of stock's successes "
        "from 1 s to 4 s",
    ),
    (
        "docs/benchmarks.md",
        "In runs 13 and 14 (`recovery-run13.md`, `recovery-run14.md`, after `4ebf3d2`) "
        "`adaptive` served {recovery_whole_first} of the demand in the first second and "
        "{recovery_whole_second} in the second, stock pymongo {recovery_whole_stock}, the "
        "default {recovery_whole_current}; from 1 s to 4 s `adaptive` had {recovery_whole_ratio} "
        "of stock's successes",
    ),
    (
        "docs/adaptive.md",
        "In soaks 14 and 15 (`faults-run14.md`, `faults-run15.md`, after `4ebf3d2`) `adaptive` "
        "acked {soak_whole_adaptive} of the default's writes (stock pymongo {soak_whole_stock}) "
        "with {soak_whole_errors} errors; from a tight limit's start to 1 s after its end "
        "{soak_whole_limit} of the default's acks, around the all-reject windows "
        "{soak_whole_overload}",
    ),
    (
        "docs/benchmarks.md",
        "In soaks 14 and 15 (`faults-run14.md`, `faults-run15.md`, after `4ebf3d2`) `adaptive` "
        "acked {soak_whole_adaptive} of the default's writes (stock pymongo {soak_whole_stock}) "
        "with {soak_whole_errors} errors; from a tight limit's start to 1 s after its end "
        "{soak_whole_limit} of the default's acks, around the all-reject windows "
        "{soak_whole_overload}",
    ),
    *((page, _SOAK_STALL) for page in ("docs/adaptive.md", "docs/benchmarks.md")),
    (
        "docs/adaptive.md",
        "In runs 19 and 20 (`mixed-fleet-run19.md`, `mixed-fleet-run20.md`, after `4ebf3d2`) an "
        "adaptive process got {real_mixed_run19}, competing for {real_mixed_run19_competed}, and "
        "{real_mixed_run20}, competing for {real_mixed_run20_competed}",
    ),
    (
        "docs/benchmarks.md",
        "In runs 19 and 20 (after `4ebf3d2`) an adaptive process got {real_mixed_run19} (run 19) "
        "and {real_mixed_run20} (run 20) of a stock process's successes",
    ),
    (
        "docs/adaptive.md",
        "In runs 15 and 16 (`criticality-run15.md`, `criticality-run16.md`, after `4ebf3d2`) "
        "`adaptive` failed {crit_adaptive2_whole} of the critical operations, the default "
        "{crit_current_whole} and stock pymongo {crit_stock_whole}, and served "
        "{crit_after_adaptive_whole} of the arrivals of the first second after the end (stock "
        "pymongo {crit_after_stock_whole})",
    ),
    (
        "docs/benchmarks.md",
        "In runs 15 and 16 (`criticality-run15.md`, `criticality-run16.md`, after `4ebf3d2`) "
        "`adaptive` failed {crit_adaptive2_whole} of the critical operations and "
        "{crit_sheddable_whole} of the sheddable ones, stock pymongo {crit_stock_whole} and the "
        "default {crit_current_whole}; it served {crit_after_adaptive_whole} of the arrivals of "
        "the first second after the end (stock pymongo {crit_after_stock_whole})",
    ),
    (
        "docs/adaptive.md",
        "In recovery runs 11 and 12 (`recovery-run11.md`, `recovery-run12.md`, after `f3e1502`) "
        "`adaptive` served {recovery_young_first} of the demand in the first second and "
        "{recovery_young_second} in the second, and {recovery_young_ratio} of stock's successes "
        "from 1 s to 4 s",
    ),
    (
        "docs/benchmarks.md",
        "`adaptive` served {recovery_young_first} of the demand in the first second and "
        "{recovery_young_second} in the second, stock pymongo {recovery_young_stock}, the "
        "default {recovery_young_current}; from 1 s to 4 s `adaptive` had {recovery_young_ratio} "
        "of stock's successes",
    ),
    (
        "docs/adaptive.md",
        "`adaptive` acked {soak_young_adaptive} of the default's writes (stock pymongo "
        "{soak_young_stock}) with {soak_young_errors} errors; from a tight limit's start to 1 s "
        "after its end {soak_young_limit} of the default's acks, around the all-reject windows "
        "{soak_young_overload}",
    ),
    (
        "docs/benchmarks.md",
        "`adaptive` acked {soak_young_adaptive} of the default's writes (stock pymongo "
        "{soak_young_stock}) with {soak_young_errors} errors; from a tight limit's start to 1 s "
        "after its end {soak_young_limit} of the default's acks, around the all-reject windows "
        "{soak_young_overload}",
    ),
    (
        "docs/adaptive.md",
        "In runs 17 and 18 (`mixed-fleet-run17.md`, `mixed-fleet-run18.md`, after a competing "
        "pacer tests at one instant in 16) an adaptive process got {real_mixed_run17}, competing "
        "for {real_mixed_run17_competed}, and {real_mixed_run18}, competing for "
        "{real_mixed_run18_competed}",
    ),
    (
        "docs/benchmarks.md",
        "an adaptive process got {real_mixed_run17} (run 17) and {real_mixed_run18} (run 18) of "
        "a stock process's successes at 1, 4 and 7 stock processes of 8",
    ),
    (
        "docs/adaptive.md",
        "In runs 13 and 14 (`criticality-run13.md`, `criticality-run14.md`, after `f3e1502`) "
        "`adaptive` failed {crit_adaptive2_young} of the critical operations, the default "
        "{crit_current_young} and stock pymongo {crit_stock_young}, and served "
        "{crit_after_adaptive_young} of the arrivals of the first second after the end (stock "
        "pymongo {crit_after_stock_young})",
    ),
    (
        "docs/benchmarks.md",
        "`adaptive` failed {crit_adaptive2_young} of the critical operations and "
        "{crit_sheddable_young} of the sheddable ones, stock pymongo {crit_stock_young} and the "
        "default {crit_current_young}; it served {crit_after_adaptive_young} of the arrivals of "
        "the first second after the end (stock pymongo {crit_after_stock_young})",
    ),
    (
        "docs/benchmarks.md",
        "In both runs before the last chance (`criticality-run1.md`, `criticality-run2.md`) "
        "`adaptive` failed {crit_adaptive} of the critical operations and {crit_sheddable} of "
        "the sheddable ones, stock pymongo {crit_stock} and the default {crit_current},",
    ),
    (
        "docs/benchmarks.md",
        "`adaptive` failed {crit_adaptive_lc} of the critical operations and "
        "{crit_sheddable_lc} of the sheddable ones, stock pymongo {crit_stock_lc} and the "
        "default {crit_current_lc},",
    ),
    (
        "docs/benchmarks.md",
        "`adaptive` failed {crit_adaptive_retries} of the critical operations and "
        "{crit_sheddable_retries} of the sheddable ones, stock pymongo {crit_stock_retries} and "
        "the default {crit_current_retries}: **the goal is met in both runs**",
    ),
    (
        "docs/benchmarks.md",
        "It served {crit_after_adaptive_retries} of the arrivals of the first second after the "
        "end (stock pymongo {crit_after_stock_retries}),",
    ),
    (
        "docs/benchmarks.md",
        "It served {crit_after_adaptive_lc} of the arrivals of the first second after the end "
        "(stock pymongo {crit_after_stock_lc}),",
    ),
    (
        "docs/benchmarks.md",
        "Runs 3 and 4 (`criticality-run3.md`, `criticality-run4.md`) sent the last chance at "
        "the bound itself: `adaptive` failed {crit_adaptive_bound} of the critical operations, "
        "stock pymongo {crit_stock_bound} and the default {crit_current_bound},",
    ),
    (
        "docs/adaptive.md",
        "(goals 1.1 and 1 %; {whole_8x8} in fleet runs 15 and 16)",
    ),
    (
        "docs/adaptive.md",
        "(goal 95 % at 1, 4 and 7 stock processes of 8; {real_mixed_run19} in mixed-fleet run "
        "19, {real_mixed_run20} in run 20)",
    ),
    (
        "docs/adaptive.md",
        "would then send as the default's loop does ({quiet_current_8x8} errors in the simulated "
        "8 x 8 fleet)",
    ),
    (
        "docs/adaptive.md",
        "(goal 90 % of the demand; {recovery_whole_first} in recovery runs 13 and 14, run 13's "
        "from pacers that competed among peers) | the end shows only as replies that are no "
        "longer pushed back, and a converged pacer's pushbacks are a median {end_gap_median} "
        "apart: a client that takes 1 s of quiet for the end serves at most {end_bound_1s} of "
        "the first second, and a quiet of 0.3 windows at most {end_bound_short}, where "
        "{end_longer_short} of the gaps during the overload are longer than that",
    ),
    (
        "docs/adaptive.md",
        "made pacers compete among peers in {quiet_short_runs} simulated 8 x 8 fleets "
        "({quiet_short_errors} errors at {quiet_short_attempts} attempts per operation, Jain at "
        "least {quiet_short_jain_min})",
    ),
    (
        "docs/adaptive.md",
        "interval; {soak_stall_adaptive} in soaks 17 and 18) | the seconds after a tight limit "
        "or an all-reject window ends are the same end detection: from a tight limit's start to "
        "1 s after its end `adaptive` acked {soak_stall_limit} of the default's writes, around "
        "the all-reject windows {soak_stall_overload}",
    ),
]
"""(page, sentence with placeholders of ``prose_figures``): each page says exactly that."""


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
    first), and the coexistence table of ``docs/adaptive.md`` is its table over the seeds."""
    pytest.importorskip("simpy")
    from backpressure.sim.mixed import load_runs, render_markdown, render_seeds

    folder = RESULTS / "adaptive-default"
    rows = json.loads((folder / "sim-mixed-fleet.json").read_text(encoding="utf-8"))
    runs = load_runs(rows)
    assert list(runs) == ["current", "adaptive"]
    seeds = sorted({row["seed"] for row in rows})
    page = (folder / "sim-mixed-fleet.md").read_text(encoding="utf-8")
    assert page == render_markdown(runs, seeds)
    adaptive = (RESULTS.parents[1] / "docs" / "adaptive.md").read_text(encoding="utf-8")
    assert render_seeds(*runs.values()) in adaptive


@pytest.mark.parametrize("burst", [0.25, 0.1])
def test_the_simulated_mixed_fleets_at_another_burst_are_the_committed_runs(burst: float) -> None:
    """``sim-mixed-fleet-burst<S>.md`` is the rendering of its JSON at that burst allowance, the
    default's runs first, over seeds 1-24, and the adaptive page quotes its table."""
    pytest.importorskip("simpy")
    from backpressure.sim.mixed import load_runs, render_markdown, render_seeds

    folder = RESULTS / "adaptive-default"
    rows = json.loads((folder / f"sim-mixed-fleet-burst{burst:g}.json").read_text("utf-8"))
    runs = load_runs(rows)
    assert list(runs) == ["current", "adaptive"]
    seeds = sorted({row["seed"] for row in rows})
    assert seeds == list(range(1, 25))
    page = (folder / f"sim-mixed-fleet-burst{burst:g}.md").read_text(encoding="utf-8")
    assert page == render_markdown(runs, seeds, burst)
    adaptive = (RESULTS.parents[1] / "docs" / "adaptive.md").read_text(encoding="utf-8")
    assert render_seeds(*runs.values()) in adaptive
