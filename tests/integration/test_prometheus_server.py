"""A real Prometheus server scrapes the exporter of a real client during an overload of the
embedded server, and evaluates the shipped alert rules: the overload alert fires, then resolves.

The rules are the shipped file with two changes, so that the test takes seconds rather than
the shipped quarter of an hour: every ``for:`` is 2 s (shipped: 5 to 15 minutes) and every
``rate(...[5m])`` window is 5 s (Prometheus scrapes and evaluates every second here).
Everything else (expressions, thresholds, labels, annotations) is as shipped.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server
from pymongo.errors import PyMongoError

import backpressure
import backpressure.metrics
from backpressure.testing.prometheus import PrometheusServer, PrometheusServerError
from backpressure.testing.server.embedded import EmbeddedServer
from tests.prometheus.tools import require_tool

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ALERT = "MongoServerShedsLoad"
"""The alert an overloaded server raises: retries of its 462 errors above 1/s."""


def fast_rules(directory: Path) -> Path:
    """A copy of the shipped rules with ``for: 2s`` and 5 s rate windows (module docstring)."""
    rules = yaml.safe_load(backpressure.metrics.PROMETHEUS_ALERTS.read_text("utf-8"))
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "2s"
            rule["expr"] = re.sub(r"\[5m\]", "[5s]", rule["expr"])
    path = directory / "fast-alerts.yml"
    path.write_text(yaml.safe_dump(rules), "utf-8")
    return path


class Load:
    """Threads sending finds through ``client`` until stopped, each about 50 a second."""

    def __init__(self, client: Any, threads: int = 4) -> None:
        self.client = client
        self.stopping = threading.Event()
        self.errors = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for thread in self.threads:
            thread.start()

    def _run(self) -> None:
        while not self.stopping.wait(0.02):  # the load's pace, not a wait for a condition
            try:
                self.client.db.coll.find_one({})
            except PyMongoError:  # a give-up under the overload: counted by the metrics too
                self.errors += 1

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)


@pytest.fixture
def exporter() -> Iterator[tuple[CollectorRegistry, str]]:
    """A registry served over HTTP on loopback: (registry, ``host:port`` of its /metrics)."""
    registry = CollectorRegistry()
    httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    yield registry, f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=30)


def _alert_states(prometheus: PrometheusServer) -> dict[str, list[dict[str, Any]]]:
    """Alert name -> its pending and firing instances."""
    found: dict[str, list[dict[str, Any]]] = {}
    for alert in prometheus.alerts():
        found.setdefault(alert["labels"]["alertname"], []).append(alert)
    return found


def _firing(prometheus: PrometheusServer, name: str) -> list[dict[str, Any]]:
    return [a for a in _alert_states(prometheus).get(name, []) if a["state"] == "firing"]


def test_the_overload_alert_fires_and_resolves(
    standalone_server: EmbeddedServer,
    exporter: tuple[CollectorRegistry, str],
    tmp_path: Path,
) -> None:
    """Quiet traffic: no alert. The server sheds load: MongoServerShedsLoad fires for it, with
    its runbook link, and ALERTS has it. The overload ends: the alert resolves."""
    require_tool("prometheus")
    registry, target = exporter
    host, port = standalone_server.addresses[0]
    client: Any = backpressure.MongoClient(standalone_server.uri)
    metrics = backpressure.metrics.enable_prometheus(registry, clients=[client], window=5)
    load = Load(client)
    try:
        with PrometheusServer([target], rules=[fast_rules(tmp_path)]) as prometheus:
            started = time.monotonic()
            # Quiet: scraped with operations counted, the rules evaluated since, nothing pending.
            prometheus.wait_until(
                lambda: prometheus.query("sum(backpressure_client_operations_total) > 20") != [],
                "operations scraped",
            )
            evaluated = prometheus.api("rules")["groups"][0]["lastEvaluation"]
            prometheus.wait_until(
                lambda: prometheus.api("rules")["groups"][0]["lastEvaluation"] != evaluated,
                "a rule evaluation after the quiet scrape",
            )
            assert _alert_states(prometheus) == {}
            assert prometheus.query("up")[0]["value"][1] == "1"

            standalone_server.set_rate_limit(5)
            prometheus.wait_until(lambda: _firing(prometheus, ALERT) != [], f"{ALERT} firing")
            fired = time.monotonic()
            (alert,) = _firing(prometheus, ALERT)
            assert alert["labels"] == {
                "alertname": ALERT,
                "server_address": host,
                "server_port": str(port),
                "severity": "warning",
            }
            assert alert["annotations"]["summary"] == f"{host}:{port} is overloaded"
            assert alert["annotations"]["runbook_url"].endswith("#mongoservershedsload")
            assert float(alert["value"]) > 1
            series = prometheus.query(f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}')
            assert [s["metric"]["server_port"] for s in series] == [str(port)]

            standalone_server.disable_rate_limit()
            prometheus.wait_until(
                lambda: ALERT not in _alert_states(prometheus), f"{ALERT} resolved"
            )
            assert prometheus.query(f'ALERTS{{alertname="{ALERT}"}}') == []
            resolved = time.monotonic()
            print(
                f"quiet {fired - started:.1f} s to firing, {resolved - fired:.1f} s to resolved;"
                f" {load.errors} give-ups"
            )
    finally:
        load.stop()
        metrics.close()
        client.close()


def test_a_missing_prometheus_binary_is_named(tmp_path: Path) -> None:
    """Without the binary, starting says so (and how to install it); nothing is left behind."""
    server = PrometheusServer(["127.0.0.1:9"], binary=str(tmp_path / "no-prometheus"))
    with pytest.raises(PrometheusServerError, match="apt-get install prometheus"):
        server.start()
    assert server.url == ""
