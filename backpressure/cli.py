"""The conventions every command line of the package follows (server, runner, sim, demo, bench).

* A bad value is an argparse usage error naming the flag: the usage line, then
  ``error: argument --flag: ...`` on stderr, exit status 2. The type functions here check a value
  as it is parsed; a check that needs several values calls ``parser.error("argument --flag: ...")``.
* ``--progress {auto,on,off}``: a progress bar on stderr; ``auto`` draws it when stderr is a
  terminal.
* ``--seed N``: the random seed, 1 by default; the same seed gives the same run.
* :func:`run_cli` runs a ``main``: a missing optional dependency prints the
  :class:`~backpressure.core.extras.MissingExtraError` message alone (no traceback) and exits 1;
  Ctrl-C exits 130 without a traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Callable, Optional, TextIO, TypeVar

from backpressure.core.extras import MissingExtraError

__all__ = [
    "PROGRESS_CHOICES",
    "SEED_DEFAULT",
    "add_progress_argument",
    "add_seed_argument",
    "bounded_float",
    "comma_list",
    "name_list",
    "non_negative_float",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "progress_enabled",
    "run_cli",
    "seed_span",
]

T = TypeVar("T")

PROGRESS_CHOICES = ("auto", "on", "off")
"""``--progress`` values: ``auto`` (on when stderr is a terminal), ``on``, ``off``."""

SEED_DEFAULT = 1
"""The default ``--seed`` of every command line."""


def _int(text: str) -> int:
    """``text`` as an integer, or an argparse type error saying what was expected."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _float(text: str) -> float:
    """``text`` as a finite number, or an argparse type error saying what was expected."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer > 0."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = _float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number in ``[low, high]``."""

    def parse(text: str) -> float:
        value = _float(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low:g}, {high:g}], got {text}")
        return value

    parse.__name__ = f"number in [{low:g}, {high:g}]"
    return parse


def name_list(known: Iterable[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated, non-empty list of names, each one of ``known``."""
    choices = tuple(known)

    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        if not names:
            raise argparse.ArgumentTypeError(f"expected one or more of {', '.join(choices)}")
        unknown = [name for name in names if name not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(unknown)}; choose from {', '.join(choices)}"
            )
        return names

    parse.__name__ = "comma-separated list"
    return parse


def comma_list(item: Callable[[str], T]) -> Callable[[str], tuple[T, ...]]:
    """An argparse type: a comma-separated, non-empty list, each item parsed by ``item`` (an
    argparse type such as :func:`positive_float`)."""

    def parse(text: str) -> tuple[T, ...]:
        items = [part.strip() for part in text.split(",") if part.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        values = []
        for index, part in enumerate(items, 1):
            try:
                values.append(item(part))
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"item {index}: {exc}") from None
        return tuple(values)

    parse.__name__ = "comma-separated list"
    return parse


def add_progress_argument(parser: argparse._ActionsContainer) -> None:
    """Add ``--progress {auto,on,off}`` (default ``auto``)."""
    parser.add_argument(
        "--progress",
        choices=PROGRESS_CHOICES,
        default="auto",
        help="progress bar on stderr; auto: only when stderr is a terminal (default: %(default)s)",
    )


def progress_enabled(choice: str, stream: Optional[TextIO] = None) -> bool:
    """Whether ``--progress choice`` draws a bar on ``stream`` (by default stderr)."""
    if choice != "auto":
        return choice == "on"
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def add_seed_argument(parser: argparse._ActionsContainer, *, scope: str = "") -> None:
    """Add ``--seed N`` (default :data:`SEED_DEFAULT`); ``scope`` says what it seeds, if not all."""
    suffix = f"; it seeds {scope}" if scope else ""
    parser.add_argument(
        "--seed",
        type=_int,
        default=SEED_DEFAULT,
        metavar="N",
        help=f"random seed; the same seed gives the same run{suffix} (default: %(default)s)",
    )


MAX_SEEDS = 100
"""The most seeds ``--seeds`` may ask a seed sweep for."""


def add_seeds_arguments(
    parser: argparse.ArgumentParser, *, seeds: int, jobs: bool = True, what: str = ""
) -> None:
    """Add a seed sweep's ``--seed N``, ``--seeds N`` (``seeds`` by default; ``what`` says what
    it does besides running them) and, with ``jobs``, ``--jobs N`` (processes, 1 by default)."""
    add_seed_argument(parser)
    also = f" {what}" if what else ""
    parser.add_argument(
        "--seeds",
        type=positive_int,
        default=seeds,
        metavar="N",
        help=f"run N seeds from --seed{also} (default: {seeds})",
    )
    if jobs:
        parser.add_argument(
            "--jobs", type=positive_int, default=1, metavar="N", help="processes (default: 1)"
        )


def swept_seeds(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[int]:
    """The seeds ``--seed`` and ``--seeds`` name; more than :data:`MAX_SEEDS` is a usage error."""
    if args.seeds > MAX_SEEDS:
        parser.error(f"argument --seeds: must be in 1..{MAX_SEEDS}, got {args.seeds}")
    return list(range(args.seed, args.seed + args.seeds))


def seed_span(seeds: Sequence[int]) -> str:
    """How a results page names the consecutive seeds it ran: ``seed 1`` or ``seeds 1-24``."""
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"


def run_cli(
    main: Callable[[Optional[Sequence[str]]], int], argv: Optional[Sequence[str]] = None
) -> int:
    """Run ``main(argv)`` and return its exit status.

    A :class:`MissingExtraError` prints its message alone on stderr and returns 1; Ctrl-C returns
    130 (128 + SIGINT). Usage errors (``SystemExit(2)`` from argparse) pass through.
    """
    try:
        return main(argv)
    except MissingExtraError as exc:
        print(exc, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
