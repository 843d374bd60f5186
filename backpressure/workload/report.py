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
    """Draw goodput, app errors and amplification per second per policy into a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    path.parent.mkdir(parents=True, exist_ok=True)
    figure, (top, middle, bottom) = pyplot.subplots(3, 1, figsize=(11, 9.5), sharex=True)
    try:
        start = 0.0
        for index, phase in enumerate(phases):
            for axis in (top, middle, bottom):
                if index % 2:
                    axis.axvspan(start, start + phase.duration, color="0.93", zorder=0)
            top.text(
                start + phase.duration / 2,
                1.0,
                f"{phase.name}\n{phase.load:g}xC",
                transform=top.get_xaxis_transform(),
                ha="center",
                va="bottom",
                fontsize=8,
            )
            start += phase.duration
        top.axhline(
            capacity, color="black", linestyle="--", linewidth=1, label=f"C = {capacity:g}/s"
        )
        for result in results:
            times = [t + 0.5 for t in result.timeline["t"]]
            width = (result.timeline["t"][1] - result.timeline["t"][0]) if len(times) > 1 else 1.0
            goodput = [s / width for s in result.timeline["successes"]]
            top.plot(times, goodput, marker=".", label=result.policy)
            errors = [e / width for e in result.timeline["errors"]]
            middle.plot(times, errors, marker=".", label=result.policy)
            amplification = [
                a if a is not None else float("nan") for a in result.timeline["amplification"]
            ]
            bottom.plot(times, amplification, marker=".", label=result.policy)
        top.set_ylabel("goodput (successful ops/s)")
        top.legend(loc="upper left", fontsize=8)
        top.grid(alpha=0.3)
        middle.set_ylabel("errors raised to the app /s")
        middle.grid(alpha=0.3)
        bottom.set_yscale("log")
        bottom.set_ylabel("attempts sent per successful op")
        bottom.set_xlabel("seconds since start of run")
        bottom.grid(alpha=0.3, which="both")
        figure.suptitle("Goodput and load amplification under overload, per client policy", y=0.995)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
    finally:
        pyplot.close(figure)
    return path
