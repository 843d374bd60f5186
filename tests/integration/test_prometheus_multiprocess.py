"""Prometheus multiprocess mode: several real processes, each with its own client and the
exporter enabled, write to one ``PROMETHEUS_MULTIPROC_DIR``; prometheus-client's
``MultiProcessCollector`` reads the aggregate, as a gunicorn or uWSGI app serves it."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.parser import text_string_to_metric_families

import backpressure
import backpressure.metrics
from backpressure.metrics._catalogue import AMPLIFICATION, BUDGET_TOKENS, METRICS
from backpressure.metrics._prometheus_multiprocess import file_metrics
from backpressure.metrics.prometheus import MULTIPROCESS_MODES
from backpressure.testing.prometheus import wait_until
from backpressure.testing.server.embedded import EmbeddedServer
from tests.integration.conftest import overload_fail_point

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]

WORKER = """
import json, os, sys
import pymongo
import backpressure, backpressure.metrics

uri, role, finds = sys.argv[1], sys.argv[2], int(sys.argv[3])
metrics = backpressure.metrics.enable_prometheus()
assert metrics.multiprocess
client = pymongo.MongoClient(uri)
if role == "adaptive":  # paced for a minute once the server pushed back
    policy = backpressure.ADAPTIVE.replace(adaptive_window=60.0, adaptive_quiet=60.0)
    backpressure.enable(client, policy)
    client.db.coll.insert_one({"x": 1})  # rejected twice (the fail point), then written
else:
    backpressure.enable(client, backpressure.DRAFT)
for _ in range(finds):
    client.db.coll.find_one({})
metrics.write_gauges()
if role == "closing":  # the exporter closed in a process that goes on
    metrics.close()
print(json.dumps({"pid": os.getpid(), "role": role}), flush=True)
os._exit(0)  # as killed: the gauges stay as last written (no later write of the thread)
"""
"""One worker process: the exporter in multiprocess mode, a client, some operations."""


FORKING = """
import json, os, sys
import pymongo
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
import backpressure, backpressure.metrics
from backpressure.testing.prometheus import wait_until

uri, directory = sys.argv[1], sys.argv[2]
backpressure.metrics.enable_prometheus()  # before the fork, as with gunicorn's preload_app
child = os.fork()
if child == 0:
    client = pymongo.MongoClient(uri)
    backpressure.enable(client, backpressure.DRAFT)
    client.db.coll.find_one({})
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    me = str(os.getpid())

    def written():
        return any(
            s.name == "backpressure_amplification_ratio" and s.labels.get("pid") == me
            and s.value == 1.0
            for family in registry.collect() for s in family.samples
        )

    wait_until(written, "the child's gauges written by its own thread", timeout=30)
    print(json.dumps({"child": me}), flush=True)
    os._exit(0)
_, status = os.waitpid(child, 0)
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
"""
"""Enables the exporter, then forks a worker that uses a client without writing its gauges
itself: the thread the fork hook started again writes them."""


def _collect(directory: Path) -> dict[str, Any]:
    """Family name -> family, from a MultiProcessCollector over ``directory`` (exposed as
    text and parsed back, as Prometheus would read it)."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def _samples(families: dict[str, Any], name: str, **labels: str) -> list[Any]:
    """The samples called ``name`` whose labels include ``labels`` (none: no family)."""
    family = families.get(re.sub(r"_(total|count|sum|bucket)$", "", name))
    return [
        s
        for s in (family.samples if family is not None else [])
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def _total(families: dict[str, Any], name: str, **labels: str) -> float:
    return sum(s.value for s in _samples(families, name, **labels))


def test_several_processes_aggregate_in_one_directory(
    standalone_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Four processes at once (one adaptive client that the server pushes back, three draft
    clients, one of which closes its exporter): counters and histograms add up; each gauge is
    aggregated by its mode, a closed exporter's per-process gauges as NaN; a process marked
    dead leaves its counts and takes its live gauges with it."""
    standalone_server.configure_fail_point(overload_fail_point(["insert"], times=2))
    environment = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    roles = [("adaptive", 0), ("draft", 5), ("draft", 7), ("closing", 3)]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, standalone_server.uri, role, str(finds)],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role, finds in roles
    ]
    done = []
    for worker in workers:
        out, err = worker.communicate(timeout=90)
        assert worker.returncode == 0, err
        done.append(json.loads(out))
    pids = {d["role"]: [str(x["pid"]) for x in done if x["role"] == d["role"]] for d in done}
    (adaptive,) = pids["adaptive"]
    (closing,) = pids["closing"]
    families = _collect(tmp_path)

    # Every family written (a labelled family with no value yet has no file entry), with its
    # type; counters and histograms summed over the processes.
    kinds = {metric.prometheus_name: metric.kind for metric in METRICS}
    unused = {"giveups", "local_waits", "local_refusals", "hedges", "pacing_last_chance_sends"}
    unused.add("server_choice_routed_around")  # a standalone: no selection had a choice
    assert set(families) == set(kinds) - {f"backpressure_{name}" for name in unused}
    for name, family in families.items():
        assert family.type == kinds[name], name
    ops = "backpressure_client_operations_total"
    assert _total(families, ops, backpressure_outcome="succeeded") == 1 + 5 + 7 + 3
    assert _total(families, ops, backpressure_outcome="failed") == 0
    assert _total(families, "backpressure_retries_total", db_response_status_code="462") == 2
    duration = "db_client_operation_duration_seconds_count"
    assert _total(families, duration, db_operation_name="find") == 15
    assert _total(families, duration, db_operation_name="insert") == 1
    retried = "backpressure_client_operation_retries"
    assert _total(families, f"{retried}_count", db_operation_name="insert") == 1
    assert _total(families, f"{retried}_sum", db_operation_name="insert") == 2

    # Per-process gauges (liveall): one series per process, a pid label on each.
    tokens = {s.labels["pid"]: s.value for s in _samples(families, "backpressure_budget_tokens")}
    assert set(tokens) == {*pids["draft"], closing}
    assert all(0 < tokens[pid] <= 1000 for pid in pids["draft"])
    assert math.isnan(tokens[closing])  # closed: gone (Prometheus's min and max skip NaN)
    ratios = {
        s.labels["pid"]: s.value for s in _samples(families, "backpressure_amplification_ratio")
    }
    assert set(ratios) == {adaptive, closing, *pids["draft"]}
    assert ratios[adaptive] == 3.0  # one insert, three attempts
    assert [ratios[pid] for pid in pids["draft"]] == [1.0, 1.0]
    assert math.isnan(ratios[closing])
    rates = _samples(families, "backpressure_pacing_rate_per_second")
    assert [s.labels["pid"] for s in rates] == [adaptive]
    assert rates[0].value > 0
    # Summed gauges (livesum) and the backlog (livemax): no pid label.
    (paced,) = _samples(families, "backpressure_pacing_paced")
    assert "pid" not in paced.labels
    assert paced.value == 1.0
    host, port = standalone_server.addresses[0]
    assert (paced.labels["server_address"], paced.labels["server_port"]) == (host, str(port))
    for name in ("backpressure_pacing_waiting", "backpressure_pacing_backlog_seconds"):
        assert ["pid" in s.labels for s in _samples(families, name)] == [False], name
    # The pacer's own count, turned into a counter.
    assert _total(families, "backpressure_pacing_pushbacks_total") == 2

    # The adaptive worker exits (gunicorn's child_exit hook): its counts stay, its live
    # gauges go.
    mark_process_dead(int(adaptive), path=str(tmp_path))
    after = _collect(tmp_path)
    assert _total(after, "backpressure_retries_total") == 2
    assert _total(after, ops) == 16
    live = {s.labels["pid"] for s in _samples(after, "backpressure_amplification_ratio")}
    assert live == {closing, *pids["draft"]}
    assert _samples(after, "backpressure_pacing_paced") == []
    assert _samples(after, "backpressure_pacing_rate_per_second") == []


def test_every_gauge_has_a_live_mode() -> None:
    """Each gauge is aggregated over live processes only (a dead worker's value would stay
    forever otherwise), and the modes are the ones the dashboard's queries need."""
    gauges = {metric for metric in METRICS if metric.kind == "gauge"}
    assert set(MULTIPROCESS_MODES) == gauges
    assert all(mode.startswith("live") for mode in MULTIPROCESS_MODES.values())


def _gauge(metric: Any, **labels: str) -> float:
    """The value of the one sample of a prometheus-client metric object with ``labels``."""
    (family,) = metric.collect()
    (sample,) = [s for s in family.samples if s.labels == labels]
    return float(sample.value)


def test_in_process_the_writer_writes_and_clears_the_gauges(
    standalone_server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same code path in this process (prometheus-client keeps the values in memory here,
    having been imported before the variable was set): nothing is registered in the registry;
    the gauges are written on demand and by the thread, and as gone once closed."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    client: Any = backpressure.MongoClient(standalone_server.uri)
    backpressure.enable(client, backpressure.DRAFT)
    registry = CollectorRegistry()
    metrics = backpressure.metrics.enable_prometheus(registry, clients=[client])
    try:
        assert metrics.multiprocess
        assert b"backpressure" not in generate_latest(registry)
        objects = file_metrics().objects
        client.db.coll.find_one({})
        # The thread writes it within a second.
        wait_until(lambda: _gauge(objects[AMPLIFICATION]) == 1.0, "the amplification written")
        metrics.write_gauges()
        ((label, tokens),) = metrics.listener.budget_tokens()
        assert _gauge(objects[BUDGET_TOKENS], backpressure_client=label) == tokens
    finally:
        metrics.close()
        client.close()
    assert math.isnan(_gauge(objects[BUDGET_TOKENS], backpressure_client=label))
    assert math.isnan(_gauge(objects[AMPLIFICATION]))


def test_a_forked_worker_writes_its_gauges(
    standalone_server: EmbeddedServer, tmp_path: Path
) -> None:
    """An exporter enabled before a fork (gunicorn's ``preload_app``): in the child, the
    writing thread runs again and writes the child's gauges under the child's pid."""
    result = subprocess.run(
        [sys.executable, "-c", FORKING, standalone_server.uri, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    child = json.loads(result.stdout)["child"]
    ratios = _samples(_collect(tmp_path), "backpressure_amplification_ratio")
    by_pid = {s.labels["pid"]: s.value for s in ratios}
    assert by_pid.pop(child) == 1.0
    assert list(by_pid.values()) == [0.0]  # the parent: no operation
