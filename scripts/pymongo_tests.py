"""Run pymongo's own backpressure tests (or its server-selection tests) with every client
enabled with a preset, against the embedded replica set; report passed/failed/skipped per preset.

usage: python scripts/pymongo_tests.py [--preset P[,P...]] [--suite S] [--flavour sync,async]
                                       [--jobs N] [-k EXPR] [--server-version V] [--cache DIR] ...

The test files (suite ``backpressure``: ``test/test_client_backpressure.py`` and its async
twin ``test/asynchronous/test_client_backpressure.py``; suite ``selection``: the
``test_server_selection*.py`` files and ``test_topology.py``, sync and async) come from
pymongo's source distribution for
the installed pymongo version (``pip download --no-binary :all: --no-deps pymongo==<version>``),
unpacked once into ``.cache/pymongo-tests/pymongo-<version>/`` (only ``test/`` and
``pyproject.toml``, pymongo's pytest settings: the tests import the installed pymongo, not the
sdist's sources). Nothing in them is changed.

For each preset and file a fresh embedded replica set (3 members, 9.0 profile) starts in a
subprocess, and pytest runs the file in a child process with ``DB_IP``/``DB_PORT`` pointing at
its primary and the plugin ``scripts/pymongo_tests_enable.py``, which wraps
``MongoClient.__init__`` and ``AsyncMongoClient.__init__`` so that every client the tests make
is enabled with the preset (``stock``: none is). The ``backpressure`` used is whatever the
invoking Python imports, so the script runs from any checkout:
``/other/checkout/.venv/bin/python /this/checkout/scripts/pymongo_tests.py``.

Exit status: 0 when no preset has a failing test and, when ``stock`` is among the presets, every
other preset passes exactly the tests stock passes; 1 otherwise; 2 on a usage error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pymongo

import backpressure
from backpressure.cli import name_list, positive_float, positive_int, run_cli
from backpressure.core.policy import DEFAULT_POLICY

HERE = Path(__file__).resolve().parent
PLUGIN = "pymongo_tests_enable"  # scripts/pymongo_tests_enable.py
DEFAULT_CACHE = HERE.parent / ".cache" / "pymongo-tests"
STOCK = "stock"
PRESETS = ("default", "current", "adaptive", "draft", STOCK)
FILES = {
    "sync": "test/test_client_backpressure.py",
    "async": "test/asynchronous/test_client_backpressure.py",
}
_SELECTION = (
    "test_server_selection.py",
    "test_server_selection_in_window.py",
    "test_server_selection_logging.py",
    "test_server_selection_rtt.py",
)
SUITES: dict[str, dict[str, tuple[str, ...]]] = {
    "backpressure": {flavour: (path,) for flavour, path in FILES.items()},
    "selection": {
        "sync": (*(f"test/{name}" for name in _SELECTION), "test/test_topology.py"),
        "async": tuple(f"test/asynchronous/{name}" for name in _SELECTION),
    },
}
"""The test files of each suite, per flavour (the backpressure suite's are :data:`FILES`)."""
TITLES = {"backpressure": "backpressure tests", "selection": "server-selection tests"}
# pymongo's prose test 5 (baseBackoffMS) needs a 9.0 server; the 9.0 profile runs every test.
SERVER_VERSION = "9.0"
USAGE = (
    "python scripts/pymongo_tests.py [--preset P[,P...]] [--suite S] [--flavour sync,async] "
    "[--jobs N] "
    "[-k EXPR] [--server-version V] [--cache DIR] [--timeout S] [--json PATH] "
    "[--markdown PATH] [-v]"
)


def default_preset() -> str:
    """The name of the package's default preset (``current`` or ``adaptive``)."""
    return DEFAULT_POLICY.name


# -- the test files ---------------------------------------------------------------------------


def fetch_tests(version: str, cache: Path) -> Path:
    """The folder holding pymongo ``version``'s ``test/`` and ``pyproject.toml``, from its sdist.

    Downloaded with pip and unpacked once into ``cache/pymongo-<version>``; later calls reuse it.

    Raises:
        RuntimeError: pip failed, or the sdist holds no backpressure test files.
    """
    target = cache / f"pymongo-{version}"
    if (target / ".complete").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        download = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--dest",
            scratch,
            f"pymongo=={version}",
        ]
        print(f"fetching pymongo {version}'s source distribution", file=sys.stderr, flush=True)
        done = subprocess.run(download, capture_output=True, text=True, check=False)
        archives = sorted(Path(scratch).glob(f"pymongo-{version}.tar.gz"))
        if done.returncode != 0 or not archives:
            raise RuntimeError(
                f"pip download of pymongo=={version}'s sdist failed:\n{done.stderr.strip()}"
            )
        staging = Path(scratch) / "unpacked"
        prefix = f"pymongo-{version}/"
        with tarfile.open(archives[0]) as archive:
            wanted = [
                member
                for member in archive.getmembers()
                if member.name.startswith(prefix + "test/")
                or member.name == prefix + "pyproject.toml"
            ]
            names = {member.name[len(prefix) :] for member in wanted}
            missing = [path for path in FILES.values() if path not in names]  # the main suite
            if missing or "pyproject.toml" not in names:
                raise RuntimeError(
                    f"pymongo {version}'s sdist lacks {', '.join(missing or ['pyproject.toml'])}"
                )
            _extract(archive, wanted, staging)
        unpacked = staging / f"pymongo-{version}"
        (unpacked / ".complete").write_text(f"{archives[0].name}\n", encoding="utf-8")
        with contextlib.suppress(OSError):  # another run may have unpacked it meanwhile
            unpacked.rename(target)
    if not (target / ".complete").is_file():
        raise RuntimeError(f"could not unpack pymongo {version}'s tests into {target}")
    return target


def _extract(archive: tarfile.TarFile, members: list[tarfile.TarInfo], into: Path) -> None:
    """Unpack ``members`` into ``into``: regular files and folders only, none outside it."""
    for member in members:
        if not (member.isfile() or member.isdir()) or ".." in Path(member.name).parts:
            raise RuntimeError(f"unexpected member {member.name!r} in {archive.name}")
    if hasattr(tarfile, "data_filter"):  # Python 3.12, and 3.9.17+/3.10.12+/3.11.4+
        archive.extractall(into, members=members, filter="data")
    else:
        archive.extractall(into, members=members)


# -- one run ----------------------------------------------------------------------------------


@dataclass
class PresetRun:
    """The outcome of pymongo's tests with every client enabled with one preset."""

    preset: str
    seconds: float
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # test id -> first line of the error
    skipped: dict[str, str] = field(default_factory=dict)  # test id -> reason
    clients_created: int = 0
    clients_enabled: int = 0
    problems: list[str] = field(default_factory=list)  # a run broke (no report, no client ...)

    def add(self, other: PresetRun) -> None:
        """Count ``other`` (another file's run with the same preset) in this one."""
        self.seconds += other.seconds
        self.passed = sorted([*self.passed, *other.passed])
        self.failed.update(other.failed)
        self.skipped.update(other.skipped)
        self.clients_created += other.clients_created
        self.clients_enabled += other.clients_enabled
        self.problems += other.problems

    def summary(self) -> dict[str, Any]:
        """The figures and the failing and skipped tests, for the JSON report."""
        return {
            "preset": self.preset,
            "passed": len(self.passed),
            "failed": len(self.failed),
            "skipped": len(self.skipped),
            "seconds": round(self.seconds, 1),
            "clients_created": self.clients_created,
            "clients_enabled": self.clients_enabled,
            "problems": list(self.problems),
            "failures": dict(sorted(self.failed.items())),
            "skips": dict(sorted(self.skipped.items())),
        }


def _first_line(text: Optional[str]) -> str:
    """The first non-empty line of ``text``."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def parse_junit(path: Path, run: PresetRun) -> None:
    """Fill ``run``'s passed/failed/skipped lists from pytest's JUnit XML report at ``path``.

    A test id is ``module.Class::name``. A test with a failure or an error (setup and teardown
    included) counts as failed, with the first line of its message.
    """
    root = ElementTree.parse(path).getroot()
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        broken = [child for child in case if child.tag in ("failure", "error")]
        skipped = case.find("skipped")
        if broken:
            message = broken[0].get("message") or _first_line(broken[0].text)
            run.failed[test_id] = _first_line(message)
        elif skipped is not None:
            run.skipped[test_id] = _first_line(skipped.get("message"))
        else:
            run.passed.append(test_id)
    run.passed.sort()


def run_tests(
    preset: str,
    flavour: str,
    tests: Path,
    *,
    suite: str = "backpressure",
    server_version: str,
    keyword: Optional[str],
    timeout: float,
    log_dir: Path,
) -> PresetRun:
    """Run one flavour's test file under pytest with every client enabled with ``preset``,
    against a fresh embedded replica set (a subprocess of its own); the pytest output goes to
    ``log_dir/<preset>-<flavour>.log``."""
    from backpressure.testing import EmbeddedServer

    log_dir.mkdir(parents=True, exist_ok=True)
    name = f"{preset}-{flavour}" if suite == "backpressure" else f"{suite}-{preset}-{flavour}"
    stem = log_dir / name
    report, counts, log = (Path(f"{stem}{suffix}") for suffix in (".xml", ".counts.json", ".log"))
    for stale in (report, counts):
        stale.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "pytest",
        *SUITES[suite][flavour],
        "-p",
        PLUGIN,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:backpressure",  # the package's fixtures: not needed, and stock imports no backpressure
        f"--junitxml={report}",
        "-q",
    ]
    if keyword:
        command += ["-k", keyword]
    server = EmbeddedServer("replicaset", members=3, server_version=server_version, subprocess=True)
    with server:
        host, port = server.primary_address
        env = dict(os.environ)
        env.update(
            DB_IP=host,
            DB_PORT=str(port),
            PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
            BACKPRESSURE_PYMONGO_TESTS_PRESET=preset,
            BACKPRESSURE_PYMONGO_TESTS_COUNTS=str(counts),
        )
        started = time.monotonic()
        with log.open("w", encoding="utf-8") as output:
            try:
                done = subprocess.run(
                    command,
                    cwd=tests,
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    check=False,
                )
                returncode: Optional[int] = done.returncode
            except subprocess.TimeoutExpired:
                returncode = None
        run = PresetRun(preset, time.monotonic() - started)
    if returncode is None:
        run.problems.append(f"{flavour}: pytest did not finish within {timeout:g} s (see {log})")
    elif returncode == 5:  # pytest's "no tests collected"
        run.problems.append(f"{flavour}: no test selected (see {log})")
    elif returncode not in (0, 1) or not report.is_file():
        run.problems.append(f"{flavour}: pytest exited with status {returncode} (see {log})")
    if report.is_file():
        parse_junit(report, run)
    if counts.is_file():
        figures = json.loads(counts.read_text(encoding="utf-8"))
        run.clients_created = int(figures["created"])
        run.clients_enabled = int(figures["enabled"])
    elif not run.problems:
        run.problems.append(f"{flavour}: the plugin {PLUGIN} wrote no client counts (see {log})")
    if not run.problems and preset != STOCK and run.clients_enabled == 0:
        run.problems.append(f"{flavour}: no client was enabled: the hook did not reach the tests")
    return run


def run_all(
    presets: Sequence[str], flavours: Sequence[str], jobs: int, **options: Any
) -> list[PresetRun]:
    """Every (preset, flavour) pair's run, ``jobs`` at a time; one merged run per preset."""
    pairs = [(preset, flavour) for preset in presets for flavour in flavours]

    def one(pair: tuple[str, str]) -> PresetRun:
        preset, flavour = pair
        run = run_tests(preset, flavour, **options)
        print(
            f"{preset} {flavour}: {len(run.passed)} passed, {len(run.failed)} failed, "
            f"{len(run.skipped)} skipped in {run.seconds:.0f} s ({run.clients_enabled} of "
            f"{run.clients_created} clients enabled)",
            file=sys.stderr,
            flush=True,
        )
        return run

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        finished = list(pool.map(one, pairs))
    merged = {preset: PresetRun(preset, 0.0) for preset in presets}
    for run in finished:
        merged[run.preset].add(run)
    return list(merged.values())


# -- the report -------------------------------------------------------------------------------


def differences(run: PresetRun, stock: PresetRun) -> dict[str, list[str]]:
    """Tests stock passes that ``run`` does not (``lost``) and the other way round (``gained``)."""
    passed, reference = set(run.passed), set(stock.passed)
    return {"lost": sorted(reference - passed), "gained": sorted(passed - reference)}


def ordered(runs: Sequence[PresetRun], default: str) -> list[PresetRun]:
    """The runs with the default preset's first and stock's last, the others as given."""
    return sorted(runs, key=lambda run: (run.preset != default, run.preset == STOCK))


def render_markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown page: the figures per preset, then each preset's failures."""
    lines = [
        f"# pymongo {report['pymongo']}'s own "
        f"{TITLES[report.get('suite', 'backpressure')]}, every client enabled",
        "",
        f"{', '.join(report['files'])} from pymongo {report['pymongo']}'s source distribution, "
        f"against the embedded replica set (3 members, version {report['server_version']}); "
        f"Python {report['python']}, {report['date']}. `stock`: no client enabled.",
        "",
        "| preset | passed | failed | skipped | time (s) | clients enabled | differs from stock |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["presets"]:
        label = row["preset"] + (" (default)" if row["preset"] == report["default"] else "")
        diff = row.get("differs_from_stock")
        differs = "-" if diff is None else f"{len(diff['lost'])} lost, {len(diff['gained'])} gained"
        lines.append(
            f"| {label} | {row['passed']} | {row['failed']} | {row['skipped']} | "
            f"{row['seconds']:.0f} | {row['clients_enabled']} of {row['clients_created']} | "
            f"{differs} |"
        )
    for row in report["presets"]:
        for problem in row["problems"]:
            lines += ["", f"`{row['preset']}`: the run broke: {problem}"]
        if row["failures"]:
            lines += ["", f"## Failing with `{row['preset']}`", ""]
            lines += [f"- `{test}`: {message}" for test, message in row["failures"].items()]
    return "\n".join(lines) + "\n"


def build_report(
    runs: Sequence[PresetRun],
    *,
    files: Sequence[str],
    server_version: str,
    default: str,
    suite: str = "backpressure",
) -> dict[str, Any]:
    """The JSON report: versions, files, and per preset its figures and failing tests."""
    stock = next((run for run in runs if run.preset == STOCK), None)
    rows = []
    for run in ordered(runs, default):
        row = run.summary()
        if stock is not None and run is not stock:
            row["differs_from_stock"] = differences(run, stock)
        rows.append(row)
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "pymongo": pymongo.version,
        "python": platform.python_version(),
        "server_version": server_version,
        "default": default,
        "files": list(files),
        **({} if suite == "backpressure" else {"suite": suite}),
        "presets": rows,
    }


def verdict(runs: Sequence[PresetRun]) -> list[str]:
    """Why the run fails (empty: it passes): failing tests, broken runs, differences from stock."""
    reasons = []
    stock = next((run for run in runs if run.preset == STOCK), None)
    for run in runs:
        reasons += [f"{run.preset}: {problem}" for problem in run.problems]
        if run.failed:
            reasons.append(f"{run.preset}: {len(run.failed)} failed")
        if stock is not None and run is not stock:
            diff = differences(run, stock)
            if diff["lost"] or diff["gained"]:
                reasons.append(
                    f"{run.preset}: passes {len(diff['lost'])} fewer and {len(diff['gained'])} "
                    "other tests than stock"
                )
    return reasons


# -- command line -----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    """The argument parser."""
    parser = argparse.ArgumentParser(
        prog="python scripts/pymongo_tests.py",
        usage=USAGE,
        description="Run pymongo's own backpressure tests (sync and async, from its source "
        "distribution) against the embedded replica set, every client enabled with a preset.",
    )
    parser.add_argument(
        "--preset",
        type=name_list(PRESETS),
        default=["default"],
        metavar="P[,P...]",
        help=f"comma-separated presets to run, each in its own run: {', '.join(PRESETS)} "
        "(default: the package's default preset; stock: no client enabled)",
    )
    parser.add_argument(
        "--suite",
        choices=list(SUITES),
        default="backpressure",
        help="pymongo's backpressure tests or its server-selection tests (default: backpressure)",
    )
    parser.add_argument(
        "--flavour",
        type=name_list(list(FILES)),
        default=list(FILES),
        metavar="sync,async",
        help="which test files: sync, async or both (default: both)",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        metavar="N",
        help="run up to N test files at once, each with its own server (default: 1; the "
        "tests mostly wait, so 4 fits 2 cores)",
    )
    parser.add_argument("-k", dest="keyword", help="only tests matching this pytest expression")
    parser.add_argument(
        "--server-version",
        default=SERVER_VERSION,
        help=f"embedded server version profile: 8.2.0, 8.2.6 or 9.0 (default: {SERVER_VERSION})",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="where pymongo's test files are unpacked and run logs go (default: .cache/"
        "pymongo-tests next to this script's checkout)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=900.0,
        metavar="S",
        help="give up on one preset's pytest run after S seconds (default: 900)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the report as JSON")
    parser.add_argument(
        "--markdown", type=Path, metavar="PATH", help="write the report as a Markdown page"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print every failing test's first error line"
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the presets; 0 when everything passes (see the module docstring), else 1."""
    return run_cli(_main, argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    """The command line, without the missing-extra and Ctrl-C handling of :func:`main`."""
    args = _parser().parse_args(argv)
    default = default_preset()
    presets = list(dict.fromkeys(default if p == "default" else p for p in args.preset))
    cache = args.cache.resolve()  # pytest runs in the tests' folder: no relative paths
    tests = fetch_tests(pymongo.version, cache)
    package = Path(backpressure.__file__ or "").resolve().parent
    print(
        f"pymongo {pymongo.version}, backpressure from {package}, tests in {tests}",
        file=sys.stderr,
        flush=True,
    )
    runs = run_all(
        presets,
        args.flavour,
        args.jobs,
        tests=tests,
        server_version=args.server_version,
        suite=args.suite,
        keyword=args.keyword,
        timeout=args.timeout,
        log_dir=cache / "runs",
    )
    report = build_report(
        runs,
        files=[path for f in args.flavour for path in SUITES[args.suite][f]],
        suite=args.suite,
        server_version=args.server_version,
        default=default,
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(render_markdown(report), encoding="utf-8")
    page = render_markdown(report)
    print(page if args.verbose else page.split("\n## ", 1)[0].rstrip("\n"))
    reasons = verdict(runs)
    for reason in reasons:
        print(f"FAIL {reason}", file=sys.stderr)
    return 1 if reasons else 0


if __name__ == "__main__":
    sys.exit(main())
