"""The embedded MongoDB-compatible server, in layers that import only downward.

* ``errors``: mongod's error codes and ``CommandError`` (imports nothing else from here);
* ``wire``: sans-I/O framing of OP_MSG, OP_QUERY/OP_REPLY and OP_COMPRESSED;
* ``control``: fail points, ingress rate limiters, server parameters, statistics;
* ``engine``: the mongomock-backed data store and the command handlers;
* ``cluster``: topology and hello replies, per-member state, server-level commands, error labels;
* ``transport``: the asyncio ``Deployment`` that accepts connections and runs the pipeline;
* ``embedded`` (``EmbeddedServer``, in a thread or a subprocess) and ``cli`` on top.

The ``engine`` layer needs mongomock (the ``server`` extra) and names the extra when it is
missing; importing this package and the command line's parser need no extra, so that
``python -m backpressure.testing.server --help`` works without it.
"""
