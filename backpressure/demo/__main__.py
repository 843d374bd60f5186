"""Run the demo: ``python -m backpressure.demo``."""

from __future__ import annotations

import sys

from backpressure.demo import main

if __name__ == "__main__":
    sys.exit(main())
