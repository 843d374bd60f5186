"""The ``failCommand`` fail point as data and logic, following mongod's rules (no I/O).

Theory of operation: ``configureFailPoint`` documents are validated into a
:class:`FailCommandConfig` (mode + data). For every command the server asks
:meth:`FailCommand.evaluate` with the command name and the connection's appName. The predicate
(name in ``failCommands``, appName equal when given) is checked first; only a matching command
moves the mode's counters (``skip``, ``times``) and the ``count`` of activations. An activation
returns a :class:`FailAction`; the transport then blocks, closes or fails the command in that
order of precedence.
"""

from __future__ import annotations

import random as _random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional

from backpressure.testing.engine_base import CommandError

__all__ = [
    "FAILPOINT_ERRMSG",
    "FAIL_COMMAND",
    "FailAction",
    "FailCommand",
    "FailCommandConfig",
    "canonical_command_name",
]

FAIL_COMMAND = "failCommand"
"""The only fail point the embedded server implements."""

FAILPOINT_ERRMSG = "Failing command via 'failCommand' failpoint"
"""The ``errmsg`` mongod uses for injected errors."""

_ALIASES = {"ismaster": "isMaster"}


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

    @classmethod
    def parse(cls, command: Mapping[str, Any]) -> FailCommandConfig:
        """Validate a ``configureFailPoint`` command; raise ``CommandError`` like mongod."""
        mode, mode_value = _parse_mode(command.get("mode"))
        data = command.get("data", {})
        if not isinstance(data, Mapping):
            raise CommandError(2, "'data' must be an object")
        if mode == "off":
            return cls("off", 0, frozenset(), None, FailAction())
        names = data.get("failCommands")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CommandError(2, "failCommand fail point requires 'failCommands', a string array")
        app_name = data.get("appName")
        if app_name is not None and not isinstance(app_name, str):
            raise CommandError(2, "'appName' must be a string")
        return cls(
            mode,
            mode_value,
            frozenset(canonical_command_name(n) for n in names),
            app_name,
            _parse_action(data),
        )


def _parse_mode(mode: Any) -> tuple[str, float]:
    if mode in ("off", "alwaysOn"):
        return str(mode), 0
    if isinstance(mode, Mapping) and len(mode) == 1:
        ((key, value),) = mode.items()
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in ("times", "skip") and numeric and value >= 0 and value == int(value):
            return key, int(value)
        if key == "activationProbability" and numeric and 0 <= value <= 1:
            return key, float(value)
    raise CommandError(2, f"invalid fail point mode: {mode!r}")


def _parse_action(data: Mapping[str, Any]) -> FailAction:
    block = bool(data.get("blockConnection", False))
    block_ms = 0
    if block:
        value = data.get("blockTimeMS")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise CommandError(
                72, "must specify 'blockTimeMS' when 'blockConnection' is true", "InvalidOptions"
            )
        block_ms = int(value)
    code = data.get("errorCode")
    if code is not None and (not isinstance(code, (int, float)) or isinstance(code, bool)):
        raise CommandError(2, "'errorCode' must be a number")
    labels = data.get("errorLabels")
    if labels is not None and (
        not isinstance(labels, list) or not all(isinstance(x, str) for x in labels)
    ):
        raise CommandError(2, "'errorLabels' must be a string array")
    errmsg = data.get("errmsg", FAILPOINT_ERRMSG)
    wce = data.get("writeConcernError")
    if wce is not None and not isinstance(wce, Mapping):
        raise CommandError(2, "'writeConcernError' must be an object")
    return FailAction(
        block_ms=block_ms,
        close_connection=bool(data.get("closeConnection", False)),
        error_code=None if code is None else int(code),
        error_labels=None if labels is None else tuple(labels),
        errmsg=str(errmsg),
        write_concern_error=None if wce is None else dict(wce),
    )


class FailCommand:
    """The state of one member's ``failCommand`` fail point."""

    def __init__(self, random: Callable[[], float] = _random.random) -> None:
        """Start switched off; ``random`` decides ``activationProbability`` draws."""
        self._random = random
        self._config = FailCommandConfig("off", 0, frozenset(), None, FailAction())
        self._remaining = 0.0
        self.count = 0
        """How many times the fail point has activated since it was last configured."""

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
        previous = self.count
        self._config = config
        self._remaining = config.mode_value
        self.count = 0
        return previous

    def disable(self) -> None:
        """Switch the fail point off."""
        self.configure(FailCommandConfig("off", 0, frozenset(), None, FailAction()))

    def evaluate(self, command_name: str, app_name: Optional[str]) -> Optional[FailAction]:
        """Return the action for this command, or ``None`` when the fail point does not fire."""
        config = self._config
        if config.mode == "off":
            return None
        if canonical_command_name(command_name) not in config.fail_commands:
            return None
        if config.app_name is not None and config.app_name != app_name:
            return None
        if config.mode == "skip":
            if self._remaining > 0:
                self._remaining -= 1
                return None
        elif config.mode == "times":
            if self._remaining <= 0:
                return None
            self._remaining -= 1
            if self._remaining <= 0:
                self._config = FailCommandConfig("off", 0, frozenset(), None, FailAction())
        elif config.mode == "activationProbability" and self._random() >= config.mode_value:
            return None
        self.count += 1
        return config.action
