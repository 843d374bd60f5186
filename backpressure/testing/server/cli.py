"""The command line of the embedded server: ``python -m backpressure.testing.server``.

Also installed as the ``backpressure-test-server`` script. Prints ``READY <uri>`` once every
member listens, then serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn, Optional

from backpressure.cli import (
    bounded_float,
    non_negative_int,
    positive_float,
    positive_int,
    run_cli,
)

# Only modules without mongomock (the 'server' extra) here, so that --help and usage errors work
# without it; the deployment is imported after parsing.
from backpressure.testing.server.cluster.topology import DEFAULT_MEMBERS, TOPOLOGIES
from backpressure.testing.server.control.parameters import (
    shard_start_parameters,
    start_parameters,
)
from backpressure.testing.server.control.profiles import (
    DEFAULT_SERVER_VERSION,
    PROFILE_NAMES,
    profile_for,
)
from backpressure.testing.server.control.ratelimit import UNLIMITED_RATE

if TYPE_CHECKING:
    from backpressure.testing.server.transport.deployment import Deployment

__all__ = ["main"]

log = logging.getLogger("backpressure.testing.server")

SCRIPT = "backpressure-test-server"
"""The installed script (``[project.scripts]``) that runs :func:`main`."""

_PARAMETER_FLAGS = {
    "ingressRequestAdmissionRatePerSec": "--rate-limit",
    "ingressRequestAdmissionBurstCapacitySecs": "--burst-seconds",
    "ingressRequestAdmissionMaxQueueDepth": "--queue-depth",
    "externalClientBaseBackoffMS": "--base-backoff-ms",
    "ingressConnectionEstablishmentRatePerSec": "--connection-rate-limit",
    "ingressConnectionEstablishmentBurstCapacitySecs": "--connection-burst-seconds",
    "ingressConnectionEstablishmentMaxQueueDepth": "--connection-queue-depth",
    "backpressureShardAdmissionRatePerSec": "--shard-rate-limit",
    "backpressureShardAdmissionBurstCapacitySecs": "--shard-burst-seconds",
    "backpressureShardBaseBackoffMS": "--shard-base-backoff-ms",
    "backpressureShardMaxRetries": "--shard-max-retries",
    "backpressureShardRetryJitter": "--shard-retry-jitter",
}
"""The flag that sets each mongod parameter: a start-up error names the flag, not the parameter."""


def _port(text: str) -> int:
    """An argparse type: a TCP port number, 0 meaning an ephemeral port per member."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer in 0..65535, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected an integer in 0..65535, got {value}")
    return value


def _rate(text: str) -> int:
    """An argparse type: an admission rate as mongod takes it, an integer in 1..2**31 - 1 (an
    integral number such as ``100.0`` too, as ``EmbeddedServer`` passes its float rates)."""
    value = positive_float(text)
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    if value > UNLIMITED_RATE:
        raise argparse.ArgumentTypeError(f"must be <= {UNLIMITED_RATE}, got {text}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return int(value)


def _version(text: str) -> str:
    """An argparse type: a dotted server version such as 8.2.6 or 9.0."""
    parts = text.split(".")
    if not 2 <= len(parts) <= 4 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected a version such as {', '.join(PROFILE_NAMES)}, got {text!r}"
        )
    return text


def _prog() -> str:
    """The name usage lines give: the installed script's, else the ``python -m`` spelling."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    return script if script == SCRIPT else "python -m backpressure.testing.server"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="Embedded MongoDB-compatible test server with fail points and rate limiters. "
        "Prints 'READY <connection string>' once every member listens; stops on SIGINT/SIGTERM. "
        "There is no authentication: bind to loopback only.",
    )
    add = parser.add_argument
    add(
        "--topology",
        choices=TOPOLOGIES,
        default="standalone",
        help="deployment to emulate (default: %(default)s)",
    )
    add(
        "--members",
        type=positive_int,
        default=None,
        help="members of the topology (default: 1 standalone, 3 replica-set members, 2 mongos)",
    )
    add(
        "--host",
        default="127.0.0.1",
        help="address to bind; a non-loopback address warns (default: %(default)s)",
    )
    add(
        "--port",
        type=_port,
        default=0,
        help="first port; members use consecutive ports; 0 = an ephemeral port each "
        "(default: %(default)s)",
    )
    add(
        "--rate-limit",
        type=_rate,
        default=None,
        metavar="OPS_PER_SEC",
        help="enable the ingress request rate limiter at this rate (default: off)",
    )
    add(
        "--burst-seconds",
        type=positive_float,
        default=1.0,
        help="request limiter burst, in seconds (default: %(default)s)",
    )
    add(
        "--queue-depth",
        type=non_negative_int,
        default=0,
        help="requests queued before rejecting (default: %(default)s)",
    )
    add(
        "--base-backoff-ms",
        type=non_negative_int,
        default=None,
        help="attach baseBackoffMS to overload errors (externalClientBaseBackoffMS; default: off)",
    )
    add(
        "--connection-rate-limit",
        type=positive_float,
        default=None,
        metavar="CONNS_PER_SEC",
        help="enable the connection-establishment rate limiter at this rate (default: off)",
    )
    add(
        "--connection-burst-seconds",
        type=positive_float,
        default=1.0,
        help="connection limiter burst, in seconds (default: %(default)s)",
    )
    add(
        "--connection-queue-depth",
        type=non_negative_int,
        default=0,
        help="connections queued before closing new ones (default: %(default)s)",
    )
    add(
        "--max-wire-version",
        type=non_negative_int,
        default=25,
        help="maxWireVersion advertised in hello (default: %(default)s)",
    )
    add(
        "--server-version",
        type=_version,
        default=DEFAULT_SERVER_VERSION,
        metavar="{" + ",".join(PROFILE_NAMES) + "}",
        help="version reported by buildInfo; it picks the limiter profile: 8.2.0 (below 8.2.6), "
        "8.2.6 (NoWritesPerformed on rejections; up to 9.0) or 9.0 (AllowRetries, "
        "externalClientBaseBackoffMS, request queueing, appName exemptions); any other x.y.z "
        "takes the profile below it (default: %(default)s)",
    )
    add(
        "--limit-hello",
        action="store_true",
        help="limit hello and handshakes like any request (mongod with auth off); by default "
        "they are exempt (mongod with auth on: unauthenticated sessions)",
    )
    add(
        "--shard-rate-limit",
        type=_rate,
        default=None,
        metavar="OPS_PER_SEC",
        help="sharded topology: enable the ingress limiter of the shard behind the mongos "
        "routers (shared by all of them); each mongos retries the shard's overload errors "
        "itself with backoff before answering the client (default: off)",
    )
    add(
        "--shard-burst-seconds",
        type=positive_float,
        default=1.0,
        help="shard limiter burst, in seconds (default: %(default)s)",
    )
    add(
        "--shard-base-backoff-ms",
        type=non_negative_int,
        default=None,
        help="9.0 profile: the shard attaches this baseBackoffMS to its overload errors; the "
        "mongos uses it as its backoff base (default: off)",
    )
    add(
        "--shard-max-retries",
        type=non_negative_int,
        default=None,
        help="times a mongos retries a shard's overload error (default: 2)",
    )
    add(
        "--shard-retry-jitter",
        type=bounded_float(0.0, 1.0),
        default=None,
        help="fix the jitter of the mongos backoff in [0, 1] (default: random)",
    )
    add(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        help="log level; the log goes to stderr (default: %(default)s)",
    )
    return parser


async def _serve_until_signalled(deployment: Deployment) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await deployment.start()
    try:
        for address in deployment.exposed_addresses():
            print(
                f"WARNING: the embedded server listens on {address}, reachable from other "
                "machines, without authentication. Bind to 127.0.0.1 or ::1 unless you mean it.",
                file=sys.stderr,
                flush=True,
            )
        print(f"READY {deployment.uri}", flush=True)
        await stop.wait()
        log.info("signal received, shutting down")
    finally:
        await deployment.stop()


def _check_profile(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors for options the chosen ``--server-version`` profile does not have."""
    profile = profile_for(args.server_version)
    needs_9 = f"needs --server-version 9.0 or later (not {args.server_version})"
    if args.queue_depth and not profile.request_queue:
        parser.error(f"argument --queue-depth: request queueing {needs_9}")
    if args.base_backoff_ms is not None and not profile.base_backoff:
        parser.error(f"argument --base-backoff-ms: {needs_9}")
    if args.shard_base_backoff_ms is not None and not profile.base_backoff:
        parser.error(f"argument --shard-base-backoff-ms: {needs_9}")


def _flag_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """A start-up parameter error as a usage error naming the flag that set the parameter."""
    for parameter, flag in _PARAMETER_FLAGS.items():
        if parameter in message:
            detail = message.replace(f"Invalid value for parameter {parameter}: ", "")
            parser.error(f"argument {flag}: {detail.replace(parameter, flag)}")
    parser.error(message)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the server until SIGINT/SIGTERM; print ``READY <uri>`` once every member listens.

    Returns the exit status: 0 after a signal, 1 when it cannot serve or the ``server`` extra is
    missing (its message alone on stderr); usage errors exit 2.
    """
    return run_cli(_main, argv)


def _main(argv: Optional[Sequence[str]]) -> int:
    """The command line, without the missing-extra and Ctrl-C handling of :func:`main`."""
    parser = _parser()
    args = parser.parse_args(argv)
    members = args.members or DEFAULT_MEMBERS[args.topology]
    if args.port and args.port + members - 1 > 65535:
        parser.error(
            f"argument --port: {members} members need ports {args.port}..{args.port + members - 1}"
            ", beyond 65535"
        )
    if args.topology == "standalone" and members != 1:
        parser.error("argument --members: a standalone topology has exactly one member")
    _check_profile(parser, args)
    if args.topology != "sharded":
        for flag in (
            "rate_limit",
            "burst_seconds",
            "base_backoff_ms",
            "max_retries",
            "retry_jitter",
        ):
            value = getattr(args, f"shard_{flag}")
            default = parser.get_default(f"shard_{flag}")
            if value != default:
                parser.error(f"argument --shard-{flag.replace('_', '-')}: needs --topology sharded")
    try:
        params = start_parameters(
            server_version=args.server_version,
            rate_limit=args.rate_limit,
            burst_seconds=args.burst_seconds,
            queue_depth=args.queue_depth,
            base_backoff_ms=args.base_backoff_ms,
            connection_rate_limit=args.connection_rate_limit,
            connection_burst_seconds=args.connection_burst_seconds,
            connection_queue_depth=args.connection_queue_depth,
        )
        shard_params = shard_start_parameters(
            server_version=args.server_version,
            rate_limit=args.shard_rate_limit,
            burst_seconds=args.shard_burst_seconds,
            base_backoff_ms=args.shard_base_backoff_ms,
            max_retries=args.shard_max_retries,
            retry_jitter=args.shard_retry_jitter,
        )
    except ValueError as exc:
        _flag_error(parser, str(exc))
    from backpressure.testing.server.transport.deployment import Deployment

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        deployment = Deployment(
            args.topology,
            args.members,
            host=args.host,
            port=args.port,
            parameters=params,
            max_wire_version=args.max_wire_version,
            server_version=args.server_version,
            limit_hello=args.limit_hello,
            shard_parameters=shard_params,
        )
    except ValueError as exc:
        parser.error(str(exc))
    try:
        asyncio.run(_serve_until_signalled(deployment))
    except OSError as exc:  # e.g. a port already in use
        log.error("cannot serve: %s", exc)
        return 1
    return 0
