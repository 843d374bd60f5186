"""The steps of the attempt cycle that sleep (the async flavour).

The sync twin ``adapters/sync_cycle.py`` is generated from ``adapters/async_cycle.py`` by
``scripts/unasync.py``: edit the async file, then run ``python scripts/unasync.py``.

The decisions are the cycle's (:class:`~backpressure.core.cycle.AttemptCycle`); these functions
only carry them out: :func:`admitted` waits as long as the cycle says before an attempt is sent
(asking again when each wait is over) and raises its refusal, :func:`pause` sleeps a backoff.
Both sleep through the client's sleep (``ClientState.sleep``: the private hook tests set, see
``backpressure.switch.client.set_timing``), else ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from backpressure.core.client_state import ClientState
from backpressure.core.cycle import AttemptCycle, Deadline, Stop, Wait

__all__ = ["admitted", "pause"]


async def admitted(cycle: AttemptCycle, server: Any, deadline: Deadline) -> None:
    """Return once the attempt to ``server`` may be sent; raise the cycle's refusal.

    The executors' one admit-wait-recheck loop: a retry going ahead of the pacing queue may move
    the slot later (another wait) or past the attempt's bound (a ``LocalOverloadError``).
    """
    step = cycle.admit(server, deadline)
    if type(step) is Wait:
        sleep = cycle.state.sleep or asyncio.sleep
        while type(step) is Wait:
            await sleep(step.seconds)
            step = cycle.waited()
    if type(step) is Stop:
        raise step.error


async def pause(state: ClientState, seconds: float) -> None:
    """Sleep a backoff of ``seconds`` (nothing when it is 0) through the client's sleep."""
    if seconds > 0.0:
        await (state.sleep or asyncio.sleep)(seconds)
