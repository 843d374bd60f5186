"""The README's Python examples run as written (the quick start against the embedded server)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pymongo

from backpressure.testing import EmbeddedServer

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    """Every ```python block of the README, in order."""
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def _block_containing(text: str) -> str:
    """The one README Python block that contains ``text``."""
    (block,) = [b for b in _python_blocks() if text in b]
    return block


def test_quick_start_runs_against_a_server(replicaset_server: EmbeddedServer) -> None:
    """The first example (lines 11-22) works when localhost:27017 is the embedded replica set."""
    block = _block_containing("backpressure.enable(other")
    assert block == _python_blocks()[0]
    code = block.replace("mongodb://localhost:27017", replicaset_server.uri)
    namespace: dict[str, object] = {}
    exec(compile(code, str(README), "exec"), namespace)
    client = namespace["client"]
    other = namespace["other"]
    assert isinstance(client, pymongo.MongoClient)
    assert isinstance(other, pymongo.MongoClient)
    try:
        assert client.shop.orders.count_documents({"sku": 1}) == 1
    finally:
        client.close()
        other.close()


def test_embedded_server_example_prints_the_retries() -> None:
    """The testing-tools example: two injected overloads, then success on the third attempt."""
    code = _block_containing("from backpressure.testing import EmbeddedServer")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    assert out.getvalue().strip() == "{'received': 3, 'failed': 2, 'rejected': 0}"
