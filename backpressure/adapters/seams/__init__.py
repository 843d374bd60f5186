"""pymongo's private names and shapes, as the adapters use them: one module per concern.

* :mod:`~backpressure.adapters.seams.names`: ``PRIVATE_NAMES``, every private pymongo name
  the adapters touch, with what each is for;
* :mod:`~backpressure.adapters.seams.versions`: feature detection of the installed pymongo and
  the version guard (``guard``);
* :mod:`~backpressure.adapters.seams.probes`: the guard's probes of each seam's shape
  (``native_problems``, ``backport_problems``) and ``print_report``;
* :mod:`~backpressure.adapters.seams.signatures`: the known signatures of the methods the native
  adapter wraps (``native_signature``, ``signature_report``);
* :mod:`~backpressure.adapters.seams.selection`: CSOT and server selection helpers;
* :mod:`~backpressure.adapters.seams.calls`: the arguments of the calls the adapters wrap, and
  the error pymongo's loop does not pass to its retry policy (``handled_error``);
* :mod:`~backpressure.adapters.seams.transactions`: transaction fix-ups;
* :mod:`~backpressure.adapters.seams.replies`: reply sanitizing.

The adapters use them as ``seams.<name>``: every name is re-exported here.
"""

from __future__ import annotations

from backpressure.adapters.seams.calls import (
    TopologyOpenDeferral,
    closure_value,
    handled_error,
    operation_name,
    retry_internal_argument,
)
from backpressure.adapters.seams.names import PRIVATE_NAMES
from backpressure.adapters.seams.probes import (
    _parameters,
    backport_problems,
    native_problems,
    print_report,
)
from backpressure.adapters.seams.replies import reply_ok, sanitize_reply
from backpressure.adapters.seams.selection import (
    CSOT_CLOCK,
    DESCRIPTION_KEEPS_FILTER,
    csot_deadline,
    csot_deadline_and_now,
    csot_expired,
    keep_candidate_servers,
    pool_paused,
    selection_has_choice,
    server_address,
    steer,
)
from backpressure.adapters.seams.signatures import (
    _EMPTY,
    NATIVE_RETRY_INTERNAL_SIGNATURES,
    NATIVE_SELECT_SERVER_SIGNATURE,
    forwarding_only,
    native_exact_signatures,
    native_signature,
    retry_internal_arity,
    signature_report,
)
from backpressure.adapters.seams.transactions import (
    ACTIVE_TRANSACTION_STATES,
    STARTING_TRANSACTION_STATES,
    commit_attempt,
    outside_transaction,
    pinned_address,
    repin,
    restart_transaction,
    resume_transaction,
    set_commit_attempt,
    transaction_starting,
)
from backpressure.adapters.seams.versions import (
    ASYNC_SHOULD_RETRY_AWAITED,
    BACKOFF_TAKES_BASE,
    HAS_ASYNC_CLIENT,
    HAS_NATIVE_BACKPRESSURE,
    OPTION_ATTRIBUTES,
    PYMONGO_VERSION,
    TESTED_RANGE,
    UnsupportedPymongoError,
    UntestedPymongoWarning,
    _version_text,
    client_has_native_backpressure,
    explicit_overload_options,
    guard,
    is_async_client,
    should_retry_is_awaited,
)

__all__ = [
    "ACTIVE_TRANSACTION_STATES",
    "ASYNC_SHOULD_RETRY_AWAITED",
    "BACKOFF_TAKES_BASE",
    "CSOT_CLOCK",
    "DESCRIPTION_KEEPS_FILTER",
    "HAS_ASYNC_CLIENT",
    "HAS_NATIVE_BACKPRESSURE",
    "NATIVE_RETRY_INTERNAL_SIGNATURES",
    "NATIVE_SELECT_SERVER_SIGNATURE",
    "OPTION_ATTRIBUTES",
    "PRIVATE_NAMES",
    "PYMONGO_VERSION",
    "STARTING_TRANSACTION_STATES",
    "TESTED_RANGE",
    "_EMPTY",
    "TopologyOpenDeferral",
    "UnsupportedPymongoError",
    "UntestedPymongoWarning",
    "_parameters",
    "_version_text",
    "backport_problems",
    "client_has_native_backpressure",
    "closure_value",
    "commit_attempt",
    "csot_deadline",
    "csot_deadline_and_now",
    "csot_expired",
    "explicit_overload_options",
    "forwarding_only",
    "guard",
    "handled_error",
    "is_async_client",
    "keep_candidate_servers",
    "native_exact_signatures",
    "native_problems",
    "native_signature",
    "operation_name",
    "outside_transaction",
    "pinned_address",
    "pool_paused",
    "print_report",
    "repin",
    "reply_ok",
    "restart_transaction",
    "resume_transaction",
    "retry_internal_argument",
    "retry_internal_arity",
    "sanitize_reply",
    "selection_has_choice",
    "server_address",
    "set_commit_attempt",
    "should_retry_is_awaited",
    "signature_report",
    "steer",
    "transaction_starting",
]
