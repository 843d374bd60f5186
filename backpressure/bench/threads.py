"""Start benchmark threads together and time them."""

from __future__ import annotations

import threading
import time
from typing import Callable

__all__ = ["run_together"]


def run_together(work: Callable[[int], None], threads: int) -> float:
    """Run ``work(i)`` for i in ``range(threads)``, one thread each, released at one instant.

    Return the wall seconds from the release until the last thread ends.
    """
    barrier = threading.Barrier(threads + 1)

    def run(index: int) -> None:
        barrier.wait()
        work(index)

    workers = [threading.Thread(target=run, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started
