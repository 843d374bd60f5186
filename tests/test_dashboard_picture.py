"""The dashboard picture of the docs (docs/_static/dashboard.png) comes from
``scripts/dashboard_picture.py``: a short run of the same scenario against a real Prometheus
gives every drawn panel its series, retries only once the server sheds load, and a PNG 1280 px
wide."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path
from types import ModuleType

import pytest

from tests.prometheus.tools import require_tool

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "dashboard_picture", ROOT / "scripts" / "dashboard_picture.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header."""
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_picture_script_draws_every_panel_from_prometheus(tmp_path: Path) -> None:
    """A 3 s quiet, 6 s overload, 5 s recovery run: each panel has data (but the give-ups,
    which may have none), the 462 retries start after the limiter was turned on and reach
    more than one a second, and the picture is drawn."""
    require_tool("prometheus")
    script = _script()
    # A fifth of the picture's capacity: the load exceeds it even on a machine so busy that
    # the four threads send far fewer than their 200 finds a second.
    recorded = script.record(quiet=3.0, overload=6.0, recovery=5.0, capacity=20)
    overload_start, overload_end = recorded["overload"]
    panels = recorded["panels"]
    assert set(panels) == set(script.PANELS)
    for title, series in panels.items():
        # A give-up needs three rejections in a row: a short overload may have none.
        if title != "Give-ups per second, by reason":
            assert series, f"{title}: no series"
    (retries,) = [s for legend, s in panels["Retries per second, by error code"]]
    assert retries["metric"] == {"db_response_status_code": "462"}
    values = [(float(t), float(v)) for t, v in retries["values"]]
    assert min(t for t, v in values if v > 0) >= overload_start
    assert max(v for _t, v in values) > 1
    succeeded = [
        s
        for legend, s in panels["Operations per second, by outcome"]
        if s["metric"].get("backpressure_outcome") == "succeeded"
    ]
    assert succeeded
    output = tmp_path / "dashboard.png"
    script.draw(recorded, output)
    assert _png_size(output) == (1280, 980)
    assert overload_end > overload_start
