"""``EmbeddedServer``: start the test server in a thread or a subprocess and control it.

Both modes are driven identically: every helper sends an admin command over the wire, on one
persistent control connection per member. The control connections identify themselves with a
reserved appName, so fail points, rate limiters and statistics ignore them and helpers keep
working whatever a test injected (even ``closeConnection`` on every hello).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import signal
import socket
import subprocess as _subprocess
import sys
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Callable, Optional, Union

from backpressure.testing.server.cluster.member import CONTROL_APP_NAME
from backpressure.testing.server.cluster.topology import DEFAULT_MEMBERS, TOPOLOGIES
from backpressure.testing.server.control.failpoints import FAIL_POINTS
from backpressure.testing.server.control.parameters import (
    shard_start_parameters,
    start_parameters,
)
from backpressure.testing.server.control.profiles import DEFAULT_SERVER_VERSION
from backpressure.testing.server.control.stats import merge_stats
from backpressure.testing.server.transport.deployment import Deployment
from backpressure.testing.server.wire.framing import (
    HEADER_SIZE,
    pack_msg,
    parse_header,
    parse_reply,
)

__all__ = ["EmbeddedServer", "EmbeddedServerError", "MemberRef"]

MemberRef = Union[int, str, tuple[str, int]]
"""A member by index, ``"host:port"`` or ``(host, port)``."""

_START_TIMEOUT = 20.0
_CONTROL_TIMEOUT = 10.0


def _server_task(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
    """Create a task of the server's loop with :class:`asyncio.Task` itself.

    The loop's own ``create_task`` looks ``asyncio.tasks.Task`` up at each call, and the
    ``asyncio.Runner`` backport that pytest-asyncio uses on Python < 3.11 swaps that attribute
    (and ``contextvars.copy_context``) in the test's thread while it creates a test's task: a
    task the server's thread created in that instant would share the test's context, and the
    test's next step could not enter it (the test hangs).
    """
    return asyncio.Task(coro, loop=loop, **options)


class EmbeddedServerError(Exception):
    """The embedded server failed to start or a control command failed."""


class _ControlConnection:
    """A blocking, lock-protected wire connection used for admin commands."""

    def __init__(self, address: tuple[str, int]) -> None:
        self._sock = socket.create_connection(address, timeout=_CONTROL_TIMEOUT)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._lock = threading.Lock()
        self._request_id = 0
        try:
            self.command({"hello": 1, "client": {"application": {"name": CONTROL_APP_NAME}}})
        except BaseException:
            self._sock.close()
            raise

    def command(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        body = dict(doc)
        body["$db"] = "admin"
        with self._lock:
            self._request_id += 1
            self._sock.sendall(pack_msg(body, self._request_id, 0))
            header = parse_header(self._recv(HEADER_SIZE))
            return parse_reply(header, self._recv(header.length - HEADER_SIZE))

    def _recv(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self._sock.recv(size - len(chunks))
            if not chunk:
                raise EmbeddedServerError("control connection closed by the server")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self._sock.close()


class EmbeddedServer:
    """A MongoDB-compatible test server (standalone, replica set or sharded) for pymongo tests."""

    def __init__(
        self,
        topology: str = "standalone",
        members: Optional[int] = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        rate_limit: Optional[float] = None,
        burst_seconds: float = 1.0,
        queue_depth: int = 0,
        base_backoff_ms: Optional[int] = None,
        connection_rate_limit: Optional[float] = None,
        connection_burst_seconds: float = 1.0,
        max_wire_version: int = 25,
        server_version: str = DEFAULT_SERVER_VERSION,
        limit_hello: bool = False,
        shard_rate_limit: Optional[int] = None,
        shard_burst_seconds: float = 1.0,
        shard_base_backoff_ms: Optional[int] = None,
        shard_max_retries: Optional[int] = None,
        shard_retry_jitter: Optional[float] = None,
        subprocess: bool = False,
        limiter_clock: Optional[Callable[[], float]] = None,
    ) -> None:
        """Configure the server; nothing runs until :meth:`start` (or ``with``).

        ``server_version`` is reported by ``buildInfo`` and picks the limiter profile
        (``8.2.0``, ``8.2.6`` (default) or ``9.0``; see ``control/profiles.py``).
        ``limit_hello=True`` limits hellos and handshakes like any request (mongod with auth
        off); the default exempts them (mongod with auth on: unauthenticated sessions).

        The ``shard_*`` options need the sharded topology: ``shard_rate_limit`` enables the
        ingress limiter of the shard behind the routers (requests/s, burst
        ``shard_burst_seconds``), whose overload errors every mongos retries itself
        ``shard_max_retries`` times (default 2) with the specification's backoff, jittered
        randomly unless ``shard_retry_jitter`` fixes the jitter in [0, 1];
        ``shard_base_backoff_ms`` (9.0 profile) makes the shard attach ``baseBackoffMS``, which
        the mongos uses as its backoff base. See ``cluster/shard.py``.

        ``limiter_clock`` (in-process servers only): the monotonic clock the ingress limiters'
        token buckets refill on, instead of ``time.monotonic``.  A test that steps one clock for
        the server and its clients makes what the limiters admit independent of the machine's
        speed.
        """
        if topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {topology!r}; expected one of {TOPOLOGIES}")
        self.topology = topology
        self.members = DEFAULT_MEMBERS[topology] if members is None else members
        self.host = host
        self.port = port
        self.rate_limit = rate_limit
        self.burst_seconds = burst_seconds
        self.queue_depth = queue_depth
        self.base_backoff_ms = base_backoff_ms
        self.connection_rate_limit = connection_rate_limit
        self.connection_burst_seconds = connection_burst_seconds
        self.max_wire_version = max_wire_version
        self.server_version = server_version
        self.limit_hello = limit_hello
        self.shard_rate_limit = shard_rate_limit
        self.shard_burst_seconds = shard_burst_seconds
        self.shard_base_backoff_ms = shard_base_backoff_ms
        self.shard_max_retries = shard_max_retries
        self.shard_retry_jitter = shard_retry_jitter
        self.subprocess = subprocess
        self._parameters = start_parameters(
            server_version=server_version,
            rate_limit=rate_limit,
            burst_seconds=burst_seconds,
            queue_depth=queue_depth,
            base_backoff_ms=base_backoff_ms,
            connection_rate_limit=connection_rate_limit,
            connection_burst_seconds=connection_burst_seconds,
        )
        self._shard_parameters = shard_start_parameters(
            server_version=server_version,
            rate_limit=shard_rate_limit,
            burst_seconds=shard_burst_seconds,
            base_backoff_ms=shard_base_backoff_ms,
            max_retries=shard_max_retries,
            retry_jitter=shard_retry_jitter,
        )
        if limiter_clock is not None and subprocess:
            raise ValueError("limiter_clock needs an in-process server (subprocess=False)")
        self.limiter_clock = limiter_clock
        if self._shard_parameters and topology != "sharded":
            raise ValueError("the shard_* options need the sharded topology")
        self._uri: Optional[str] = None
        self._addresses: list[tuple[str, int]] = []
        self._controls: list[_ControlConnection] = []
        self._process: Optional[_subprocess.Popen[str]] = None
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop_event: Optional[asyncio.Event] = None
        self._deployment: Optional[Deployment] = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> EmbeddedServer:
        """Start serving; return once every member accepts connections."""
        if self._uri is not None:
            raise EmbeddedServerError("already started")
        try:
            if self.subprocess:
                self._start_process()
            else:
                self._start_thread()
            for address in self._addresses:  # one by one: stop() closes those already open
                self._controls.append(_ControlConnection(address))
            if self.connection_rate_limit is not None:
                # Give back the connection tokens the control connections just took.
                for control in self._controls:
                    _checked(control.command({"backpressureReset": 1, "engine": False}))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop serving and close every connection; safe to call twice."""
        for control in self._controls:
            control.close()
        self._controls = []
        if self._process is not None:
            self._stop_process(self._process)
            self._process = None
        if self._thread is not None:
            loop, event = self._loop, self._stop_event
            if loop is not None and event is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # the loop finished on its own
                    loop.call_soon_threadsafe(event.set)
            self._thread.join(timeout=10)
            self._thread = None
        self._uri = None
        self._deployment = None

    def __enter__(self) -> EmbeddedServer:
        """Start the server."""
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        """Stop the server."""
        self.stop()

    # -- addresses -------------------------------------------------------------------------

    @property
    def uri(self) -> str:
        """The MongoDB connection string of the whole topology."""
        if self._uri is None:
            raise EmbeddedServerError("the server is not running")
        return self._uri

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every member, primary first for a replica set."""
        return list(self._addresses)

    @property
    def primary_address(self) -> tuple[str, int]:
        """The primary (replica set) or first member."""
        if not self._addresses:
            raise EmbeddedServerError("the server is not running")
        return self._addresses[0]

    @property
    def deployment(self) -> Optional[Deployment]:
        """The in-process :class:`Deployment` (``None`` in subprocess mode); loop-thread only."""
        return self._deployment

    # -- control ---------------------------------------------------------------------------

    def command(self, doc: Mapping[str, Any], member: MemberRef = 0) -> dict[str, Any]:
        """Run an admin command on one member over its control connection; return the reply."""
        return self._controls[self._index(member)].command(doc)

    def configure_fail_point(
        self, doc: Mapping[str, Any], member: Optional[MemberRef] = None
    ) -> list[int]:
        """Send a ``configureFailPoint`` document (None: to every member); return the counts."""
        body = dict(doc)
        body.setdefault("configureFailPoint", "failCommand")
        body = {"configureFailPoint": body.pop("configureFailPoint"), **body}
        return [int(r.get("count", 0)) for r in self._each(body, member)]

    def disable_fail_points(self, member: Optional[MemberRef] = None) -> None:
        """Switch ``failCommand`` and ``onPrimaryTransactionalWrite`` off."""
        for name in FAIL_POINTS:
            self._each({"configureFailPoint": name, "mode": "off"}, member)

    def set_parameter(self, member: Optional[MemberRef] = None, **params: Any) -> None:
        """``setParameter`` on one member or all of them."""
        self._each({"setParameter": 1, **params}, member)

    def set_rate_limit(
        self,
        rate: float,
        burst_seconds: float = 1.0,
        queue_depth: int = 0,
        member: Optional[MemberRef] = None,
    ) -> None:
        """Enable the ingress request limiter with ``rate`` requests/s (an integer >= 1, as
        mongod's ``ingressRequestAdmissionRatePerSec``); ``queue_depth`` needs the 9.0 profile
        (8.2 accepts it and still rejects at once)."""
        self.set_parameter(
            member,
            ingressRequestAdmissionRatePerSec=rate,
            ingressRequestAdmissionBurstCapacitySecs=burst_seconds,
            ingressRequestAdmissionMaxQueueDepth=queue_depth,
            ingressRequestRateLimiterEnabled=True,
        )

    def set_operation_rate_limit(
        self, rate: int, burst_seconds: float = 1.0, member: Optional[MemberRef] = None
    ) -> None:
        """Enable the operation rate limiter (code 463; server version 8.3 or later) at ``rate``
        operations/s: the embedded stand-in for mongod's adaptive operation rate limiter."""
        self.set_parameter(
            member,
            backpressureOperationRateLimiterRatePerSec=rate,
            backpressureOperationRateLimiterBurstCapacitySecs=burst_seconds,
            backpressureOperationRateLimiterEnabled=True,
        )

    def set_shard_rate_limit(self, rate: int, burst_seconds: float = 1.0) -> None:
        """Enable the ingress limiter of the shard behind a sharded topology's routers (shared
        by every mongos, so set once) at ``rate`` requests/s."""
        self.set_parameter(
            0,
            backpressureShardAdmissionRatePerSec=rate,
            backpressureShardAdmissionBurstCapacitySecs=burst_seconds,
            backpressureShardRateLimiterEnabled=True,
        )

    def disable_shard_rate_limit(self) -> None:
        """Disable the shard's ingress limiter."""
        self.set_parameter(0, backpressureShardRateLimiterEnabled=False)

    def disable_rate_limit(self, member: Optional[MemberRef] = None) -> None:
        """Disable the ingress request limiter."""
        self.set_parameter(member, ingressRequestRateLimiterEnabled=False)

    def stats(self, member: Optional[MemberRef] = None, reset: bool = False) -> dict[str, Any]:
        """``backpressureStats`` of one member, or all members merged (``members`` lists each)."""
        docs = self._each({"backpressureStats": 1, "reset": reset}, member)
        for doc in docs:
            doc.pop("ok", None)
            doc.pop("$clusterTime", None)
            doc.pop("operationTime", None)
        return docs[0] if member is not None else merge_stats(docs)

    def reset(self) -> None:
        """Data, cursors, sessions, fail points, limiters and statistics back to the start."""
        for index, control in enumerate(self._controls):
            _checked(control.command({"backpressureReset": 1, "engine": index == 0}))

    # -- internals -------------------------------------------------------------------------

    def _index(self, member: MemberRef) -> int:
        if isinstance(member, int):
            if not 0 <= member < len(self._addresses):
                raise IndexError(f"no member {member}")
            return member
        if isinstance(member, str):
            host, _, port = member.rpartition(":")
            member = (host, int(port))
        try:
            return self._addresses.index((member[0], int(member[1])))
        except ValueError:
            raise KeyError(f"no member at {member[0]}:{member[1]}") from None

    def _each(self, doc: Mapping[str, Any], member: Optional[MemberRef]) -> list[dict[str, Any]]:
        if not self._controls:
            raise EmbeddedServerError("the server is not running")
        indexes = range(len(self._controls)) if member is None else [self._index(member)]
        return [_checked(self._controls[i].command(doc)) for i in indexes]

    def _cli_args(self) -> list[str]:
        args = [
            "--topology", self.topology,
            "--members", str(self.members),
            "--host", self.host,
            "--port", str(self.port),
            "--max-wire-version", str(self.max_wire_version),
            "--server-version", self.server_version,
            "--burst-seconds", str(self.burst_seconds),
            "--queue-depth", str(self.queue_depth),
            "--connection-burst-seconds", str(self.connection_burst_seconds),
            "--log-level", "WARNING",
        ]  # fmt: skip
        if self.limit_hello:
            args.append("--limit-hello")
        if self.rate_limit is not None:
            args += ["--rate-limit", str(self.rate_limit)]
        if self.base_backoff_ms is not None:
            args += ["--base-backoff-ms", str(self.base_backoff_ms)]
        if self.connection_rate_limit is not None:
            args += ["--connection-rate-limit", str(self.connection_rate_limit)]
        if self.shard_rate_limit is not None:
            args += ["--shard-rate-limit", str(self.shard_rate_limit)]
            args += ["--shard-burst-seconds", str(self.shard_burst_seconds)]
        if self.shard_base_backoff_ms is not None:
            args += ["--shard-base-backoff-ms", str(self.shard_base_backoff_ms)]
        if self.shard_max_retries is not None:
            args += ["--shard-max-retries", str(self.shard_max_retries)]
        if self.shard_retry_jitter is not None:
            args += ["--shard-retry-jitter", str(self.shard_retry_jitter)]
        return args

    def _start_process(self) -> None:
        cmd = [sys.executable, "-m", "backpressure.testing.server", *self._cli_args()]
        process = _subprocess.Popen(cmd, stdout=_subprocess.PIPE, text=True)
        self._process = process
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], _START_TIMEOUT)
        line = process.stdout.readline() if ready else ""
        if not line.startswith("READY "):
            raise EmbeddedServerError(f"server did not start (exit code {process.poll()})")
        self._set_uri(line.split(" ", 1)[1].strip())

    @staticmethod
    def _stop_process(process: _subprocess.Popen[str]) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except _subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def _start_thread(self) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []
        deployment = Deployment(
            self.topology,
            self.members,
            host=self.host,
            port=self.port,
            parameters=self._parameters,
            max_wire_version=self.max_wire_version,
            server_version=self.server_version,
            limit_hello=self.limit_hello,
            shard_parameters=self._shard_parameters,
            limiter_clock=self.limiter_clock or time.monotonic,
        )

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._loop.set_task_factory(_server_task)
            self._stop_event = asyncio.Event()
            try:
                await deployment.start()
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                await self._stop_event.wait()
            finally:
                await deployment.stop()

        def run() -> None:
            try:
                asyncio.run(serve())
            except BaseException as exc:  # pragma: no cover - reported through `failure`
                failure.append(exc)
                ready.set()

        self._thread = threading.Thread(target=run, name="embedded-mongodb", daemon=True)
        self._thread.start()
        if not ready.wait(_START_TIMEOUT):
            raise EmbeddedServerError("server thread did not start in time")
        if failure:
            raise EmbeddedServerError(f"server failed to start: {failure[0]!r}") from failure[0]
        self._deployment = deployment
        self._set_uri(deployment.uri)

    def _set_uri(self, uri: str) -> None:
        hosts = uri.split("://", 1)[1].split("/", 1)[0]
        addresses = []
        for item in hosts.split(","):
            host, _, port = item.rpartition(":")
            addresses.append((host, int(port)))
        self._uri = uri
        self._addresses = addresses


def _checked(reply: dict[str, Any]) -> dict[str, Any]:
    if not reply.get("ok"):
        raise EmbeddedServerError(
            f"command failed: {reply.get('errmsg')} (code {reply.get('code')})"
        )
    return reply
