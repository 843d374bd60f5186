"""The data engine: a mongomock-backed store and the command handlers, without an import cycle.

Modules in import order, each importing only from those before it: ``where``; ``store``;
``fields``; ``cursors`` and ``sessions`` (state); ``request``; the command modules; ``dispatch``
(``Engine``).
"""
