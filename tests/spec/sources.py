"""Where the official spec suites come from, and ``make spec-tests``, which fetches them.

The official unified-format files are never committed. ``make spec-tests`` (``python
tests/spec/sources.py``) downloads the source distribution of pymongo releases from the package
index (its simple API, PEP 691; each file's sha256 is checked) and extracts only the JSON files
of the suites below into ``.cache/spec-tests/pymongo-<version>/<suite>/`` (gitignored), with a
``manifest.json`` naming the release and which suites its sdist has.  It fetches the pymongo
installed in the interpreter that runs it (the version under test) and 4.17.0, the first release
with native backpressure and the newest whose sdist still has the SDAM backpressure files
(4.20's does not); ``--pymongo`` names other releases.

The tests read each suite from the first of these places that has it:

1. ``$BACKPRESSURE_SPEC_TESTS`` (a folder of suite folders), when set;
2. ``../shared/spec-tests`` beside the checkout, when present;
3. the cache, newest release first.  Every pymongo era runs the same, newest files: the suites
   describe this package's presets, which do not change with the pymongo under test, and the
   sdists of the eras before 4.17 have no backpressure suites at all.

A suite found nowhere is one skipped test item whose reason says why (not fetched, no network, or
no sdist fetched has it) and names ``make spec-tests``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE = REPO_ROOT / ".cache" / "spec-tests"
SHARED = (REPO_ROOT / ".." / "shared" / "spec-tests").resolve()
VARIABLE = "BACKPRESSURE_SPEC_TESTS"
"""Environment variable naming a folder of suite folders that overrides every other source."""
FETCH_COMMAND = "make spec-tests"
MANIFEST = "manifest.json"

SUITES: dict[str, tuple[str, str]] = {
    "client-backpressure": ("test/client-backpressure", "*.json"),
    "transactions-backpressure": ("test/transactions/unified", "backpressure-*.json"),
    "sdam-backpressure": ("test/discovery_and_monitoring/unified", "backpressure-*.json"),
    "uri-options": ("test/uri_options", "client-backpressure-options.json"),
}
"""Suite folder -> (folder inside pymongo's sdist, file pattern) of the suites an sdist can give."""

SDAM_RELEASE = "4.17.0"
"""The newest release whose sdist has the SDAM backpressure files; fetched beside the installed."""

SHARED_ONLY = ("client-backpressure-2026-03",)
"""Suites no sdist carries in the form the tests want (the draft era's files): ../shared only."""

_INDEX = "https://pypi.org/simple"
_VERSION = re.compile(r"^pymongo-(\d+(?:\.\d+)*)$")


def _version_key(name: str) -> tuple[int, ...]:
    """``pymongo-4.20.1`` -> (4, 20, 1); anything else sorts first."""
    match = _VERSION.match(name)
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def cached_releases() -> list[Path]:
    """The cache folders of the releases fetched so far, newest first."""
    if not CACHE.is_dir():
        return []
    fetched = [p for p in CACHE.iterdir() if (p / MANIFEST).is_file() and _version_key(p.name)]
    return sorted(fetched, key=lambda p: _version_key(p.name), reverse=True)


@dataclass(frozen=True)
class Suite:
    """Where one suite was found (``path``), or why it was not (``missing``)."""

    name: str
    path: Optional[Path]
    missing: str = ""


def _has_files(folder: Path) -> bool:
    """Whether ``folder`` holds at least one JSON or YAML file."""
    return folder.is_dir() and any(p.suffix in (".json", ".yml", ".yaml") for p in folder.iterdir())


def locate(name: str) -> Suite:
    """Find suite ``name`` in the override, ``../shared/spec-tests`` or the cache, in that order."""
    override = os.environ.get(VARIABLE)
    roots = [Path(override).expanduser().resolve()] if override else []
    roots.append(SHARED)
    cached = cached_releases()
    if name not in SHARED_ONLY:
        roots += cached
    for root in roots:
        if _has_files(root / name):
            return Suite(name, root / name)
    return Suite(name, None, _missing_reason(name, override, cached))


def _missing_reason(name: str, override: Optional[str], cached: list[Path]) -> str:
    """Why suite ``name`` is skipped, naming where it was looked for and how to get it."""
    places = ([f"${VARIABLE} ({override})"] if override else []) + [f"{SHARED}"]
    where = f"not in {' or '.join(places)}"
    if name in SHARED_ONLY:
        return f"{name}: {where}; no pymongo sdist carries this (draft-era) suite"
    if not cached:
        return (
            f"{name}: {where}, and the official suites were not fetched: run "
            f"`{FETCH_COMMAND}` (it downloads pymongo's sdist from the package index; needs the "
            "network)"
        )
    releases = ", ".join(p.name.replace("-", " ", 1) for p in cached)
    return f"{name}: {where}, and the sdists fetched ({releases}) have no {name} files"


def _index_url() -> str:
    """The package index to ask: ``$PIP_INDEX_URL`` when it is an http(s) URL, else PyPI."""
    configured = os.environ.get("PIP_INDEX_URL", "")
    return configured.rstrip("/") if configured.startswith(("http://", "https://")) else _INDEX


def _sdist_link(version: str, timeout: float) -> tuple[str, str, str]:
    """(filename, URL, sha256) of pymongo ``version``'s sdist, from the index's simple API."""
    request = urllib.request.Request(
        f"{_index_url()}/pymongo/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        listing = json.load(response)
    filename = f"pymongo-{version}.tar.gz"
    for entry in listing.get("files", []):
        if entry.get("filename") == filename:
            return filename, entry["url"], entry.get("hashes", {}).get("sha256", "")
    raise LookupError(f"the package index lists no {filename}")


def _extract(archive: bytes, target: Path) -> dict[str, list[str]]:
    """Write each suite's files from the sdist ``archive`` into ``target``; list them by suite."""
    found: dict[str, list[str]] = {name: [] for name in SUITES}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            _, _, inner = member.name.partition("/")  # drop the "pymongo-X/" prefix
            folder, _, filename = inner.rpartition("/")
            for name, (source, pattern) in SUITES.items():
                if folder == source and Path(filename).match(pattern):
                    data = tar.extractfile(member)
                    assert data is not None
                    (target / name).mkdir(parents=True, exist_ok=True)
                    (target / name / filename).write_bytes(data.read())
                    found[name].append(filename)
    return {name: sorted(files) for name, files in found.items()}


def fetch(version: str, *, timeout: float = 60.0) -> Path:
    """Download pymongo ``version``'s sdist and cache its suites; return the cache folder.

    Raises:
        OSError: the index or the file cannot be reached (``urllib.error.URLError``).
        LookupError: the index has no sdist of that version.
        ValueError: the download does not match the sha256 the index gives.
    """
    target = CACHE / f"pymongo-{version}"
    if (target / MANIFEST).is_file():
        return target
    filename, url, sha256 = _sdist_link(version, timeout)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        archive = response.read()
    digest = hashlib.sha256(archive).hexdigest()
    if sha256 and digest != sha256:
        raise ValueError(f"{filename}: sha256 {digest} does not match the index's {sha256}")
    CACHE.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=CACHE, prefix=".fetch-"))
    try:
        suites = _extract(archive, scratch)
        manifest = {"pymongo": version, "sdist": filename, "sha256": digest, "suites": suites}
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _installed_pymongo() -> str:
    """The version of the pymongo installed here."""
    from importlib.metadata import version

    return version("pymongo")


def main(argv: Optional[list[str]] = None) -> int:
    """``make spec-tests``: fetch the suites; without the network, say so and exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pymongo",
        action="append",
        help="a release whose sdist to read, repeatable (default: the installed one and "
        f"{SDAM_RELEASE})",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when the files cannot be fetched"
    )
    args = parser.parse_args(argv)
    versions = args.pymongo or list(dict.fromkeys([_installed_pymongo(), SDAM_RELEASE]))
    failed = False
    for version in versions:
        try:
            target = fetch(version)
        except (OSError, LookupError, ValueError) as exc:
            print(
                f"spec-tests: could not fetch pymongo {version}'s sdist ({exc}); the official "
                f"suites found nowhere else will be skipped. Run `{FETCH_COMMAND}` again with "
                "the network.",
                file=sys.stderr,
            )
            failed = True
            continue
        manifest = json.loads((target / MANIFEST).read_text())
        found = [f"{name} ({len(files)})" for name, files in manifest["suites"].items() if files]
        print(
            f"spec-tests: pymongo {version}: {', '.join(found) or 'no suites'} in "
            f"{target.relative_to(REPO_ROOT)}"
        )
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
