"""Round trips per second against the embedded server, and the server's CPU cost per request.

Run with ``python -m backpressure.bench.server_roundtrips [--ops N] [--threads 1 4]``. The server
runs in a subprocess (so client and server do not share a GIL); the client side is one pymongo
``MongoClient`` shared by 1 or more threads. The server's cost per request comes from its own
``serverStatus.backpressure`` counters: thread CPU inside request handling (parse, dispatch,
pack) and the whole process's CPU time (event loop and socket I/O included).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, Callable, Optional

from pymongo import MongoClient

from backpressure.bench.threads import run_together
from backpressure.testing.server.embedded import EmbeddedServer

__all__ = ["OPERATIONS", "main", "run"]

Operation = Callable[[MongoClient[dict[str, Any]], int], object]
"""One measured call: client and iteration number."""

_DOCS = 1000


def _ping(client: MongoClient[dict[str, Any]], i: int) -> object:
    return client.admin.command("ping")


def _insert_one(client: MongoClient[dict[str, Any]], i: int) -> object:
    return client.bench.inserts.insert_one({"i": i})


def _find_one(client: MongoClient[dict[str, Any]], i: int) -> object:
    return client.bench.docs.find_one({"_id": i % _DOCS})


OPERATIONS: dict[str, Operation] = {
    "ping": _ping,
    "insert_one": _insert_one,
    "find_one": _find_one,
}
"""The measured operations by name."""


def _server_counters(server: EmbeddedServer) -> tuple[int, float, float]:
    status = server.command({"serverStatus": 1})["backpressure"]
    return status["requests"], status["handlerCpuSeconds"], status["processCpuSeconds"]


def _measure(
    client: MongoClient[dict[str, Any]], operation: Operation, ops: int, threads: int
) -> float:
    per_thread = max(1, ops // threads)

    def worker(index: int) -> None:
        offset = index * per_thread
        for i in range(per_thread):
            operation(client, offset + i)

    return per_thread * threads / run_together(worker, threads)


def run(
    ops: int = 3000, threads: Sequence[int] = (1, 4), subprocess: bool = True
) -> dict[str, Any]:
    """Measure every operation at every thread count; return ops/s and server cost per request."""
    results: dict[str, Any] = {"ops": ops, "subprocess": subprocess, "operations": {}}
    with EmbeddedServer(subprocess=subprocess) as server:
        client: MongoClient[dict[str, Any]] = MongoClient(
            server.uri, maxPoolSize=max(threads) + 2, serverSelectionTimeoutMS=5000
        )
        try:
            client.bench.docs.insert_many([{"_id": i, "v": "x" * 32} for i in range(_DOCS)])
            for name, operation in OPERATIONS.items():
                operation(client, 0)  # warm up the pool and the server
                entry: dict[str, Any] = {}
                for count in threads:
                    before = _server_counters(server)
                    rate = _measure(client, operation, ops, count)
                    after = _server_counters(server)
                    requests = max(1, after[0] - before[0])
                    entry[f"{count}_threads_ops_per_sec"] = round(rate)
                    entry[f"{count}_threads_server_handler_us"] = round(
                        (after[1] - before[1]) / requests * 1e6, 1
                    )
                    entry[f"{count}_threads_server_process_us"] = round(
                        (after[2] - before[2]) / requests * 1e6, 1
                    )
                results["operations"][name] = entry
        finally:
            client.close()
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark and print the results as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--in-process", action="store_true", help="run the server in a thread")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.ops, args.threads, subprocess=not args.in_process), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
