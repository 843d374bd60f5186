"""The lab's yardsticks: closed-loop fleets, transients, fault schedules and their figures."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("simpy")

from backpressure.bench.faults import fault_schedule as real_fault_schedule
from backpressure.sim import LimiterSpec, ServerSpec, run
from backpressure.sim.arms import default_first, default_name, display_name
from backpressure.sim.model import ClosedLoop
from backpressure.sim.report import format_fleet_markdown
from backpressure.sim.scenarios import closed_fleet, fault_schedule, faults, scenario, transient
from backpressure.sim.server import SimServer
from backpressure.sim.yardsticks import acked_by_kind, main
from backpressure.workload.metrics import jain_index


def test_jain_index() -> None:
    """1.0 for equal shares, 1/n when one client takes everything, None for one client."""
    assert jain_index([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain_index([8, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([3]) is None
    assert jain_index([0, 0]) == 1.0


def test_closed_loop_floor_is_the_same_for_every_arm() -> None:
    """N = 16 workers, C = 5/s, D = 1 s: the floor is 1 - C*D/N whatever the arm does."""
    shape = closed_fleet(2, 8, step_s=1.0, rates=(5.0, 5.0))
    result = run(shape, ["no-retries", "current", "retry-storm"], seed=1)
    floors = {arm.physical_min_errors for arm in result.arms.values()}
    fractions = {arm.floor_fraction for arm in result.arms.values()}
    assert floors == {round((16 - 5) * 2.0)}
    assert len(fractions) == 1
    assert fractions.pop() == pytest.approx(1 - 5 / 16)
    for arm in result.arms.values():
        assert arm.app_errors >= arm.physical_min_errors * 0.9
        assert len(arm.client_successes) == 2
        assert sum(arm.client_successes) == arm.ops - arm.app_errors


def test_capacity_steps_show_in_the_goodput_per_phase() -> None:
    """Stock retries keep the server busy: goodput near capacity in each step's settled part."""
    shape = closed_fleet(2, 4, step_s=4.0, rates=(100.0, 50.0))
    arm = run(shape, ["current"], seed=1).arms["current"]
    assert [phase.label for phase in arm.phase_goodput] == ["100/s", "50/s"]
    assert [phase.start_s for phase in arm.phase_goodput] == [2.0, 6.0]
    for phase, capacity in zip(arm.phase_goodput, (100.0, 50.0)):
        assert phase.capacity_per_s == capacity
        assert phase.of_capacity is not None
        assert 0.8 < phase.of_capacity < 1.1


def test_a_rejection_burst_rejects_exactly_that_many_commands() -> None:
    """``transient(3)`` without retries: exactly the 3 rejected operations fail."""
    result = run(transient(3), ["no-retries", "current"], seed=1)
    assert result.arms["no-retries"].app_errors == 3
    assert result.arms["no-retries"].server_rejected == 3
    current = result.arms["current"]
    assert current.app_errors == 0
    assert current.server_rejected == 3
    assert current.phase_goodput[-1].offered_per_s == pytest.approx(400.0)


def test_reject_windows_reject_everything_and_take_no_token() -> None:
    """Inside a window every request is rejected; the capacity reads 0 there."""
    spec = ServerSpec("rs0", limiter=LimiterSpec(10.0), reject_windows=((1.0, 2.0),))
    server = SimServer(spec, 0)
    assert server.request(0.5)[0]
    assert not server.request(1.5)[0]
    assert server.capacity_at(1.5) == 0.0
    assert server.capacity_at(2.5) == 10.0
    assert server.request(2.5)[0]
    with pytest.raises(ValueError, match="reject_windows"):
        ServerSpec("rs0", reject_windows=((2.0, 1.0),))
    with pytest.raises(ValueError, match="reject_bursts count"):
        ServerSpec("rs0", reject_bursts=((1.0, 0),))


def test_the_fault_schedule_is_seeded_and_within_its_ranges() -> None:
    """The same seed gives the same schedule; every fault is within the real soak's ranges."""
    assert fault_schedule(3) == fault_schedule(3)
    assert fault_schedule(1) != fault_schedule(2)
    for seed in range(1, 8):
        schedule = fault_schedule(seed, 20.0)
        for _at, count in schedule.bursts:
            assert 1 <= count <= 5
        for start, end in schedule.windows:
            length = end - start
            assert 0.3 <= length <= 1.5 or 3.0 <= length <= 8.0 or end == 20.0
        for _at, rate in schedule.rate_changes[::2]:
            assert 20 <= rate <= 200
    assert faults(1).servers[0].reject_windows == fault_schedule(1).windows


def test_the_simulated_soak_replays_the_real_soaks_schedule() -> None:
    """Seed for seed, the simulator draws the real soak's faults: its all-reject windows, its
    limits and its rejected commits run; closes, blocks and closed commits are listed only."""
    for seed in (1, 2, 3):
        real = real_fault_schedule(seed, 96.0)
        simulated = fault_schedule(seed, 96.0)
        assert [(f.at, f.end, f.kind, f.label) for f in real] == list(simulated.faults)
        assert simulated.windows == tuple((f.at, f.end) for f in real if f.kind == "overload")
        limits = [(f.at, f.rate, f.end) for f in real if f.kind == "limit"]
        assert simulated.rate_changes == tuple(
            change for at, rate, end in limits for change in ((at, rate), (end, 2000.0))
        )
        rejected = [
            (f.at, f.fail_point["mode"]["times"])
            for f in real
            if f.kind == "commit" and f.fail_point and "errorCode" in f.fail_point["data"]
        ]
        assert simulated.bursts == tuple(rejected)
    soak = faults(1)
    (writers,) = soak.clients
    assert (writers.count, writers.workload.duration_s) == (4, 96.0)
    assert isinstance(writers.workload, ClosedLoop)
    assert writers.workload.workers == 8
    assert [label for _, label in soak.phases][:2] == ["round 1", "round 2"]


def test_tables_put_the_default_first_and_show_every_arm() -> None:
    """The Markdown table lists every arm run, the default's row first and labelled."""
    names = ["no-retries", "current", "draft", "adaptive"]
    result = run(transient(1), names, seed=1)
    table = format_fleet_markdown(result, goodput_as="rate")
    rows = table.splitlines()[2:]
    assert len(rows) == len(names)
    assert rows[0].startswith(f"| default ({default_name()}) |")
    assert default_first(names)[0] == default_name()
    assert display_name("no-retries") == "no-retries"


def test_the_yardsticks_command_writes_markdown(tmp_path: Path) -> None:
    """The command runs the named scenarios and writes their tables and goals."""
    path = tmp_path / "out.md"
    assert (
        main(["--scenarios", "transient-1", "--arms", "current,no-retries", "--md", str(path)]) == 0
    )
    text = path.read_text(encoding="utf-8")
    assert "## `transient-1`" in text
    assert "Goals:" in text
    assert "| current |" in text or "| default (current) |" in text


def test_the_recovery_fleet_ends_its_overload_at_ten_seconds() -> None:
    """``recovery-fleet``: 4 x 8 workers with 60 ms think, 100/s for 10 s, then no limit; the
    recovery is measured from the end of the first step."""
    shape = scenario("recovery-fleet")
    assert shape.overload_end_s == 10.0
    (group,) = shape.clients
    assert group.count == 4
    assert isinstance(group.workload, ClosedLoop)
    assert (group.workload.workers, group.workload.think_ms) == (8, 60.0)
    limiter = shape.servers[0].limiter
    assert limiter is not None
    assert (limiter.rate_at(9.9), limiter.rate_at(10.0)) == (100.0, 100_000.0)


def test_successes_are_counted_by_fault_kind_as_the_real_soak_counts_them() -> None:
    """From each fault's start to 1 s after its end, whole buckets, each bucket once; the rest
    is ``none``."""
    goodput = [4.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0, 32.0]  # per second, 0.5 s buckets
    faults = [(0.5, 0.5, "close", "1 closed"), (2.0, 2.5, "overload", "all rejected 0.5 s")]
    assert acked_by_kind(goodput, 0.5, faults) == {"close": 10.0, "overload": 36.0, "none": 26.0}
