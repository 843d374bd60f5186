"""One way to run a real-process benchmark and publish it: the run's record, its page, its JSON.

The recovery, fault-soak and mixed-fleet benchmarks each run on a fresh embedded deployment (its
own process; a replica set unless the benchmark asks for another topology) and publish a page
that opens with the run's date, wall time, machine, load average and commit
(:func:`backpressure.workload.report.run_line`), rendered from the JSON they write.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from backpressure.workload.report import code_revision, machine_info

__all__ = ["publish_run"]

R = TypeVar("R")

Report = Callable[[R, dict[str, Any], list[float], float, str], dict[str, Any]]
"""Builds the raw data from the runs, the machine, the load averages, the wall time, the commit."""


def publish_run(
    run: Callable[[Any], R],
    report: Report[R],
    render: Callable[[dict[str, Any]], str],
    *,
    markdown: Optional[Path] = None,
    json_path: Optional[Path] = None,
    topology: str = "replicaset",
    members: Optional[int] = None,
) -> dict[str, Any]:
    """Run ``run(server)`` on a fresh embedded deployment and publish what it measured.

    The deployment is a ``topology`` (a replica set by default) of ``members`` members (the
    topology's default when None), in its own process.

    The 1-minute load average is read before and after, the wall time around the server's
    life.  The page ``render`` makes of ``report``'s data is printed, and written to
    ``markdown`` if given; the data is written to ``json_path`` if given, and returned.
    """
    from backpressure.testing.server.embedded import EmbeddedServer

    info, commit = machine_info(), code_revision()
    load = [os.getloadavg()[0]]
    started = time.monotonic()
    with EmbeddedServer(topology, members=members, subprocess=True) as server:
        runs = run(server)
    load.append(os.getloadavg()[0])
    data = report(runs, info, load, time.monotonic() - started, commit)
    text = render(data)
    sys.stdout.write(text)
    if markdown is not None:
        markdown.write_text(text, encoding="utf-8")
    if json_path is not None:
        json_path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data
