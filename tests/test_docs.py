"""Every Python example of the docs site runs as written (against the embedded server), and the
command lines the pages name hold: each CLI answers ``--help``, the server prints READY."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import pymongo
import pytest

from backpressure.adapters import seams
from backpressure.testing.server.embedded import EmbeddedServer

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LOCAL_URI = "mongodb://localhost:27017"


def _pages() -> list[Path]:
    """The Markdown pages of the site."""
    return sorted(DOCS.glob("*.md"))


def _blocks(page: Path, language: str) -> list[str]:
    """Every ```language block of ``page``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def _lines(*expected: str) -> Callable[[str], bool]:
    """A check that the block printed exactly these lines."""
    return lambda out: out.splitlines() == list(expected)


def _contains(*parts: str) -> Callable[[str], bool]:
    """A check that the block's output contains each of ``parts``."""
    return lambda out: all(part in out for part in parts)


# One marker per Python block of the docs, with what the block must print (None: any output).
# A new block needs an entry here, so that its output is looked at when it is added.
BLOCKS: dict[str, Optional[Callable[[str], bool]]] = {
    # quickstart.md
    "print(backpressure.policy(client).name)": _lines("current"),
    "print(backpressure.stats(client).retries)": _lines("2"),
    # presets.md
    'backpressure="current", maxAdaptiveRetries=3': _lines("3", "1"),
    "named = backpressure.DRAFT.replace": _lines("draft 3", "True"),
    # adaptive.md
    'backpressure="adaptive") as client': _lines("adaptive True 2"),
    # hedging.md
    "class PrintHedges": lambda out: out.splitlines()[-1] == "{'_id': 1}",
    # observability.md
    "class Recorder": _lines("[('retried', 'insert', 1), ('finished', 2, True)]"),
    "print(stats.operations, stats.attempts, stats.retries)": _lines("1 2 1", "2"),
    "summary = retry_summary(exc)": _lines("462 3 attempts exhausted"),
    "enable_prometheus(registry)": _contains(
        "backpressure_retries_total", "backpressure_attempts_per_operation"
    ),
    "InMemoryMetricReader()": _lines("True"),
    # overrides.md
    "with backpressure.overrides(max_retries=0):": _lines(),
    # testing.md
    "with set_testing(True, seed=7):": _lines(),
    'print("gave up:", exc.code)': _lines("gave up: 462", "3"),
    "def test_retries_an_overloaded_insert(standalone_server):": _lines(),
    # outer-loops.md
    "def save_with_tenacity(doc):": _lines("2"),
    # embedded-server.md
    "server.set_rate_limit(100": _lines("{'received': 3, 'failed': 2, 'rejected': 0}"),
    # simulator.md
    'backpressure.sim.run("bench-open-1.5x"': lambda out: out.splitlines()[0].startswith(
        "current "
    ),
}


NEEDS_NATIVE_OPTIONS = frozenset({'backpressure="current", maxAdaptiveRetries=3'})
"""Markers of blocks that pass ``maxAdaptiveRetries`` to a plain ``pymongo.MongoClient``, an
option of pymongo >= 4.17 (the page says so); on earlier eras pymongo itself rejects it."""


def _all_python_blocks() -> list[tuple[str, str]]:
    """(page name, block) for every Python block of every page."""
    return [(page.name, block) for page in _pages() for block in _blocks(page, "python")]


def _block_ids() -> list[str]:
    """``page.md:N`` for the N-th Python block of each page (from 1)."""
    return [
        f"{page.name}:{number}"
        for page in _pages()
        for number in range(1, len(_blocks(page, "python")) + 1)
    ]


def _marker(block: str) -> str:
    """The one marker of BLOCKS that ``block`` contains."""
    markers = [marker for marker in BLOCKS if marker in block]
    assert len(markers) == 1, f"docs block without exactly one marker in BLOCKS:\n{block}"
    return markers[0]


def test_every_python_block_has_a_marker() -> None:
    """Each block matches exactly one entry of BLOCKS, and each entry one block."""
    blocks = [block for _page, block in _all_python_blocks()]
    assert sorted(_marker(block) for block in blocks) == sorted(BLOCKS)
    assert set(BLOCKS) >= NEEDS_NATIVE_OPTIONS


def _run(code: str, page: str, namespace: dict[str, Any]) -> str:
    """Execute ``code`` in ``namespace``; return what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"<python block of docs/{page}>", "exec"), namespace)
    return out.getvalue()


@pytest.mark.parametrize(
    ("page", "block"),
    _all_python_blocks(),
    ids=_block_ids(),
)
def test_python_block_runs(
    page: str, block: str, replicaset_server: EmbeddedServer, standalone_server: EmbeddedServer
) -> None:
    """The block runs on its own (``localhost:27017`` is an embedded replica set) and prints
    what its comments say; a block that defines a pytest test has it run with the fixture."""
    marker = _marker(block)
    if marker in NEEDS_NATIVE_OPTIONS and not seams.HAS_NATIVE_BACKPRESSURE:
        pytest.skip("the example passes pymongo >= 4.17's own options to pymongo.MongoClient")
    check = BLOCKS[marker]
    namespace: dict[str, Any] = {"__name__": f"docs_{page[:-3].replace('-', '_')}"}
    try:
        out = _run(block.replace(LOCAL_URI, replicaset_server.uri), page, namespace)
        for name, value in list(namespace.items()):
            if name.startswith("test_") and callable(value):
                value(standalone_server)
    finally:  # a block that failed half-way leaves no client open for a later test to report
        for value in namespace.values():
            if isinstance(value, pymongo.MongoClient):
                value.close()
    assert check is None or check(out), out


def _modules_named() -> list[str]:
    """Every ``python -m MODULE`` the pages name (prose and shell blocks alike)."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in _pages())
    return sorted(set(re.findall(r"python -m (backpressure[\w.]*)", text)))


def test_the_pages_name_the_clis() -> None:
    """The command lines checked below are the ones the pages show."""
    assert set(_modules_named()) >= {
        "backpressure.bench",
        "backpressure.bench.agreement",
        "backpressure.demo",
        "backpressure.sim",
        "backpressure.sim.yardsticks",
        "backpressure.testing.server",
        "backpressure.testing.unified",
    }


@pytest.mark.parametrize("module", _modules_named())
def test_cli_help(module: str) -> None:
    """``python -m MODULE --help`` exits 0 with a usage line."""
    result = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:"), result.stdout[:500]


def test_installed_server_script_is_the_module() -> None:
    """``backpressure-test-server --help`` prints the same help as the module, as the page says."""
    assert "`backpressure-test-server`" in (DOCS / "embedded-server.md").read_text("utf-8")
    script = shutil.which("backpressure-test-server", path=str(Path(sys.executable).parent))
    assert script is not None
    by_script = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    by_module = subprocess.run(
        [sys.executable, "-m", "backpressure.testing.server", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert by_script.returncode == by_module.returncode == 0
    # The usage names the program as it was started; everything else is the same.
    program = "python -m backpressure.testing.server"
    assert by_script.stdout.replace("backpressure-test-server", program).split() == (
        by_module.stdout.split()
    )


def test_server_command_prints_ready_with_ephemeral_ports() -> None:
    """The embedded-server page's command prints READY and a 3-member URI, as shown."""
    (block,) = [
        b
        for b in _blocks(DOCS / "embedded-server.md", "bash")
        if "python -m backpressure.testing.server" in b
    ]
    argv = shlex.split(block.split("\n# ")[0].replace("\\\n", " "))
    assert argv[:3] == ["python", "-m", "backpressure.testing.server"]
    process = subprocess.Popen(
        [sys.executable, *argv[1:]], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
    assert re.fullmatch(
        r"READY mongodb://127\.0\.0\.1:\d+,127\.0\.0\.1:\d+,127\.0\.0\.1:\d+/\?replicaSet=rs0", line
    ), line
    shown = re.search(r"e\.g\.\s+(READY \S+)", block)
    assert shown is not None
    assert re.fullmatch(r"READY mongodb://(127\.0\.0\.1:\d+,?){3}/\?replicaSet=rs0", shown[1])


def _runner_commands() -> list[list[str]]:
    """The unified-runner page's command lines, split into arguments."""
    (block,) = _blocks(DOCS / "unified-runner.md", "bash")
    return [shlex.split(line) for line in block.strip().splitlines()]


def test_runner_presets_are_accepted() -> None:
    """Every preset the runner page names is a choice of ``--preset``."""
    help_text = subprocess.run(
        [sys.executable, "-m", "backpressure.testing.unified", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    choices = re.search(r"--preset \{([\w,]+)\}", help_text)
    assert choices is not None
    named = {argv[argv.index("--preset") + 1] for argv in _runner_commands()}
    assert named <= set(choices[1].split(","))


def test_runner_command_against_a_uri(replicaset_server: EmbeddedServer) -> None:
    """The runner command with ``--uri`` passes our own scenarios against a replica set."""
    (argv,) = [argv for argv in _runner_commands() if "--uri" in argv]
    argv = [replicaset_server.uri if a == "mongodb://my-mongod/" else a for a in argv]
    result = subprocess.run(
        [sys.executable, *argv[1:], "--fast-backoff"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"^\d+ passed, 0 failed", result.stdout, flags=re.M)


@pytest.mark.parametrize("preset", ["current", "draft", "adaptive"])
def test_test_mode_sleeps_with_no_preset(
    preset: str, standalone_server: EmbeddedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The testing page's claim: in test mode retries happen but this thread never sleeps,
    whatever the preset (the default included)."""
    import threading
    import time

    import backpressure
    from backpressure.testing import set_testing

    caller = threading.get_ident()
    slept: list[float] = []
    real_sleep = time.sleep

    def recording_sleep(seconds: float) -> None:
        if threading.get_ident() == caller:
            slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", recording_sleep)
    standalone_server.configure_fail_point(
        {
            "configureFailPoint": "failCommand",
            "mode": {"times": 2},
            "data": {
                "failCommands": ["insert"],
                "errorCode": 462,
                "errorLabels": ["SystemOverloadedError", "RetryableError"],
            },
        }
    )
    with (
        backpressure.MongoClient(standalone_server.uri, backpressure=preset) as client,
        set_testing(True, seed=1),
    ):
        client.db.coll.insert_one({"x": 1})
        assert backpressure.stats(client).retries == 2
    assert [seconds for seconds in slept if seconds > 0] == []
