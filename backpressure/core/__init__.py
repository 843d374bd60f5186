"""The pure decision core: policy, error classification, backoff, budgets, decisions and events.

Nothing here does I/O, sleeps or reads a clock it was not given; the adapters in
:mod:`backpressure.adapters` feed it pymongo's errors and carry out what it decides.
"""
