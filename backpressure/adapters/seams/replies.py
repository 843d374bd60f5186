"""Replies: ``MongoClient._process_response`` sees each one before pymongo builds an error from
it; hostile fields are made harmless here."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from backpressure.core.labels import valid_milliseconds

# -- replies (``MongoClient._process_response`` sees each one before pymongo builds an error) ----


def reply_ok(reply: Any) -> bool:
    """Return True for a command reply with ``ok: 1``."""
    if type(reply) is dict:
        return bool(reply.get("ok") == 1)
    try:
        return isinstance(reply, Mapping) and reply.get("ok") == 1
    except Exception:
        return False


def sanitize_reply(reply: Any) -> None:
    """Make hostile backpressure fields of a reply harmless, in place, before pymongo reads them.

    A ``baseBackoffMS`` that is not a positive finite number is removed (pymongo >= 4.18 would
    divide it and raise ``TypeError``); ``errorLabels`` that is not a list of strings keeps only
    its strings (pymongo would raise ``TypeError`` building the error).  Replies that cannot be
    changed (e.g. ``RawBSONDocument``) are left alone.
    """
    if not isinstance(reply, MutableMapping):
        return
    try:
        if "baseBackoffMS" in reply and valid_milliseconds(reply["baseBackoffMS"]) is None:
            del reply["baseBackoffMS"]
        if "errorLabels" in reply:
            labels = reply["errorLabels"]
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                kept = [x for x in labels if isinstance(x, str)] if isinstance(labels, list) else []
                reply["errorLabels"] = kept
    except Exception:  # a reply type we do not understand: leave it to pymongo
        return
