"""The data engine: a mongomock-backed store and the command handlers, without an import cycle.

Modules in import order, each importing only from those before it: ``where``; ``store``;
``fields``; ``cursors`` and ``sessions`` (state); ``request``; the command modules; ``dispatch``
(``Engine``).
"""

from backpressure.core.extras import require

# Every module of the engine (and every layer above it) needs mongomock, the 'server' extra:
# name the extra at once instead of a bare ModuleNotFoundError.
require("mongomock", "server", "The embedded test server")
