"""Generate the sync twins of async modules, line by line.

Usage: ``python scripts/unasync.py`` rewrites the generated files; ``python scripts/unasync.py
--check`` exits with status 1 when a generated file is stale or a substitution went unused.  A
generated file that differs from what its source gives and is newer than the source looks
hand-edited: it is not overwritten unless ``--force`` is given.

Each output line is the input line with the substitutions below applied, so both files have the
same number of lines and a traceback line number in one is the same line in the other.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FILES = {
    "backpressure/adapters/async_cycle.py": "backpressure/adapters/sync_cycle.py",
    "backpressure/adapters/backport/async_install.py": (
        "backpressure/adapters/backport/sync_install.py"
    ),
    "backpressure/adapters/backport/async_loop.py": "backpressure/adapters/backport/sync_loop.py",
    "backpressure/adapters/backport/async_methods.py": (
        "backpressure/adapters/backport/sync_methods.py"
    ),
    "backpressure/adapters/backport/async_pool.py": "backpressure/adapters/backport/sync_pool.py",
    "backpressure/adapters/hedging/async_wrappers.py": (
        "backpressure/adapters/hedging/sync_wrappers.py"
    ),
    "backpressure/adapters/native/async_wrappers.py": (
        "backpressure/adapters/native/sync_wrappers.py"
    ),
}
"""Async source -> generated sync twin, relative to the repository root."""

SUBS = [
    (r"\basync def ", "def "),
    (r"\basync with ", "with "),
    (r"\bawait ", ""),
    (r"^import asyncio$", "import time"),
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"\bpymongo\.asynchronous\b", "pymongo.synchronous"),
    (r"\bbackpressure\.adapters\.async_cycle\b", "backpressure.adapters.sync_cycle"),
    (r"\bbackpressure\.adapters\.backport\.async_", "backpressure.adapters.backport.sync_"),
    (r"\bAsyncMongoClient\b", "MongoClient"),
    (r"\bAsyncCollection\b", "Collection"),
    (r"\bAsyncDatabase\b", "Database"),
    (r"\bAsyncConnection\b", "Connection"),
    (r"\bAsyncBackpressurePool\b", "BackpressurePool"),
    (r"\b_AsyncCycleLoop\b", "_SyncCycleLoop"),
    (r"\bbackpressure\.adapters\.hedging\.tasks\b", "backpressure.adapters.hedging.threads"),
    (r"\bTaskAttempts\b", "ThreadAttempts"),
    (r"\bthe async flavour\b", "the sync flavour"),
]
"""(pattern, replacement) pairs applied to every line, in order."""

_COMPILED = [(re.compile(pattern), replacement) for pattern, replacement in SUBS]


def unasync_text(text: str, used: set[str]) -> str:
    """Return the sync version of ``text``; add the patterns that matched to ``used``."""
    lines = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        newline = line[len(body) :]
        for (pattern, replacement), (source, _) in zip(_COMPILED, SUBS):
            body, count = pattern.subn(replacement, body)
            if count:
                used.add(source)
        lines.append(body + newline)
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Generate (or with ``--check`` verify) every sync twin; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a twin is stale")
    parser.add_argument("--force", action="store_true", help="overwrite hand-edited twins")
    args = parser.parse_args(argv)
    used: set[str] = set()
    stale = []
    refused = []
    for source, target in FILES.items():
        source_path = ROOT / source
        expected = unasync_text(source_path.read_text(encoding="utf-8"), used)
        target_path = ROOT / target
        current = target_path.read_text(encoding="utf-8") if target_path.exists() else None
        if current == expected:
            continue
        if args.check:
            stale.append(target)
        elif (
            current is not None
            and not args.force
            and target_path.stat().st_mtime > source_path.stat().st_mtime
        ):
            refused.append(target)
        else:
            target_path.write_text(expected, encoding="utf-8")
            print(f"wrote {target}")
    unused = [source for source, _ in SUBS if source not in used]
    status = 0
    if unused:
        print("These patterns were not used:", ", ".join(unused), file=sys.stderr)
        status = 1
    if refused:
        print(
            "Refusing to overwrite hand-edited files (newer than their source; edit the async",
            "source instead, or pass --force):",
            ", ".join(refused),
            file=sys.stderr,
        )
        status = 1
    if stale:
        print(
            "Stale generated files (run python scripts/unasync.py):",
            ", ".join(stale),
            file=sys.stderr,
        )
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
