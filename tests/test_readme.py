"""The README is the index: its Python example runs as written (against the embedded server), its
install lines name real extras, its commands are real make targets that CI runs, its links
resolve, and it stays short with the two commands a newcomer needs on the first screen."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pymongo
import pytest

import backpressure
from backpressure.testing.server.embedded import EmbeddedServer

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _text() -> str:
    """The README."""
    return README.read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    """Every ```language block of the README, in order."""
    return re.findall(rf"```{language}\n(.*?)```", _text(), flags=re.S)


def _run(code: str, namespace: dict[str, Any]) -> str:
    """Execute ``code`` in ``namespace``; return what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<python block of README.md>", "exec"), namespace)
    return out.getvalue()


def test_readme_is_an_index() -> None:
    """At most 250 lines, with ``make demo`` and ``make test`` in the first 40."""
    lines = _text().splitlines()
    assert len(lines) <= 250
    first_screen = "\n".join(lines[:40])
    assert "make demo" in first_screen
    assert "make test" in first_screen


def test_the_one_python_example_runs(replicaset_server: EmbeddedServer) -> None:
    """The example works when localhost:27017 is the embedded replica set, and prints the
    default preset's name."""
    (block,) = _blocks("python")
    code = block.replace("mongodb://localhost:27017", replicaset_server.uri)
    namespace: dict[str, Any] = {}
    try:
        out = _run(code, namespace)
    except BaseException:  # a failure half-way leaves no client open for a later test to report
        for value in namespace.values():
            if isinstance(value, pymongo.MongoClient):
                value.close()
        raise
    client, other = namespace["client"], namespace["other"]
    assert isinstance(client, pymongo.MongoClient)
    try:
        assert out.splitlines() == ["current"]
        assert client.shop.orders.count_documents({"sku": 1}) == 1
        assert backpressure.is_enabled(client)
        assert not backpressure.is_enabled(other)
    finally:
        client.close()
        other.close()


def _extras() -> set[str]:
    """The package's extras: from pyproject.toml, or on Python < 3.11 (no tomllib) from the
    installed package's metadata (the make targets reinstall it when pyproject.toml changes)."""
    try:
        import tomllib
    except ImportError:
        from importlib import metadata

        return set(metadata.metadata("pymongo-backpressure").get_all("Provides-Extra") or ())
    return set(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
            "optional-dependencies"
        ]
    )


def test_install_names_every_user_extra() -> None:
    """The install lines and the table name every extra of the package, and only those."""
    extras = _extras()
    (install,) = [b for b in _blocks("bash") if "[prometheus]" in b]
    named = set(re.findall(r"pymongo-backpressure\[(\w+)\]", install))
    assert named == extras - {"test", "dev"}
    text = _text()
    section = text[text.index("## Install") : text.index("## Supported versions")]
    table = set(re.findall(r"^\| `([\w, `]+)` \|", section, flags=re.M))
    assert table == (extras - {"test", "dev"}) | {"test`, `dev"}


def test_supported_versions_match_the_project() -> None:
    """The Python floor is pyproject's, and the pymongo eras and the other Pythons tested are the
    Makefile's."""
    text = _text()
    section = text[text.index("## Supported versions") : text.index("## Features")]
    section = " ".join(section.split())
    requires = re.search(r'requires-python = ">=([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert requires is not None
    assert f"**Python** >= {requires[1]}" in section
    makefile = (ROOT / "Makefile").read_text()
    compat = re.search(r"^COMPAT_VERSIONS \?= (.+)$", makefile, re.M)
    assert compat is not None
    versions = compat[1].split()
    assert ", ".join(versions[:-1]) + f" and {versions[-1]}" in section
    assert f"4.9 to {versions[-1]}" in section
    pythons = re.search(r"^TEST_PYTHONS \?= (.+)$", makefile, re.M)
    assert pythons is not None
    others = pythons[1].split()
    assert (
        "`make test-pythons` the era-sensitive tests on "
        + ", ".join(others[:-1])
        + (f" and {others[-1]}")
        in section
    )


def test_make_commands_are_targets_and_ci_runs_the_test_command() -> None:
    """Every ``make X`` the README names is a Makefile target; .ci/run runs make test and docs."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    named = set(re.findall(r"(?:`|^)make ([a-z][\w-]*)", _text(), flags=re.M))
    assert {"demo", "test", "docs", "lint"} <= named
    for target in named:
        assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), target
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "make test" in ci
    assert "make docs" in ci


def test_precedence_is_stated_once() -> None:
    """The precedence rule for explicit options appears once, for both paths."""
    text = " ".join(_text().split())
    rule = (
        "An explicit client option such as `maxAdaptiveRetries` or `enableOverloadRetargeting` "
        "beats the preset, for `backpressure.MongoClient` and for `enable()` alike."
    )
    assert text.count(rule) == 1
    assert text.count("beats the preset") == 1


DOCS_URL = "https://pymongo-backpressure.readthedocs.io/en/latest/"
"""The documentation site: the README's links to it are absolute, so that they work on PyPI."""


def _links() -> list[str]:
    """The target of every Markdown link of the README."""
    return re.findall(r"\]\(([^)\s]+)\)", _text())


def _anchors(page: Path) -> set[str]:
    """The anchors of a docs page: each heading's id (as Sphinx makes it) and each MyST label."""
    text = page.read_text(encoding="utf-8")
    headings = re.findall(r"^#{1,6} (.+)$", text, flags=re.M)
    slugs = {re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") for heading in headings}
    return slugs | set(re.findall(r"^\(([\w-]+)\)=$", text, flags=re.M))


def test_links_are_absolute_and_docs_links_name_a_page_and_anchor() -> None:
    """The README is the package's long description on PyPI, where a relative link is dead:
    every link is absolute, and each into the documentation names an existing page (``index``
    for the site itself) and, where it has one, an anchor of that page."""
    links = _links()
    assert [link for link in links if "://" not in link] == []
    docs = [link.removeprefix(DOCS_URL) for link in links if link.startswith(DOCS_URL)]
    assert len(docs) > 20
    for link in docs:
        path, _, anchor = link.partition("#")
        name = path.removesuffix(".html") if path else "index"
        assert path == "" or path.endswith(".html"), link
        page = ROOT / "docs" / f"{name}.md"
        assert page.exists(), link
        assert not anchor or anchor in _anchors(page), link


def test_the_docs_url_is_the_projects() -> None:
    """Where pyproject.toml names the documentation, it is the site the README links to."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    named = re.findall(r'^Documentation = "([^"]+)"', text, flags=re.M)
    assert all(url.rstrip("/") == DOCS_URL.rstrip("/") for url in named)


def test_code_lines_fit_pypi() -> None:
    """No line of a code block is longer than 90 characters."""
    long = [
        line for block in re.findall(r"```\w*\n(.*?)```", _text(), flags=re.S)
        for line in block.splitlines() if len(line) > 90
    ]  # fmt: skip
    assert long == []


def test_every_docs_page_is_linked() -> None:
    """The documentation table links every page of the site."""
    linked = set(re.findall(rf"\]\({re.escape(DOCS_URL)}([\w-]+)\.html", _text()))
    pages = {page.stem for page in (ROOT / "docs").glob("*.md")}
    assert pages - {"changelog", "index"} <= linked


def test_public_names_the_readme_uses_exist() -> None:
    """The ``backpressure.X`` names the README mentions are public attributes of the package."""
    text = re.sub(r"https://\S+", "", _text())  # the documentation's host name is no attribute
    names = set(re.findall(r"\bbackpressure\.([A-Za-z_]\w*)\b", text))
    modules = {"metrics", "testing", "sim", "demo"}
    for name in names - modules:
        assert name in backpressure.__all__, name
