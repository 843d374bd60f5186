"""The demo's figure: per policy, server load against capacity, app errors and attempts per op.

The pure parts (where each phase lies and how it is labelled, the per-phase figures written on
the panels) are separate from the drawing so they can be tested without matplotlib.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backpressure.core.extras import require
from backpressure.workload import Phase, RunResult

__all__ = ["PhaseSpan", "draw_demo_chart", "phase_load", "phase_spans"]


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

    One row per policy, three columns: the load the server received (attempts per second,
    admitted ones shaded) against its capacity, with the load of each overloaded phase as a
    multiple of C; the errors the application saw per second (raised, plus arrivals never sent),
    with the whole run's count next to the fewest any policy could have (``minimum_errors["run"]``);
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
            "The same open-loop load against a server limited to C ops/s, one client policy "
            "per row",
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
    """Draw one policy's three panels."""
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
    load_axis.set_ylabel(result.policy, fontsize=10, fontweight="bold")
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
