"""Output helpers shared by the demo and the benchmarks: tables, machine info, JSON, progress."""

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

__all__ = [
    "code_revision",
    "fmt",
    "format_table",
    "machine_info",
    "quiet_backpressure_logs",
    "run_line",
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


def code_revision() -> str:
    """The checkout's short commit (with ``+`` when it has uncommitted changes), or ``-``."""
    import subprocess

    here = Path(__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=here, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "-"
    return commit + ("+" if dirty else "") if commit else "-"


def run_line(info: dict[str, Any], load: Sequence[float], wall_s: float, commit: str) -> str:
    """One sentence naming a run: its date, wall time, machine, load average and code.

    ``info`` is :func:`machine_info`'s, ``load`` the 1-minute load average at the start and the
    end of the run, ``commit`` :func:`code_revision`'s.
    """
    return (
        f"Run on {info['date']} ({wall_s:,.0f} s wall), {info['cpu_count']} CPUs, load average "
        f"{load[0]:.1f} at the start and {load[-1]:.1f} at the end (the machine is shared with "
        f"other work), Python {info['python']}, pymongo {info['pymongo']}, backpressure "
        f"{info['backpressure']} at commit {commit}."
    )


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
