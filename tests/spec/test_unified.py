"""The unified-format spec suites, one pytest item per test, for sync, async and Motor clients.

Suites: the official ``client-backpressure``, ``transactions-backpressure`` and ``sdam-
backpressure`` files (found by :mod:`tests.spec.sources`: ``make spec-tests`` fetches them from
pymongo's sdist) with our ``current`` and ``adaptive`` presets (and with stock pymongo, preset
``none``, when pymongo has native backpressure, >= 4.17: the reference); the 2026-03 draft-era
files with our ``draft`` preset; our own scenarios in ``spec-tests/`` with ``draft`` (a client
entity may state its own policy with ``backpressurePolicy``); the runner's own feature scenarios
in ``tests/spec/runner-scenarios/`` with stock clients. ``BACKPRESSURE_UNIFIED_SUITES`` adds
external suites (``PATH[=PRESET]`` entries separated by ``os.pathsep``, preset ``none`` by
default), e.g. the official CRUD or transactions folders of a specifications checkout. Backoff
jitter is pinned to 0 (``fast_backoff``): no sleeps, the same attempt counts. Unsupported
features are reported as skips with the runner's reason; an official suite found nowhere is one
skipped item per flavour saying why.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from backpressure.adapters import seams
from backpressure.testing.unified import (
    PRESET_NAMES,
    Deployment,
    Outcome,
    RunnerConfig,
    SpecTest,
    UnifiedRunner,
    choose_topology,
    iter_spec_paths,
    load_spec_file,
)
from tests.spec.sources import Suite, locate

DeploymentFor = Callable[..., Deployment]

# Motor 3.7 runs on pymongo's sync client in a thread pool: a third flavour when installed.
FLAVOURS = ("sync", "async") + (("motor",) if importlib.util.find_spec("motor") else ())

REPO_ROOT = Path(__file__).resolve().parents[2]
OWN_SPEC_TESTS = REPO_ROOT / "spec-tests"
RUNNER_SCENARIOS = Path(__file__).resolve().parent / "runner-scenarios"
EXTERNAL_SUITES_VARIABLE = "BACKPRESSURE_UNIFIED_SUITES"
SHARED_SUITES = (
    ("client-backpressure", "current"),
    ("client-backpressure-2026-03", "draft"),
    ("transactions-backpressure", "current"),
    ("sdam-backpressure", "current"),
)
"""Official suites and the preset each targets (stock pymongo too where native)."""


@dataclass(frozen=True)
class Case:
    """One test of one suite with one preset and client flavour."""

    preset: str
    flavour: str
    test: Optional[SpecTest]
    missing: str = ""
    """Why the suite is skipped when ``test`` is None."""
    suite: str = ""
    """The suite's name (the id of a skipped placeholder)."""
    topology: Optional[str] = None
    """Embedded topology to force (default: chosen from the file's requirements)."""
    server_version: Optional[str] = None
    """Embedded server version profile (default: the plugin's servers, 8.2.6)."""

    @property
    def id(self) -> str:
        """``<preset>-<flavour>[-<topology>]-<folder>/<file>::<description>``."""
        name = self.test.test_id if self.test is not None else f"{self.suite}-missing"
        where = f"-{self.topology}" if self.topology else ""
        return f"{self.preset}-{self.flavour}{where}-{name}"


def _suites() -> list[tuple[Suite, str]]:
    """(suite, preset) pairs of the official suites to run."""
    suites = [(locate(name), preset) for name, preset in SHARED_SUITES]
    # ``adaptive`` layers its pacing on the current spec's retry rules: it must pass the
    # current suites exactly as ``current`` does.
    # (a suite found nowhere keeps its one skipped placeholder, under ``current``)
    suites += [
        (suite, "adaptive")
        for suite, preset in suites
        if preset == "current" and suite.path is not None
    ]
    if seams.HAS_NATIVE_BACKPRESSURE:
        # Stock pymongo with native backpressure is the reference for the current spec.
        suites += [(suite, "none") for suite, preset in suites if preset == "current"]
    return suites


def external_suites(value: str) -> list[tuple[Path, str]]:
    """Parse ``PATH[=PRESET]`` entries separated by ``os.pathsep`` (preset ``none`` by default)."""
    suites = []
    for entry in filter(None, value.split(os.pathsep)):
        path, _, preset = entry.partition("=")
        preset = preset or "none"
        if preset not in PRESET_NAMES:
            raise ValueError(
                f"{EXTERNAL_SUITES_VARIABLE}: preset {preset!r} of {path!r} is not one of "
                f"{PRESET_NAMES}"
            )
        suites.append((Path(path).expanduser().resolve(), preset))
    return suites


def _profile_needed(doc: Mapping[str, Any]) -> Optional[str]:
    """``9.0`` for a file that needs ``externalClientBaseBackoffMS`` (a 9.0 parameter)."""
    for requirement in doc.get("runOnRequirements") or []:
        if "externalClientBaseBackoffMS" in (requirement.get("serverParameters") or {}):
            return "9.0"
    return None


def _cases() -> list[Case]:
    """Every case, and one skipped placeholder per flavour for each official suite not found."""
    cases: list[Case] = []
    suites = _suites()
    for flavour in FLAVOURS:
        for suite, preset in suites:
            if suite.path is None:
                if preset != "none":  # one placeholder per suite, not one per preset
                    cases.append(Case(preset, flavour, None, suite.missing, suite.name))
                continue
            for path in iter_spec_paths([suite.path]):
                spec = load_spec_file(path, display_name=f"{suite.name}/{path.name}")
                cases.extend(Case(preset, flavour, t) for t in spec.tests)
        if OWN_SPEC_TESTS.is_dir():
            for path in iter_spec_paths([OWN_SPEC_TESTS]):
                spec = load_spec_file(path, display_name=f"spec-tests/{path.name}")
                version = _profile_needed(spec.doc)
                cases.extend(Case("draft", flavour, t, server_version=version) for t in spec.tests)
        for path in iter_spec_paths([RUNNER_SCENARIOS]):
            cases.extend(Case("none", flavour, t) for t in load_spec_file(path).tests)
        for folder, preset in external_suites(os.environ.get(EXTERNAL_SUITES_VARIABLE, "")):
            for path in iter_spec_paths([folder]):
                cases.extend(Case(preset, flavour, t) for t in load_spec_file(path).tests)
    # The current suite once more on the sharded embedded server (2 mongos), sync clients only.
    current = locate("client-backpressure").path
    if current is not None and not os.environ.get("MONGODB_URI"):
        for path in iter_spec_paths([current]):
            spec = load_spec_file(path)
            cases.extend(Case("current", "sync", t, topology="sharded") for t in spec.tests)
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_unified(case: Case, spec_deployment: DeploymentFor) -> None:
    """The unified test passes (or is skipped with the runner's reason)."""
    if case.test is None:
        pytest.skip(case.missing)
    topology = case.topology or choose_topology(case.test.file)
    if topology is None:
        pytest.skip("no embedded topology satisfies runOnRequirements")
    config = RunnerConfig(preset=case.preset, flavour=case.flavour, fast_backoff=True)
    deployment = spec_deployment(topology, case.server_version)
    result = UnifiedRunner(deployment, config).run_test(case.test)
    if result.outcome is Outcome.SKIP:
        pytest.skip(result.reason)
    if result.outcome is Outcome.FAIL:
        pytest.fail(result.reason, pytrace=False)


def test_external_suites_parse_paths_and_presets(tmp_path: Path) -> None:
    """PATH[=PRESET] entries, preset none by default; an unknown preset names the variable."""
    value = os.pathsep.join([str(tmp_path / "crud"), f"{tmp_path / 'txn'}=current", ""])
    assert external_suites(value) == [(tmp_path / "crud", "none"), (tmp_path / "txn", "current")]
    with pytest.raises(ValueError, match=EXTERNAL_SUITES_VARIABLE):
        external_suites(f"{tmp_path}=fastest")
