"""The sdist, built from this tree as a release would be: it carries the package, its licence,
README and metadata (project URLs, no pytest plugin registered), and leaves the tests out: they
need docs/, dashboards/, bench/ and spec-tests/, which it does not carry (MANIFEST.in)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import setuptools

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[1]

BUILD = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
"""Build the sdist through setuptools' PEP 517 hook: no build front end, no download."""

URLS = {
    "Homepage": "https://github.com/pymongo-backpressure/pymongo-backpressure",
    "Repository": "https://github.com/pymongo-backpressure/pymongo-backpressure",
    "Documentation": "https://pymongo-backpressure.readthedocs.io/en/latest/",
    "Changelog": "https://pymongo-backpressure.readthedocs.io/en/latest/changelog.html",
}


def _setuptools_version() -> tuple[int, ...]:
    return tuple(int(part) for part in setuptools.__version__.split(".")[:2] if part.isdigit())


def _source_files() -> list[str]:
    """The files of this tree a release is made from: tracked or new, not ignored."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout (the sdist is built from its files)")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, bytes], list[str]]:
    """The sdist's files (path inside it -> content) and the tree's files it was built from."""
    if _setuptools_version() < (77,):
        pytest.skip(f"the build needs setuptools >= 77 (test extra), not {setuptools.__version__}")
    files = _source_files()
    tree = tmp_path_factory.mktemp("tree")
    for name in files:
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-c", BUILD, str(out)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    archive = out / done.stdout.strip().splitlines()[-1]
    contents: dict[str, bytes] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            top, _, inner = member.name.partition("/")
            assert top == "pymongo_backpressure-0.1.0" or top.startswith("pymongo_backpressure-")
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is not None:
                contents[inner] = extracted.read()
    return contents, files


def test_sdist_leaves_the_tests_out(sdist: tuple[dict[str, bytes], list[str]]) -> None:
    """No test file travels without the docs, dashboards and results it reads."""
    contents, files = sdist
    assert any(name.startswith("tests/") for name in files)  # there are tests to leave out
    assert [name for name in contents if name.startswith("tests/")] == []


def test_sdist_carries_the_package(sdist: tuple[dict[str, bytes], list[str]]) -> None:
    """Every module of the package, its type marker, the licence, README and pyproject."""
    contents, files = sdist
    modules = [n for n in files if n.startswith("backpressure/") and n.endswith(".py")]
    assert "backpressure/testing/pytest_plugin.py" in modules
    assert [name for name in modules if name not in contents] == []
    for name in ("backpressure/py.typed", "LICENSE", "README.md", "pyproject.toml", "PKG-INFO"):
        assert name in contents, name


def test_sdist_metadata(sdist: tuple[dict[str, bytes], list[str]]) -> None:
    """The project URLs are in PKG-INFO; the console script is the only entry point."""
    contents, _files = sdist
    info = contents["PKG-INFO"].decode()
    for label, url in URLS.items():
        assert f"Project-URL: {label}, {url}\n" in info, label
    entry_points = contents["pymongo_backpressure.egg-info/entry_points.txt"].decode()
    assert "[console_scripts]" in entry_points
    assert "[pytest11]" not in entry_points
    assert "pytest_plugin" not in entry_points
