"""Server-level commands the transport answers itself; every other command goes to the engine.

``ADMIN_COMMANDS`` is an explicit dispatch table. ``RATE_LIMIT_EXEMPT`` lists the commands the
ingress request limiter never counts as attempts (they are counted as exempted): the control
commands tests use to configure and read the server, and the hellos unless the deployment runs
with ``limit_hello``.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
import time
from collections.abc import Mapping
from typing import Any, Callable

from backpressure.testing.server.cluster.member import ConnectionState, MemberState
from backpressure.testing.server.cluster.topology import (
    MAX_BSON_OBJECT_SIZE,
    SET_NAME,
    version_array,
)
from backpressure.testing.server.control.failpoints import (
    FAIL_COMMAND,
    FAIL_POINTS,
    ON_PRIMARY_TRANSACTIONAL_WRITE,
    FailCommandConfig,
)
from backpressure.testing.server.control.parameters import SHARD_PREFIX
from backpressure.testing.server.errors import CommandError

__all__ = [
    "ADMIN_COMMANDS",
    "ADMIN_ONLY",
    "HELLO_COMMANDS",
    "RATE_LIMIT_EXEMPT",
    "SECONDARY_ALWAYS_OK",
    "AdminHandler",
]

AdminHandler = Callable[[MemberState, ConnectionState, str, dict[str, Any]], dict[str, Any]]
"""A server-level command: member, connection, database, body -> ``ok: 1`` reply."""

HELLO_COMMANDS = frozenset({"hello", "isMaster", "ismaster"})
"""The handshake/monitoring commands."""

RATE_LIMIT_EXEMPT = HELLO_COMMANDS | frozenset(
    {
        "configureFailPoint",
        "setParameter",
        "getParameter",
        "serverStatus",
        "backpressureStats",
        "backpressureReset",
    }
)
"""Commands the ingress request limiter lets through (counted as ``exemptedAdmissions``)."""

ADMIN_ONLY = frozenset(
    {
        "configureFailPoint",
        "setParameter",
        "getParameter",
        "getCmdLineOpts",
        "backpressureStats",
        "backpressureReset",
        "replSetGetStatus",
        "listShards",
    }
)
"""Commands that must run on the ``admin`` database."""

_BODY_META = frozenset({"$db", "lsid", "$clusterTime", "$readPreference", "comment", "apiVersion"})


def _hello(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    name = next(iter(body))
    reply = member.topology.hello(
        member.member,
        connection_id=conn.connection_id,
        legacy=name != "hello",
        compression=conn.compression,
    )
    if body.get("loadBalanced") is True and member.member.role == "mongos":
        # A mongos behind a load balancer names its service: the driver then runs in
        # load-balanced mode (cursors and transactions pinned to a connection).
        reply["serviceId"] = member.member.service_id
    return reply


def _ping(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    return {"ok": 1.0}


def _build_info(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    version = member.topology.server_version
    return {
        "version": version,
        "versionArray": version_array(version),
        "gitVersion": "0" * 40,
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "none",
        "sysInfo": "deprecated",
        "bits": 64,
        "debug": False,
        "maxBsonObjectSize": MAX_BSON_OBJECT_SIZE,
        "storageEngines": ["wiredTiger"],
        "ok": 1.0,
    }


def _server_status(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    uptime = time.monotonic() - member.started
    open_connections = sum(1 for c in member.stats.connections.values() if c.open)
    reply: dict[str, Any] = {
        "host": member.member.address,
        "version": member.topology.server_version,
        "process": "mongos" if member.member.role == "mongos" else "mongod",
        "pid": os.getpid(),
        "uptime": float(int(uptime)),
        "uptimeMillis": int(uptime * 1000),
        "localTime": datetime.datetime.now(tz=datetime.timezone.utc),
        "connections": {
            "current": open_connections,
            "available": 100_000 - open_connections,
            "totalCreated": member.total_connections,
            "rejected": member.stats.connections_rejected,
            "queuedForEstablishment": member.connection_limiter.queued,
            "establishmentRateLimit": {
                "rejected": member.connection_limiter.rejected,
                "exempted": member.connection_limiter.exempted,
                "interruptedDueToClientDisconnect": member.establishment_interrupted,
            },
        },
        "queues": {
            "ingressSessionEstablishment": {
                "averageTimeQueuedMicros": (
                    member.establishment_queued_micros // member.establishment_queued
                    if member.establishment_queued
                    else 0
                ),
            },
        },
        "network": {
            "ingressRequestRateLimiter": member.request_limiter.status(),
            "ingressConnectionEstablishmentRateLimiter": member.connection_limiter.status(),
        },
        "storageEngine": {"name": "wiredTiger", "supportsCommittedReads": True},
        # mongod's per-command counters leave out the requests its ingress limiter rejected
        "metrics": {
            "commands": {
                name: {"total": c.received - c.rejected, "failed": c.failed - c.rejected}
                for name, c in sorted(member.stats.commands.items())
            }
        },
        "backpressure": {
            "requests": member.requests,
            "handlerCpuSeconds": member.cpu_seconds,
            "processCpuSeconds": time.process_time(),
        },
        "ok": 1.0,
    }
    if member.profile.request_queue:
        reply["backpressure"]["ingressRequestQueue"] = {
            "waiting": member.request_limiter.queued,
            "interruptedByMaxTimeMS": member.queue_interrupted_by_max_time,
            "interruptedByClientDisconnect": member.queue_interrupted_by_disconnect,
        }
    if member.profile.operation_rate_limiter:
        reply["backpressure"]["operationRateLimiter"] = member.operation_limiter.status()
    if member.shard is not None:
        reply["backpressure"]["shard"] = member.shard.status()
    if member.topology.kind == "replicaset":
        hello = member.topology.hello(member.member, connection_id=0, legacy=False)
        reply["repl"] = {
            k: hello[k] for k in ("setName", "hosts", "me", "secondary", "primary") if k in hello
        }
        reply["repl"]["isWritablePrimary"] = hello["isWritablePrimary"]
    return reply


def _get_parameter(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    params = member.parameters
    shard = member.shard
    if body.get("getParameter") == "*":
        reply = params.all()
        if shard is not None:
            reply.update(shard.parameters.values)
        reply["featureCompatibilityVersion"] = _fcv(member)
        reply["ok"] = 1.0
        return reply
    reply = {}
    for name in body:
        if name == "getParameter" or name in _BODY_META:
            continue
        if name == "featureCompatibilityVersion":
            reply[name] = _fcv(member)
            continue
        try:
            if shard is not None and name.startswith(SHARD_PREFIX):
                reply[name] = shard.parameters.values[name]
            else:
                reply[name] = params.get(name)
        except KeyError:
            raise CommandError(72, f"no option found to get: {name}") from None
    if not reply:
        raise CommandError(72, "no option found to get")
    reply["ok"] = 1.0
    return reply


def _fcv(member: MemberState) -> dict[str, str]:
    major, minor = version_array(member.topology.server_version)[:2]
    return {"version": f"{major}.{minor}"}


def _set_parameter(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    changes = {k: v for k, v in body.items() if k != "setParameter" and k not in _BODY_META}
    if not changes:
        raise CommandError(2, "no option found to set, use help:true to see options")
    shard = member.shard
    shard_changes = {}
    if shard is not None:  # the shard's parameters, set through any mongos
        shard_changes = {k: v for k, v in changes.items() if k.startswith(SHARD_PREFIX)}
        changes = {k: v for k, v in changes.items() if k not in shard_changes}
        for name, value in shard_changes.items():  # validate all before applying any
            shard.parameters.validate(name, value)
    previous = member.parameters.update(changes) if changes else {}
    if shard is not None and shard_changes:
        previous.update(shard.parameters.update(shard_changes))
        shard.apply_parameters()
    member.apply_parameters()
    reply: dict[str, Any] = {}
    if len(previous) == 1:
        reply["was"] = next(iter(previous.values()))
    reply["ok"] = 1.0
    return reply


def _cmd_line_opts(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    parsed: dict[str, Any] = {
        "net": {"bindIp": member.member.host, "port": member.member.port},
        "setParameter": {"enableTestCommands": "1"},
    }
    if member.topology.kind == "replicaset":
        parsed["replication"] = {"replSet": SET_NAME}
    process = "mongos" if member.member.role == "mongos" else "mongod"
    return {"argv": [process, "--port", str(member.member.port)], "parsed": parsed, "ok": 1.0}


def _host_info(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    return {
        "system": {
            "currentTime": datetime.datetime.now(tz=datetime.timezone.utc),
            "hostname": socket.gethostname(),
            "cpuAddrSize": 64,
            "numCores": os.cpu_count() or 1,
            "cpuArch": platform.machine(),
        },
        "os": {"type": platform.system(), "name": platform.platform(), "version": ""},
        "extra": {},
        "ok": 1.0,
    }


def _whatsmyuri(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    return {"you": conn.record.remote, "ok": 1.0}


def _connection_status(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    return {"authInfo": {"authenticatedUsers": [], "authenticatedUserRoles": []}, "ok": 1.0}


def _configure_fail_point(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    name = body.get("configureFailPoint")
    if name == FAIL_COMMAND:
        count = member.fail_command.configure(FailCommandConfig.parse(body))
    elif name == ON_PRIMARY_TRANSACTIONAL_WRITE:
        count = member.transactional_write.configure(body)
    else:
        known = ", ".join(repr(n) for n in FAIL_POINTS)
        raise CommandError(2, f"Cannot find fail point named {name!r}: only {known} exist")
    return {"count": count, "ok": 1.0}


def _backpressure_stats(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    reply = member.stats.to_document(member.engine.txn_stats())
    reply["member"] = member.member.address
    reply["role"] = member.member.role
    if member.shard is not None:
        reply["shardHop"]["shard"] = member.shard.status()
    reply["ok"] = 1.0
    if body.get("reset"):
        member.stats.reset()
        if member.shard is not None:
            member.shard.reset_counters()
    return reply


def _backpressure_reset(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    if body.get("engine", True):
        member.engine.reset()
    member.reset()
    return {"ok": 1.0}


def _get_log(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    if body.get("getLog") == "*":
        return {"names": ["global", "startupWarnings"], "ok": 1.0}
    return {"totalLinesWritten": 0, "log": [], "ok": 1.0}


def _repl_set_get_status(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    topology = member.topology
    if topology.kind != "replicaset":
        raise CommandError(76, "not running with --replSet", "NoReplicationEnabled")
    members = [
        {
            "_id": m.index,
            "name": m.address,
            "health": 1.0,
            "state": 1 if m.role == "primary" else 2,
            "stateStr": m.role.upper(),
            "self": m.index == member.member.index,
        }
        for m in topology.members
    ]
    return {"set": SET_NAME, "myState": 1 if member.member.role == "primary" else 2,
            "members": members, "ok": 1.0}  # fmt: skip


def _list_shards(
    member: MemberState, conn: ConnectionState, db: str, body: dict[str, Any]
) -> dict[str, Any]:
    if member.member.role != "mongos":
        raise CommandError(59, "no such command: 'listShards'", "CommandNotFound")
    return {"shards": [{"_id": "shard0", "host": "shard0/embedded", "state": 1}], "ok": 1.0}


ADMIN_COMMANDS: Mapping[str, AdminHandler] = {
    "hello": _hello,
    "isMaster": _hello,
    "ismaster": _hello,
    "ping": _ping,
    "buildInfo": _build_info,
    "buildinfo": _build_info,
    "serverStatus": _server_status,
    "getParameter": _get_parameter,
    "setParameter": _set_parameter,
    "getCmdLineOpts": _cmd_line_opts,
    "hostInfo": _host_info,
    "whatsmyuri": _whatsmyuri,
    "connectionStatus": _connection_status,
    "configureFailPoint": _configure_fail_point,
    "backpressureStats": _backpressure_stats,
    "backpressureReset": _backpressure_reset,
    "getLog": _get_log,
    "replSetGetStatus": _repl_set_get_status,
    "listShards": _list_shards,
}
"""Commands answered by the transport, not the engine."""

SECONDARY_ALWAYS_OK = frozenset(ADMIN_COMMANDS) | frozenset(
    {"getMore", "killCursors", "endSessions", "killAllSessions", "killSessions", "abortTransaction"}
)
"""Commands a secondary serves without a secondary-ok read preference."""
