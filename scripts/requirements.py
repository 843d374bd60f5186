"""Print the project's dependencies and those of the named extras, one per line.

Usage: ``python scripts/requirements.py demo > requirements.txt``.  ``make demo`` installs these
instead of the package itself: the demo runs from the checkout (``python -m`` puts it on
``sys.path``), so no wheel is built.  Needs Python 3.11+ (``tomllib``); on an older Python, or
for an extra the project does not have, it exits with status 1 and the caller falls back to
installing the package.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(extras: list[str], pyproject: Path = PYPROJECT) -> list[str]:
    """Return the dependencies of the project and of ``extras``, without repeats, in order."""
    import tomllib

    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise ValueError(f"unknown extras {unknown}; the project has {sorted(optional)}")
    picked = list(project.get("dependencies", []))
    for extra in extras:
        picked.extend(optional[extra])
    return list(dict.fromkeys(picked))


def main() -> int:
    """Print the requirements, or say why not and return 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extras", nargs="*", help="extras whose dependencies to add")
    args = parser.parse_args()
    try:
        print("\n".join(requirements(args.extras)))
    except (ImportError, ValueError) as exc:
        print(f"requirements.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
