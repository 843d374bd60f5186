"""A runner for the unified test format (schema <= 1.21) with our client presets.

``python -m backpressure.testing.unified [--uri URI] [--preset draft|current|adaptive|none]
[--async] [--fast-backoff] PATH...`` runs files or folders of ``.json``/``.yml``/``.yaml`` tests;
without a URI it starts the embedded server with the topology the files need. See ``README.md``
here.
"""

from __future__ import annotations

from backpressure.testing.unified.entities import Unsupported
from backpressure.testing.unified.loader import SpecFile, SpecTest, iter_spec_paths, load_spec_file
from backpressure.testing.unified.runner import (
    PRESET_NAMES,
    Deployment,
    Outcome,
    RunnerConfig,
    TestResult,
    UnifiedRunner,
    choose_topology,
    unmet_requirements,
)

__all__ = [
    "PRESET_NAMES",
    "Deployment",
    "Outcome",
    "RunnerConfig",
    "SpecFile",
    "SpecTest",
    "TestResult",
    "UnifiedRunner",
    "Unsupported",
    "choose_topology",
    "iter_spec_paths",
    "load_spec_file",
    "unmet_requirements",
]
