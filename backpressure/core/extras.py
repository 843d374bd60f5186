"""Optional dependencies: import one, or raise an error naming the extra that installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "require"]


class MissingExtraError(ImportError):
    """An optional dependency is missing; the message names the extra that installs it."""

    def __init__(self, module: str, extra: str, feature: str) -> None:
        """Name the missing ``module``, the ``extra`` to install and the ``feature`` at stake."""
        super().__init__(
            f"{feature} needs the {module!r} package, which is not installed; install it with "
            f"pip install 'pymongo-backpressure[{extra}]'",
            name=module,
        )
        self.extra = extra
        """The extra that installs the missing package."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import and return ``module``.

    Raises:
        MissingExtraError: ``module`` (or a package it needs) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise MissingExtraError((exc.name or module).split(".")[0], extra, feature) from exc
