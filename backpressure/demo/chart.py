"""The demo's figure: per arm, server load against capacity, app errors and attempts per op.

The pure parts (where each phase lies and how it is labelled, the per-phase figures written on
the panels) are separate from the drawing so they can be tested without matplotlib.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backpressure.core.extras import require
from backpressure.workload import Phase, RunResult

if TYPE_CHECKING:
    from backpressure.bench.fleet import FleetPlan, FleetRun

__all__ = [
    "PhaseSpan",
    "draw_demo_chart",
    "draw_fleet_chart",
    "fleet_series",
    "phase_load",
    "phase_spans",
]


@dataclass(frozen=True)
class PhaseSpan:
    """Where one phase lies on the time axis and how the figure names it."""

    name: str
    load: float
    """Offered load as a multiple of the server's capacity."""
    start: float
    """Seconds from the start of the run."""
    end: float
    label: str
    """Text written above the phase: its name over its load as a multiple of C."""
    shaded: bool
    """Every other phase is shaded, so neighbouring phases stand apart."""


def phase_spans(phases: Sequence[Phase]) -> list[PhaseSpan]:
    """Return the phases laid end to end from 0, labelled with their name and load."""
    spans = []
    start = 0.0
    for index, phase in enumerate(phases):
        end = start + phase.duration
        spans.append(
            PhaseSpan(
                phase.name,
                phase.load,
                start,
                end,
                f"{phase.name}\n{phase.load:g}\u00d7C",
                index % 2 == 1,
            )
        )
        start = end
    return spans


def phase_load(result: RunResult, span: PhaseSpan, capacity: float) -> float:
    """Attempts the client sent per second inside ``span``, as a multiple of ``capacity``.

    Timeline buckets that overlap the span count in proportion to the overlap.
    """
    times: Sequence[float] = result.timeline.get("t", [])
    attempts: Sequence[int] = result.timeline.get("attempts", [])
    if not times or span.end <= span.start:
        return 0.0
    width = times[1] - times[0] if len(times) > 1 else max(span.end, 1.0)
    sent = 0.0
    for start, count in zip(times, attempts):
        overlap = min(start + width, span.end) - max(start, span.start)
        if overlap > 0:
            sent += count * overlap / width
    return sent / (span.end - span.start) / capacity


def draw_demo_chart(
    results: Sequence[RunResult],
    phases: Sequence[Phase],
    capacity: float,
    minimum_errors: Mapping[str, int],
    path: Path,
) -> Path:
    """Draw the demo's figure into a PNG at ``path`` and return ``path``.

    One row per arm, three columns: the load the server received (attempts per second,
    admitted ones shaded) against its capacity, with the load of each overloaded phase as a
    multiple of C; the errors the application saw per second (raised, plus arrivals never sent),
    with the whole run's count next to the fewest any arm could have (``minimum_errors["run"]``);
    the attempts the server received per operation, by arrival time.
    """
    matplotlib = require("matplotlib", "demo", "The chart")
    matplotlib.use("Agg")
    from matplotlib import pyplot

    path.parent.mkdir(parents=True, exist_ok=True)
    spans = phase_spans(phases)
    rows = max(1, len(results))
    figure, axes = pyplot.subplots(
        rows, 3, figsize=(13, 1.75 * rows + 1.5), sharex=True, sharey="col", squeeze=False
    )
    try:
        peak_load = max(
            [capacity, *(a / _width(r) for r in results for a in r.timeline.get("attempts", []))]
        )
        peak_errors = max(
            [
                1.0,
                *(
                    (e + k) / _width(r)
                    for r in results
                    for e, k in zip(r.timeline.get("errors", []), r.timeline.get("skipped", []))
                ),
            ]
        )
        peak_per_op = max(
            [
                1.0,
                *(
                    sent / arrived
                    for r in results
                    for sent, arrived in zip(
                        r.timeline.get("sent_by_arrival", []), r.timeline.get("arrived", [])
                    )
                    if arrived
                ),
            ]
        )
        for row, result in enumerate(results):
            load_axis, error_axis, attempts_axis = axes[row]
            _draw_row(result, spans, capacity, minimum_errors, load_axis, error_axis, attempts_axis)
            # Headroom above the highest line of the column keeps the text clear of it.
            load_axis.set_ylim(0, peak_load * 1.3)
            error_axis.set_ylim(0, peak_errors * 1.3)
            attempts_axis.set_ylim(0, peak_per_op * 1.3)
            for axis in (load_axis, error_axis, attempts_axis):
                _mark_phases(axis, spans, label=row == 0)
                axis.grid(alpha=0.3)
        titles = (
            f"server load: attempts/s (green: admitted)\ndashed: capacity C = {capacity:g}/s",
            "app errors/s (raised + never sent)",
            "attempts sent per operation\n(by arrival time; dotted: 1)",
        )
        for axis, title in zip(axes[0], titles):
            axis.set_title(title, fontsize=9, pad=26)
        for axis in axes[-1]:
            axis.set_xlabel("seconds since start of run")
        figure.suptitle(
            "The same open-loop load against a server limited to C ops/s, one client arm per row",
            y=0.995,
        )
        figure.tight_layout()
        figure.savefig(path, dpi=100)
    finally:
        pyplot.close(figure)
    return path


def _width(result: RunResult) -> float:
    """The timeline's bucket width in seconds."""
    times: Sequence[float] = result.timeline.get("t", [])
    return times[1] - times[0] if len(times) > 1 else 1.0


def _draw_row(
    result: RunResult,
    spans: Sequence[PhaseSpan],
    capacity: float,
    minimum_errors: Mapping[str, int],
    load_axis: Any,
    error_axis: Any,
    attempts_axis: Any,
) -> None:
    """Draw one arm's three panels."""
    timeline = result.timeline
    times = timeline["t"]
    width = _width(result)
    edges = [*times, times[-1] + width] if times else [0.0, width]

    def steps(values: Sequence[float]) -> list[float]:
        return [*values, values[-1]] if values else [0.0, 0.0]

    attempts = steps([a / width for a in timeline["attempts"]])
    successes = steps([s / width for s in timeline["successes"]])
    errors = steps([(e + k) / width for e, k in zip(timeline["errors"], timeline["skipped"])])
    per_op = steps(
        [
            sent / arrived if arrived else float("nan")
            for sent, arrived in zip(timeline["sent_by_arrival"], timeline["arrived"])
        ]
    )
    load_axis.fill_between(edges, successes, step="post", color="tab:green", alpha=0.35)
    load_axis.step(edges, attempts, where="post", color="tab:blue", linewidth=1.4)
    load_axis.axhline(capacity, color="black", linestyle="--", linewidth=1)
    for span in spans:
        if span.load > 1.0:  # the server's load where the offered load exceeds C
            load = phase_load(result, span, capacity)
            load_axis.text(
                (span.start + span.end) / 2,
                0.97,
                f"{load:.1f}\u00d7C",
                transform=load_axis.get_xaxis_transform(),
                ha="center",
                va="top",
                fontsize=8,
                color="tab:blue",
                fontweight="bold",
            )
    error_axis.step(edges, errors, where="post", color="tab:red", linewidth=1.4)
    attempts_axis.step(edges, per_op, where="post", color="tab:purple", linewidth=1.4)
    attempts_axis.axhline(1.0, color="black", linestyle=":", linewidth=1)
    load_axis.set_ylabel(result.arm, fontsize=10, fontweight="bold")
    fewest = minimum_errors.get("run")
    floor = "" if fewest is None else f" (physical limit {fewest:,})"
    error_axis.text(
        0.02,
        0.95,
        f"{result.app_errors:,} of {result.offered:,} ops lost{floor}",
        transform=error_axis.transAxes,
        ha="left",
        va="top",
        fontsize=8,
    )
    per_operation = result.server_received / max(1, result.offered)
    attempts_axis.text(
        0.02,
        0.95,
        f"whole run: {per_operation:.2f} attempts/op",
        transform=attempts_axis.transAxes,
        ha="left",
        va="top",
        fontsize=8,
    )


def _mark_phases(axis: Any, spans: Sequence[PhaseSpan], *, label: bool) -> None:
    """Shade every other phase and, when ``label``, name each phase above the axis."""
    for span in spans:
        if span.shaded:
            axis.axvspan(span.start, span.end, color="0.92", zorder=0)
        if label:
            axis.text(
                (span.start + span.end) / 2,
                1.01,
                span.label,
                transform=axis.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=7,
            )


def fleet_series(run: FleetRun, width: float) -> tuple[list[float], list[float], list[float]]:
    """A fleet run's bins regrouped ``width`` seconds wide: start times, successes per second
    and app errors per second (bins past the run's end, or short of a whole group, left out)."""
    per = max(1, round(width / run.bin_s))
    groups = round(run.duration_s / run.bin_s) // per
    times, successes, errors = [], [], []
    seconds = per * run.bin_s
    for group in range(groups):
        lo, hi = group * per, (group + 1) * per
        times.append(lo * run.bin_s)
        successes.append(sum(run.success_bins[lo:hi]) / seconds)
        errors.append(sum(run.error_bins[lo:hi]) / seconds)
    return times, successes, errors


def draw_fleet_chart(
    runs: Sequence[FleetRun], plan: FleetPlan, limit: Mapping[str, Any], path: Path
) -> Path:
    """Draw the fleet scenario's figure into a PNG at ``path`` and return ``path``.

    Left, one row per arm (in the order given, the default's first): successes per second
    (green) against the capacity steps (dashed) and app errors per second (red). Right: app
    errors as a share of the operations per arm, the physical limit marked, each bar
    labelled with the share and the attempts per operation.
    """
    matplotlib = require("matplotlib", "demo", "The chart")
    matplotlib.use("Agg")
    from matplotlib import pyplot

    from backpressure.workload.arms import arm_label

    path.parent.mkdir(parents=True, exist_ok=True)
    rows = max(1, len(runs))
    figure = pyplot.figure(figsize=(13, 1.45 * rows + 1.6))
    grid = figure.add_gridspec(rows, 2, width_ratios=(1.7, 1.0), wspace=0.08)
    try:
        width = 0.5
        series = [fleet_series(run, width) for run in runs]
        # The scale is the capacity's: an arm that fails fast in a closed loop raises errors
        # far faster than the server admits work; its line is clipped and its peak written.
        top = 2.0 * max(plan.rates)
        edges = [step * plan.step_s for step in range(len(plan.rates) + 1)]
        capacity = [*plan.rates, plan.rates[-1]]
        first = None
        for row, (run, (times, successes, errors)) in enumerate(zip(runs, series)):
            axis = figure.add_subplot(grid[row, 0], sharex=first, sharey=first)
            first = first or axis
            steps_x = [*times, times[-1] + width] if times else [0.0, width]
            axis.fill_between(
                steps_x,
                [*successes, successes[-1]] if successes else [0, 0],
                step="post",
                color="tab:green",
                alpha=0.45,
                linewidth=0,
                label="successes/s",
            )
            axis.step(
                steps_x,
                [*errors, errors[-1]] if errors else [0, 0],
                where="post",
                color="tab:red",
                linewidth=1.6,
                label="app errors/s",
            )
            axis.step(
                edges, capacity, where="post", color="black", linestyle="--", linewidth=1.1,
                label="capacity C",
            )  # fmt: skip
            axis.set_ylim(0, top)
            worst = max(errors, default=0.0)
            if worst > top:
                axis.text(
                    0.01,
                    0.93,
                    f"errors/s off scale, up to {worst:,.0f}/s",
                    transform=axis.transAxes,
                    ha="left",
                    va="top",
                    fontsize=8,
                    color="tab:red",
                    fontweight="bold",
                )
            axis.set_xlim(0, plan.duration_s)
            axis.grid(alpha=0.3)
            axis.set_ylabel(arm_label(run.arm), fontsize=9, fontweight="bold")
            axis.text(
                0.99,
                0.93,
                f"{100 * run.error_fraction:.1f}% errors, {run.attempts_per_op:.2f} att/op",
                transform=axis.transAxes,
                ha="right",
                va="top",
                fontsize=8,
                bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0},
            )
            if row == 0:
                axis.set_title(
                    "per second: successes (green), app errors (red), capacity (dashed)",
                    fontsize=9,
                )
            if row < rows - 1:
                axis.tick_params(labelbottom=False)
            else:
                axis.set_xlabel("seconds since start of load")
        bars = figure.add_subplot(grid[:, 1])
        names = [arm_label(run.arm) for run in runs] + ["physical limit"]
        shares = [100 * run.error_fraction for run in runs] + [100 * limit["error_fraction"]]
        notes = [f"{s:.1f}%, {run.attempts_per_op:.2f} att/op" for s, run in zip(shares, runs)]
        notes.append(f"{shares[-1]:.1f}%, 1.00 att/op")
        colors = ["tab:red" if s > 5 else "tab:orange" if s > 1 else "tab:green" for s in shares]
        colors[-1] = "black"
        positions = list(range(len(names)))[::-1]
        bars.barh(positions, shares, color=colors, alpha=0.8)
        widest = max([*shares, 1.0])
        for y, share, note in zip(positions, shares, notes):
            bars.text(share + widest * 0.03, y, note, va="center", fontsize=9)
        bars.axvline(shares[-1], color="black", linestyle=":", linewidth=1)
        # A bar near 0 is invisible: a marker at each arm's share keeps it on the chart.
        bars.scatter(shares, positions, color=colors, marker="D", s=18, zorder=3)
        bars.set_yticks(positions, names, fontsize=9)
        bars.yaxis.tick_right()
        bars.set_xlim(0, widest * 1.6)
        workers = plan.processes * plan.threads
        bars.set_xlabel(
            "app errors, % of operations\n"
            f"physical limit: {workers} workers / {min(plan.rates):g} ops/s = "
            f"{workers / min(plan.rates):.2f} s of queue vs a {plan.deadline_s:g} s deadline",
            fontsize=9,
        )
        bars.set_title("app errors per arm (lower is better)", fontsize=9)
        bars.grid(axis="x", alpha=0.3)
        steps = " \u2192 ".join(f"{rate:g}" for rate in plan.rates)
        figure.suptitle(
            f"{plan.processes} client processes \u00d7 {plan.threads} threads, closed loop, "
            f"deadline {plan.deadline_s:g} s; capacity {steps} ops/s every {plan.step_s:g} s",
            fontsize=11,
        )
        figure.subplots_adjust(left=0.09, right=0.86, top=0.9, bottom=0.1, hspace=0.15)
        figure.savefig(path, dpi=100)
    finally:
        pyplot.close(figure)
    return path
