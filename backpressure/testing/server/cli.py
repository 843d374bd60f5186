"""The command line of the embedded server: ``python -m backpressure.testing.server``.

Also installed as the ``backpressure-test-server`` script. Prints ``READY <uri>`` once every
member listens, then serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Optional

from backpressure.testing.server.cluster.topology import TOPOLOGIES
from backpressure.testing.server.control.parameters import start_parameters
from backpressure.testing.server.transport.deployment import Deployment

__all__ = ["main"]

log = logging.getLogger("backpressure.testing.server")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.testing.server",
        description="Embedded MongoDB-compatible test server with fail points and rate limiters.",
    )
    parser.add_argument("--topology", choices=TOPOLOGIES, default="standalone")
    parser.add_argument("--members", type=int, default=None, help="default: 1 / 3 / 2")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="first port; 0 = ephemeral")
    parser.add_argument("--rate-limit", type=float, default=None, metavar="OPS_PER_SEC")
    parser.add_argument("--burst-seconds", type=float, default=1.0)
    parser.add_argument("--queue-depth", type=int, default=0)
    parser.add_argument("--base-backoff-ms", type=int, default=None)
    parser.add_argument(
        "--connection-rate-limit", type=float, default=None, metavar="CONNS_PER_SEC"
    )
    parser.add_argument("--connection-burst-seconds", type=float, default=1.0)
    parser.add_argument("--connection-queue-depth", type=int, default=0)
    parser.add_argument("--max-wire-version", type=int, default=25)
    parser.add_argument("--server-version", default="8.2.0")
    parser.add_argument("--log-level", default="INFO")
    return parser


async def _serve_until_signalled(deployment: Deployment) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await deployment.start()
    try:
        print(f"READY {deployment.uri}", flush=True)
        await stop.wait()
        log.info("signal received, shutting down")
    finally:
        await deployment.stop()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the server until SIGINT/SIGTERM; print ``READY <uri>`` once every member listens."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        params = start_parameters(
            rate_limit=args.rate_limit,
            burst_seconds=args.burst_seconds,
            queue_depth=args.queue_depth,
            base_backoff_ms=args.base_backoff_ms,
            connection_rate_limit=args.connection_rate_limit,
            connection_burst_seconds=args.connection_burst_seconds,
            connection_queue_depth=args.connection_queue_depth,
        )
        deployment = Deployment(
            args.topology,
            args.members,
            host=args.host,
            port=args.port,
            parameters=params,
            max_wire_version=args.max_wire_version,
            server_version=args.server_version,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve_until_signalled(deployment))
    except OSError as exc:  # e.g. a port already in use
        log.error("cannot serve: %s", exc)
        return 1
    return 0
