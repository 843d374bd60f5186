"""Per-client backpressure state shared by every pymongo adapter."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from backpressure.core.decision import RetryController
from backpressure.core.events import RetryListener
from backpressure.core.operation import BudgetWarnings, OperationRetries
from backpressure.core.policy import Policy

LOGGER = logging.getLogger("backpressure")

STATE_ATTRIBUTE = "_backpressure_state"
"""Name of the attribute that holds a client's `ClientState` while backpressure is enabled."""


@dataclass
class ClientState:
    """What one enabled client carries: its controller (policy + budget) and its listeners."""

    controller: RetryController
    listeners: tuple[RetryListener, ...] = ()
    logger: logging.Logger = field(default=LOGGER)
    budget_warnings: BudgetWarnings = field(init=False, repr=False, compare=False)
    """The client's rate limit of budget-empty WARNINGs (on the controller's clock)."""

    def __post_init__(self) -> None:
        """Create the client's budget-warning rate limit."""
        self.budget_warnings = BudgetWarnings(clock=self.controller.clock)

    @property
    def policy(self) -> Policy:
        """The policy this client retries with."""
        return self.controller.policy

    def new_operation(self, operation: str) -> OperationRetries:
        """Start the retry bookkeeping of one operation (one call of the retry loop)."""
        return OperationRetries(
            self.controller,
            operation,
            listeners=self.listeners,
            logger=self.logger,
            budget_warnings=self.budget_warnings,
        )
