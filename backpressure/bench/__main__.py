"""Run the benchmarks: ``python -m backpressure.bench``."""

from __future__ import annotations

import sys

from backpressure.bench import main

if __name__ == "__main__":
    sys.exit(main())
