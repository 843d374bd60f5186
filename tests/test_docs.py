"""Every Python example of the docs site runs as written (against the embedded server), and the
command lines the pages name hold: each CLI answers ``--help``, the server prints READY."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
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
    """The Markdown pages of the site: the user pages, then the results pages."""
    return sorted(DOCS.glob("*.md")) + sorted((DOCS / "results").glob("*.md"))


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
    'client.shop.command("ping")': _lines("current"),
    "print(backpressure.stats(motor).operations)": _lines("current", "draft", "1"),
    'with EmbeddedServer("replicaset", members=3) as server:\n    server.configure': _lines("2"),
    'await client.db.coll.insert_one({"x": 1})\n            print(backpressure.stats': _lines("2"),
    # presets.md
    'backpressure="current", maxAdaptiveRetries=3': _lines("3", "1"),
    'AsyncMongoClient(uri, backpressure="draft")': _lines("True", "True"),
    "named = backpressure.DRAFT.replace": _lines("draft 3", "True"),
    # server-choice.md
    'print("avoided:", hot.avoided': _lines("avoided: True | routed around: True"),
    "policy(c).route_around for c in (off, also_off)": _lines("False False"),
    # adaptive.md
    'with backpressure.MongoClient(server.uri, backpressure="adaptive")': _lines("adaptive True 2"),
    'AsyncMongoClient(uri, backpressure="adaptive")': _lines("async adaptive"),
    # hedging.md
    "class PrintHedges": lambda out: out.splitlines()[-1] == "{'_id': 1}",
    'print("async", await client.db.orders.find_one': _lines("async {'_id': 1}"),
    # observability.md
    "class Recorder": _lines("[('retried', 'insert', 1), ('finished', 2, True)]"),
    "class OnRetry": _lines("retry 1 of insert", "1 1"),
    "print(stats.operations, stats.attempts, stats.retries)": _lines("1 2 1", "2"),
    "summary = retry_summary(exc)": _lines("462 3 attempts exhausted"),
    'print("async", exc.code, attempts)': _lines("async 462 3"),
    "print(generate_latest(registry).decode())": _contains(
        "backpressure_retries_total", "backpressure_client_operation_retries_count"
    ),
    'print("backpressure_retries_total{" in scrape)': _lines("True"),
    "InMemoryMetricReader()": _lines("True"),
    # overrides.md
    "with backpressure.overrides(max_retries=0):\n            client": _lines(),
    "with backpressure.overrides(max_retries=0):\n                await": _lines("1"),
    # testing.md
    "with set_testing(True, seed=7):": _lines(),
    'print("gave up:", exc.code)': _lines("gave up: 462", "3"),
    'print("async gave up:", exc.code)': _lines("async gave up: 462"),
    "def test_retries_an_overloaded_insert(standalone_server):": _lines(),
    "async def test_retries_an_overloaded_insert_async(standalone_server):": _lines(),
    # outer-loops.md
    "\ndef save_with_tenacity(doc):": _lines("2"),
    "async def save_with_tenacity(doc):": _lines("async 2"),
    # embedded-server.md
    "server.set_rate_limit(100": _lines("{'received': 3, 'failed': 2, 'rejected': 0}"),
    'print(server.stats()["commands"]["find"]["failed"])': _lines("1"),
    # production.md
    "uri, timeoutMS=2000) as client:\n        client": _lines("{'_id': 1}"),
    'print("async", found)': _lines("async {'_id': 1}"),
    "logging.config.dictConfig(": _lines("30"),
    # troubleshooting.md
    "print(stats.operations, stats.retries, 0 < slept <= 0.2)": _lines("1 1 True"),
    'print("async", stats.operations, stats.retries)': _lines("async 1 0"),
    "category=backpressure.UntestedPymongoWarning": _lines("True"),
    # migration.md
    "print(policy.name, policy.max_retries, policy.retarget)": _lines("current 3 True"),
    'print("async", backpressure.policy(client).max_retries)': _lines("async 3"),
    "def overloaded(exc):": _lines("commands: 9 then 3"),
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


CODE_LINE_LIMIT = 90
"""Characters of a code line that fit a docs code block without scrolling sideways: measured in
headless Chromium at a 1280 px window on the built site (furo): the block's text box is 708 px
wide and a character of its 13 px monospace font 7.8 px, so 90 characters."""

_INCLUDE = re.compile(r"^```\{include\} (\S+)\n(?::.*\n)*```$", flags=re.M)


def _expanded(page: Path) -> str:
    """The page's Markdown with every ``{include}`` replaced by the file it includes."""
    text = page.read_text("utf-8")
    return _INCLUDE.sub(lambda m: (page.parent / m[1]).read_text("utf-8"), text)


def _fenced(text: str) -> list[tuple[str, list[str]]]:
    """(info string, lines) of every fenced block of ``text``, however indented, with or
    without a language (diagrams are bare blocks)."""
    blocks: list[tuple[str, list[str]]] = []
    fence: Optional[str] = None
    for line in text.splitlines():
        match = re.fullmatch(r"\s*(`{3,})(.*)", line)
        if fence is None and match:
            fence = match[1]
            blocks.append((match[2].strip(), []))
        elif fence is not None and line.strip() == fence:
            fence = None
        elif fence is not None:
            blocks[-1][1].append(line)
    return blocks


def test_code_lines_fit_the_code_block() -> None:
    """No line of a fenced code block or diagram (bare blocks included), in a page, a file it
    includes, or a file it includes as code, is longer than CODE_LINE_LIMIT (comments go
    above)."""
    blocks: list[tuple[str, list[str]]] = []
    for page in _pages():
        for info, lines in _fenced(_expanded(page)):
            included = re.fullmatch(r"\{literalinclude\} (\S+)", info)
            if included:
                blocks.append((included[1], (DOCS / included[1]).read_text("utf-8").splitlines()))
            elif not info.startswith("{"):
                blocks.append((page.name, lines))
    assert len(blocks) > 40
    long = [
        f"{name}: {line}" for name, lines in blocks for line in lines if len(line) > CODE_LINE_LIMIT
    ]
    assert long == []


TABLE_WIDTH_PX = 742
"""Width of a table's box in the content column of the built site at a 1280 px window (furo,
docs/_static/tables.css), measured in headless Chromium; 723 px for a table in a list item."""

NESTED_TABLE_WIDTH_PX = 723


def _table_width_px(rows: list[list[str]]) -> float:
    """An upper estimate of a table's narrowest width in px: per column, its longest word (a
    table wraps cells at spaces only) at 6.5 px a character of text or 7.5 of inline code,
    plus 8 px of padding and border. Calibrated in headless Chromium on the 58 tables of the
    site: the estimate is within 5% of the measured width or above it, and above the box for
    each of the five tables that scrolled sideways before they were narrowed."""
    width = 0.0
    for column in range(len(rows[0])):
        words = [0.0]
        for row in rows:
            cell = row[column] if column < len(row) else ""
            code = re.findall(r"`([^`]*)`", cell)
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", re.sub(r"`[^`]*`", " ", cell))
            words += [6.5 * len(word) for word in text.replace("**", "").split()]
            words += [7.5 * len(word) for part in code for word in part.split()]
        width += max(words) + 8
    return width


def _tables(text: str) -> list[tuple[bool, list[list[str]]]]:
    """(in a list item, rows of cells) of every Markdown table of ``text``, header first."""
    tables: list[tuple[bool, list[list[str]]]] = []
    lines: list[str] = []
    for line in [*text.splitlines(), ""]:
        if re.fullmatch(r"\s*\|.*\|\s*", line):
            lines.append(line)
            continue
        if len(lines) >= 2 and re.fullmatch(r"\s*\|(\s*:?-+:?\s*\|)+\s*", lines[1]):
            rows = [re.split(r"(?<!\\)\|", row.strip()[1:-1]) for row in lines[:1] + lines[2:]]
            tables.append((lines[0].startswith(" "), [[c.strip() for c in r] for r in rows]))
        lines = []
    return tables


def test_tables_fit_the_content_column() -> None:
    """No table of a page, or of a results file it includes, scrolls sideways at 1280 px: its
    estimated narrowest width fits the content column (split a wide table or move a column
    out; results tables by their generator)."""
    tables = [(page.name, table) for page in _pages() for table in _tables(_expanded(page))]
    assert len(tables) > 50
    wide = [
        f"{name}: {_table_width_px(rows):.0f} px: {' | '.join(rows[0])}"
        for name, (nested, rows) in tables
        if _table_width_px(rows) > (NESTED_TABLE_WIDTH_PX if nested else TABLE_WIDTH_PX)
    ]
    assert wide == []


def test_every_sync_client_example_has_an_async_one() -> None:
    """A page whose examples use a sync client shows an AsyncMongoClient or Motor one too."""
    for page in _pages():
        blocks = _blocks(page, "python")
        sync = [b for b in blocks if re.search(r"(?<!Async)MongoClient\(", b)]
        asynchronous = [b for b in blocks if "asyncio.run(" in b or "async def test_" in b]
        assert not sync or asynchronous, f"{page.name}: sync client examples only"
        for block in asynchronous:
            assert re.search(r"AsyncMongoClient\(|AsyncIOMotorClient\(", block), block


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
                result = value(standalone_server)
                if inspect.iscoroutine(result):  # an async def test, as pytest-asyncio runs it
                    asyncio.run(result)
    finally:  # a block that failed half-way leaves no client open for a later test to report
        for value in namespace.values():
            if isinstance(value, pymongo.MongoClient):
                value.close()
    assert check is None or check(out), out


def _fleet_summary(report: dict[str, Any]) -> str:
    """The benchmarks page's summary table, rendered from the committed fleet results."""
    from backpressure.workload.arms import ARM_KEY, arm_label

    plans = report["fleet"]
    shapes = [f"{p['plan']['processes']}x{p['plan']['threads']}" for p in plans]
    runs = {(r["shape"], r[ARM_KEY]): r for p in plans for r in p["runs"]}
    head = ["arm"] + [f"{what} {s}" for what in ("errors", "attempts/op", "p99") for s in shapes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in [r[ARM_KEY] for r in plans[0]["runs"]]:
        cells = [arm_label(arm)]
        cells += [f"{runs[(s, arm)]['error_fraction'] * 100:.1f} %" for s in shapes]
        cells += [f"{runs[(s, arm)]['attempts_per_op']:.2f}" for s in shapes]
        cells += [f"{runs[(s, arm)]['p99_ms']:.0f} ms" for s in shapes]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def test_the_benchmarks_page_leads_with_the_fleet_summary() -> None:
    """The summary table at the top of the benchmarks page is the latest committed fleet run's
    (named above it), every arm with the default's row first, before any other table."""
    from backpressure.bench.goals import latest_runs

    folder = ROOT / "bench" / "results" / "adaptive-default"
    ((number, report),) = latest_runs(folder, "fleet-run", 1)
    page = (DOCS / "benchmarks.md").read_text("utf-8")
    table = _fleet_summary(report)
    assert table in page
    assert page.index(f"`adaptive-default/fleet-run{number}.md`") < page.index(table)
    assert page.index(table) == page.index("\n|") + 1
    assert table.splitlines()[2].startswith("| default (")


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
    shown = re.search(r"e\.g\.[\s#]+(READY \S+)", block)
    assert shown is not None
    assert re.fullmatch(r"READY mongodb://(127\.0\.0\.1:\d+,?){3}/\?replicaSet=rs0", shown[1])


def _runner_commands() -> list[list[str]]:
    """The unified-runner page's command lines, split into arguments."""
    (block,) = _blocks(DOCS / "unified-runner.md", "bash")
    return [shlex.split(line) for line in block.replace("\\\n", " ").strip().splitlines()]


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


# -- claims about the code, held to it ---------------------------------------------------------

_PATH = re.compile(r"`((?:tests|backpressure|scripts|bench|core|adapters|switch)/[\w/.-]*)`")


def test_every_path_a_page_names_exists() -> None:
    """A file or folder named in backticks (``tests/...``, ``backpressure/...``, ``core/...``)
    exists in the checkout or in the package."""
    missing = []
    for page in [*_pages(), ROOT / "README.md"]:
        for path in _PATH.findall(page.read_text(encoding="utf-8")):
            if not any((base / path).exists() for base in (ROOT, ROOT / "backpressure")):
                missing.append(f"{page.name}: {path}")
    assert not missing


def test_the_architecture_page_lists_the_adaptive_package_and_where_classes_live() -> None:
    """The ``adaptive/`` row counts and names every module of ``core/adaptive/``, and each
    ``Class`` (``core/....py``) the page pairs is defined in that module."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    modules = sorted(
        p.name for p in (ROOT / "backpressure/core/adaptive").glob("*.py") if p.name[0] != "_"
    )
    (row,) = [line for line in text.splitlines() if line.startswith("| `adaptive/` |")]
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    assert f"a package of {words[len(modules)]} modules" in row
    assert all(f"`{module}`" in row for module in modules)
    pairs = re.findall(r"`(\w+)` \(`(core/[\w/]+\.py)`\)", text)
    assert pairs
    for name, path in pairs:
        source = (ROOT / "backpressure" / path).read_text(encoding="utf-8")
        assert re.search(rf"^class {name}\b", source, flags=re.M), f"{name} not in {path}"
    for module in modules:
        cell = row.split(f"`{module}` (", 1)[1].split(")", 1)[0]
        source = (ROOT / "backpressure/core/adaptive" / module).read_text(encoding="utf-8")
        for name in re.findall(r"`([A-Z]\w+)`", cell):
            assert re.search(rf"^class {name}\b", source, flags=re.M), f"{name} not in {module}"


def test_the_oracle_needs_only_the_standard_library_as_the_simulator_page_says() -> None:
    """Without SimPy: ``backpressure.sim.oracle``'s names import, and ``backpressure.sim``
    reached from ``import backpressure`` raises MissingExtraError, as the page says."""
    text = " ".join((DOCS / "simulator.md").read_text(encoding="utf-8").split())
    statement = "from backpressure.sim.oracle import physical_limit, physical_min_errors"
    assert f"`{statement}`" in text
    code = (
        "import sys\nsys.modules['simpy'] = None\n"
        "import backpressure\n"
        "try:\n    backpressure.sim\nexcept backpressure.MissingExtraError:\n    pass\n"
        "else:\n    sys.exit('backpressure.sim did not raise')\n"
        f"{statement}\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_the_outer_loop_arithmetic_is_the_presets() -> None:
    """ "3 outer tries x N attempts = M commands" uses the default preset's and draft's
    attempts, on the page and in ``core/outer.py``."""
    from backpressure.core.policy import DEFAULT_POLICY, DRAFT

    default, draft = DEFAULT_POLICY.max_retries + 1, DRAFT.max_retries + 1
    claim = (
        f"3 outer tries x {default} attempts of the default preset = {3 * default} commands per "
        f"operation under overload; x {draft} = {3 * draft} with"
    )
    for path in (DOCS / "outer-loops.md", ROOT / "backpressure/core/outer.py"):
        assert claim in " ".join(path.read_text(encoding="utf-8").split()), path


def test_the_adaptive_page_gives_the_pacers_times_in_windows() -> None:
    """The pacing times are fractions of ``adaptive_window`` (its default named), taken from
    the pacer's own constants, so the page holds at any window."""
    from backpressure.core.adaptive import _neighbours, _rate, _replies, _waiting
    from backpressure.core.policy import Policy

    text = " ".join((DOCS / "adaptive.md").read_text(encoding="utf-8").split())
    window = Policy.__dataclass_fields__["adaptive_window"].default
    assert f"a window is `adaptive_window` ({window:g} s by default" in text
    for phrase in (
        f"the send rate of the last {_replies._SEND_BUCKETS / _replies._BUCKETS:g} windows",
        f"the slot-to-reply time and {_rate._MIN_ROUND:g} windows",
        f"{_rate._HELD_QUIET:g} of it after a held round",
        f"doubles every {_rate._CLIMB_DOUBLING:g} windows",
        f"a pushback less than {_rate._YOUNG:g} windows after the close",
        f"{_rate._YOUNG_GAPS:g} times the mean gap of the last {_rate._YOUNG_ROUNDS} without one",
        f"at least {_rate._YOUNG_QUIET:g} windows, at most `adaptive_quiet`",
        f"within {_rate._JUMP_AGE:g} windows of the close",
        f"It tests at one instant in {_neighbours._COMPETING_TESTS}, cutting",
        f"not after {_neighbours._CLIMB_CUT_QUIET:g} windows without a pushback",
        f"asks again at least every {_waiting._NAP:g} windows",
    ):
        assert phrase in text, phrase
    assert not re.search(r"\b0\.\d+ s\b(?! at the default)", text)


def test_the_runner_prints_every_test_and_v_the_full_reasons(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As the runner page says: each test is one line with its reason's first line; ``-v``
    prints the reason in full."""
    from backpressure.testing.unified.__main__ import _print_result
    from backpressure.testing.unified.runner import Outcome, TestResult

    text = " ".join((DOCS / "unified-runner.md").read_text(encoding="utf-8").split())
    claim = "Every test is printed with its outcome and the first line of its reason; `-v`"
    assert f"{claim} prints each reason in full." in text
    result = TestResult("f.json::t", Outcome.FAIL, "first\nsecond")
    _print_result(result, verbose=False)
    assert capsys.readouterr().out.splitlines() == [
        f"{Outcome.FAIL.value} f.json::t (0.00s): first"
    ]
    _print_result(result, verbose=True)
    assert capsys.readouterr().out.splitlines()[1] == "second"
