"""Where the official suites are read from, and what ``make spec-tests`` extracts and says."""

from __future__ import annotations

import io
import json
import tarfile
import urllib.error
from pathlib import Path

import pytest

from tests.spec import sources


def _suite_dir(root: Path, name: str, filename: str = "a.json") -> Path:
    """Create ``root/name/filename`` (an empty JSON document) and return the suite folder."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / filename).write_text("{}")
    return folder


def _cached(cache: Path, version: str, *suites: str) -> Path:
    """A cache folder for ``version`` holding ``suites``, with its manifest."""
    folder = cache / f"pymongo-{version}"
    for name in suites:
        _suite_dir(folder, name)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / sources.MANIFEST).write_text(json.dumps({"pymongo": version}))
    return folder


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """An empty shared folder and cache in place of the real ones, no override set."""
    shared, cache = tmp_path / "shared", tmp_path / "cache"
    monkeypatch.setattr(sources, "SHARED", shared)
    monkeypatch.setattr(sources, "CACHE", cache)
    monkeypatch.delenv(sources.VARIABLE, raising=False)
    return shared, cache


def test_override_then_shared_then_newest_cached_release(
    places: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variable wins over ../shared, which wins over the cache, newest release first."""
    shared, cache = places
    _cached(cache, "4.17.0", "client-backpressure", "sdam-backpressure")
    newest = _cached(cache, "4.20.1", "client-backpressure")
    _cached(cache, "4.9.2")
    assert sources.locate("client-backpressure").path == newest / "client-backpressure"
    assert sources.locate("sdam-backpressure").path == cache / "pymongo-4.17.0/sdam-backpressure"
    in_shared = _suite_dir(shared, "client-backpressure")
    assert sources.locate("client-backpressure").path == in_shared
    override = _suite_dir(tmp_path / "mine", "client-backpressure")
    monkeypatch.setenv(sources.VARIABLE, str(tmp_path / "mine"))
    assert sources.locate("client-backpressure").path == override
    assert sources.locate("sdam-backpressure").path == cache / "pymongo-4.17.0/sdam-backpressure"


def test_a_suite_found_nowhere_says_why_and_names_the_fetch_command(
    places: tuple[Path, Path],
) -> None:
    """Nothing fetched: the reason names `make spec-tests`; fetched without it: the releases."""
    _, cache = places
    suite = sources.locate("client-backpressure")
    assert suite.path is None
    assert "`make spec-tests`" in suite.missing
    assert "client-backpressure" in suite.missing
    _cached(cache, "4.20.1", "client-backpressure")
    suite = sources.locate("sdam-backpressure")
    assert suite.path is None
    assert "(pymongo 4.20.1) have no sdam-backpressure files" in suite.missing


def test_the_draft_era_suite_is_never_read_from_the_cache(places: tuple[Path, Path]) -> None:
    """client-backpressure-2026-03 comes from ../shared (or the override) only."""
    shared, cache = places
    _cached(cache, "4.17.0", "client-backpressure-2026-03")
    suite = sources.locate("client-backpressure-2026-03")
    assert suite.path is None
    assert "no pymongo sdist" in suite.missing
    _suite_dir(shared, "client-backpressure-2026-03")
    assert sources.locate("client-backpressure-2026-03").path is not None


def _sdist(files: dict[str, bytes]) -> bytes:
    """A gzipped tarball with ``files`` under a ``pymongo-9.9.9/`` prefix."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"pymongo-9.9.9/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_extract_takes_only_the_suites_files(tmp_path: Path) -> None:
    """Each suite's files land in its folder; other tests, YAML and nested files stay out."""
    archive = _sdist(
        {
            "test/client-backpressure/retry.json": b"1",
            "test/client-backpressure/README.rst": b"no",
            "test/transactions/unified/backpressure-commit.json": b"2",
            "test/transactions/unified/commit.json": b"no",
            "test/uri_options/client-backpressure-options.json": b"3",
            "test/uri_options/tls-options.json": b"no",
            "test/discovery_and_monitoring/unified/nested/backpressure-x.json": b"no",
            "pymongo/common.py": b"no",
        }
    )
    found = sources._extract(archive, tmp_path)
    assert found == {
        "client-backpressure": ["retry.json"],
        "transactions-backpressure": ["backpressure-commit.json"],
        "sdam-backpressure": [],
        "uri-options": ["client-backpressure-options.json"],
    }
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == [
        "client-backpressure/retry.json",
        "transactions-backpressure/backpressure-commit.json",
        "uri-options/client-backpressure-options.json",
    ]


def test_without_the_network_the_fetch_says_so_and_succeeds_unless_strict(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unreachable index is reported, naming the command; ``--strict`` makes it an error."""

    def unreachable(version: str, timeout: float) -> tuple[str, str, str]:
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(sources, "_sdist_link", unreachable)
    assert sources.main(["--pymongo", "4.20.1"]) == 0
    message = capsys.readouterr().err
    assert "could not fetch pymongo 4.20.1's sdist" in message
    assert "no route to host" in message
    assert "`make spec-tests`" in message
    assert sources.main(["--pymongo", "4.20.1", "--strict"]) == 1


def test_a_download_that_does_not_match_its_hash_is_refused(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sha256 the index gives is checked; nothing is cached on a mismatch."""
    _, cache = places
    archive = _sdist({"test/client-backpressure/retry.json": b"1"})
    monkeypatch.setattr(
        sources, "_sdist_link", lambda version, timeout: ("p.tar.gz", "u", "0" * 64)
    )

    class Response(io.BytesIO):
        """A downloaded body."""

    monkeypatch.setattr(sources.urllib.request, "urlopen", lambda url, timeout: Response(archive))
    with pytest.raises(ValueError, match="does not match"):
        sources.fetch("9.9.9")
    assert sources.cached_releases() == []
    assert not (cache / "pymongo-9.9.9").exists()
