"""Benchmarks: the decision core, the embedded server, goodput under overload."""
