"""Hedged reads for one client (opt-in): the I/O around :mod:`backpressure.core.hedging`.

Theory of operation.  Installed only when the policy sets ``hedge_delay``, as the outermost
instance wrappers of four client methods, so a client without hedging runs none of this code:

* ``_run_operation`` (a cursor's first ``find``) and ``_retryable_read`` (``count``,
  ``distinct``): a read that may be hedged (see *What is hedged*) runs as a race.  The first
  attempt and every hedge are each the client's own unchanged read path (retry loop, pacing
  and budget accounting included), run in a thread of their own (sync clients and Motor; idle
  threads are reused) or a task (``AsyncMongoClient``).  The caller waits for the first
  success; at ``start + n * hedge_delay`` on the client's clock (``Hedging.next_wait``, slept
  with the client's sleep) it asks the core for hedge ``n`` and, when granted, starts it pinned
  to the chosen member (drawn with the client's server choice rule; a hedge's attempts report
  their outcomes to the choice through the retry adapter's cycle, as any attempt does).  A
  fatal error of the first attempt (one every member would return) ends the read at once; a
  non-fatal one waits for the hedges in flight.  When every attempt failed, the first
  attempt's error is raised.
* ``_select_server``: pins a hedge to its member (selection by address), records the member of
  each attempt, and stops a losing attempt before it sends another try (``HedgeCancelled``).
* ``_process_response``: every reply carrying ``SystemOverloadedError`` pauses hedging for
  ``hedge_pushback_pause`` seconds.

Losers send no further attempt (retries included).  An async ``count``/``distinct`` loser is
cancelled (pymongo then discards its connection).  A sync loser cannot be interrupted while it
waits for its reply on the socket: it finishes in its thread and its reply is dropped.  A losing
``find`` (sync or async) is left to finish, because the server cursor it may open is known only
from its reply: that cursor is then killed (through the client's background cursor cleanup).

What is hedged: ``find`` first batches (``find``, ``find_one``) and the ``count`` and
``distinct`` commands (``count_documents``, ``estimated_document_count``, ``distinct``), with no
explicit session (implicit sessions only), outside transactions, neither exhaust nor
load-balanced, and only when the read preference allows at least two members.  The attempts of
a hedged read share the cursor's implicit session (a ``getMore`` must use the session that
opened the cursor), which is then discarded instead of being pooled again.  Everything else is
never hedged: writes, ``getMore``, ``aggregate`` and change streams (their cursors own the
session), ``runCommand``, ``list_*``, explicit sessions (causal consistency and thread safety
of the session), transactions and exhaust cursors.

Shared state.  A hedged ``find`` runs on a copy of the cursor's query (its own cached command).
A ``count``/``distinct`` hedge brings its own implicit session but calls pymongo's closure,
which holds one command document: pymongo updates it in place on each send (``lsid``,
``$clusterTime``), so the hedge is sent only while the first attempt waits for its reply (no
hedge follows an overload reply, and the first attempt's retries are stopped once the read is
answered); a first attempt retrying a network error while a hedge is being encoded is the one
overlap left.

Layout.  ``race.py``: the race's attempts (its rule is the core's ``HedgeRace``); ``reads.py``:
which reads are hedged; ``installation.py``: what one client's hedging installed;
``async_wrappers.py``: the wrappers and the race loop, from which ``sync_wrappers.py`` is
generated (``scripts/unasync.py``); the executors ``tasks.py`` (async) and ``threads.py``
(sync).
"""

from __future__ import annotations

from typing import Any

from backpressure.adapters import seams
from backpressure.adapters.hedging import async_wrappers, sync_wrappers
from backpressure.adapters.hedging.installation import HedgingInstallation
from backpressure.adapters.hedging.race import HedgeCancelled
from backpressure.adapters.hedging.reads import ASYNC_HEDGING, HEDGED_COMMANDS
from backpressure.core.client_state import ClientState

__all__ = [
    "ASYNC_HEDGING",
    "HEDGED_COMMANDS",
    "HedgeCancelled",
    "install",
    "installed",
    "uninstall",
]

_INSTALLATION_ATTR = "_backpressure_hedging"


def install(client: Any, state: ClientState) -> None:
    """Hedge ``client``'s eligible reads as ``state``'s policy says (replaces an earlier one)."""
    uninstall(client)
    if state.policy.hedge_delay is None:
        return
    wrappers = async_wrappers.wrappers if seams.is_async_client(client) else sync_wrappers.wrappers
    setattr(client, _INSTALLATION_ATTR, HedgingInstallation(client, state, wrappers))


def uninstall(client: Any) -> None:
    """Remove hedging from ``client`` (no-op when not installed)."""
    installation = vars(client).pop(_INSTALLATION_ATTR, None)
    if isinstance(installation, HedgingInstallation):
        installation.restore(client)


def installed(client: Any) -> bool:
    """Whether hedging is installed on ``client`` (a pymongo client)."""
    return isinstance(vars(client).get(_INSTALLATION_ATTR), HedgingInstallation)
