"""When a pacer could tell from its own pushbacks that an overload ended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("simpy")

from backpressure.sim.arms import resolve
from backpressure.sim.end_detection import (
    EndDetection,
    load,
    main,
    measure,
    quiet_rows,
    render_markdown,
)
from backpressure.sim.engine import simulate
from backpressure.sim.scenarios import recovery_fleet

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "adaptive-default"


def test_quiet_rows_count_false_ends_and_the_delay_after_the_end() -> None:
    """Two clients, the overload ends at 10 s, a 4 s window: client A's pushbacks are 0.5 s
    apart up to 9.5 s, client B's 1.5 s apart up to 9.0 s."""
    a = [6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 9.0, 9.5]
    b = [5.0, 6.0, 7.5, 9.0]  # 5.0 is before the window
    rows = quiet_rows([[a, b]], end_s=10.0, window_s=4.0, paced_share=0.2, quiets=(0.4, 1.0, 2.0))
    short, second, long = rows
    # 7 gaps of 0.5 s (A) and 2 of 1.5 s (B).
    assert short.gaps_longer == pytest.approx(1.0)
    assert short.false_ends_per_s == pytest.approx(9 / (2 * 4.0))
    assert second.gaps_longer == pytest.approx(2 / 9)
    assert second.false_ends_per_s == pytest.approx(2 / 8.0)
    assert long.gaps_longer == 0.0
    # Delays: quiet 0.4: A 0 (9.9 < 10), B 0; quiet 1.0: A 0.5, B 0; quiet 2.0: A 1.5, B 1.0.
    assert short.mean_delay_s == 0.0
    assert short.first_second_bound == pytest.approx(1.0)
    assert second.mean_delay_s == pytest.approx(0.25)
    assert second.first_second_bound == pytest.approx((1.0 - 0.8 * 0.5 + 1.0) / 2)
    assert long.mean_delay_s == pytest.approx(1.25)
    assert long.first_second_bound == pytest.approx(0.2)  # both wait a second or more


def test_a_client_without_pushbacks_in_the_window_has_no_delay() -> None:
    rows = quiet_rows([[[1.0], []]], end_s=10.0, window_s=5.0, paced_share=0.5, quiets=(1.0,))
    assert rows[0].mean_delay_s == 0.0
    assert rows[0].gaps_longer == 0.0
    assert rows[0].false_ends_per_s == 0.0
    assert rows[0].first_second_bound == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"runs": []}, "at least one client"),
        ({"window_s": 0.0}, "must be > 0"),
        ({"quiets": (0.0,)}, "must be > 0"),
        ({"paced_share": 1.5}, "paced_share must be in 0..1, got 1.5"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "runs": [[[1.0]]],
        "end_s": 10.0,
        "window_s": 5.0,
        "paced_share": 0.5,
    }
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        quiet_rows(**arguments)  # type: ignore[arg-type]


def test_the_simulator_records_each_clients_pushbacks_in_order() -> None:
    """Every pushback an attempt read is recorded for its client, in time order; attempts whose
    reply came after their deadline are rejected at the server but never read."""
    data = simulate(recovery_fleet(), resolve("adaptive"), 1)
    assert len(data.client_pushbacks) == len(data.client_successes) == 4
    read = sum(len(times) for times in data.client_pushbacks)
    assert 0 < read <= data.server_rejected
    for times in data.client_pushbacks:
        assert times == sorted(times)
        assert all(t <= 10.5 for t in times)  # no overload error after the limit is lifted
    unpaced = simulate(recovery_fleet(), resolve("current"), 1)
    assert sum(len(t) for t in unpaced.client_pushbacks) > read  # stock's loop: many more


def test_one_seed_measured_and_rendered_the_default_first() -> None:
    """Seed 1 of the recovery fleet: the default's first second after the end is near the
    demand, ``adaptive``'s paced share near the capacity's (100 of about 520 ops/s), and the
    bound falls as the quiet stretch grows."""
    result = measure("recovery-fleet", (1,), (0.1, 1.0))
    assert list(result.first_second) == ["current", "adaptive"]
    assert result.first_second["current"] > 0.8
    assert result.first_second["adaptive"] < result.first_second["current"]
    assert 0.1 < result.paced_share < 0.35
    short, long = result.rows
    assert short.gaps_longer > long.gaps_longer
    assert short.first_second_bound > long.first_second_bound
    # No pacer that waits a second of quiet serves more than this bound; adaptive waits longer.
    assert result.first_second["adaptive"] <= long.first_second_bound + 0.05
    page = render_markdown(result, "cmd")
    assert "current (the default)" in page.split("served:")[1].split(",")[0]
    assert page.count("\n| ") == 3  # the header and two rows


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in (
        (["--scenario", "faults"], "invalid choice"),
        (["--quiets", "0"], "must be > 0"),
        (["--seeds", "101"], "must be in 1..100"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    with pytest.raises(ValueError, match="has no end of overload"):
        measure("hot-member", (1,))
    with pytest.raises(ValueError, match=r"window_s must be in 0\.\.10"):
        measure("recovery-fleet", (1,), window_s=11.0)


def test_the_committed_page_renders_from_its_json() -> None:
    """The committed page is its JSON's rendering, over seeds 1-8 of the recovery fleet."""
    result = load(json.loads((RESULTS / "sim-end-detection.json").read_text("utf-8")))
    assert isinstance(result, EndDetection)
    assert result.seeds == tuple(range(1, 9))
    command = (
        "python -m backpressure.sim.end_detection --scenario recovery-fleet --seed 1 --seeds 8"
    )
    page = (RESULTS / "sim-end-detection.md").read_text("utf-8")
    assert page == render_markdown(result, command)
