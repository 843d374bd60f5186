"""scripts/pymongo_tests.py (pymongo's own backpressure tests, every client enabled): its hook
enables every client a pytest run makes, its report reads pytest's JUnit XML, and its verdict
holds each preset to stock's pass set. The full run is ``make pymongo-tests`` (in CI)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
RESULTS = ROOT / "bench" / "results"


def _load(name: str) -> ModuleType:
    """Import ``scripts/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


script = _load("pymongo_tests")

CLIENT_TEST = """
import asyncio

import pymongo

import backpressure


def test_clients():
    clients = [
        pymongo.MongoClient(connect=False),
        pymongo.MongoClient("mongodb://127.0.0.1:1/", connect=False, maxAdaptiveRetries=1),
        pymongo.AsyncMongoClient(connect=False),
    ]
    try:
        with open("seen.txt", "w") as seen:
            for client in clients:
                state = backpressure.policy(client).name if backpressure.is_enabled(client) else "-"
                seen.write(state + "\\n")
    finally:
        clients[0].close()
        clients[1].close()
        asyncio.run(clients[2].close())
"""


@pytest.mark.slow
@pytest.mark.parametrize(("preset", "expected"), [("adaptive", "adaptive"), ("stock", "-")])
def test_the_hook_enables_every_client_the_tests_make(
    tmp_path: Path, preset: str, expected: str
) -> None:
    """With the plugin, every MongoClient and AsyncMongoClient a test makes is enabled with the
    preset (an explicit ``maxAdaptiveRetries`` still beats it) and counted; stock: none is."""
    (tmp_path / "test_clients.py").write_text(CLIENT_TEST, encoding="utf-8")
    counts = tmp_path / "counts.json"
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(SCRIPTS), env.get("PYTHONPATH")])),
        BACKPRESSURE_PYMONGO_TESTS_PRESET=preset,
        BACKPRESSURE_PYMONGO_TESTS_COUNTS=str(counts),
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "pymongo_tests_enable", "-p",
         "no:cacheprovider", "test_clients.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    seen = (tmp_path / "seen.txt").read_text(encoding="utf-8").split()
    if preset == "stock":
        assert seen == ["-", "-", "-"]
    else:
        assert seen[0] == seen[2] == expected
        assert seen[1].startswith(expected)  # the preset, modified by maxAdaptiveRetries=1
    enabled = 0 if preset == "stock" else 3
    assert json.loads(counts.read_text(encoding="utf-8")) == {"created": 3, "enabled": enabled}


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="test.test_x.TestA" name="test_ok" time="0.1"/>
<testcase classname="test.test_x.TestA" name="test_fails" time="0.2">
  <failure message="AssertionError: 3 != 4&#10;more">trace</failure></testcase>
<testcase classname="test.test_x.TestA" name="test_teardown" time="0.2">
  <error message="failed on teardown with &quot;boom&quot;">trace</error></testcase>
<testcase classname="test.asynchronous.test_x.TestA" name="test_skip" time="0">
  <skipped type="pytest.skip" message="PyMongo does not support x">why</skipped></testcase>
<testcase classname="test.asynchronous.test_x.TestA" name="test_ok" time="0.1"/>
</testsuite></testsuites>
"""


def _run(preset: str, passed: list[str], **kwargs: object) -> object:
    """A PresetRun with these passed tests."""
    run = script.PresetRun(preset, 1.0, **kwargs)
    run.passed = list(passed)
    return run


def test_junit_outcomes_are_passed_failed_or_skipped(tmp_path: Path) -> None:
    """Failures and errors (teardown included) count as failed with their first line; skips with
    their reason; the rest passed; ids are ``module.Class::name``."""
    report = tmp_path / "r.xml"
    report.write_text(JUNIT, encoding="utf-8")
    run = script.PresetRun("current", 1.0)
    script.parse_junit(report, run)
    assert run.passed == [
        "test.asynchronous.test_x.TestA::test_ok",
        "test.test_x.TestA::test_ok",
    ]
    assert run.failed == {
        "test.test_x.TestA::test_fails": "AssertionError: 3 != 4",
        "test.test_x.TestA::test_teardown": 'failed on teardown with "boom"',
    }
    assert run.skipped == {
        "test.asynchronous.test_x.TestA::test_skip": "PyMongo does not support x"
    }


def test_the_verdict_holds_every_preset_to_stocks_pass_set() -> None:
    """Same pass set and no failure: no reason to fail. A lost or gained test, a failure or a
    broken run is a reason, named with its preset."""
    stock = _run("stock", ["a", "b"])
    assert script.verdict([_run("current", ["a", "b"]), stock]) == []
    reasons = script.verdict([_run("adaptive", ["a", "c"], failed={"b": "x"}), stock])
    assert reasons == [
        "adaptive: 1 failed",
        "adaptive: passes 1 fewer and 1 other tests than stock",
    ]
    broken = _run("current", ["a", "b"], problems=["sync: pytest exited with status 2"])
    assert script.verdict([broken]) == ["current: sync: pytest exited with status 2"]
    assert script.verdict([_run("adaptive", [], failed={"a": "x"})]) == ["adaptive: 1 failed"]


def test_runs_of_one_preset_merge_and_the_default_comes_first() -> None:
    """A preset's sync and async runs add up; the report lists the default first, stock last."""
    total = script.PresetRun("current", 0.0)
    total.add(_run("current", ["b"], clients_created=2, clients_enabled=2))
    total.add(_run("current", ["a"], skipped={"c": "why"}, clients_created=3, clients_enabled=3))
    assert (total.passed, total.seconds, total.clients_enabled) == (["a", "b"], 2.0, 5)
    runs = [_run("stock", []), _run("adaptive", []), _run("draft", []), total]
    assert [run.preset for run in script.ordered(runs, "current")] == [
        "current",
        "adaptive",
        "draft",
        "stock",
    ]


def test_the_results_page_is_the_rendering_of_its_raw_data() -> None:
    """``bench/results/pymongo-tests.md`` is what the script renders from the committed JSON,
    which has every preset's row, the default's first and stock's last."""
    report = json.loads((RESULTS / "pymongo-tests.json").read_text(encoding="utf-8"))
    assert (RESULTS / "pymongo-tests.md").read_text(encoding="utf-8") == script.render_markdown(
        report
    )
    presets = [row["preset"] for row in report["presets"]]
    assert presets[0] == report["default"]
    assert presets[-1] == "stock"
    assert sorted(presets) == ["adaptive", "current", "draft", "stock"]


def test_usage_errors_name_the_flag() -> None:
    """An unknown preset is a usage error naming ``--preset`` and the choices."""
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "pymongo_tests.py"), "--preset", "fast"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("usage: python scripts/pymongo_tests.py")
    assert "error: argument --preset: unknown fast; choose from default, current" in done.stderr


def test_the_adaptive_results_page_is_the_rendering_of_its_raw_data() -> None:
    """``bench/results/adaptive-default/pymongo-tests-adaptive.md`` (the latest run with every
    client on ``adaptive``, beside stock) is what the script renders from its JSON."""
    folder = RESULTS / "adaptive-default"
    report = json.loads((folder / "pymongo-tests-adaptive.json").read_text(encoding="utf-8"))
    page = (folder / "pymongo-tests-adaptive.md").read_text(encoding="utf-8")
    assert page == script.render_markdown(report)
    assert [row["preset"] for row in report["presets"]] == ["adaptive", "stock"]
