"""The embedded server's asyncio transport: accept, frame, admit, fail, dispatch, reply.

Theory of operation: a :class:`Deployment` binds one listening socket per member on one event
loop; all members share one engine. Each connection is one coroutine that handles its requests
in order, so a blocked command (``blockConnection``, a queued admission) sleeps without stalling
other connections. A request goes through these steps:

1. framing (``wire/framing.py``); a malformed or oversized message closes only that
   connection;
2. the first hello records the handshake (appName, compressors) for statistics and fail points;
3. the ingress request limiter, right after the message is read and before it is decoded (the
   command name is read at a fixed offset; a compressed message or a connection's first one is
   decoded first): control commands are exempt (``cluster/commands.py``), and so
   are hellos unless ``limit_hello`` (mongod with auth on exempts unauthenticated sessions; with
   auth off it limits them too); client addresses in ``ingressRequestRateLimiterExemptions`` and
   (9.0) appName or driver-name prefixes in ``ingressRequestRateLimiterApplicationExemptions``
   are exempt; a rejection is the server version profile's 462 reply (``control/profiles.py``);
   on 9.0 a request without a token may wait in the queue until its maxTimeMS runs out or its
   client disconnects; then the operation rate limiter (code 463, 8.3+ profiles);
4. the ``failCommand`` fail point: block, then close, then error (``control/failpoints.py``); a
   close or an error is reported to ``Engine.note_injected_error`` (mongod has already checked
   the session out and begun a ``startTransaction`` transaction when the fail point fires);
5. on a sharded topology, the shard hop (``cluster/shard.py``): a command the mongos would send
   to a shard must pass the shard's limiter, shared by every mongos; the mongos retries the
   shard's overload errors with backoff (an ``asyncio.sleep``) before answering the client
   with the shard's error;
6. server-level commands (``cluster/commands.py``), else role checks and ``Engine.execute``,
   preceded by the time the command would take in mongod (``$where`` ``sleep()`` calls, the
   await of a change-stream getMore), slept without blocking other connections; the
   ``onPrimaryTransactionalWrite`` fail point wraps first-time retryable writes on a primary;
7. reply decoration: ``writeConcernError`` from the fail point, ``baseBackoffMS`` on overload
   errors, ``$clusterTime``/``operationTime`` for replica sets and sharded clusters.

Any exception while handling a command becomes an ``InternalError`` reply, never a crash.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from backpressure.testing.server.cluster.commands import (
    ADMIN_COMMANDS,
    ADMIN_ONLY,
    HELLO_COMMANDS,
    RATE_LIMIT_EXEMPT,
    SECONDARY_ALWAYS_OK,
)
from backpressure.testing.server.cluster.member import (
    CONTROL_APP_NAME,
    ConnectionState,
    MemberState,
)
from backpressure.testing.server.cluster.replies import (
    error_reply,
    is_retryable_write,
    mongod_labels,
    operation_limited_reply,
    rate_limited_reply,
    unsatisfiable_write_concern,
)
from backpressure.testing.server.cluster.shard import SHARD_LOCAL_COMMANDS, ShardHop
from backpressure.testing.server.cluster.topology import (
    DEFAULT_MEMBERS,
    Member,
    Topology,
    version_array,
)
from backpressure.testing.server.control.failpoints import (
    TRANSACTIONAL_WRITE_ERRMSG,
    FailAction,
    TransactionalWriteAction,
    canonical_command_name,
)
from backpressure.testing.server.control.profiles import DEFAULT_SERVER_VERSION, profile_for
from backpressure.testing.server.control.stats import CommandCounters, ConnectionRecord
from backpressure.testing.server.engine.request import CommandContext
from backpressure.testing.server.errors import CommandError
from backpressure.testing.server.wire.compression import SUPPORTED_COMPRESSORS
from backpressure.testing.server.wire.framing import (
    HEADER_SIZE,
    Header,
    Peek,
    Request,
    WireError,
    compressed_size,
    pack_reply,
    parse_header,
    parse_request,
    peek_request,
)

if TYPE_CHECKING:
    from backpressure.testing.server.engine.dispatch import Engine

__all__ = ["Deployment"]

log = logging.getLogger("backpressure.testing.server")

_SECONDARY_OK_FLAG = 4  # OP_QUERY flag bit 2
_READ_SLICE = 1 << 20
_PARSE_IN_WORKER_BYTES = 1 << 20
"""Messages larger than this (declared uncompressed size included) are parsed off the loop."""
_TRANSACTIONAL_WRITES = frozenset({"insert", "update", "delete", "findAndModify", "bulkWrite"})
"""Commands ``onPrimaryTransactionalWrite`` interrupts when they carry a ``txnNumber``."""


def _default_engine() -> Engine:
    from backpressure.testing.server.engine.dispatch import Engine

    return Engine()


_PENDING = "pending"
"""The request limiter has not seen the request yet (decided while handling it)."""
_ADMITTED = "admitted"
"""Admitted (or exempt) before the body was decoded."""
_QUEUED = "queued"
"""Must wait in the 9.0 queue (decided before the body was decoded)."""


async def _client_gone(reader: asyncio.StreamReader) -> None:
    """Return once the client has closed its side of the connection (checked every 10 ms)."""
    while not reader.at_eof():
        await asyncio.sleep(0.01)


class _Close(Exception):
    """Raised inside request handling to drop the connection without a reply."""


class _TrackedStreamProtocol(asyncio.StreamReaderProtocol):
    """A client connection's stream protocol that keeps its transport in ``open_transports``
    while it is connected, so that stopping the deployment closes it even if its handler task
    never ran.

    The loop creates the handler task when the connection is made; a task cancelled before its
    first step (the loop shutting down just then) never reaches the handler's own ``close``.
    """

    def __init__(
        self,
        open_transports: set[asyncio.BaseTransport],
        stopped: Callable[[], bool],
        handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
    ) -> None:
        """Serve the connection with ``handler``; ``stopped`` tells whether the deployment has
        stopped (a connection made after that is closed at once)."""
        super().__init__(asyncio.StreamReader(), handler)
        self._open_transports = open_transports
        self._stopped = stopped
        self._tracked: Optional[asyncio.BaseTransport] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Track the transport and start the handler; close at once after the stop."""
        self._tracked = transport
        self._open_transports.add(transport)
        super().connection_made(transport)
        if self._stopped():
            transport.close()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        """Forget the transport."""
        if self._tracked is not None:
            self._open_transports.discard(self._tracked)
        super().connection_lost(exc)


class Deployment:
    """All members of one emulated topology, served from the current event loop."""

    def __init__(
        self,
        topology: str = "standalone",
        members: Optional[int] = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        parameters: Optional[Mapping[str, Any]] = None,
        max_wire_version: int = 25,
        server_version: str = DEFAULT_SERVER_VERSION,
        limit_hello: bool = False,
        shard_parameters: Optional[Mapping[str, Any]] = None,
        engine_factory: Callable[[], Engine] = _default_engine,
        limiter_clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Describe the deployment; :meth:`start` binds the ports. ``shard_parameters``
        configure the shard behind a sharded topology's routers (``ShardParameters``); the
        ingress limiters refill on ``limiter_clock``."""
        if shard_parameters and topology != "sharded":
            raise ValueError("shard options need the sharded topology")
        self.limit_hello = limit_hello
        self.limiter_clock = limiter_clock
        self.shard_parameters = dict(shard_parameters or {})
        self.shard: Optional[ShardHop] = None
        count = DEFAULT_MEMBERS.get(topology, 1) if members is None else members
        self.roles = Topology.roles(topology, count)
        self.kind = topology
        self.host = host
        self.port = port
        self.parameters = dict(parameters or {})
        self.max_wire_version = max_wire_version
        self.server_version = server_version
        self.engine = engine_factory()
        self.states: list[MemberState] = []
        self.topology: Optional[Topology] = None
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._transports: set[asyncio.BaseTransport] = set()
        self._stopped = False
        self._next_connection_id = 1
        self._next_request_id = 1
        self._parser: Optional[concurrent.futures.ThreadPoolExecutor] = None

    @property
    def uri(self) -> str:
        """The connection string of the whole topology (after :meth:`start`)."""
        if self.topology is None:
            raise RuntimeError("the deployment is not started")
        return self.topology.uri()

    async def start(self) -> None:
        """Bind every member's port and start accepting connections."""
        self._stopped = False
        bound: list[int] = []
        try:
            for index in range(len(self.roles)):
                port = self.port + index if self.port else 0
                server = await self._listen(index, port)
                self._servers.append(server)
                bound.append(server.sockets[0].getsockname()[1])
        except BaseException:
            await self.stop()
            raise
        members = [
            Member(i, self.host, p, role) for i, (p, role) in enumerate(zip(bound, self.roles))
        ]
        self.topology = Topology(
            self.kind,
            members,
            max_wire_version=self.max_wire_version,
            server_version=self.server_version,
        )
        if self.kind == "sharded":
            self.shard = ShardHop(
                self.shard_parameters,
                profile_for(self.server_version),
                clock=self.limiter_clock,
            )
        self.states = [
            MemberState(
                m,
                self.topology,
                self.engine,
                self.parameters,
                self.shard,
                limiter_clock=self.limiter_clock,
            )
            for m in members
        ]
        log.info("serving %s topology at %s", self.kind, self.topology.uri())
        for address in self.exposed_addresses():
            log.warning(
                "listening on %s, reachable from other machines: the embedded server has no "
                "authentication; bind to a loopback address unless you mean it",
                address,
            )

    def exposed_addresses(self) -> list[str]:
        """The bound socket addresses that are not loopback (reachable from other machines)."""
        exposed = []
        for server in self._servers:
            for sock in server.sockets:
                host = sock.getsockname()[0]
                try:
                    loopback = ipaddress.ip_address(host.split("%")[0]).is_loopback
                except ValueError:
                    loopback = False
                if not loopback:
                    exposed.append(host)
        return sorted(set(exposed))

    async def _listen(self, index: int, port: int) -> asyncio.Server:
        """Listen for member ``index``'s clients on ``port`` (0: any free port)."""
        acceptor = self._make_acceptor(index)
        return await asyncio.get_running_loop().create_server(
            lambda: _TrackedStreamProtocol(self._transports, lambda: self._stopped, acceptor),
            self.host,
            port,
            reuse_address=True,
        )

    async def stop(self) -> None:
        """Close the listeners and every client connection."""
        self._stopped = True
        for server in self._servers:
            server.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        for state in self.states:
            state.close()
        if self.shard is not None:
            self.shard.close()
        if self._parser is not None:
            self._parser.shutdown(wait=True)
            self._parser = None
        for transport in list(self._transports):  # handlers that never ran (see the protocol)
            transport.close()
        await asyncio.sleep(0)

    def _make_acceptor(
        self, index: int
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._connections.add(task)
            try:
                await self._serve_connection(index, reader, writer)
            except asyncio.CancelledError:  # stop() cancels connections; end quietly
                pass
            finally:
                self._connections.discard(task)

        return accept

    async def _serve_connection(
        self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if not self.states:  # a client raced the start-up
            writer.close()
            return
        state = self.states[index]
        peer = writer.get_extra_info("peername")
        remote = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        try:
            admitted = await self._admit_connection(state, peer, reader)
            if admitted is None:
                return  # the client left while queued
            if not admitted:
                state.stats.connections_rejected += 1
                log.debug(
                    "%s: connection from %s rejected by the limiter", state.member.address, remote
                )
                return
            conn = ConnectionState(ConnectionRecord(self._next_connection_id, remote))
            if isinstance(peer, tuple):
                conn.peer_host = str(peer[0])
            self._next_connection_id += 1
            state.total_connections += 1
            state.stats.connections[conn.connection_id] = conn.record
            try:
                await self._read_loop(state, conn, reader, writer)
            finally:
                conn.record.closed_at = time.time()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _admit_connection(
        self, state: MemberState, peer: Any, reader: asyncio.StreamReader
    ) -> Optional[bool]:
        """The connection-establishment limiter: True (admitted, bypassed or disabled), False
        (the queue is full: close before any message), None (the client disconnected while
        queued: its place and token go back, counted in ``interruptedDueToClientDisconnect``)."""
        limiter = state.connection_limiter
        if not limiter.settings.enabled:
            return True
        host = str(peer[0]) if isinstance(peer, tuple) else None
        if host is not None and _in_networks(host, state.parameters.bypass_networks):
            limiter.record_exempt()
            return True
        decision = limiter.try_admit()
        if decision is not None:
            return decision
        started = time.monotonic()
        watcher = asyncio.ensure_future(_client_gone(reader))
        try:
            admitted = await limiter.wait(interrupt=watcher)
        finally:
            watcher.cancel()
            state.establishment_queued += 1
            state.establishment_queued_micros += int((time.monotonic() - started) * 1e6)
        if admitted:
            return True
        state.establishment_interrupted += 1
        return None

    async def _read_loop(
        self,
        state: MemberState,
        conn: ConnectionState,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        while True:
            header_bytes = await reader.readexactly(HEADER_SIZE)
            admission = _PENDING
            try:
                header = parse_header(header_bytes)
                payload = await _read_payload(reader, header.length - HEADER_SIZE)
                started = time.thread_time()
                # mongod's ingress limiter decides right after reading, before parsing: so
                # does this one, once the handshake has told control connections apart.
                peek = None
                if conn.record.handshake is not None and not conn.control:
                    peek = peek_request(header, payload)
                if peek is not None:
                    state.cpu_seconds += time.thread_time() - started
                    early = self._decide_early(state, conn, peek)
                    started = time.thread_time()
                    if isinstance(early, dict):
                        state.cpu_seconds += time.thread_time() - started
                        if peek.more_to_come:
                            continue  # a rejected fire-and-forget request gets no reply
                        writer.write(
                            pack_reply(peek.as_request(header.request_id), early, self._next_id())
                        )
                        await writer.drain()
                        continue
                    admission = early
                if compressed_size(header, payload) > _PARSE_IN_WORKER_BYTES or (
                    header.length > _PARSE_IN_WORKER_BYTES
                ):  # inflating and decoding megabytes would stall every other connection
                    request = await self._parse_in_worker(header, payload)
                else:
                    request = parse_request(header, payload)
                del payload
            except WireError as exc:
                log.warning(
                    "%s: closing connection %d from %s: %s",
                    state.member.address,
                    conn.connection_id,
                    conn.record.remote,
                    exc,
                )
                return
            state.cpu_seconds += time.thread_time() - started
            response_to = None
            while True:
                try:
                    reply = await self._handle(state, conn, request, admission, reader)
                except _Close:
                    return
                except Exception as exc:
                    log.exception(
                        "%s: handling %r failed", state.member.address, request.command_name
                    )
                    reply = _internal_error(exc)
                if request.more_to_come:
                    break
                streams = _streams_on(request, reply)
                started = time.thread_time()
                request_id = self._next_id()
                try:
                    data = pack_reply(
                        request, reply, request_id, more_to_come=streams, response_to=response_to
                    )
                except Exception as exc:  # e.g. a reply that is not BSON-encodable
                    log.exception("%s: packing the reply failed", state.member.address)
                    streams = False
                    data = pack_reply(request, _internal_error(exc), request_id)
                state.cpu_seconds += time.thread_time() - started
                writer.write(data)
                await writer.drain()
                if not streams:
                    break
                # An exhaust getMore: the next batch goes out unasked, answering this reply,
                # until the cursor is exhausted or a batch fails (as mongod streams them); the
                # continuation is no new request, so the limiter does not see it.
                response_to = request_id
                admission = _ADMITTED

    async def _parse_in_worker(self, header: Header, payload: bytearray) -> Request:
        """Parse a large message on the single parser thread (one at a time, bounding memory)."""
        if self._parser is None:
            self._parser = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="embedded-server-parser"
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._parser, parse_request, header, payload)

    def _next_id(self) -> int:
        request_id = self._next_request_id
        self._next_request_id += 1
        return request_id

    def _decide_early(
        self, state: MemberState, conn: ConnectionState, peek: Peek
    ) -> Union[dict[str, Any], str]:
        """The request limiter's decision on a message not yet decoded: the 462 reply, or
        ``_ADMITTED`` (admitted or exempt), or ``_QUEUED`` (wait in the 9.0 queue once the
        body, with its maxTimeMS, is decoded)."""
        name = canonical_command_name(peek.command_name)
        counters = state.stats.command(name)
        counters.received += 1  # counted before the decision, as on the late path
        conn.record.commands += 1
        decision = self._first_decision(state, conn, name)
        if decision is None:
            return _QUEUED
        if decision:
            return _ADMITTED
        state.requests += 1
        counters.rejected += 1
        reply = rate_limited_reply(
            state.parameters.allow_retries, state.profile.no_writes_performed
        )
        self._decorate(state, reply, counters)
        return reply

    def _first_decision(
        self, state: MemberState, conn: ConnectionState, name: str
    ) -> Optional[bool]:
        """The request limiter's verdict: admitted or exempt (True), rejected (False), or None:
        the request must wait in the queue."""
        limiter = state.request_limiter
        if not limiter.settings.enabled:
            return True
        if self._exempt_from_limiter(state, conn, name):
            limiter.record_exempt()
            return True
        return limiter.try_admit()

    async def _wait_in_queue(
        self,
        state: MemberState,
        request: Request,
        reader: Optional[asyncio.StreamReader],
    ) -> Optional[dict[str, Any]]:
        """Wait for a token (9.0 queue); interrupted by the request's maxTimeMS (the reply is
        MaxTimeMSExpired) or by the client closing the connection (``_Close``)."""
        max_time = request.body.get("maxTimeMS")
        timeout = (
            max_time / 1000.0
            if isinstance(max_time, (int, float))
            and not isinstance(max_time, bool)
            and max_time > 0
            else None
        )
        watcher = None if reader is None else asyncio.ensure_future(_client_gone(reader))
        try:
            admitted = await state.request_limiter.wait(timeout, watcher)
        finally:
            if watcher is not None:
                watcher.cancel()
        if admitted:
            return None
        if watcher is not None and watcher.done() and not watcher.cancelled():
            state.queue_interrupted_by_disconnect += 1
            raise _Close
        state.queue_interrupted_by_max_time += 1
        return {
            "ok": 0.0,
            "errmsg": "operation exceeded time limit",
            "code": 50,
            "codeName": "MaxTimeMSExpired",
        }

    async def _handle(
        self,
        state: MemberState,
        conn: ConnectionState,
        request: Request,
        admission: str = _PENDING,
        reader: Optional[asyncio.StreamReader] = None,
    ) -> dict[str, Any]:
        started = time.thread_time()
        state.requests += 1
        name = canonical_command_name(request.command_name)
        if name in HELLO_COMMANDS and conn.record.handshake is None:
            self._record_handshake(state, conn, request.body)
        counters = None if conn.control else state.stats.command(name)
        if counters is not None and admission == _PENDING:  # else counted by _decide_early
            counters.received += 1
            conn.record.commands += 1
        reply: Optional[dict[str, Any]] = None
        action: Optional[FailAction] = None
        if not conn.control:
            if admission == _PENDING:
                decision = self._first_decision(state, conn, name)
                if decision is None:
                    admission = _QUEUED
                elif not decision:
                    reply = rate_limited_reply(
                        state.parameters.allow_retries, state.profile.no_writes_performed
                    )
                    assert counters is not None
                    counters.rejected += 1
            if admission == _QUEUED:
                state.cpu_seconds += time.thread_time() - started
                reply = await self._wait_in_queue(state, request, reader)
                started = time.thread_time()
            operations = state.operation_limiter
            if (
                reply is None
                and operations.settings.enabled
                and name not in RATE_LIMIT_EXEMPT
                and not operations.try_admit()
            ):
                reply = operation_limited_reply()
                assert counters is not None
                counters.rejected += 1
            if reply is None and name != "configureFailPoint":
                action = state.fail_command.evaluate(
                    name,
                    conn.app_name,
                    namespace=_namespace(request),
                    thread_name=f"conn{conn.connection_id}",
                )
        if action is not None:
            if action.block_ms:
                state.cpu_seconds += time.thread_time() - started
                await asyncio.sleep(action.block_ms / 1000.0)
                started = time.thread_time()
            if action.close_connection:
                self._note_injected_error(state, conn, request)
                if counters is not None:
                    counters.failed += 1
                raise _Close
            if action.error_code is not None:
                self._note_injected_error(state, conn, request)
                reply = error_reply(
                    action.error_code,
                    action.errmsg,
                    name=name,
                    body=request.body,
                    labels=action.error_labels,
                )
        if (
            reply is None
            and state.shard is not None
            and not conn.control
            and name not in ADMIN_COMMANDS
            and name not in SHARD_LOCAL_COMMANDS
        ):
            hop = state.stats.shard_hop
            assert hop is not None
            state.cpu_seconds += time.thread_time() - started
            reply = await state.shard.forward(hop)
            started = time.thread_time()
        if reply is None:
            wait = 0.0 if name in ADMIN_COMMANDS else self._wait_seconds(request)
            if wait > 0:
                state.cpu_seconds += time.thread_time() - started
                await asyncio.sleep(wait)
                started = time.thread_time()
            write_action = self._transactional_write_action(state, conn, request, name)
            if write_action is not None and write_action.error_code is not None:
                self._note_injected_error(state, conn, request)
                if write_action.close_connection:
                    if counters is not None:
                        counters.failed += 1
                    raise _Close
                reply = error_reply(
                    write_action.error_code,
                    TRANSACTIONAL_WRITE_ERRMSG,
                    name=name,
                    body=request.body,
                )
            else:
                reply = self._execute(state, conn, request, name)
                if write_action is not None and write_action.close_connection:
                    if counters is not None:
                        counters.failed += 1
                    raise _Close  # the write is applied; the client sees a network error
            if action is not None and action.write_concern_error is not None:
                _attach_write_concern_error(reply, action.write_concern_error, name, request.body)
            elif "writeConcernError" not in reply and self.kind == "replicaset":
                self._check_write_concern(reply, name, request.body)
        self._decorate(state, reply, counters)
        state.cpu_seconds += time.thread_time() - started
        return reply

    def _exempt_from_limiter(self, state: MemberState, conn: ConnectionState, name: str) -> bool:
        """Whether the ingress request limiter lets this request through uncounted."""
        if name in RATE_LIMIT_EXEMPT and (not self.limit_hello or name not in HELLO_COMMANDS):
            return True
        params = state.parameters
        if conn.peer_host is not None and _in_networks(conn.peer_host, params.exempt_networks):
            return True
        prefixes = params.exempt_app_prefixes
        if prefixes:
            names = [n for n in (conn.app_name, _driver_name(conn)) if n]
            if any(n.startswith(p) for n in names for p in prefixes):
                return True
        return False

    def _check_write_concern(self, reply: dict[str, Any], name: str, body: dict[str, Any]) -> None:
        """Report a ``w`` the replica set cannot satisfy, after the write, as mongod does."""
        if name not in ("commitTransaction", "abortTransaction") and (
            not self.engine.is_write(name, body) or "autocommit" in body
        ):
            return
        error = unsatisfiable_write_concern(body, data_bearing=len(self.roles))
        if error is not None:
            _attach_write_concern_error(reply, error, name, body)

    def _context(self, state: MemberState, conn: ConnectionState) -> CommandContext:
        """What the engine needs to know about the member and connection of a command."""
        return CommandContext(
            connection_id=conn.connection_id,
            app_name=conn.app_name,
            role=state.member.role,
            max_wire_version=self.max_wire_version,
            member_index=state.member.index,
        )

    def _note_injected_error(
        self, state: MemberState, conn: ConnectionState, request: Request
    ) -> None:
        """Tell the engine a fail point answered this command before it ran."""
        try:
            self.engine.note_injected_error(request.db, request.body, self._context(state, conn))
        except Exception:  # never let bookkeeping turn an injected error into a crash
            log.exception("noting the injected error of %r failed", request.command_name)

    def _wait_seconds(self, request: Request) -> float:
        """How long mongod would take before answering: ``$where`` sleeps, change-stream awaits."""
        try:
            delay = self.engine.delay_seconds(request.db, request.body)
            return delay + self.engine.await_seconds(request.body)
        except CommandError:  # e.g. unsupported $where code: executing reports the same error
            return 0.0
        except Exception:
            log.exception("computing the delay of %r failed", request.command_name)
            return 0.0

    def _transactional_write_action(
        self, state: MemberState, conn: ConnectionState, request: Request, name: str
    ) -> Optional[TransactionalWriteAction]:
        """Evaluate ``onPrimaryTransactionalWrite`` for a first-time retryable write.

        A retry of an applied write is answered from the session's record without reaching the
        write path, so it neither fires nor moves the fail point's counters.
        """
        point = state.transactional_write
        body = request.body
        if (
            not point.active
            or conn.control
            or state.member.role not in ("primary", "mongos")
            or name not in _TRANSACTIONAL_WRITES
            or body.get("txnNumber") is None
            or "autocommit" in body
        ):
            return None
        lsid = body.get("lsid")
        txn_number = body.get("txnNumber")
        for record in self.engine.txn_stats():
            if record["txnNumber"] == txn_number and record["lsid"] == lsid and record["applied"]:
                return None
        return point.evaluate()

    def _record_handshake(
        self, state: MemberState, conn: ConnectionState, body: dict[str, Any]
    ) -> None:
        handshake = {k: v for k, v in body.items() if k != "$db"}
        conn.record.handshake = handshake
        client = body.get("client")
        application = client.get("application") if isinstance(client, Mapping) else None
        app_name = application.get("name") if isinstance(application, Mapping) else None
        conn.record.app_name = app_name if isinstance(app_name, str) else None
        offered = body.get("compression")
        if isinstance(offered, list):
            conn.compression = [c for c in offered if c in SUPPORTED_COMPRESSORS]
        if conn.record.app_name == CONTROL_APP_NAME:
            conn.control = True
            state.stats.connections.pop(conn.connection_id, None)

    def _execute(
        self, state: MemberState, conn: ConnectionState, request: Request, name: str
    ) -> dict[str, Any]:
        body = request.body
        try:
            if name in ADMIN_ONLY and request.db != "admin":
                raise CommandError(13, f"{name} may only be run against the admin database.")
            handler = ADMIN_COMMANDS.get(name)
            if handler is not None:
                return handler(state, conn, request.db, body)
            self._check_role(state, request, name)
            ctx = self._context(state, conn)
            return self.engine.execute(request.db, body, ctx)
        except CommandError as exc:
            reply = exc.to_reply()
            if not exc.labels:
                labels = mongod_labels(exc.code, name, body)
                if labels:
                    reply["errorLabels"] = labels
            return reply
        except Exception as exc:
            log.exception("%s: command %r failed", state.member.address, name)
            return _internal_error(exc)

    def _check_role(self, state: MemberState, request: Request, name: str) -> None:
        if state.member.role != "secondary" or name in SECONDARY_ALWAYS_OK:
            return
        # Since 5.0 a secondary runs the read part of $out/$merge and sends the writes to the
        # primary; only other writes are refused.
        if self.engine.is_write(name, request.body) and not (
            name == "aggregate" and version_array(self.server_version) >= [5, 0, 0, 0]
        ):
            raise CommandError(10107, "not primary", "NotWritablePrimary")
        read_pref = request.body.get("$readPreference")
        mode = read_pref.get("mode") if isinstance(read_pref, Mapping) else None
        secondary_ok = (mode not in (None, "primary")) or bool(
            request.query_flags & _SECONDARY_OK_FLAG
        )
        if not secondary_ok:
            raise CommandError(
                13435, "not primary and secondaryOk=false", "NotPrimaryNoSecondaryOk"
            )

    def _decorate(
        self, state: MemberState, reply: dict[str, Any], counters: Optional[CommandCounters]
    ) -> None:
        if not reply.get("ok"):
            if counters is not None:
                counters.failed += 1
            backoff = state.parameters.base_backoff_ms
            if backoff > 0 and "SystemOverloadedError" in reply.get("errorLabels", ()):
                reply["baseBackoffMS"] = backoff
        elif isinstance(reply.get("writeConcernError"), dict):
            # 9.0 puts the hint of an overloaded write concern inside writeConcernError.
            backoff = state.parameters.base_backoff_ms
            if backoff > 0 and "SystemOverloadedError" in reply.get("errorLabels", ()):
                reply["writeConcernError"]["baseBackoffMS"] = backoff
        topology = state.topology
        if topology.gossips_cluster_time:
            now = topology.clock.tick()
            reply["$clusterTime"] = topology.clock.gossip(now)
            reply["operationTime"] = now


async def _read_payload(reader: asyncio.StreamReader, size: int) -> bytearray:
    """Read ``size`` bytes in slices into one buffer (``readexactly`` would hold two copies)."""
    buffer = bytearray()
    while len(buffer) < size:
        chunk = await reader.read(min(size - len(buffer), _READ_SLICE))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", size)
        buffer += chunk
    return buffer


def _in_networks(host: str, networks: list[Any]) -> bool:
    """Whether the IP address ``host`` lies in one of ``networks``."""
    if not networks:
        return False
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    candidates: list[Any] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)  # a dual-stack socket's IPv4 client
    return any(a.version == net.version and a in net for a in candidates for net in networks)


def _driver_name(conn: ConnectionState) -> Optional[str]:
    """``client.driver.name`` of the connection's handshake."""
    handshake = conn.record.handshake
    client = handshake.get("client") if isinstance(handshake, Mapping) else None
    driver = client.get("driver") if isinstance(client, Mapping) else None
    name = driver.get("name") if isinstance(driver, Mapping) else None
    return name if isinstance(name, str) else None


def _namespace(request: Request) -> str:
    """The command's namespace as a fail point's ``namespace`` sees it: ``db.collection``."""
    target = next(iter(request.body.values()), None)
    return f"{request.db}.{target}" if isinstance(target, str) else f"{request.db}.$cmd"


def _internal_error(exc: Exception) -> dict[str, Any]:
    """The reply for an unexpected exception: InternalError, no labels."""
    return {
        "ok": 0.0,
        "errmsg": f"{type(exc).__name__}: {exc}",
        "code": 1,
        "codeName": "InternalError",
    }


def _attach_write_concern_error(
    reply: dict[str, Any], wce: Mapping[str, Any], name: str, body: Mapping[str, Any]
) -> None:
    """Add the fail point's ``writeConcernError`` to a successful reply, with mongod's labels."""
    if not reply.get("ok"):
        return
    error = {k: v for k, v in wce.items() if k != "errorLabels"}
    reply["writeConcernError"] = error
    labels = wce.get("errorLabels")
    if labels is None:
        code = error.get("code")
        labels = (
            mongod_labels(int(code), name, body, write_concern_error=True)
            if isinstance(code, int) and is_retryable_write(name, body)
            else []
        )
    if labels:
        existing = list(reply.get("errorLabels", []))
        reply["errorLabels"] = existing + [x for x in labels if x not in existing]


def _streams_on(request: Request, reply: Mapping[str, Any]) -> bool:
    """Whether ``reply`` to ``request`` continues an exhaust stream (more replies follow).

    An OP_MSG getMore sent with ``exhaustAllowed`` whose batch succeeded and left the cursor
    open: mongod then sends the following batches with ``moreToCome`` set, unasked.
    """
    if not request.exhaust_allowed or request.legacy or request.command_name != "getMore":
        return False
    cursor = reply.get("cursor")
    return reply.get("ok") == 1 and isinstance(cursor, Mapping) and cursor.get("id", 0) != 0
