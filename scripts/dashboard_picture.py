"""Draw the main panels of the shipped Grafana dashboard from a real Prometheus's data.

Run: ``python scripts/dashboard_picture.py [--output docs/_static/dashboard.png]`` (needs the
``prometheus`` binary, ``make prometheus``, and matplotlib, the ``demo`` extra). Grafana does
not run here, so the panels are drawn with matplotlib, from the same queries.

What it does: the embedded server (standalone) serves an application of four threads sending
about 200 finds a second through one client with the default preset and the Prometheus
exporter enabled; a real Prometheus scrapes the exporter every second. After ``--quiet``
seconds the server's ingress limiter admits 100 requests a second (an overload: half the
load), for ``--overload`` seconds; then the load is served again for ``--recovery`` seconds.
Each panel's queries are read from ``backpressure.metrics.GRAFANA_DASHBOARD`` (``$job`` and
``$instance`` as ``.*``, ``$__rate_interval`` as 5 s) and run through Prometheus's
``query_range`` API; the overload is shaded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from pymongo.errors import PyMongoError

import backpressure
import backpressure.metrics
from backpressure.testing import EmbeddedServer
from backpressure.testing.prometheus import PrometheusServer

ROOT = Path(__file__).resolve().parents[1]
PANELS = (
    "Operations per second, by outcome",
    "Share of operations retried, and failed",
    "Retries per second, by error code",
    "Give-ups per second, by reason",
    "Operation duration",
    "Amplification (attempts per operation)",
)
"""The dashboard's panels drawn, by title, in reading order (two per row)."""
RATE_INTERVAL = "5s"
THREADS = 4
PACE = 0.02
"""Seconds between two finds of one thread (four threads: about 200 finds a second)."""
CAPACITY = 100
"""Requests a second the server admits during the overload."""


def _queries(title: str) -> list[tuple[str, str]]:
    """(PromQL, legend format) of the dashboard panel called ``title``, variables filled."""
    dashboard = json.loads(backpressure.metrics.GRAFANA_DASHBOARD.read_text("utf-8"))
    (panel,) = [p for p in dashboard["panels"] if p["title"] == title]
    found = []
    for target in panel["targets"]:
        expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL)
        expr = expr.replace("$job", ".*").replace("$instance", ".*")
        found.append((expr, target.get("legendFormat", "")))
    return found


def _legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's legend format: ``{{label}}`` replaced by the series' label value."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def _run_load(client: Any, stopping: threading.Event) -> None:
    """Send finds at the thread's pace until stopped (a give-up's error is dropped)."""
    while not stopping.wait(PACE):
        with contextlib.suppress(PyMongoError):  # the metrics count them: give-ups
            client.db.coll.find_one({})


def record(
    quiet: float, overload: float, recovery: float, capacity: float = CAPACITY
) -> dict[str, Any]:
    """Run the scenario (the server admits ``capacity`` requests a second during the
    overload); return each panel's series and the phases' times (Unix seconds)."""
    registry = CollectorRegistry()
    httpd, http_thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    target = f"127.0.0.1:{httpd.server_address[1]}"
    stopping = threading.Event()
    try:
        with EmbeddedServer("standalone") as server:
            client: Any = backpressure.MongoClient(server.uri)
            metrics = backpressure.metrics.enable_prometheus(registry, clients=[client], window=5)
            threads = [
                threading.Thread(target=_run_load, args=(client, stopping), daemon=True)
                for _ in range(THREADS)
            ]
            try:
                with PrometheusServer([target], job="shop") as prometheus:
                    for thread in threads:
                        thread.start()
                    # Prometheus's first scrape comes a few seconds after it starts (target
                    # discovery): the picture starts once it has a rate to show.
                    prometheus.wait_until(
                        lambda: (
                            prometheus.query(
                                f"rate(backpressure_client_operations_total[{RATE_INTERVAL}])"
                            )
                            != []
                        ),
                        "a first rate of operations",
                    )
                    start = time.time()
                    time.sleep(quiet)
                    server.set_rate_limit(capacity)
                    overload_start = time.time()
                    time.sleep(overload)
                    server.disable_rate_limit()
                    overload_end = time.time()
                    time.sleep(recovery)
                    end = time.time()
                    # The last scrape's samples are in: one more interval, and a scrape after.
                    scraped = prometheus.query("timestamp(up)")
                    prometheus.wait_until(
                        lambda: prometheus.query("timestamp(up)") != scraped, "a last scrape"
                    )
                    panels = {
                        title: [
                            (legend, series)
                            for expr, legend in _queries(title)
                            for series in prometheus.query_range(expr, start, end, 1.0)
                        ]
                        for title in PANELS
                    }
            finally:
                stopping.set()
                for thread in threads:
                    thread.join(timeout=60)
                metrics.close()
                client.close()
    finally:
        httpd.shutdown()
        httpd.server_close()
        http_thread.join(timeout=30)
    return {"start": start, "overload": (overload_start, overload_end), "panels": panels}


def draw(recorded: dict[str, Any], output: Path) -> None:
    """Draw the panels, two per row, the overload shaded, into ``output`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    start = recorded["start"]
    begin, end = (t - start for t in recorded["overload"])
    rows = (len(PANELS) + 1) // 2
    figure, axes = pyplot.subplots(rows, 2, figsize=(12.8, 3.0 * rows + 0.8), sharex=True)
    for axis, title in zip(axes.flat, PANELS):
        axis.axvspan(begin, end, color="#f2b8b5", alpha=0.35, linewidth=0)
        for legend, series in recorded["panels"][title]:
            points = [(float(t) - start, float(v)) for t, v in series["values"]]
            xs = [x for x, _ in points]
            ys = [y for _, y in points]
            axis.plot(xs, ys, linewidth=1.6, label=_legend(legend, series["metric"]))
        axis.set_title(title, fontsize=11, loc="left")
        axis.grid(True, alpha=0.3)
        if title == "Operation duration":  # p50 (ms) to p99 (s): a log scale shows both
            axis.set_yscale("log")
            axis.set_ylabel("seconds (log)", fontsize=9)
        else:
            axis.set_ylim(bottom=0)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8, loc="best")
    for axis in axes[-1]:
        axis.set_xlabel("seconds")
    figure.suptitle(
        "pymongo-backpressure dashboard (main panels), from a real Prometheus: "
        f"the server admits {CAPACITY} requests/s in the shaded span, "
        f"under a load of about {round(THREADS / PACE)}/s",
        fontsize=11,
    )
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    pyplot.close(figure)


def main(argv: list[str] | None = None) -> None:
    """Record the scenario and draw it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "_static" / "dashboard.png")
    parser.add_argument("--quiet", type=float, default=25.0, help="seconds before the overload")
    parser.add_argument("--overload", type=float, default=40.0, help="seconds of overload")
    parser.add_argument("--recovery", type=float, default=30.0, help="seconds after it")
    args = parser.parse_args(argv)
    draw(record(args.quiet, args.overload, args.recovery), args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
