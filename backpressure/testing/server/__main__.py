"""Run the embedded server: ``python -m backpressure.testing.server --help``."""

import sys

from backpressure.testing.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
