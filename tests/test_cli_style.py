"""One command-line style for the server, runner, simulator, demo and bench (backpressure.cli).

Each command line's own test module checks its flags; this one checks the shared parts and,
across every command line, a missing extra (a subprocess that hides the package) and the
``--progress``/``--seed`` spellings.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Optional

import pytest

from backpressure.cli import (
    SEED_DEFAULT,
    add_progress_argument,
    add_seed_argument,
    add_seeds_arguments,
    bounded_float,
    comma_list,
    name_list,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    progress_enabled,
    run_cli,
    swept_seeds,
)
from backpressure.core.extras import MissingExtraError

SPEC_TESTS = Path(__file__).resolve().parent.parent / "spec-tests"


def _parser(kind: Callable[[str], object]) -> argparse.ArgumentParser:
    """A parser with one ``--value`` of type ``kind``."""
    parser = argparse.ArgumentParser(prog="prog")
    parser.add_argument("--value", type=kind)
    return parser


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        (positive_int, "3", 3),
        (non_negative_int, "0", 0),
        (positive_float, "0.5", 0.5),
        (non_negative_float, "0", 0.0),
        (bounded_float(0.0, 1.0), "1", 1.0),
        (name_list(["a", "b"]), " b, a ,", ["b", "a"]),
        (comma_list(positive_float), "100,50.5", (100.0, 50.5)),
    ],
)
def test_types_accept_good_values(
    kind: Callable[[str], object], text: str, expected: object
) -> None:
    """Each type returns the parsed value."""
    assert _parser(kind).parse_args(["--value", text]).value == expected


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        (positive_int, "0", "must be >= 1, got 0"),
        (positive_int, "1.5", "expected an integer, got '1.5'"),
        (non_negative_int, "-1", "must be >= 0, got -1"),
        (positive_float, "0", "must be > 0, got 0"),
        (positive_float, "x", "expected a number, got 'x'"),
        (positive_float, "inf", "expected a finite number, got 'inf'"),
        (non_negative_float, "nan", "expected a finite number, got 'nan'"),
        (non_negative_float, "-0.1", "must be >= 0, got -0.1"),
        (bounded_float(0.0, 1.0), "2", "must be in [0, 1], got 2"),
        (name_list(["a", "b"]), "a,c", "unknown c; choose from a, b"),
        (name_list(["a", "b"]), ",", "expected one or more of a, b"),
        (comma_list(positive_int), "1,0", "item 2: must be >= 1, got 0"),
        (comma_list(positive_int), " ", "expected a comma-separated list"),
    ],
)
def test_types_make_usage_errors_naming_the_flag(
    kind: Callable[[str], object], text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad value exits 2 with the usage line and ``argument --value: <why>``."""
    with pytest.raises(SystemExit) as raised:
        _parser(kind).parse_args(["--value", text])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: prog")
    assert f"error: argument --value: {message}" in err


class _Stream(io.StringIO):
    """A text stream that says whether it is a terminal."""

    def __init__(self, tty: bool) -> None:
        """Remember the answer."""
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        """The remembered answer."""
        return self._tty


def test_progress_auto_follows_the_stream_and_on_off_force_it() -> None:
    """``auto`` draws on a terminal only (a closed stream is none); ``on``/``off`` decide alone."""
    tty, pipe = _Stream(True), _Stream(False)
    closed = io.StringIO()
    closed.close()  # isatty() on a closed stream raises ValueError
    assert progress_enabled("auto", tty)
    assert not progress_enabled("auto", pipe)
    assert not progress_enabled("auto", closed)
    assert progress_enabled("on", pipe)
    assert not progress_enabled("off", tty)


def test_progress_and_seed_arguments() -> None:
    """``--progress`` defaults to auto and takes only auto/on/off; ``--seed`` defaults to 1 and is
    documented as the seed that makes a run repeatable."""
    parser = argparse.ArgumentParser(prog="prog")
    add_progress_argument(parser)
    add_seed_argument(parser)
    assert vars(parser.parse_args([])) == {"progress": "auto", "seed": SEED_DEFAULT}
    assert SEED_DEFAULT == 1
    assert parser.parse_args(["--progress", "off", "--seed", "-3"]).seed == -3
    text = " ".join(parser.format_help().split())
    assert "--seed N random seed; the same seed gives the same run (default: 1)" in text
    assert "--progress {auto,on,off}" in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--progress", "yes"])


def test_run_cli_missing_extra_and_ctrl_c(capsys: pytest.CaptureFixture[str]) -> None:
    """A missing extra prints its message alone and returns 1; Ctrl-C returns 130; a usage
    error's SystemExit passes through."""

    def missing(argv: Optional[Sequence[str]]) -> int:
        raise MissingExtraError("simpy", "sim", "The simulator")

    def interrupted(argv: Optional[Sequence[str]]) -> int:
        raise KeyboardInterrupt

    def usage(argv: Optional[Sequence[str]]) -> int:
        raise SystemExit(2)

    assert run_cli(missing) == 1
    err = capsys.readouterr().err
    assert err == (
        "The simulator needs the 'simpy' package, which is not installed; install it with "
        "pip install 'pymongo-backpressure[sim]'\n"
    )
    assert run_cli(interrupted) == 130
    assert run_cli(lambda argv: len(argv or ()), ["a", "b"]) == 2
    with pytest.raises(SystemExit):
        run_cli(usage)


def _run_hiding(
    blocked: Sequence[str], module: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module args`` in a subprocess where the ``blocked`` packages cannot be
    imported (``sys.modules[name] = None``), as if their extra were not installed."""
    code = (
        "import runpy, sys\n"
        f"for name in {list(blocked)!r}:\n"
        "    sys.modules[name] = None\n"
        f"sys.argv = [{module!r}, *sys.argv[1:]]\n"
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("blocked", "module", "args", "extra"),
    [
        ("mongomock", "backpressure.testing.server", ["--port", "0"], "server"),
        ("simpy", "backpressure.sim", ["burst", "--progress", "off"], "sim"),
        ("simpy", "backpressure.sim.yardsticks", ["--scenarios", "faults"], "sim"),
        ("matplotlib", "backpressure.demo", ["--quick", "--progress", "off"], "demo"),
        ("tqdm", "backpressure.demo", ["--scenario", "single"], "demo"),
        ("mongomock", "backpressure.testing.unified", [str(SPEC_TESTS)], "server"),
    ],
)
def test_a_missing_extra_prints_its_message_alone(
    blocked: str, module: str, args: list[str], extra: str
) -> None:
    """Without the extra the command prints the MissingExtraError message, no traceback, exit 1."""
    done = _run_hiding([blocked], module, *args)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert f"the {blocked!r} package, which is not installed" in done.stderr
    assert f"pip install 'pymongo-backpressure[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("module", "blocked"),
    [
        ("backpressure.testing.server", "mongomock"),
        ("backpressure.sim", "simpy"),
        ("backpressure.sim.yardsticks", "simpy"),
    ],
)
def test_help_and_usage_errors_need_no_extra(module: str, blocked: str) -> None:
    """``--help`` and a usage error work without the extra the run needs."""
    helped = _run_hiding([blocked], module, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: python -m {module}")
    wrong = _run_hiding([blocked], module, "--seed" if "sim" in module else "--port", "x")
    assert wrong.returncode == 2
    assert "error: argument --" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_sim_list_needs_no_simpy() -> None:
    """``python -m backpressure.sim --list`` works without SimPy."""
    listed = _run_hiding(["simpy"], "backpressure.sim", "--list")
    assert listed.returncode == 0, listed.stderr
    assert "scenarios:" in listed.stdout


def test_sim_package_names_the_extra_without_simpy() -> None:
    """``backpressure.sim.run`` raises MissingExtraError (an ImportError) naming the sim extra."""
    code = (
        "import sys\n"
        "sys.modules['simpy'] = None\n"
        "import backpressure.sim\n"
        "from backpressure.core.extras import MissingExtraError\n"
        "try:\n"
        "    backpressure.sim.run\n"
        "except MissingExtraError as exc:\n"
        "    print(exc.extra, isinstance(exc, ImportError)); print(exc)\n"
        "print(backpressure.sim.physical_limit.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    first, message, oracle = done.stdout.splitlines()
    assert first == "sim True"
    assert message.startswith("backpressure.sim.run needs the 'simpy' package")
    assert oracle == "physical_limit"  # the oracle needs no SimPy


@pytest.mark.parametrize(
    ("module", "seed", "progress"),
    [
        ("backpressure.sim", True, True),
        ("backpressure.sim.yardsticks", True, False),
        ("backpressure.demo", True, True),
        ("backpressure.bench", False, True),
    ],
)
def test_progress_and_seed_are_spelled_alike(module: str, seed: bool, progress: bool) -> None:
    """Every command line with randomness takes ``--seed N`` (default 1) and every one with a
    progress bar ``--progress {auto,on,off}``, with the same help; ``--no-progress`` is gone."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert ("--seed N random seed; the same seed gives the same run" in text) == seed
    assert ("--progress {auto,on,off} progress bar on stderr" in text) == progress
    assert "--no-progress" not in text


def test_a_seed_sweep_runs_consecutive_seeds_and_refuses_too_many(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--seed 5 --seeds 3`` names seeds 5, 6 and 7; more than 100 seeds, or none, is a usage
    error naming ``--seeds``; ``--jobs`` is there only when asked for."""
    parser = argparse.ArgumentParser(prog="prog")
    add_seeds_arguments(parser, seeds=8)
    assert swept_seeds(parser, parser.parse_args(["--seed", "5", "--seeds", "3"])) == [5, 6, 7]
    defaults = parser.parse_args([])
    assert defaults.jobs == 1
    assert len(swept_seeds(parser, defaults)) == 8
    for argv, message in (
        (["--seeds", "101"], "must be in 1..100, got 101"),
        (["--seeds", "0"], "must be >= 1, got 0"),
    ):
        with pytest.raises(SystemExit):
            swept_seeds(parser, parser.parse_args(argv))
        assert message in capsys.readouterr().err
    without = argparse.ArgumentParser(prog="prog")
    add_seeds_arguments(without, seeds=1, jobs=False, what="and add a table")
    assert not hasattr(without.parse_args([]), "jobs")
    assert "run N seeds from --seed and add a table (default: 1)" in without.format_help()
