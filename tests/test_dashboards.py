"""The Grafana dashboard and the Prometheus alert rules name only what the exporter serves.

The names come from the real exposition: a registry with the Prometheus exporter enabled is
scraped and parsed, and each family's sample names are built from its type; the labels of each
family are those of its metric in ``backpressure.metrics._catalogue.METRICS``, plus the target
labels Prometheus adds (``job``, ``instance``), which the dashboard's variables filter on.

Both files are package data (``backpressure.metrics.GRAFANA_DASHBOARD`` and
``PROMETHEUS_ALERTS``); ``promtool`` checks them and unit-tests every alert
(``tests/prometheus/alerts.test.yml``): skipped without Prometheus, failed in CI without it
(``tests/prometheus/tools.py``).
"""

from __future__ import annotations

import json
import os
import re
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
from backpressure.metrics import GRAFANA_DASHBOARD as DASHBOARD
from backpressure.metrics import PROMETHEUS_ALERTS as ALERTS
from backpressure.metrics._catalogue import METRICS
from tests.prometheus.tools import require_tool

ROOT = Path(__file__).resolve().parents[1]
ALERT_TESTS = ROOT / "tests" / "prometheus" / "alerts.test.yml"
TROUBLESHOOTING = ROOT / "docs" / "troubleshooting.md"
TARGET_LABELS = {"job", "instance"}
"""The labels Prometheus gives every series of a scrape target."""
VARIABLES = {"job": '=~"$job"', "instance": '=~"$instance"'}
"""The dashboard's filters: each of its selectors has both."""
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
        allowed = exported[name] | TARGET_LABELS
        assert set(selected) <= allowed, f"{where}: {name} has no label {selected}"
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
    """Every rule has a name, a ``for``, a severity, a summary and a runbook link."""
    rules = _rules()
    assert rules
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in {"page", "warning"}
        assert rule["annotations"]["summary"]
        assert rule["annotations"]["runbook_url"].startswith("https://")


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


def _rules() -> list[dict[str, Any]]:
    """Every alerting rule of the shipped file."""
    return [
        rule
        for group in yaml.safe_load(ALERTS.read_text("utf-8"))["groups"]
        for rule in group["rules"]
    ]


def test_the_files_are_package_data() -> None:
    """The dashboard and the rules are inside the package (shipped in the wheel by
    pyproject.toml's package-data), once: no other copy in the checkout."""
    package = Path(backpressure.metrics.__file__).resolve().parent
    assert DASHBOARD.parent == package / "dashboards"
    assert DASHBOARD.is_file()
    assert ALERTS.is_file()
    pyproject = (ROOT / "pyproject.toml").read_text("utf-8")
    assert '"metrics/dashboards/*.json", "metrics/dashboards/*.yml"' in pyproject
    names = {DASHBOARD.name, ALERTS.name}
    copies = []
    for directory, subdirectories, files in os.walk(ROOT):
        # Not the virtualenvs, caches, builds and .git (dot directories), nor docs/_build.
        subdirectories[:] = [
            d for d in subdirectories if not d.startswith(".") and d not in {"build", "_build"}
        ]
        copies += [Path(directory, name) for name in names & set(files)]
    assert sorted(copies) == sorted(package / "dashboards" / name for name in names), copies


def test_every_panel_query_is_filtered_by_job_and_instance() -> None:
    """The dashboard has ``job`` and ``instance`` variables (instance values within the jobs
    chosen), and every selector of every panel query filters on both."""
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name in VARIABLES:
        variable = variables[name]
        assert variable["type"] == "query"
        assert variable["datasource"]["uid"] == "${datasource}"
        assert variable["includeAll"]
        assert variable["multi"]
        assert variable["allValue"] == ".*"
        assert variable["query"]["query"] == variable["definition"]
        assert f", {name})" in variable["definition"]
    assert '{job=~"$job"}' in variables["instance"]["definition"]
    queries = 0
    for where, expr in _expressions():
        if not where.startswith("panel "):
            continue
        names = set(_metric_names(expr))
        assert names, where
        for name in names:
            for found in re.finditer(r"\b" + name + r"\b(\{[^}]*\})?", expr):
                inside = found.group(1) or ""
                for label, match in VARIABLES.items():
                    assert f"{label}{match}" in inside, f"{where}: {name} without ${label}"
        queries += 1
    assert queries >= 30


def _anchors(markdown: str) -> set[str]:
    """The anchors of the page's headings, as GitHub and MyST (``myst_heading_anchors``) make
    them: lower case, punctuation dropped, spaces as hyphens."""
    anchors = set()
    for heading in re.findall(r"^#{1,3} (.+)$", markdown, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_alert_has_a_runbook_in_troubleshooting() -> None:
    """Each alert's ``runbook_url`` is a section of docs/troubleshooting.md named after it."""
    anchors = _anchors(TROUBLESHOOTING.read_text("utf-8"))
    bases = set()
    for rule in _rules():
        url = rule["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base.endswith("/docs/troubleshooting.md"), url
        bases.add(base)
        assert anchor == rule["alert"].lower(), url
        assert anchor in anchors, f"{rule['alert']}: no section #{anchor} in troubleshooting.md"
    assert len(bases) == 1, bases


def test_the_latency_alert_is_the_one_production_recommends() -> None:
    """docs/production.md recommends alerting on the p99 of the operation duration: an alert
    has that expression."""
    production = (ROOT / "docs" / "production.md").read_text("utf-8")
    assert "histogram_quantile(0.99, ...)` of `db_client_operation_duration_seconds_bucket" in (
        production
    )
    (slow,) = [rule for rule in _rules() if "db_client_operation_duration_seconds" in rule["expr"]]
    assert slow["alert"] == "MongoOperationsSlow"
    assert re.match(r"histogram_quantile\(0\.99,\s*sum by \(le\)", slow["expr"].strip()), slow[
        "expr"
    ]


def test_promtool_accepts_the_rules_and_the_queries(tmp_path: Path) -> None:
    """Prometheus's own checker parses every alert rule, and every dashboard query (as a
    recording rule, Grafana's ``$__rate_interval`` as 5m, the variables as ``.*``)."""
    promtool = require_tool("promtool")
    queries = [expr for where, expr in _expressions() if where.startswith("panel ")]
    recording = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"dashboard:query{number}",
                        "expr": expr.replace("$__rate_interval", "5m")
                        .replace("$job", ".*")
                        .replace("$instance", ".*"),
                    }
                    for number, expr in enumerate(queries)
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(recording), "utf-8")
    for rules in (ALERTS, tmp_path / "dashboard.yml"):
        result = subprocess.run(
            [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_fire_and_spare_every_alert() -> None:
    """``promtool test rules`` passes the committed unit tests, which cover every alert of
    the file: each both firing (with its labels and annotations) and not firing."""
    promtool = require_tool("promtool")
    tests = yaml.safe_load(ALERT_TESTS.read_text("utf-8"))
    assert [Path(f).name for f in tests["rule_files"]] == [ALERTS.name]
    assert (ALERT_TESTS.parent / tests["rule_files"][0]).resolve() == ALERTS.resolve()
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
            for alert in check["exp_alerts"]:
                assert alert["exp_annotations"]["runbook_url"], check["alertname"]
    names = {rule["alert"] for rule in _rules()}
    assert firing == names, names ^ firing
    assert quiet == names, names ^ quiet
    result = subprocess.run(
        [promtool, "test", "rules", str(ALERT_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ALERT_TESTS.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
