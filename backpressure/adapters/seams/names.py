"""Every private pymongo name the adapters touch, with what each is for (``PRIVATE_NAMES``).

``tests/unit/test_seams_inventory.py`` fails when an adapter uses a private name missing here.
"""

from __future__ import annotations

from collections.abc import Mapping

PRIVATE_NAMES: Mapping[str, str] = {
    # Both adapters.
    "MongoClient._retry_internal": "the retry loop every retryable operation passes through "
    "(4.20.1 added conn_mgr: a pinned cursor's connection)",
    "MongoClient._select_server": "server selection of each attempt (wrapped per instance)",
    "MongoClient._retry_policy": "the native loop's policy object (native: replaced; the "
    "delay its backoff returns reaches its should_retry unchanged)",
    "MongoClient._get_topology": "the constructor's topology open, held until enable",
    "AgnosticClient.__delegate_class__": "Motor builds its sync delegate from it",
    "ClientSession._transaction": "transaction state: state, attempt, pinned_address, conn_mgr",
    "client_session._TxnState": "transaction states STARTING / IN_PROGRESS",
    "client_session._Transaction.starting": "whether the transaction sent no command yet",
    "_Transaction.has_completed_command": "pymongo >= 4.17: first command completed",
    "_csot.get_timeout/get_deadline/remaining": "the CSOT deadline",
    "Server.pool / Pool.state / PoolState.PAUSED": "a pool reset while a paced attempt waited "
    "(the attempt selects again)",
    "ClientOptions._ClientOptions__max_adaptive_retries": "native: maxAdaptiveRetries value",
    "ClientOptions._options": "native: the options the application gave (URI and keywords)",
    "ClientOptions._ClientOptions__enable_overload_retargeting": "native: retargeting value",
    "helpers._RetryPolicy (4.17) / helpers_shared._RetryPolicy (4.18+)": "native: detection "
    "of the native loop and its conventions",
    # Native adapter (pymongo >= 4.17).
    "MongoClient._process_response": "sees every reply before pymongo builds an error",
    # Backport (pymongo 4.9-4.16).
    "MongoClient._checkout": "connection checkout of a write attempt",
    "MongoClient._conn_from_server": "connection checkout of a read attempt",
    "MongoClient._topology / ._topology_settings": "pools to tag; _topology_id; pool_class",
    "MongoClient(_pool_class=...)": "the pool class of an enabled client",
    "MongoClient._resolve_srv_info": "pool class of a mongodb+srv topology built on first use",
    "mongo_client._add_retryable_write_error": "labels write errors as pymongo's loop does "
    "(probed through the client's modules: 4.20.1 moved it to mongo_client_shared)",
    "helpers_shared._RETRYABLE_ERROR_CODES": "classic retryable read codes",
    "_csot._TimeoutContext / _csot.apply": "one deadline for method-level retries",
    "ClientSession._start_retryable_write / ._unpin": "txnNumber once; unpin for retries",
    "Topology._servers / ._create_pool_for_server / ._topology_id": "tag existing/new pools",
    "Topology.handle_error": "leave SDAM alone for overload-labelled connection errors",
    # Server avoidance (both adapters, pymongo >= 4.16).
    "Topology._select_servers_loop / ._description": "put back the candidate servers a "
    "deprioritized selection leaves filtered on the shared description",
    "TopologyDescription._filter_servers": "its candidate list, filtered in place by selection",
    "Pool.connect / Pool._client_id / Pool.is_sdam (4.13+) / Pool.handshake (<4.13)": "label "
    "connection-establishment errors of application pools",
    "Connection.hello_cmd / .pool_ref / .performed_handshake": "the handshake flag",
    "Connection._hello (4.17)": "native: its source shows whether it sets the flag to True "
    "after hello_cmd (then hello_cmd returns a dict that stores '2' instead)",
    "Connection.write_command": "a bulk batch of a transaction's first statement completed",
    "_Bulk.retrying / .started_retryable_write": "batch-level retries",
    "retryable_bulk closure: full_result": "client bulk write: forget a retried error",
    "_finish_transaction_with_retry closure: command_name": "pymongo <= 4.14: commit vs abort",
    "Database._drop_helper, Collection._create_helper / ._create_indexes / ._drop_index / "
    "._create_search_indexes, ._timeout": "commands that bypass the retry loop before 4.17",
    "motor.metaprogramming._class_cache": "Motor attributes rebuilt after wrapping",
    # Hedged reads (adapters/hedging/, both eras).
    "MongoClient._run_operation / ._retryable_read": "hedging: the read entry points wrapped",
    "message._Query (copy, reset) / message._CursorAddress": "hedging: a hedge's own find",
    "MongoClient._close_cursor_soon": "hedging: kill the server cursor of a losing find",
    "ClientSession._implicit / ._server_session.mark_dirty": "hedging: implicit sessions only",
}
"""Every private pymongo name the adapters touch, with what it is used for.

A new pymongo release can break exactly these; the version guard
(:mod:`backpressure.adapters.seams.versions`) probes the shapes the adapters depend on most
before a client is enabled, and ``tests/unit/test_seams_inventory.py`` fails when the adapters
start using a private name that is not listed here.
"""

__all__ = ["PRIVATE_NAMES"]
