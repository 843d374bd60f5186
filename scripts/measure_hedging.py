"""Measure hedged reads against the embedded replica set: latency percentiles and extra reads.

Usage: python scripts/measure_hedging.py [--reads 600] [--delay-ms 20] [--slow-ms 200]

Two scenarios, each run without and with hedging in one process, one sync client thread reading
``find_one`` with ``nearest`` (every member in the latency window):

* one slow member: every find on one secondary is held ``--slow-ms``;
* slow tails: every member holds 5% of its finds for ``--slow-ms`` (``activationProbability``).

Printed per run: p50, p90, p99 and max latency, and finds the servers received per read (1.00
without hedging; the excess is the hedges' extra server load).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any, Optional

from pymongo import monitoring

import backpressure
from backpressure.testing.server.embedded import EmbeddedServer


class FindCounter(monitoring.CommandListener):
    """Counts the find commands sent."""

    def __init__(self) -> None:
        """Start at zero."""
        self.lock = threading.Lock()
        self.finds = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        """Count a find."""
        if event.command_name == "find":
            with self.lock:
                self.finds += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Ignore."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Ignore."""


def slow_finds(block_ms: int, probability: Optional[float] = None) -> dict[str, Any]:
    """A fail point holding finds ``block_ms`` (each with ``probability``, or all of them)."""
    mode: Any = "alwaysOn" if probability is None else {"activationProbability": probability}
    return {
        "configureFailPoint": "failCommand",
        "mode": mode,
        "data": {"failCommands": ["find"], "blockConnection": True, "blockTimeMS": block_ms},
    }


def run(server: EmbeddedServer, policy: Any, reads: int) -> tuple[list[float], float]:
    """Read ``reads`` times; return the latencies (s) and finds sent per read."""
    counter = FindCounter()
    client: Any = backpressure.MongoClient(
        server.uri, backpressure=policy, readPreference="nearest", localThresholdMS=60_000,
        event_listeners=[counter],
    )  # fmt: skip
    try:
        while len(client.nodes) < 3 or client.db.coll.find_one({"_id": 1}) is None:
            time.sleep(0.01)
        time.sleep(0.5)  # let every member be discovered as readable
        counter.finds = 0
        latencies = []
        for _ in range(reads):
            start = time.perf_counter()
            client.db.coll.find_one({"_id": 1})
            latencies.append(time.perf_counter() - start)
        # Losers still in flight are counted once they are sent: they were, before the return.
        return latencies, counter.finds / reads
    finally:
        client.close()


def describe(latencies: list[float]) -> str:
    """p50, p90, p99 and max in milliseconds."""
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return (
        f"p50 {cuts[49] * 1000:6.1f} ms  p90 {cuts[89] * 1000:6.1f} ms  "
        f"p99 {cuts[98] * 1000:6.1f} ms  max {max(latencies) * 1000:6.1f} ms"
    )


def main() -> None:
    """Run both scenarios without and with hedging and print one line per run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=600)
    parser.add_argument("--delay-ms", type=int, default=20)
    parser.add_argument("--slow-ms", type=int, default=200)
    args = parser.parse_args()
    hedged = backpressure.DRAFT.replace(hedge_delay=args.delay_ms / 1000)
    with EmbeddedServer("replicaset", subprocess=True) as server:
        seed: Any = backpressure.MongoClient(server.uri)
        seed.db.coll.insert_one({"_id": 1})
        seed.close()
        scenarios = {
            "one slow member": [(slow_finds(args.slow_ms), 1)],
            "5% slow finds on every member": [
                (slow_finds(args.slow_ms, 0.05), member) for member in range(3)
            ],
        }
        for title, fail_points in scenarios.items():
            for fail_point, member in fail_points:
                server.configure_fail_point(fail_point, member=member)
            for label, policy in (("no hedging", backpressure.DRAFT), ("hedged", hedged)):
                latencies, per_read = run(server, policy, args.reads)
                print(f"{title:30s} {label:10s} {describe(latencies)}  finds/read {per_read:.2f}")
            server.disable_fail_points()


if __name__ == "__main__":
    main()
