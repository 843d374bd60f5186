"""Output helpers shared by the demo and the benchmarks: tables, machine info, JSON, the chart."""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import pymongo

from backpressure.core.extras import require
from backpressure.workload.driver import Phase, RunResult

__all__ = [
    "draw_timelines",
    "fmt",
    "format_table",
    "machine_info",
    "quiet_backpressure_logs",
    "write_json",
]


def fmt(value: Optional[float], digits: int = 1, suffix: str = "") -> str:
    """Format a number for a table (``-`` for None)."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{suffix}"


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False
) -> str:
    """Render rows as an aligned plain-text table, or a Markdown table."""
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines.extend("| " + " | ".join(row) + " |" for row in rows)
        return "\n".join(lines)
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:]))
        return "  ".join([first, *rest])

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in rows)
    return "\n".join(out)


def machine_info() -> dict[str, Any]:
    """Describe the machine and the software versions of this run."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        motor_version: Optional[str] = version("motor")
    except PackageNotFoundError:
        motor_version = None
    from backpressure import __version__

    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "pymongo": pymongo.version,
        "pymongo_c_extensions": pymongo.has_c(),
        "motor": motor_version,
        "backpressure": __version__,
        "argv": sys.argv,
    }


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON, creating parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


@contextmanager
def quiet_backpressure_logs(level: int = logging.ERROR) -> Iterator[None]:
    """Raise the ``backpressure`` logger's level for the duration (one line per give-up is noise
    under deliberate overload)."""
    logger = logging.getLogger("backpressure")
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)


def draw_timelines(
    results: Sequence[RunResult], phases: Sequence[Phase], capacity: float, path: Path
) -> Path:
    """Draw one figure into a PNG at ``path``: a row per policy, the phases marked.

    Columns: the load the server received (attempts/s, admitted ones shaded) against its
    capacity; the errors the application saw per second (raised, plus arrivals never sent);
    attempts per operation issued in that second.
    """
    matplotlib = require("matplotlib", "demo", "The chart")
    matplotlib.use("Agg")
    from matplotlib import pyplot

    path.parent.mkdir(parents=True, exist_ok=True)
    rows = max(1, len(results))
    figure, axes = pyplot.subplots(
        rows, 3, figsize=(13, 1.9 * rows + 1.2), sharex=True, sharey="col", squeeze=False
    )
    try:
        peak_load = max([capacity, *(a for r in results for a in r.timeline.get("attempts", []))])
        for row, result in enumerate(results):
            load_axis, error_axis, attempts_axis = axes[row]
            timeline = result.timeline
            times = timeline["t"]
            width = times[1] - times[0] if len(times) > 1 else 1.0
            edges = [*times, times[-1] + width]

            def steps(values: Sequence[float]) -> list[float]:
                return [*values, values[-1]] if values else [0.0]

            attempts = steps([a / width for a in timeline["attempts"]])
            successes = steps([s / width for s in timeline["successes"]])
            errors = steps(
                [(e + k) / width for e, k in zip(timeline["errors"], timeline["skipped"])]
            )
            per_op = steps(
                [
                    sent / arrived if arrived else float("nan")
                    for sent, arrived in zip(timeline["sent_by_arrival"], timeline["arrived"])
                ]
            )
            load_axis.fill_between(edges, successes, step="post", color="tab:green", alpha=0.35)
            load_axis.step(edges, attempts, where="post", color="tab:blue", linewidth=1.4)
            load_axis.axhline(capacity, color="black", linestyle="--", linewidth=1)
            error_axis.step(edges, errors, where="post", color="tab:red", linewidth=1.4)
            attempts_axis.step(edges, per_op, where="post", color="tab:purple", linewidth=1.4)
            attempts_axis.axhline(1.0, color="black", linestyle=":", linewidth=1)
            load_axis.set_ylabel(result.policy, fontsize=10, fontweight="bold")
            load_axis.set_ylim(0, peak_load * 1.08)
            errors_total = result.app_errors
            error_axis.text(
                0.99,
                0.9,
                f"{errors_total:,} app errors / {result.offered:,} ops",
                transform=error_axis.transAxes,
                ha="right",
                va="top",
                fontsize=8,
            )
            attempts_axis.text(
                0.99,
                0.9,
                f"{result.server_received / max(1, result.offered):.2f} attempts/op overall",
                transform=attempts_axis.transAxes,
                ha="right",
                va="top",
                fontsize=8,
            )
            for axis in (load_axis, error_axis, attempts_axis):
                _mark_phases(axis, phases, label=row == 0)
                axis.grid(alpha=0.3)
        titles = (
            f"server load, attempts/s (green: admitted; dashed: capacity {capacity:g}/s)",
            "app errors/s (raised + never sent)",
            "attempts sent per operation (by arrival second)",
        )
        for axis, title in zip(axes[0], titles):
            axis.set_title(title, fontsize=9, pad=22)
        for axis in axes[-1]:
            axis.set_xlabel("seconds since start of run")
        figure.suptitle(
            "The same overload, one client policy per row (phases shaded and named)", y=0.998
        )
        figure.tight_layout()
        figure.savefig(path, dpi=100)
    finally:
        pyplot.close(figure)
    return path


def _mark_phases(axis: Any, phases: Sequence[Phase], *, label: bool) -> None:
    """Shade every other phase and, when ``label``, name each phase above the axis."""
    start = 0.0
    for index, phase in enumerate(phases):
        if index % 2:
            axis.axvspan(start, start + phase.duration, color="0.92", zorder=0)
        if label:
            axis.text(
                start + phase.duration / 2,
                1.01,
                f"{phase.name}\n{phase.load:g}xC",
                transform=axis.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        start += phase.duration


def progress_bar(total: float, *, desc: str, disabled: bool, counter: str = "") -> Any:
    """A tqdm bar on stderr (``disabled``: one that draws nothing); tqdm is in the demo extra.

    ``counter`` is a tqdm format inserted before the times, e.g. ``"{n:.0f}/{total:.0f} s "``.
    """
    tqdm = require("tqdm", "demo", f"The {desc} progress bar").tqdm
    return tqdm(
        total=round(total, 1),
        desc=desc,
        file=sys.stderr,
        disable=disabled,
        mininterval=0.5,
        bar_format=(
            "{desc}: {percentage:3.0f}%|{bar}| " + counter + "[{elapsed}<{remaining}] {postfix}"
        ),
    )
