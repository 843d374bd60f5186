"""The steps of the attempt cycle that sleep (the sync flavour).

The sync twin ``adapters/sync_cycle.py`` is generated from ``adapters/async_cycle.py`` by
``scripts/unasync.py``: edit the async file, then run ``python scripts/unasync.py``.

The decisions are the cycle's (:class:`~backpressure.core.cycle.AttemptCycle`); these functions
only carry them out: :func:`carry_out` waits as long as the cycle says before an attempt is
sent (asking again when each wait is over) and raises its refusal, :func:`pause` sleeps a
backoff.
Both sleep through the client's sleep (``ClientState.sleep``: the private hook tests set, see
``backpressure.switch.client.set_timing``), else ``time.sleep``.
"""

from __future__ import annotations

import time

from backpressure.core.client_state import ClientState
from backpressure.core.cycle import AttemptCycle, Step, Stop, Wait

__all__ = ["carry_out", "pause"]


def carry_out(cycle: AttemptCycle, step: Step) -> None:
    """Carry out the cycle's answer to ``admit`` (a :class:`Wait` or a :class:`Stop`).

    The executors' one wait-and-recheck loop: wait, ask again when each wait is over (a retry
    going ahead of the pacing queue may move the slot later, or past the attempt's bound), and
    raise the refusal (a ``LocalOverloadError``).  The executors ask ``cycle.admit`` themselves
    and come here only when the answer is not ``SEND`` (the success path costs no call).
    """
    if type(step) is Wait:
        sleep = cycle.state.sleep or time.sleep
        while type(step) is Wait:
            sleep(step.seconds)
            step = cycle.waited()
    if type(step) is Stop:
        raise step.error


def pause(state: ClientState, seconds: float) -> None:
    """Sleep a backoff of ``seconds`` (nothing when it is 0) through the client's sleep."""
    if seconds > 0.0:
        (state.sleep or time.sleep)(seconds)
