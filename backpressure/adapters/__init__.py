"""The pymongo adapters: the seams into pymongo's internals, the native adapter and the backport."""
