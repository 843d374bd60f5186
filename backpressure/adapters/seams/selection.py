"""CSOT and server selection: the deadline, the known servers, and deprioritization that steers
one selection only."""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping
from typing import Any, Callable, Optional

from pymongo import _csot
from pymongo.read_preferences import Primary
from pymongo.server_selectors import writable_server_selector
from pymongo.topology_description import TOPOLOGY_TYPE, TopologyDescription

from backpressure.adapters.seams.versions import _import


def csot_deadline() -> Optional[float]:
    """Return the CSOT deadline (``time.monotonic`` clock) or None when no timeout applies."""
    if _csot.get_timeout() is None:
        return None
    deadline = _csot.get_deadline()
    return deadline if deadline != float("inf") else None


CSOT_CLOCK: Callable[[], float] = time.monotonic
"""pymongo's clock, on which its CSOT deadline lies (``_csot``: ``time.monotonic``)."""


def csot_deadline_and_now(
    clock: Callable[[], float],
) -> tuple[Optional[float], Optional[float]]:
    """Return ``(deadline, now)``: the CSOT deadline moved onto ``clock`` (the client's clock,
    where the retry rules compare) and ``clock``'s reading; ``(None, None)`` without a timeout.

    The deadline stays pymongo's: the time left before it is read on pymongo's clock
    (:data:`CSOT_CLOCK`) and added to ``clock``'s now (on pymongo's clock itself, the deadline
    as it is).  ``clock`` is read only when a timeout applies.
    """
    deadline = csot_deadline()
    if deadline is None:
        return None, None
    now = clock()
    if clock is not CSOT_CLOCK:
        deadline = now + (deadline - CSOT_CLOCK())
    return deadline, now


# -- server avoidance (``deprioritized_servers``) ----------------------------------------------


def steer(
    client: Any,
    avoid: Callable[[list[tuple[str, int]]], list[tuple[str, int]]],
    selector: Any,
    address: Any,
    deprioritized: Optional[list[Any]],
) -> Optional[list[Any]]:
    """The deprioritized servers of one selection on ``client``, plus the known servers whose
    addresses ``avoid`` draws (``ClientState.avoid``: the server choice and the pacing).

    Inert for selections that have no choice: by ``address`` (getMore, a pinned transaction),
    and writes and primary reads outside a sharded cluster (:func:`selection_has_choice`).
    pymongo leaves a deprioritized server out only while another eligible one remains, so
    eligibility never widens.  The topology undoes the filter a deprioritized selection leaves
    on its shared description (:func:`keep_candidate_servers`).
    """
    if address is not None or not selection_has_choice(client, selector):
        return deprioritized
    servers = getattr(getattr(client, "_topology", None), "_servers", None)
    if not isinstance(servers, dict) or len(servers) < 2:
        return deprioritized
    known = dict(servers)
    avoided = avoid(list(known))
    if not avoided:
        return deprioritized
    current = deprioritized or []
    added = [known[a] for a in avoided if known[a] not in current]
    if current and added and not _leaves_one(client, selector, known, [*current, *added]):
        # pymongo already deprioritizes servers (a retry it retargets): adding the rest of
        # the eligible ones would make it fall back to all of them, the failed one included.
        return deprioritized
    keep_candidate_servers(client)
    return [*current, *added]


def _leaves_one(client: Any, selector: Any, known: dict[Any, Any], avoided: list[Any]) -> bool:
    """Whether a server eligible for ``selector`` is left when ``avoided`` are deprioritized
    (True when the eligible servers cannot be read)."""
    description = getattr(getattr(client, "_topology", None), "description", None)
    try:
        eligible = description.apply_selector(selector, None)  # type: ignore[union-attr]
    except Exception:  # an unforeseen selector or description: assume pymongo has a choice
        return True
    return any(known.get(found.address) not in avoided for found in eligible)


DESCRIPTION_KEEPS_FILTER: bool = (
    callable(getattr(TopologyDescription, "_filter_servers", None))
    and "deprioritized_servers" in inspect.signature(TopologyDescription.apply_selector).parameters
)
"""pymongo >= 4.16 filters the deprioritized servers out of the candidate list of the topology's
shared description (``TopologyDescription._filter_servers``) and leaves it so until its next
selection: ``client.primary`` and ``client.secondaries`` (``Topology._new_selection``) read it."""

_KEEPS_CANDIDATES = "_backpressure_keeps_candidates"


def selection_has_choice(client: Any, selector: Any) -> bool:
    """Whether pymongo may choose between servers for ``selector`` on ``client``.

    False for writes and primary reads outside a sharded cluster: the primary is the only
    eligible server there, so deprioritizing a server cannot send the attempt elsewhere.
    """
    if selector is not writable_server_selector and type(selector) is not Primary:
        return True
    description = getattr(getattr(client, "_topology", None), "description", None)
    return getattr(description, "topology_type", None) == TOPOLOGY_TYPE.Sharded


def _restore_candidates(topology: Any) -> None:
    """Put back the full candidate list on ``topology``'s description (its lock held)."""
    topology._description._filter_servers(None)


def _deprioritizes(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether a ``_select_servers_loop(selector, timeout, operation, operation_id, address,
    deprioritized_servers)`` call deprioritizes servers."""
    return bool(kwargs.get("deprioritized_servers") or (len(args) > 5 and args[5]))


def keep_candidate_servers(client: Any) -> None:
    """Make ``client``'s topology undo the filter a deprioritized selection leaves behind.

    After each selection that deprioritized servers, the topology's ``_select_servers_loop`` puts
    the full candidate list back on the shared description before the topology's lock is
    released (see :data:`DESCRIPTION_KEEPS_FILTER`), so no other caller ever sees it filtered:
    what the adapters pass as ``deprioritized_servers`` steers one selection and nothing else.
    Installed on the topology object on first need (a topology rebuilt after a fork gets it
    again); a no-op on pymongo < 4.16, whose deprioritization filters a copy.
    """
    topology = getattr(client, "_topology", None)
    if not DESCRIPTION_KEEPS_FILTER or topology is None or _KEEPS_CANDIDATES in vars(topology):
        return
    original = topology._select_servers_loop
    if inspect.iscoroutinefunction(original):

        async def select_servers_loop(*args: Any, **kwargs: Any) -> Any:
            try:
                return await original(*args, **kwargs)
            finally:
                if _deprioritizes(args, kwargs):
                    _restore_candidates(topology)

    else:

        def select_servers_loop(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            try:
                return original(*args, **kwargs)
            finally:
                if _deprioritizes(args, kwargs):
                    _restore_candidates(topology)

    topology._select_servers_loop = select_servers_loop
    setattr(topology, _KEEPS_CANDIDATES, True)


def csot_expired() -> bool:
    """Return True if a CSOT timeout applies and no time is left."""
    remaining = _csot.remaining()
    return remaining is not None and remaining <= 0


def _paused_state() -> Any:
    """pymongo's ``PoolState.PAUSED`` (in ``pool_shared`` in recent releases, in
    ``synchronous.pool`` before), or None."""
    for module in ("pymongo.pool_shared", "pymongo.synchronous.pool", "pymongo.pool"):
        states = getattr(_import(module), "PoolState", None)
        if states is not None:
            return getattr(states, "PAUSED", None)
    return None


_PAUSED = _paused_state()


def pool_paused(server: Any) -> bool:
    """Return True if ``server``'s connection pool is paused: pymongo cleared it after a network
    error and marked the server unknown, and a checkout fails at once until the server is
    found again (a new selection waits for that)."""
    state = getattr(getattr(server, "pool", None), "state", None)
    return _PAUSED is not None and state == _PAUSED


def server_address(server: Any) -> Optional[tuple[str, int]]:
    """Return the (host, port) of a pymongo Server, or None."""
    try:
        address = server.description.address
    except AttributeError:
        return None
    if type(address) is tuple and len(address) == 2:
        return address  # pymongo's own (host, port): already a str and an int (success path)
    if isinstance(address, tuple) and len(address) == 2:
        return (str(address[0]), int(address[1]))
    return None
