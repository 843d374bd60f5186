"""Load unified-format test files (JSON or YAML, extended JSON values) into plain values.

A :class:`SpecFile` keeps the decoded document and one :class:`SpecTest` per entry of ``tests``.
Values are decoded with ``bson.json_util`` so ``{"$numberLong": "1"}``, ``{"$oid": ...}`` and
friends become BSON types; YAML is first read with ``yaml.safe_load`` and then decoded the same way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bson import json_util

__all__ = [
    "SUFFIXES",
    "SpecFile",
    "SpecTest",
    "iter_spec_paths",
    "load_document",
    "load_spec_file",
]

SUFFIXES = (".json", ".yml", ".yaml")
"""File name endings the loader reads."""


@dataclass(frozen=True)
class SpecTest:
    """One entry of a file's ``tests`` array."""

    file: SpecFile = field(repr=False, compare=False)
    """The file the test belongs to."""
    index: int
    """Position in the file's ``tests`` array."""
    description: str
    """The test's ``description``."""
    doc: dict[str, Any] = field(repr=False, compare=False)
    """The decoded test document."""

    @property
    def test_id(self) -> str:
        """``<file display name>::<description>``, the id used by the CLI and pytest."""
        return f"{self.file.display_name}::{self.description}"


@dataclass(frozen=True)
class SpecFile:
    """A decoded test file."""

    path: Path
    """Where the file was read from."""
    display_name: str
    """``<parent folder>/<file name>``, used in test ids."""
    doc: dict[str, Any] = field(repr=False, compare=False)
    """The whole decoded document."""
    tests: tuple[SpecTest, ...] = field(default=(), repr=False, compare=False)
    """The file's tests in order."""


def load_document(path: Path) -> dict[str, Any]:
    """Read a JSON or YAML file and decode extended JSON values."""
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yml", ".yaml"):
        import yaml  # PyYAML is a test dependency, imported only when a YAML file is read.

        text = json.dumps(yaml.safe_load(text))
    decoded = json_util.loads(text)
    if not isinstance(decoded, dict):
        raise ValueError(f"{path}: the top level must be a document")
    return decoded


def load_spec_file(path: Path, *, display_name: str | None = None) -> SpecFile:
    """Load one unified-format file and split it into tests."""
    doc = load_document(path)
    name = display_name or f"{path.parent.name}/{path.name}"
    spec = SpecFile(path=path, display_name=name, doc=doc)
    tests = tuple(
        SpecTest(file=spec, index=i, description=str(t.get("description", f"test {i}")), doc=t)
        for i, t in enumerate(doc.get("tests", []))
    )
    object.__setattr__(spec, "tests", tests)
    return spec


def iter_spec_paths(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """Expand files and folders (recursively, sorted) into the spec files they hold.

    A folder yields one copy of each test file: where ``name.json`` and ``name.yml`` (or
    ``.yaml``) sit side by side, as in the specifications repository, only the first in
    :data:`SUFFIXES` order (JSON). Files named explicitly are always yielded.
    """
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = [p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES]
            chosen: dict[Path, Path] = {}
            for candidate in sorted(found, key=lambda p: SUFFIXES.index(p.suffix)):
                chosen.setdefault(candidate.with_suffix(""), candidate)
            yield from sorted(chosen.values())
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"no such spec file or folder: {path}")
