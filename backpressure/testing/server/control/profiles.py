"""Server version profiles: which mongod ingress-limiter behaviours a member shows.

The embedded server reports any version in ``buildInfo``; its limiter behaviour follows one of
three profiles chosen from that version (``../shared/notes/mongod-limiter-facts.md``):

* ``8.2.0`` (versions below 8.2.6): the 462 rejection carries ``SystemOverloadedError`` and
  ``RetryableError``; no ``externalClientBaseBackoffMS`` or
  ``ingressRequestRateLimiterAllowRetries`` parameter; no request queue (mongod 8.2 fixes the
  queue depth at 0).
* ``8.2.6`` (8.2.6 up to 9.0, 8.3 included): as 8.2.0, plus ``NoWritesPerformed`` on the
  rejection (SERVER-113311).
* ``9.0`` (9.0 and later): ``ingressRequestRateLimiterAllowRetries`` decides ``RetryableError``
  (SERVER-126027); ``externalClientBaseBackoffMS`` attaches ``baseBackoffMS`` (SERVER-130142);
  ``ingressRequestAdmissionMaxQueueDepth`` queues requests (SERVER-124943); the application-name
  exemptions and the operation rate limiter (code 463, 8.3+) exist.

8.3.x takes the 8.2.6 profile with the operation rate limiter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["DEFAULT_SERVER_VERSION", "PROFILE_NAMES", "ServerProfile", "profile_for"]

DEFAULT_SERVER_VERSION = "8.2.6"
"""The version (and so the profile) the embedded server runs unless told otherwise."""

PROFILE_NAMES = ("8.2.0", "8.2.6", "9.0")
"""The profiles, by the version that introduced their behaviour."""


@dataclass(frozen=True)
class ServerProfile:
    """The client-visible limiter behaviours of one server version."""

    name: str
    """``8.2.0``, ``8.2.6`` or ``9.0``."""
    no_writes_performed: bool
    """The 462 rejection also carries ``NoWritesPerformed``."""
    allow_retries_parameter: bool
    """``ingressRequestRateLimiterAllowRetries`` exists (else ``RetryableError`` always)."""
    base_backoff: bool
    """``externalClientBaseBackoffMS`` exists and attaches ``baseBackoffMS``."""
    request_queue: bool
    """``ingressRequestAdmissionMaxQueueDepth`` queues requests (else rejected at once)."""
    application_exemptions: bool
    """``ingressRequestRateLimiterApplicationExemptions`` exists."""
    operation_rate_limiter: bool
    """The operation rate limiter (code 463) exists."""


_PROFILES = {
    "8.2.0": ServerProfile("8.2.0", False, False, False, False, False, False),
    "8.2.6": ServerProfile("8.2.6", True, False, False, False, False, False),
    "9.0": ServerProfile("9.0", True, True, True, True, True, True),
}


def _version_tuple(version: str) -> tuple[int, int, int]:
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        parts.append(int(digits) if digits else 0)
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def profile_for(version: str) -> ServerProfile:
    """The profile of a server reporting ``version`` (anything below 8.2.6 behaves as 8.2.0)."""
    number = _version_tuple(version)
    if number >= (9, 0, 0):
        return _PROFILES["9.0"]
    if number >= (8, 3, 0):  # 8.3 has the operation rate limiter (code 463), off by default
        return replace(_PROFILES["8.2.6"], operation_rate_limiter=True)
    if number >= (8, 2, 6):
        return _PROFILES["8.2.6"]
    return _PROFILES["8.2.0"]
