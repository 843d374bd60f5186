"""The closed loop's arrival log, with a clock that stalls a worker right after stamping."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from backpressure.workload.driver import WorkloadConfig, _AttemptCounter, _drive_closed


class _InstantClient:
    """A client whose every operation returns at once (no server: only the loop is tested)."""

    def call(self, fn: Callable[[], Any]) -> None:
        """Succeed without running ``fn``."""


def test_the_arrival_log_is_in_time_order_when_a_worker_stalls_after_its_stamp() -> None:
    """One worker is preempted for 2 ms each time it reads the clock, after the read: another
    worker reads later but could take the next index first.  The log, in index order, must
    still be in time order (the physical-limit oracle replays it as the arrival sequence)."""

    def clock() -> float:
        now = time.monotonic()
        if threading.current_thread().name == "closed-0":
            time.sleep(0.002)
        return now

    config = WorkloadConfig(capacity=30.0, burst_seconds=0.1, allowed_wait=0.2)
    raw = _drive_closed(
        _InstantClient(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        4,
        0.2,
        config,
        _AttemptCounter(clock),
        None,
        clock,
    )
    assert len(raw.times) > 20
    assert raw.times == sorted(raw.times)
