"""The Grafana dashboard and the Prometheus alert rules name only what the exporter serves.

The names come from the real exposition: a registry with the Prometheus exporter enabled is
scraped and parsed, and each family's sample names are built from its type; the labels of each
family are those of its metric in ``backpressure.metrics._recorder.METRICS``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import backpressure.metrics
from backpressure.metrics._recorder import METRICS

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "dashboards" / "grafana.json"
ALERTS = ROOT / "dashboards" / "prometheus-alerts.yml"
OURS = re.compile(r"\b(?:backpressure|db_client)_[a-z0-9_]+\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Sample name -> its labels, for every family the exporter serves (from a scrape)."""
    registry = CollectorRegistry()
    metrics = backpressure.metrics.enable_prometheus(registry, clients=[])
    try:
        families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    finally:
        metrics.close()
    labels = {metric.prometheus_name: set(metric.prometheus_labels) for metric in METRICS}
    samples: dict[str, set[str]] = {}
    for family in families:
        for suffix in SUFFIXES[family.type]:
            extra = {"le"} if suffix == "_bucket" else set()
            samples[family.name + suffix] = labels[family.name] | extra
    assert len(families) == len(METRICS)
    return samples


def _expressions() -> list[tuple[str, str]]:
    """(where, PromQL) for every query of the dashboard and every alert rule."""
    found = []
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r}", target["expr"]))
    for group in yaml.safe_load(ALERTS.read_text("utf-8"))["groups"]:
        for rule in group["rules"]:
            found.append((f"alert {rule['alert']}", rule["expr"]))
    return found


def _metric_names(expr: str) -> list[str]:
    """The package's metric names in ``expr`` (label names in selectors and ``by`` left out)."""
    bare = re.sub(r"\{[^}]*\}", "", expr)
    bare = re.sub(r"\b(?:by|without)\s*\([^)]*\)", "", bare)
    return OURS.findall(bare)


def _selectors(expr: str) -> Iterator[tuple[str, list[str]]]:
    """(metric, label names) of every ``metric{...}`` selector (no braces: no labels)."""
    for match in re.finditer(r"\b((?:backpressure|db_client)_[a-z0-9_]+)(\{([^}]*)\})?", expr):
        inside = match.group(3) or ""
        yield match.group(1), re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", inside)


@pytest.mark.parametrize(("where", "expr"), _expressions())
def test_query_names_exported_metrics_and_labels(
    where: str, expr: str, exported: dict[str, set[str]]
) -> None:
    """Every metric a query names is served, with the labels it selects or groups by."""
    names = _metric_names(expr)
    assert names, f"{where}: names no metric of the package"
    for name in names:
        assert name in exported, f"{where}: {name} is not exported"
    for name, selected in _selectors(expr):
        if name not in names:  # a label name (in a selector or a by clause)
            continue
        assert set(selected) <= exported[name], f"{where}: {name} has no label {selected}"
    grouped = {
        label.strip()
        for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr)
        for label in clause.split(",")
        if label.strip()
    }
    available = set().union(*(exported[name] for name in names))
    assert grouped <= available, f"{where}: grouped by {grouped - available}, not a label"
    assert expr.count("(") == expr.count(")"), where
    assert expr.count("{") == expr.count("}"), where


def test_the_dashboard_shows_every_metric(exported: dict[str, set[str]]) -> None:
    """Each exported family has a panel; the queries use the dashboard's datasource variable."""
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    queried = {name for _where, expr in _expressions() for name in _metric_names(expr)}
    families = {metric.prometheus_name for metric in METRICS}
    for family in families:
        assert any(name.startswith(family) for name in queried), f"no panel shows {family}"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "datasource" in variables
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_alert_rules_are_complete() -> None:
    """Every rule has a name, a ``for``, a severity and a summary."""
    rules: list[dict[str, Any]] = [
        rule
        for group in yaml.safe_load(ALERTS.read_text("utf-8"))["groups"]
        for rule in group["rules"]
    ]
    assert rules
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in {"page", "warning"}
        assert rule["annotations"]["summary"]


@pytest.mark.skipif(sys.version_info < (3, 10), reason="promql-parser has no wheel for Python 3.9")
def test_a_promql_parser_accepts_the_queries_and_the_rules() -> None:
    """Every dashboard query (Grafana's ``$__rate_interval`` as 5m) and every alert rule's
    expression parses as PromQL, functions included, and each rule's ``for`` as a duration:
    the check that runs everywhere the test extra is installed (promtool, below, only where
    Prometheus is)."""
    import promql_parser

    for where, expr in _expressions():
        try:
            promql_parser.parse(expr.replace("$__rate_interval", "5m"))
        except ValueError as exc:
            pytest.fail(f"{where}: {exc}: {expr}")
    for group in yaml.safe_load(ALERTS.read_text("utf-8"))["groups"]:
        for rule in group["rules"]:
            assert promql_parser.parse_duration(rule["for"]).total_seconds() > 0, rule["alert"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Prometheus) not installed")
def test_promtool_accepts_the_rules_and_the_queries(tmp_path: Path) -> None:
    """Prometheus's own checker parses every alert rule, and every dashboard query (as a
    recording rule, Grafana's ``$__rate_interval`` as 5m)."""
    queries = [expr for where, expr in _expressions() if where.startswith("panel ")]
    recording = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"dashboard:query{number}",
                        "expr": expr.replace("$__rate_interval", "5m"),
                    }
                    for number, expr in enumerate(queries)
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(recording), "utf-8")
    for rules in (ALERTS, tmp_path / "dashboard.yml"):
        result = subprocess.run(
            ["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stdout + result.stderr
