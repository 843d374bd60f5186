"""The steps of the attempt cycle that sleep (the async flavour).

The sync twin ``adapters/sync_cycle.py`` is generated from ``adapters/async_cycle.py`` by
``scripts/unasync.py``: edit the async file, then run ``python scripts/unasync.py``.

The decisions are the cycle's (:class:`~backpressure.core.cycle.AttemptCycle`); these functions
only carry them out: :func:`carry_out` sleeps each wait the cycle's wait-and-recheck loop
(``AttemptCycle.wait_out``) yields before an attempt is sent and raises its refusal,
:func:`after_wait` selects again when the server's pool was reset during that wait,
:func:`pause` sleeps a backoff.
Both sleep through the client's sleep (``ClientState.sleep``: the private hook tests set, see
``backpressure.switch.client.set_timing``), else ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from backpressure.adapters import seams
from backpressure.core.client_state import ClientState
from backpressure.core.cycle import SEND, AttemptCycle, Step, Stop

__all__ = ["after_wait", "carry_out", "pause"]


async def carry_out(cycle: AttemptCycle, step: Step) -> None:
    """Carry out the cycle's answer to ``admit`` (a :class:`Wait` or a :class:`Stop`).

    Sleeps each wait the cycle's wait-and-recheck loop (``cycle.wait_out``) yields, with the
    client's sleep: the loop asks again when each wait is over (a retry going ahead of the
    pacing queue may move the slot later, or past the attempt's bound); then raises the refusal
    (a ``LocalOverloadError``).  The executors ask ``cycle.admit`` themselves and come here only
    when the answer is not ``SEND`` (the success path costs no call).
    """
    waits = cycle.wait_out(step)
    sleep = cycle.state.sleep or asyncio.sleep
    for seconds in waits:
        await sleep(seconds)
    answer = waits.answer
    if type(answer) is Stop:
        raise answer.error


async def after_wait(cycle: AttemptCycle, server: Any, select: Callable[[], Any]) -> Any:
    """The server a paced attempt is sent to once its wait is over: ``server``, or a new
    selection (``select()``) when ``server``'s pool was reset meanwhile.

    A network error on another connection clears the pool and marks the server unknown: an
    attempt that waited its turn would fail at once on the paused pool, where one that never
    waited waits in the selection for the server to be found again.  So it selects again, and
    is admitted again if that picks another server.
    """
    if not seams.pool_paused(server):
        return server
    again = await select()
    if seams.server_address(again) != seams.server_address(server):
        step = cycle.admit(again, seams.csot_deadline)
        if step is not SEND:
            await carry_out(cycle, step)
    return again


async def pause(state: ClientState, seconds: float) -> None:
    """Sleep a backoff of ``seconds`` (nothing when it is 0) through the client's sleep."""
    if seconds > 0.0:
        await (state.sleep or asyncio.sleep)(seconds)
