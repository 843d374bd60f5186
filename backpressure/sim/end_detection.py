"""How soon a pacer could tell that an overload ended, from its own pushbacks alone.

``python -m backpressure.sim.end_detection`` runs a simulated scenario whose overload ends
(by default the recovery fleet: 4 x 8 workers, 100/s for 10 s, then no limit) under
``adaptive`` and the default, and asks of every ``adaptive`` client's pushbacks: had it taken
``quiet`` seconds without a pushback for the end of the overload, how often would it have been
wrong during the overload, and how late would it have been after the real end?

A paced client learns the end only from its own replies: after the end no attempt of its is
pushed back, but during the overload stretches without a pushback are common too (a paced
client sends a few dozen attempts a second, and most are admitted).  For each ``quiet`` the
table gives:

- the share of the gaps between one client's consecutive pushbacks, over the last
  ``window_s`` seconds of the overload, that are longer than ``quiet``, and how many such
  stretches one client sees per second: each would be a false end (a climb into the overload);
- the mean delay after the real end before ``quiet`` has passed since the client's last
  pushback;
- the most of the demand the first second after the end could serve with that delay: the
  client served at its paced share until then and at the whole demand at once after
  (an instant climb, so a bound no pacer that waits for that quiet can beat).

Beside them, the first second's share the arms really served in the same runs, the
default's first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from backpressure.cli import (
    add_seeds_arguments,
    comma_list,
    positive_float,
    run_cli,
    seed_span,
    swept_seeds,
)
from backpressure.core.extras import require
from backpressure.sim.arms import resolve
from backpressure.sim.scenarios import SCENARIOS, scenario
from backpressure.workload.arms import default_policy_name
from backpressure.workload.metrics import percentile

__all__ = [
    "DEFAULT_QUIETS",
    "EndDetection",
    "QuietRow",
    "RunPushbacks",
    "main",
    "measure",
    "quiet_rows",
    "render_markdown",
]

DEFAULT_QUIETS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5)
"""The quiet stretches (seconds) the table has a row for by default."""

WINDOW_S = 7.0
"""The seconds of the overload, up to its end, whose pushbacks are read (the pacers' first
seconds, while they close and settle, are left out)."""

DEMAND_AFTER_S = 5.0
"""The demand is the goodput from this many seconds after the end to the run's last second."""


@dataclass(frozen=True)
class RunPushbacks:
    """One run's pushbacks per client, and its goodput per second around the end."""

    pushbacks: tuple[tuple[float, ...], ...]
    """Per client: when each overload error its attempts got was read (seconds, in order)."""
    paced_share: float
    """The goodput over the window before the end, as a share of the demand."""
    first_second: float
    """The goodput of the first second after the end, as a share of the demand."""


@dataclass(frozen=True)
class QuietRow:
    """What a pacer that takes ``quiet_s`` without a pushback for the end would have done."""

    quiet_s: float
    gaps_longer: float
    """The share of the gaps between one client's consecutive pushbacks in the window that
    are longer than ``quiet_s``."""
    false_ends_per_s: float
    """Such gaps per client and second of the window: ends it would have taken for real."""
    mean_delay_s: float
    """After the real end, the mean wait until ``quiet_s`` had passed since the client's last
    pushback (0 when that had already passed)."""
    first_second_bound: float
    """The most of the demand the first second after the end could serve: the paced share
    until the delay is over, the whole demand at once after it."""


@dataclass(frozen=True)
class EndDetection:
    """The table for one scenario over its seeds."""

    scenario: str
    seeds: tuple[int, ...]
    window_s: float
    clients: int
    """Clients per run."""
    pushbacks: int
    """Pushbacks in the window, over every client and run."""
    gap_median_s: float
    gap_p95_s: float
    paced_share: float
    """``adaptive``'s goodput over the window, as a share of the demand (mean over runs)."""
    first_second: dict[str, float]
    """Per arm, the default's first: the first second's goodput after the end as a share
    of the demand (mean over runs)."""
    rows: tuple[QuietRow, ...]


def _gaps(times: Sequence[float], start: float, end: float) -> list[float]:
    """The gaps between consecutive pushbacks that both fall in ``[start, end)``."""
    inside = [t for t in times if start <= t < end]
    return [later - earlier for earlier, later in zip(inside, inside[1:])]


def quiet_rows(
    runs: Sequence[Sequence[Sequence[float]]],
    *,
    end_s: float,
    window_s: float,
    paced_share: float,
    quiets: Sequence[float] = DEFAULT_QUIETS,
) -> tuple[QuietRow, ...]:
    """One row per quiet stretch, from the pushback times of every client of every run.

    ``runs[r][c]`` holds client ``c``'s pushback times in run ``r`` (in order); the overload
    ends at ``end_s`` and the window is its last ``window_s`` seconds.  A client with no
    pushback in the window has no delay.

    Raises:
        ValueError: no client, a ``window_s`` or quiet stretch not > 0, or a ``paced_share``
            outside 0..1.
    """
    clients = [times for run in runs for times in run]
    if not clients:
        raise ValueError("quiet_rows needs at least one client")
    if window_s <= 0 or any(quiet <= 0 for quiet in quiets):
        raise ValueError("window_s and every quiet stretch must be > 0")
    if not 0.0 <= paced_share <= 1.0:
        raise ValueError(f"paced_share must be in 0..1, got {paced_share}")
    start = end_s - window_s
    gaps = [gap for times in clients for gap in _gaps(times, start, end_s)]
    last = [max((t for t in times if start <= t < end_s), default=None) for times in clients]
    rows = []
    for quiet in quiets:
        delays = [0.0 if at is None else max(0.0, at + quiet - end_s) for at in last]
        served = [1.0 - (1.0 - paced_share) * min(1.0, delay) for delay in delays]
        longer = sum(1 for gap in gaps if gap > quiet)
        rows.append(
            QuietRow(
                quiet_s=quiet,
                gaps_longer=longer / len(gaps) if gaps else 0.0,
                false_ends_per_s=longer / (len(clients) * window_s),
                mean_delay_s=statistics.mean(delays),
                first_second_bound=statistics.mean(served),
            )
        )
    return tuple(rows)


def _goodput_share(ok: Sequence[int], width: float, start: float, stop: float) -> float:
    """Successes per second over ``[start, stop)`` of a timeline of ``width``-second buckets."""
    first, last = round(start / width), round(stop / width)
    return sum(ok[first:last]) / max(stop - start, width)


def _run_one(job: tuple[str, str, int, float]) -> RunPushbacks:
    """Simulate one scenario, arm and seed; keep its pushbacks (a process pool's task)."""
    from backpressure.sim.engine import simulate

    name, arm, seed, window = job
    run = scenario(name)
    assert run.overload_end_s is not None  # checked by measure()
    end = run.overload_end_s
    data = simulate(run, resolve(arm), seed)
    width = run.bucket_s
    stop = min(run.duration_s, len(data.timeline_ok) * width)
    demand = _goodput_share(data.timeline_ok, width, end + DEMAND_AFTER_S, stop)
    if demand <= 0:
        raise ValueError(f"{name}: no goodput {DEMAND_AFTER_S:g} s after the end to measure")
    return RunPushbacks(
        pushbacks=tuple(tuple(times) for times in data.client_pushbacks),
        paced_share=_goodput_share(data.timeline_ok, width, end - window, end) / demand,
        first_second=_goodput_share(data.timeline_ok, width, end, end + 1.0) / demand,
    )


def measure(
    name: str = "recovery-fleet",
    seeds: Sequence[int] = tuple(range(1, 9)),
    quiets: Sequence[float] = DEFAULT_QUIETS,
    window_s: float = WINDOW_S,
    jobs: int = 1,
) -> EndDetection:
    """Run ``name`` under the default and ``adaptive`` for every seed, and build the table.

    Raises:
        ValueError: an unknown scenario, one whose overload does not end, or a window longer
            than the time before the end.
    """
    require("simpy", "sim", "the simulator")
    run = scenario(name)  # an unknown name raises, listing the known ones
    end = run.overload_end_s
    if end is None:
        raise ValueError(f"scenario {name!r} has no end of overload (overload_end_s)")
    if not 0 < window_s <= end:
        raise ValueError(
            f"window_s must be in 0..{end:g} (the time before the end), got {window_s}"
        )
    arms = (default_policy_name(), "adaptive")
    tasks = [(name, arm, seed, window_s) for arm in arms for seed in seeds]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_run_one, tasks))
    else:
        results = [_run_one(task) for task in tasks]
    per_arm = {
        arm: results[index * len(seeds) : (index + 1) * len(seeds)]
        for index, arm in enumerate(arms)
    }
    paced = per_arm["adaptive"]
    paced_share = min(1.0, statistics.mean(r.paced_share for r in paced))
    start = end - window_s
    gaps = [gap for r in paced for times in r.pushbacks for gap in _gaps(times, start, end)]
    return EndDetection(
        scenario=name,
        seeds=tuple(seeds),
        window_s=window_s,
        clients=len(paced[0].pushbacks),
        pushbacks=sum(1 for r in paced for times in r.pushbacks for t in times if start <= t < end),
        gap_median_s=percentile(gaps, 50) or 0.0,
        gap_p95_s=percentile(gaps, 95) or 0.0,
        paced_share=paced_share,
        first_second={
            arm: statistics.mean(r.first_second for r in runs) for arm, runs in per_arm.items()
        },
        rows=quiet_rows(
            [r.pushbacks for r in paced],
            end_s=end,
            window_s=window_s,
            paced_share=paced_share,
            quiets=quiets,
        ),
    )


def render_markdown(result: EndDetection, command: str) -> str:
    """The results page: what was run, the measured first seconds, then the table."""
    span = seed_span(result.seeds)
    measured = ", ".join(
        f"{arm}{' (the default)' if arm == default_policy_name() else ''} {share:.0%}"
        for arm, share in result.first_second.items()
    )
    lines = [
        f"# When a pacer could tell that an overload ended ({result.scenario}, {span})\n",
        f"`{command}`.\n",
        f"The pushbacks of every `adaptive` client over the last {result.window_s:g} s of the "
        f"overload ({result.clients} clients a run, {result.pushbacks:,} pushbacks in all): "
        f"one client's consecutive pushbacks were a median {result.gap_median_s:.2f} s apart, "
        f"and 5 % of the gaps were longer than {result.gap_p95_s:.2f} s. Over that window "
        f"`adaptive` served {result.paced_share:.0%} of the demand. The first second after the "
        f"end served: {measured}.\n",
        "A client that took each quiet stretch without a pushback for the end:\n",
        "| quiet | gaps longer | false ends per client and second | mean delay after the end "
        "| first second at most |",
        "|---|---|---|---|---|",
    ]
    for row in result.rows:
        lines.append(
            f"| {row.quiet_s:g} s | {row.gaps_longer:.0%} | {row.false_ends_per_s:.2f} | "
            f"{row.mean_delay_s:.2f} s | {row.first_second_bound:.0%} |"
        )
    return "\n".join(lines) + "\n"


def load(data: dict[str, Any]) -> EndDetection:
    """An :class:`EndDetection` from its ``--json`` file."""
    fields = dict(data)
    fields["seeds"] = tuple(fields["seeds"])
    fields["rows"] = tuple(QuietRow(**row) for row in fields["rows"])
    return EndDetection(**fields)


def _main(argv: Optional[Sequence[str]]) -> int:
    """Parse ``argv``, run the scenario, print (and optionally write) the page."""
    ending = [name for name, factory in SCENARIOS.items() if factory().overload_end_s is not None]
    parser = argparse.ArgumentParser(
        prog="python -m backpressure.sim.end_detection",
        description="How soon a pacer could tell from its own pushbacks that an overload ended.",
    )
    parser.add_argument(
        "--scenario",
        choices=ending,
        default="recovery-fleet",
        help="a scenario whose overload ends (default: recovery-fleet)",
    )
    parser.add_argument(
        "--quiets",
        type=comma_list(positive_float),
        default=DEFAULT_QUIETS,
        help="quiet stretches in seconds, comma-separated (default: "
        + ",".join(f"{q:g}" for q in DEFAULT_QUIETS)
        + ")",
    )
    add_seeds_arguments(parser, seeds=8)
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the table as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the results page")
    args = parser.parse_args(argv)
    seeds = swept_seeds(parser, args)
    result = measure(args.scenario, seeds, args.quiets, jobs=args.jobs)
    command = (
        f"python -m backpressure.sim.end_detection --scenario {args.scenario} "
        f"--seed {args.seed} --seeds {args.seeds}"
    )
    if tuple(args.quiets) != DEFAULT_QUIETS:
        command += " --quiets " + ",".join(f"{q:g}" for q in args.quiets)
    page = render_markdown(result, command)
    sys.stdout.write(page)
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(result), indent=1) + "\n", encoding="utf-8")
    if args.markdown is not None:
        args.markdown.write_text(page, encoding="utf-8")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m backpressure.sim.end_detection``: exit status 0, 1 without SimPy, 2 on usage
    errors."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
