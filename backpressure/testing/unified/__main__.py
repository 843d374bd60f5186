"""Command line: run unified-format test files and print one line per test.

``python -m backpressure.testing.unified [--uri URI] [--preset {draft,current,adaptive,none}]
[--async | --motor] [--fast-backoff] [--topology T] [--server-version V] [-k TEXT] [-v] PATH...``

Without ``--uri`` (or ``MONGODB_URI``) each file runs on an embedded server of the topology its
``runOnRequirements`` need (a 3-member replica set when allowed, else sharded, else standalone),
one server per topology shared by all files and reset between tests (``--topology`` forces
one). ``--server-version`` gives the embedded servers a version profile (``9.0`` for the
files that need ``externalClientBaseBackoffMS``). ``--preset`` picks the clients: a package preset
(``current``, the default, ``draft`` or ``adaptive``), or ``none`` for stock pymongo clients.
Exit code 1 on any failure, 2 on a usage error (a missing PATH among them).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional

from backpressure.cli import run_cli
from backpressure.testing.unified.loader import SpecFile, iter_spec_paths, load_spec_file
from backpressure.testing.unified.runner import (
    DEFAULT_PRESET,
    PRESET_NAMES,
    Deployment,
    Outcome,
    RunnerConfig,
    TestResult,
    UnifiedRunner,
    choose_topology,
)

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    """The argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.testing.unified",
        description="Run unified-format test files (JSON or YAML) against MongoDB.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="test files or folders")
    parser.add_argument(
        "--uri",
        default=os.environ.get("MONGODB_URI"),
        help="deployment to test (default: $MONGODB_URI, else an embedded server)",
    )
    parser.add_argument(
        "--preset",
        choices=PRESET_NAMES,
        default=DEFAULT_PRESET,
        help="draft/current/adaptive: backpressure clients with that preset; none: stock pymongo "
        "clients (default: %(default)s)",
    )
    flavour = parser.add_mutually_exclusive_group()
    flavour.add_argument(
        "--async",
        dest="flavour",
        action="store_const",
        const="async",
        default="sync",
        help="use AsyncMongoClient entities",
    )
    flavour.add_argument(
        "--motor",
        dest="flavour",
        action="store_const",
        const="motor",
        help="use Motor AsyncIOMotorClient entities",
    )
    parser.add_argument(
        "--fast-backoff",
        action="store_true",
        help="pin the backoff jitter to 0: no sleeps, same attempt counts",
    )
    parser.add_argument(
        "--topology",
        choices=("replicaset", "sharded", "standalone"),
        help="embedded server topology for every file (default: chosen per file)",
    )
    parser.add_argument(
        "--server-version",
        help="embedded server version, which picks its limiter profile: 8.2.0, 8.2.6 or 9.0 "
        "(9.0 has externalClientBaseBackoffMS; default: the server's, 8.2.6)",
    )
    parser.add_argument("-k", dest="keyword", help="only tests whose id contains this text")
    parser.add_argument("-v", "--verbose", action="store_true", help="print full failure reasons")
    return parser


def _print_result(result: TestResult, verbose: bool) -> None:
    """One line per test (full reason with -v)."""
    reason = result.reason if verbose else result.reason.split("\n", 1)[0]
    suffix = f": {reason}" if reason else ""
    print(f"{result.outcome.value} {result.test_id} ({result.duration:.2f}s){suffix}", flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the files; return 0 when nothing failed, else 1 (usage errors exit 2)."""
    return run_cli(_main, argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    """The command line, without the missing-extra and Ctrl-C handling of :func:`main`."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.uri and args.server_version:
        parser.error(
            "argument --server-version: sets up the embedded servers; it has no effect with --uri"
        )
    missing = [path for path in args.paths if not os.path.exists(path)]
    if missing:
        parser.error(f"argument PATH: no such file or folder: {', '.join(missing)}")
    config = RunnerConfig(preset=args.preset, flavour=args.flavour, fast_backoff=args.fast_backoff)
    specs: list[SpecFile] = [load_spec_file(path) for path in iter_spec_paths(args.paths)]
    results: list[TestResult] = []
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        deployments: dict[str, Deployment] = {}

        def deployment_for(spec: SpecFile) -> Optional[Deployment]:
            """The shared deployment for a file (embedded servers start on first use)."""
            key = "uri" if args.uri else (args.topology or choose_topology(spec))
            if key is None:
                return None
            if key not in deployments:
                if args.uri:
                    deployment = Deployment(args.uri)
                else:
                    from backpressure.testing import EmbeddedServer

                    options: dict[str, Any] = {}
                    if args.server_version:
                        options["server_version"] = args.server_version
                    server = stack.enter_context(EmbeddedServer(key, **options))
                    deployment = Deployment(server.uri, server=server)
                stack.callback(deployment.close)
                deployments[key] = deployment
            return deployments[key]

        for spec in specs:
            tests = [t for t in spec.tests if not args.keyword or args.keyword in t.test_id]
            if not tests:
                continue
            deployment = deployment_for(spec)
            for test in tests:
                if deployment is None:
                    reason = "no embedded topology satisfies runOnRequirements"
                    result = TestResult(test.test_id, Outcome.SKIP, reason)
                else:
                    result = UnifiedRunner(deployment, config).run_test(test)
                results.append(result)
                _print_result(result, args.verbose)
    counts = {outcome: sum(r.outcome is outcome for r in results) for outcome in Outcome}
    print(
        f"{counts[Outcome.PASS]} passed, {counts[Outcome.FAIL]} failed, "
        f"{counts[Outcome.SKIP]} skipped in {time.monotonic() - started:.1f}s "
        f"(preset {config.preset}, {config.flavour})"
    )
    return 1 if counts[Outcome.FAIL] else 0


if __name__ == "__main__":
    sys.exit(main())
