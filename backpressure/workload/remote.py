"""A deployment the user names (``--uri``): the demo and the fleet benchmark against it.

The same client processes and workloads run against any deployment instead of the embedded
server.  Two safeguards:

* :func:`check_uri` refuses a connection string naming a host that is not a loopback address
  (``localhost``, ``127.0.0.0/8``, ``::1``, a Unix socket) unless the caller allows it (the
  ``--allow-remote`` flag): a run loads the deployment as hard as it can.
* :class:`RemoteDeployment` changes no server parameter unless asked (``--set-limiter``).
  Asked, it sets mongod's ingress request rate limiter (``ingressRequestRateLimiterEnabled``,
  ``ingressRequestAdmissionRatePerSec``, ``ingressRequestAdmissionBurstCapacitySecs``) with
  ``setParameter`` at each capacity step, on the server the client's commands reach (the
  primary of a replica set, a mongos), and puts back the values it read when it started.
  Unasked, the capacity steps are not applied: the deployment admits what it admits.

The workloads write only to their own databases (``backpressure_fleet``, ``backpressure_demo``),
dropping and refilling their collections before each run.  The commands the deployment received
come from ``serverStatus``: ``metrics.commands.<name>.total``, which counts the commands mongod
admitted (a request its ingress limiter rejected is counted in
``network.ingressRequestRateLimiter.rejectedAdmissions`` only, without its command name).
"""

from __future__ import annotations

import argparse
import ipaddress
import urllib.parse
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Callable, Optional

from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.uri_parser import parse_uri

__all__ = [
    "ALLOW_REMOTE_FLAG",
    "LIMITER_PARAMETERS",
    "RemoteDeployment",
    "add_uri_arguments",
    "check_uri",
    "check_uri_arguments",
    "deployment_factory",
    "deployment_label",
    "non_loopback_hosts",
    "redact_uri",
    "untouched_note",
]

ALLOW_REMOTE_FLAG = "--allow-remote"
"""The command-line flag that lets a run target a host that is not a loopback address."""

LIMITER_PARAMETERS = (
    "ingressRequestRateLimiterEnabled",
    "ingressRequestAdmissionRatePerSec",
    "ingressRequestAdmissionBurstCapacitySecs",
)
"""mongod's ingress request rate limiter parameters ``--set-limiter`` sets (and restores)."""

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
_SRV = "mongodb+srv://"


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (a name, an IP address or a socket path) is this machine."""
    if host.endswith(".sock") or host.startswith("/"):
        return True
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def non_loopback_hosts(uri: str) -> list[str]:
    """The hosts of ``uri`` that are not loopback addresses, as ``host:port`` (an SRV name as
    given: what it resolves to is not looked up).

    Raises:
        ValueError: ``uri`` is not a MongoDB connection string.
    """
    if uri.startswith(_SRV):
        rest = uri[len(_SRV) :]
        host = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
        if not host:
            raise ValueError(f"no host in {redact_uri(uri)!r}")
        return [host]
    try:
        parsed = parse_uri(uri, validate=True, warn=False)
    except (PyMongoError, ValueError) as exc:
        raise ValueError(f"not a MongoDB connection string ({exc})") from None
    return [f"{host}:{port}" for host, port in parsed["nodelist"] if not _is_loopback(host)]


def check_uri(uri: str, allow_remote: bool) -> None:
    """Refuse ``uri`` when it names a host that is not a loopback address and ``allow_remote``
    is False.

    Raises:
        ValueError: the message names the hosts and the flag (:data:`ALLOW_REMOTE_FLAG`).
    """
    remote = non_loopback_hosts(uri)
    if remote and not allow_remote:
        raise ValueError(
            f"{', '.join(remote)} is not a loopback address; a run loads the deployment as "
            f"hard as it can: pass {ALLOW_REMOTE_FLAG} to run against it"
        )


def redact_uri(uri: str) -> str:
    """``uri`` without its password (for reports and messages)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return uri
    credentials, _, hosts = rest.partition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{urllib.parse.unquote(user)}:***@{hosts}"


def _commands(status: dict[str, Any]) -> dict[str, int]:
    """``metrics.commands.<name>.total`` of a serverStatus reply."""
    found: dict[str, int] = {}
    for name, counters in status.get("metrics", {}).get("commands", {}).items():
        if isinstance(counters, dict) and "total" in counters:
            found[name] = int(counters["total"])
    return found


def _rejected(status: dict[str, Any]) -> int:
    """The requests the ingress request limiter rejected, from a serverStatus reply."""
    limiter = status.get("network", {}).get("ingressRequestRateLimiter", {})
    return int(limiter.get("rejectedAdmissions", 0))


class RemoteDeployment:
    """A :class:`~backpressure.workload.driver.LoadTarget` for a deployment given by its URI.

    Use it as a context manager: entering connects (and, with ``set_limiter``, reads the
    limiter parameters to restore), leaving restores them and disconnects.
    """

    def __init__(self, uri: str, *, set_limiter: bool = False, timeout_ms: int = 10_000) -> None:
        """Target ``uri``; with ``set_limiter``, apply the capacity steps with setParameter."""
        self._uri = uri
        self.set_limiter = set_limiter
        """Whether the capacity steps set the server's ingress request rate limiter."""
        self._timeout_ms = timeout_ms
        self._client: Optional[MongoClient[dict[str, Any]]] = None
        self._saved: Optional[dict[str, Any]] = None
        self._baseline: dict[str, int] = {}
        self._rejected_baseline = 0
        self.steps_not_applied = 0
        """Capacity steps left out because ``set_limiter`` is False."""

    @property
    def uri(self) -> str:
        """The connection string the client processes use."""
        return self._uri

    def _admin(self) -> Any:
        if self._client is None:
            raise RuntimeError("RemoteDeployment is used outside its with block")
        return self._client.admin

    def __enter__(self) -> RemoteDeployment:
        """Connect; with ``set_limiter``, read the limiter parameters (to put them back)."""
        self._client = MongoClient(self._uri, serverSelectionTimeoutMS=self._timeout_ms)
        try:
            self._admin().command("ping")
            if self.set_limiter:
                self._saved = self._read_limiter()
        except BaseException:
            self._client.close()
            self._client = None
            raise
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        """Put the limiter parameters back (when they were changed) and disconnect."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if self._saved is not None:
                client.admin.command({"setParameter": 1, **self._saved})
        finally:
            client.close()

    def _read_limiter(self) -> dict[str, Any]:
        """The current values of :data:`LIMITER_PARAMETERS`."""
        query: dict[str, Any] = {"getParameter": 1, **dict.fromkeys(LIMITER_PARAMETERS, 1)}
        try:
            reply = self._admin().command(query)
        except OperationFailure as exc:
            raise RuntimeError(
                "--set-limiter: the deployment has no ingress request rate limiter "
                f"(mongod 8.2 or later): getParameter answered {exc}"
            ) from None
        missing = [name for name in LIMITER_PARAMETERS if name not in reply]
        if missing:
            raise RuntimeError(
                f"--set-limiter: the deployment does not know {', '.join(missing)} "
                "(mongod 8.2 or later has them)"
            )
        return {name: reply[name] for name in LIMITER_PARAMETERS}

    def set_rate_limit(
        self, rate: float, burst_seconds: float = 1.0, *, member: Any = None
    ) -> None:
        """With ``set_limiter``: admit ``rate`` requests/s (rounded to an integer >= 1, as
        mongod takes it) with a bucket of ``burst_seconds`` of them.  Otherwise nothing."""
        if not self.set_limiter:
            self.steps_not_applied += 1
            return
        self._admin().command(
            {
                "setParameter": 1,
                "ingressRequestAdmissionRatePerSec": max(1, round(rate)),
                "ingressRequestAdmissionBurstCapacitySecs": float(burst_seconds),
                "ingressRequestRateLimiterEnabled": True,
            }
        )

    def disable_rate_limit(self, member: Any = None) -> None:
        """With ``set_limiter``: switch the limiter off until the next step.  Otherwise nothing
        (the deployment keeps its own settings)."""
        if self.set_limiter:
            self._admin().command({"setParameter": 1, "ingressRequestRateLimiterEnabled": False})

    def stats(self, member: Any = None, reset: bool = False) -> dict[str, Any]:
        """The commands the server admitted since the last ``reset`` (``received`` per command
        name, from ``metrics.commands``), and the requests its limiter rejected."""
        status = self._admin().command("serverStatus")
        commands = _commands(status)
        rejected = _rejected(status)
        if reset:
            self._baseline = commands
            self._rejected_baseline = rejected
        return {
            "commands": {
                name: {"received": total - self._baseline.get(name, 0)}
                for name, total in commands.items()
            },
            "rejectedAdmissions": rejected - self._rejected_baseline,
        }

    def reset(self) -> None:
        """Nothing: the workloads drop and refill their own collections before each run."""


# -- the command line -------------------------------------------------------------------------


def add_uri_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--uri``, ``--allow-remote`` and ``--set-limiter`` (checked by
    :func:`check_uri_arguments`)."""
    group = parser.add_argument_group("your own deployment (instead of the embedded server)")
    group.add_argument(
        "--uri",
        default=None,
        help="run the same client processes against this deployment (a loopback address "
        f"unless {ALLOW_REMOTE_FLAG}); no server parameter is changed unless --set-limiter",
    )
    group.add_argument(
        ALLOW_REMOTE_FLAG,
        action="store_true",
        help="let --uri name a host that is not a loopback address (a staging deployment)",
    )
    group.add_argument(
        "--set-limiter",
        action="store_true",
        help="with --uri: set mongod's ingress request rate limiter at each capacity step "
        "(setParameter " + ", ".join(LIMITER_PARAMETERS) + ") and restore it afterwards",
    )


def check_uri_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors of the deployment options (exit 2, naming the option)."""
    if args.uri is None:
        for flag, given in (
            (ALLOW_REMOTE_FLAG, args.allow_remote),
            ("--set-limiter", args.set_limiter),
        ):
            if given:
                parser.error(f"argument {flag}: needs --uri")
        return
    try:
        check_uri(args.uri, args.allow_remote)
    except ValueError as exc:
        parser.error(f"argument --uri: {exc}")


def deployment_factory(
    args: argparse.Namespace, embedded: Callable[[], AbstractContextManager[Any]]
) -> Callable[[], AbstractContextManager[Any]]:
    """The deployment ``--uri`` names, or ``embedded`` without it."""
    uri = getattr(args, "uri", None)
    if uri is None:
        return embedded
    set_limiter = bool(getattr(args, "set_limiter", False))
    return lambda: RemoteDeployment(uri, set_limiter=set_limiter)


def deployment_label(args: argparse.Namespace) -> str:
    """What a report says the run was against: the URI without its password, or embedded."""
    uri = getattr(args, "uri", None)
    return "embedded" if uri is None else redact_uri(uri)


def untouched_note(args: argparse.Namespace) -> Optional[str]:
    """The line a run against a deployment without ``--set-limiter`` prints (None otherwise)."""
    if getattr(args, "uri", None) is None or getattr(args, "set_limiter", False):
        return None
    return (
        f"Against {redact_uri(args.uri)}, no server parameter changed (no --set-limiter): the "
        "capacity steps are not applied, so the capacities, goodput shares and physical limit "
        "below are the plan's, not the deployment's."
    )
