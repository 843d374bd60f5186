"""A real Prometheus server on loopback, for tests and pictures of the package's metrics.

``PrometheusServer`` runs the ``prometheus`` binary (Debian's ``prometheus`` package, or any
Prometheus 2.x on the ``PATH``) in a temporary directory, listening on 127.0.0.1, scraping the
targets given every ``interval`` seconds and evaluating the rule files given as often; its HTTP
API is read with :meth:`PrometheusServer.query`, :meth:`~PrometheusServer.query_range` and
:meth:`~PrometheusServer.alerts`. Nothing leaves the machine: there is no Alertmanager.

    with PrometheusServer(["127.0.0.1:8000"], rules=[PROMETHEUS_ALERTS]) as prometheus:
        prometheus.wait_until(lambda: prometheus.query("up") != [], "a first scrape")
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Optional, Union

__all__ = ["PrometheusServer", "PrometheusServerError", "wait_until"]


class PrometheusServerError(RuntimeError):
    """Prometheus is not installed, did not start, or its API answered with an error."""


def _free_port() -> int:
    """A loopback port nobody listens on now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _duration(seconds: float) -> str:
    """Prometheus's duration syntax for ``seconds`` (milliseconds precision)."""
    return f"{round(seconds * 1000)}ms"


class PrometheusServer:
    """A ``prometheus`` process scraping ``targets`` (``host:port`` of /metrics endpoints)."""

    def __init__(
        self,
        targets: Sequence[str],
        *,
        rules: Iterable[Union[str, Path]] = (),
        interval: float = 1.0,
        job: str = "backpressure",
        binary: str = "prometheus",
        start_timeout: float = 60.0,
    ) -> None:
        """Configure the server; nothing runs until :meth:`start` (or ``with``).

        ``rules`` are rule files (alerting or recording) copied into the server's directory;
        ``interval`` is both the scrape and the rule evaluation interval.
        """
        self.targets = list(targets)
        self.rules = [Path(rule) for rule in rules]
        self.interval = interval
        self.job = job
        self.binary = binary
        self.start_timeout = start_timeout
        self.url = ""
        """``http://127.0.0.1:<port>`` once started."""
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._directory: Optional[tempfile.TemporaryDirectory[str]] = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> PrometheusServer:
        """Start Prometheus; return once it is ready to serve queries.

        Raises:
            PrometheusServerError: no ``prometheus`` binary, or it exited or was not ready
                within ``start_timeout`` seconds (its log is in the message).
        """
        executable = shutil.which(self.binary)
        if executable is None:
            raise PrometheusServerError(
                f"{self.binary!r} is not installed (Debian: apt-get install prometheus)"
            )
        self._directory = tempfile.TemporaryDirectory(prefix="backpressure-prometheus-")
        root = Path(self._directory.name)
        rule_files = []
        for number, rule in enumerate(self.rules):
            copy = root / f"rules-{number}-{rule.name}"
            copy.write_bytes(rule.read_bytes())
            rule_files.append(str(copy))
        config = {
            "global": {
                "scrape_interval": _duration(self.interval),
                "scrape_timeout": _duration(self.interval),
                "evaluation_interval": _duration(self.interval),
            },
            "rule_files": rule_files,
            "scrape_configs": [
                {"job_name": self.job, "static_configs": [{"targets": self.targets}]}
            ],
        }
        (root / "prometheus.yml").write_text(json.dumps(config), "utf-8")  # JSON is YAML
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = (root / "prometheus.log").open("wb")
        try:
            self._process = subprocess.Popen(
                [
                    executable,
                    f"--config.file={root / 'prometheus.yml'}",
                    f"--storage.tsdb.path={root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--web.enable-lifecycle",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout
        while not self._ready():
            if self._process.poll() is not None or time.monotonic() > deadline:
                message = f"prometheus did not start: {self.log()}"
                self.stop()
                raise PrometheusServerError(message)
            time.sleep(0.05)
        return self

    def _ready(self) -> bool:
        """Whether /-/ready answers 200."""
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def log(self) -> str:
        """What Prometheus wrote to its log so far."""
        if self._directory is None:
            return ""
        path = Path(self._directory.name) / "prometheus.log"
        return path.read_text("utf-8", "replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop Prometheus and remove its directory (its data with it)."""
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        directory, self._directory = self._directory, None
        if directory is not None:
            directory.cleanup()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.stop()

    # -- HTTP API --------------------------------------------------------------------------

    def api(self, path: str, params: Optional[Mapping[str, Any]] = None) -> Any:
        """GET ``/api/v1/<path>`` with ``params``; return its ``data``.

        Raises:
            PrometheusServerError: the API answered an error.
        """
        query = "?" + urllib.parse.urlencode(params) if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=30) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            raise PrometheusServerError(f"{path} {params}: {exc.read().decode()}") from exc
        if body.get("status") != "success":
            raise PrometheusServerError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now: ``[{"metric": ..., "value": ...}]``."""
        data = self.api("query", {"query": expr})
        return list(data["result"])

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """The range vector of ``expr`` from ``start`` to ``end`` (Unix seconds) every ``step``
        seconds: ``[{"metric": ..., "values": [[time, "value"], ...]}]``."""
        params = {"query": expr, "start": start, "end": end, "step": step}
        return list(self.api("query_range", params)["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """The pending and firing alerts, each with its ``labels``, ``annotations``, ``state``."""
        return list(self.api("alerts")["alerts"])

    def rule_evaluations(self) -> int:
        """How many rule groups have been evaluated at least once."""
        groups = self.api("rules")["groups"]
        return sum(1 for group in groups if not group["lastEvaluation"].startswith("0001-"))

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
        """:func:`wait_until`, polling every tenth of the scrape interval."""
        wait_until(condition, what, timeout, poll=self.interval / 10)


def wait_until(
    condition: Callable[[], bool], what: str, timeout: float = 60.0, poll: float = 0.05
) -> None:
    """Poll ``condition()`` every ``poll`` seconds until it holds.

    Raises:
        TimeoutError: it did not hold within ``timeout`` seconds (``what`` names it).
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)
