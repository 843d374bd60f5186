"""Overload-aware retries ("client backpressure") for PyMongo, AsyncMongoClient and Motor."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
