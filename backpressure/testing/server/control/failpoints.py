"""The ``failCommand`` and ``onPrimaryTransactionalWrite`` fail points, following mongod's rules.

Theory of operation: ``configureFailPoint`` documents are validated into a
:class:`FailCommandConfig` (mode + data). Like mongod, any ``data`` is stored: without
``failCommands`` (or ``failAllCommands``) the fail point matches no command. Values that cannot
mean anything (a non-finite ``times``, ``blockTimeMS`` or ``errorCode``, wrong types) are
BadValue. For every command the server asks :meth:`FailCommand.evaluate` with the command name,
the connection's appName, the command's namespace and the connection's thread name
(``conn<id>``). The predicate (name in ``failCommands`` or ``failAllCommands``; ``appName``,
``namespace`` and ``threadName`` equal when given) is checked first; only a matching command
moves the mode's counters (``skip``, ``times``) and the ``count`` of activations. An activation
returns a :class:`FailAction`; the transport then blocks, closes or fails the command in that
order of precedence.

``onPrimaryTransactionalWrite`` (:class:`TransactionalWriteFailPoint`) shares the modes. The
transport asks it for each retryable write (``txnNumber`` outside a transaction) that a primary
is about to apply for the first time. An activation either applies the write and then drops the
connection (``closeConnection``, default true), or, with ``failBeforeCommitExceptionCode``, fails
the write without applying it (and still drops the connection unless ``closeConnection`` is
false). No I/O here.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional

from backpressure.testing.server.errors import CommandError

__all__ = [
    "FAILPOINT_ERRMSG",
    "FAIL_COMMAND",
    "FAIL_POINTS",
    "ON_PRIMARY_TRANSACTIONAL_WRITE",
    "TRANSACTIONAL_WRITE_ERRMSG",
    "FailAction",
    "FailCommand",
    "FailCommandConfig",
    "TransactionalWriteAction",
    "TransactionalWriteFailPoint",
    "canonical_command_name",
]

FAIL_COMMAND = "failCommand"
"""The fail point that fails, blocks or closes chosen commands."""

ON_PRIMARY_TRANSACTIONAL_WRITE = "onPrimaryTransactionalWrite"
"""The fail point that interrupts retryable writes on the primary."""

FAIL_POINTS = (FAIL_COMMAND, ON_PRIMARY_TRANSACTIONAL_WRITE)
"""The fail points the embedded server implements."""

TRANSACTIONAL_WRITE_ERRMSG = "Failing write due to the onPrimaryTransactionalWrite failpoint"
"""The ``errmsg`` of a ``failBeforeCommitExceptionCode`` error (the write is not applied)."""

FAILPOINT_ERRMSG = "Failing command via 'failCommand' failpoint"
"""The ``errmsg`` mongod uses for injected errors."""

_ALIASES = {"ismaster": "isMaster"}
_INT32_MAX = 2**31 - 1
_BLOCK_TIME_REQUIRED = "must specify 'blockTimeMS' when 'blockConnection' is true"


def canonical_command_name(name: str) -> str:
    """Map command aliases to the name fail points match (``ismaster`` -> ``isMaster``)."""
    return _ALIASES.get(name, name)


@dataclass(frozen=True)
class FailAction:
    """What an activated fail point does to one command."""

    block_ms: int = 0
    """Sleep this long before anything else (``blockConnection``)."""
    close_connection: bool = False
    """Drop the connection without a reply."""
    error_code: Optional[int] = None
    """Fail the command with this code instead of running it."""
    error_labels: Optional[tuple[str, ...]] = None
    """Labels replacing the server-computed ones (``None``: compute them; empty: none)."""
    errmsg: str = FAILPOINT_ERRMSG
    """The message of the injected error."""
    write_concern_error: Optional[dict[str, Any]] = None
    """Attached to the reply after the command runs normally."""


@dataclass(frozen=True)
class FailCommandConfig:
    """A validated ``configureFailPoint: "failCommand"`` request."""

    mode: str
    """``off``, ``alwaysOn``, ``times``, ``skip`` or ``activationProbability``."""
    mode_value: float
    """n for ``times``/``skip``, p for ``activationProbability``, 0 otherwise."""
    fail_commands: frozenset[str]
    """Command names the fail point matches."""
    app_name: Optional[str]
    """Only connections with this appName match, when given."""
    action: FailAction
    """What an activation does."""
    fail_all: bool = False
    """``failAllCommands``: every command matches (except ``configureFailPoint``)."""
    namespace: Optional[str] = None
    """Only commands on this ``db.collection`` match, when given."""
    thread_name: Optional[str] = None
    """Only the connection with this thread name (``conn<id>``) matches, when given."""

    @classmethod
    def parse(cls, command: Mapping[str, Any]) -> FailCommandConfig:
        """Validate a ``configureFailPoint`` command; raise ``CommandError`` like mongod."""
        mode, mode_value = _parse_mode(command.get("mode"))
        data = command.get("data", {})
        if not isinstance(data, Mapping):
            raise CommandError(2, "'data' must be an object")
        if mode == "off":
            return cls("off", 0, frozenset(), None, FailAction())
        names = data.get("failCommands", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CommandError(2, "'failCommands' must be an array of command names")
        filters = {}
        for field in ("appName", "namespace", "threadName"):
            value = data.get(field)
            if value is not None and not isinstance(value, str):
                raise CommandError(2, f"'{field}' must be a string")
            filters[field] = value
        return cls(
            mode,
            mode_value,
            frozenset(canonical_command_name(n) for n in names),
            filters["appName"],
            _parse_action(data),
            fail_all="failAllCommands" in data,
            namespace=filters["namespace"],
            thread_name=filters["threadName"],
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _parse_mode(mode: Any) -> tuple[str, float]:
    """mongod's mode rules: ``times``/``skip`` whole numbers in 0..2**31-1 (fractions are
    truncated), ``activationProbability`` in [0, 1]; anything else, NaN and infinity: BadValue."""
    if mode in ("off", "alwaysOn"):
        return str(mode), 0
    if not isinstance(mode, Mapping):
        raise CommandError(2, f"invalid fail point mode {mode!r}: 'off', 'alwaysOn' or an object")
    for key in ("times", "skip"):
        if key in mode:
            value = mode[key]
            if not _is_number(value) or not math.isfinite(value):
                raise CommandError(2, f"'{key}' option to 'mode' must be a finite number")
            if value < 0:
                raise CommandError(2, f"'{key}' option to 'mode' must be positive")
            if value > _INT32_MAX:
                raise CommandError(2, f"'{key}' option to 'mode' is too large")
            return key, int(value)
    if "activationProbability" in mode:
        value = mode["activationProbability"]
        if not _is_number(value) or not 0 <= value <= 1:  # NaN fails the range check too
            raise CommandError(
                2, "the 'activationProbability' option to 'mode' must be a number in [0, 1]"
            )
        return "activationProbability", float(value)
    raise CommandError(2, "mode object can include 'times', 'activationProbability', or 'skip'")


def _parse_action(data: Mapping[str, Any]) -> FailAction:
    """The action of an activation; a missing ``blockTimeMS`` fails each matched command."""
    block_ms = 0
    block_error = False
    if bool(data.get("blockConnection", False)):
        value: Any = data.get("blockTimeMS")
        if not _is_number(value):
            block_error = True  # mongod: InvalidOptions when a matching command arrives
        elif not math.isfinite(value) or not 0 <= value <= _INT32_MAX:
            raise CommandError(2, "'blockTimeMS' must be a number of milliseconds in 0..2**31-1")
        else:
            block_ms = int(value)
    code = data.get("errorCode")
    if code is not None and (
        not _is_number(code) or not math.isfinite(code) or abs(code) > _INT32_MAX
    ):
        raise CommandError(2, "'errorCode' must be a 32-bit integer")
    labels = data.get("errorLabels")
    if labels is not None and (
        not isinstance(labels, list) or not all(isinstance(x, str) for x in labels)
    ):
        raise CommandError(2, "'errorLabels' must be a string array")
    errmsg = data.get("errmsg", FAILPOINT_ERRMSG)
    wce = data.get("writeConcernError")
    if wce is not None and not isinstance(wce, Mapping):
        raise CommandError(2, "'writeConcernError' must be an object")
    if block_error:
        return FailAction(error_code=72, errmsg=_BLOCK_TIME_REQUIRED)
    return FailAction(
        block_ms=block_ms,
        close_connection=bool(data.get("closeConnection", False)),
        error_code=None if code is None else int(code),
        error_labels=None if labels is None else tuple(labels),
        errmsg=str(errmsg),
        write_concern_error=None if wce is None else dict(wce),
    )


class _Modes:
    """The mode bookkeeping every fail point shares: ``off``, ``alwaysOn``, ``times``, ``skip``
    and ``activationProbability``, plus the activation ``count``."""

    def __init__(self, random: Callable[[], float]) -> None:
        self._random = random
        self._mode = "off"
        self._remaining = 0.0
        self.count = 0
        """How many times the fail point has activated since it was last configured."""

    def _set_mode(self, mode: str, value: float) -> int:
        previous = self.count
        self._mode = mode
        self._remaining = value
        self.count = 0
        return previous

    def _switch_off(self) -> None:
        self._mode = "off"

    def _activate(self) -> bool:
        """Move the mode's counters for one matching event; True when the fail point fires."""
        if self._mode == "off":
            return False
        if self._mode == "skip":
            if self._remaining > 0:
                self._remaining -= 1
                return False
        elif self._mode == "times":
            if self._remaining <= 0:
                return False
            self._remaining -= 1
            if self._remaining <= 0:
                self._switch_off()
        elif self._mode == "activationProbability" and self._random() >= self._remaining:
            return False  # for this mode ``_remaining`` holds the probability
        self.count += 1
        return True


class FailCommand(_Modes):
    """The state of one member's ``failCommand`` fail point."""

    def __init__(self, random: Callable[[], float] = _random.random) -> None:
        """Start switched off; ``random`` decides ``activationProbability`` draws."""
        super().__init__(random)
        self._config = FailCommandConfig("off", 0, frozenset(), None, FailAction())

    @property
    def config(self) -> FailCommandConfig:
        """The current configuration."""
        return self._config

    @property
    def active(self) -> bool:
        """True unless the mode is ``off``."""
        return self._config.mode != "off"

    def configure(self, config: FailCommandConfig) -> int:
        """Install ``config``; return the activation count of the previous configuration."""
        self._config = config
        return self._set_mode(config.mode, config.mode_value)

    def disable(self) -> None:
        """Switch the fail point off."""
        self.configure(FailCommandConfig("off", 0, frozenset(), None, FailAction()))

    def _switch_off(self) -> None:
        super()._switch_off()
        self._config = FailCommandConfig("off", 0, frozenset(), None, FailAction())

    def evaluate(
        self,
        command_name: str,
        app_name: Optional[str],
        namespace: Optional[str] = None,
        thread_name: Optional[str] = None,
    ) -> Optional[FailAction]:
        """Return the action for this command, or ``None`` when the fail point does not fire."""
        config = self._config
        if config.mode == "off":
            return None
        if config.thread_name is not None and config.thread_name != thread_name:
            return None
        if config.app_name is not None and config.app_name != app_name:
            return None
        if config.namespace is not None and config.namespace != namespace:
            return None
        if not config.fail_all and canonical_command_name(command_name) not in config.fail_commands:
            return None
        return config.action if self._activate() else None


@dataclass(frozen=True)
class TransactionalWriteAction:
    """What an activated ``onPrimaryTransactionalWrite`` does to one retryable write."""

    close_connection: bool = True
    """Drop the connection instead of replying (after applying the write, unless it fails)."""
    error_code: Optional[int] = None
    """``failBeforeCommitExceptionCode``: fail the write with this code; it is not applied."""

    @classmethod
    def parse(cls, command: Mapping[str, Any]) -> tuple[str, float, TransactionalWriteAction]:
        """Validate a ``configureFailPoint`` command: (mode, mode value, action)."""
        mode, mode_value = _parse_mode(command.get("mode"))
        data = command.get("data", {})
        if not isinstance(data, Mapping):
            raise CommandError(2, "'data' must be an object")
        close = data.get("closeConnection", True)
        if not isinstance(close, bool):
            raise CommandError(2, "'closeConnection' must be a boolean")
        code = data.get("failBeforeCommitExceptionCode")
        if code is not None and (
            not _is_number(code) or not math.isfinite(code) or abs(code) > _INT32_MAX
        ):
            raise CommandError(2, "'failBeforeCommitExceptionCode' must be a 32-bit integer")
        return mode, mode_value, cls(close, None if code is None else int(code))


class TransactionalWriteFailPoint(_Modes):
    """The state of one member's ``onPrimaryTransactionalWrite`` fail point."""

    def __init__(self, random: Callable[[], float] = _random.random) -> None:
        """Start switched off; ``random`` decides ``activationProbability`` draws."""
        super().__init__(random)
        self.action = TransactionalWriteAction()
        """What the next activation does."""

    @property
    def active(self) -> bool:
        """True unless the mode is ``off``."""
        return self._mode != "off"

    def configure(self, command: Mapping[str, Any]) -> int:
        """Validate and install a ``configureFailPoint`` command; return the previous count."""
        mode, value, action = TransactionalWriteAction.parse(command)
        self.action = action
        return self._set_mode(mode, value)

    def disable(self) -> None:
        """Switch the fail point off."""
        self._set_mode("off", 0)

    def evaluate(self) -> Optional[TransactionalWriteAction]:
        """Return the action for one first-time retryable write, or ``None``."""
        return self.action if self._activate() else None
