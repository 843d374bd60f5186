"""The simulator's outputs: a table that fits 100 columns, the JSON file and the PNG chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from backpressure.core.extras import require
from backpressure.sim.arms import default_first, display_name
from backpressure.sim.runner import ArmResult, Result

__all__ = [
    "format_criticality",
    "format_fleet_markdown",
    "format_recovery",
    "format_table",
    "ordered",
    "write_chart",
    "write_json",
]


def ordered(result: Result) -> list[ArmResult]:
    """The result's arms, the default's first."""
    return [result.arms[name] for name in default_first(list(result.arms))]


def _ms(value: Optional[float]) -> str:
    """A latency cell."""
    return "-" if value is None else f"{value:,.0f}"


def _seconds(value: Optional[float]) -> str:
    """A recovery-time cell."""
    return "-" if value is None else f"{value:.1f}"


def _versus_floor(arm: ArmResult) -> str:
    """App errors as a multiple of the physical floor."""
    if arm.physical_min_errors == 0:
        return "-" if arm.app_errors == 0 else "inf"
    return f"{arm.app_errors / arm.physical_min_errors:.2f}x"


def format_table(result: Result) -> str:
    """One row per arm: errors next to the physical floor, load, goodput, latency."""
    header = (
        f"{'arm':<18} {'ops':>9} {'app errors':>10} {'floor':>9} {'vs floor':>8} "
        f"{'att/op':>6} {'goodput/s':>9} {'p99 ms':>7} {'recov s':>7} {'wall s':>6}"
    )
    lines = [header, "-" * len(header)]
    inexact = False
    for arm in ordered(result):
        floor = f"{arm.physical_min_errors:,}"
        if not arm.physical_exact:
            floor = ">=" + floor
            inexact = True
        lines.append(
            f"{display_name(arm.name):<18} {arm.ops:>9,} {arm.app_errors:>10,} {floor:>9} "
            f"{_versus_floor(arm):>8} {arm.attempts_per_op:>6.2f} "
            f"{arm.goodput_per_s:>9,.1f} {_ms(arm.p99_ms):>7} "
            f"{_seconds(arm.recovery_s):>7} {arm.wall_s:>6.1f}"
        )
    lines.append("")
    if any(arm.floor_fraction is not None for arm in result.arms.values()):
        lines.append(
            "floor (closed loop): max(0, N/D - C) errors per second with N workers, deadline D, "
            "capacity C, whatever the arm"
        )
    else:
        lines.append(
            "floor: the fewest app errors any client arm could have had on these arrivals "
            "(offline optimum)"
        )
    if inexact:
        lines.append(">=: a lower bound (operations with different eligible servers overlap)")
    if any(arm.recovery_s is not None for arm in result.arms.values()):
        lines.append("recov s: from the end of the overload until app errors stop")
    if any(arm.sheddable_ops for arm in result.arms.values()):
        lines += ["", format_criticality(result)]
    if result.demand_per_s() is not None:
        lines += ["", format_recovery(result)]
    return "\n".join(lines)


def format_recovery(result: Result) -> str:
    """After the overload: goodput per second as a share of the demand, successes from 1 s to
    4 s against the default's, and errors after the end, one row per arm."""
    demand = result.demand_per_s() or 0.0
    header = (
        f"{'arm':<18} {'1st s':>6} {'2nd s':>6} {'3rd s':>6} {'4th s':>6} "
        f"{'ok 1-4 s':>8} {'vs default':>10} {'errors after':>12}"
    )
    lines = [header, "-" * len(header)]
    for arm in ordered(result):
        figures = result.recovery(arm.name)
        if figures is None:
            continue
        shares = " ".join(f"{_percent(share, 0):>6}" for share in figures.demand_share)
        lines.append(
            f"{display_name(arm.name):<18} {shares} {figures.successes_1_to_4:>8,} "
            f"{_percent(figures.versus_default, 0):>10} {figures.errors_after:>12,}"
        )
    lines += [
        f"after the overload: goodput per second as a share of the demand ({demand:,.0f} ops/s: "
        "the highest",
        "goodput of any arm over the last 2 s); ok 1-4 s: successes from 1 s to 4 s after the end",
    ]
    return "\n".join(lines)


def format_criticality(result: Result) -> str:
    """App errors of the critical and the sheddable operations apart, one row per arm."""
    header = (
        f"{'arm':<18} {'critical ops':>12} {'critical errors':>16} "
        f"{'sheddable ops':>13} {'sheddable errors':>17}"
    )
    lines = [header, "-" * len(header)]
    for arm in ordered(result):
        critical = arm.critical_errors / arm.critical_ops if arm.critical_ops else 0.0
        shed = arm.sheddable_errors / arm.sheddable_ops if arm.sheddable_ops else 0.0
        lines.append(
            f"{display_name(arm.name):<18} {arm.critical_ops:>12,} "
            f"{f'{_percent(critical, 2)} ({arm.critical_errors:,})':>16} "
            f"{arm.sheddable_ops:>13,} "
            f"{f'{_percent(shed, 2)} ({arm.sheddable_errors:,})':>17}"
        )
    return "\n".join(lines)


def _percent(value: Optional[float], digits: int = 1) -> str:
    """A fraction as a percentage cell."""
    return "-" if value is None else f"{100.0 * value:.{digits}f}%"


def _phase_cell(arm: ArmResult, index: int) -> str:
    """Goodput of one phase: % of capacity when the capacity is finite, else ops/s."""
    if index >= len(arm.phase_goodput):
        return "-"
    phase = arm.phase_goodput[index]
    share = phase.of_capacity
    if share is None:
        return f"{phase.goodput_per_s:,.0f}/s"
    return f"{100.0 * share:.1f}%"


WIDE_PHASES = 4
"""A table with more goodput phases than this puts them in a second table below the first, so
that neither is wider than the docs page."""


def format_fleet_markdown(result: Result, *, goodput_as: str = "capacity") -> str:
    """A Markdown table of the lab's yardsticks, one row per arm, the default's first.

    Columns: app errors (and the floor), attempts per operation, Jain's index over the clients'
    successes, goodput per phase mark (from ``settle_s`` after it: % of capacity, or ops/s when
    ``goodput_as`` is ``"rate"``), p99 of successes, local refusals per second. With more than
    WIDE_PHASES phases, the goodput columns are a second table (arm and goodput per phase).
    """
    arms = ordered(result)
    first = arms[0]
    phases = [
        f"{phase.label} ({phase.start_s:g}-{phase.end_s:g} s)" for phase in first.phase_goodput
    ]
    unit = "ops/s" if goodput_as == "rate" else "% of C"
    goodput_header = [f"goodput {label}, {unit}" for label in phases]
    split = len(phases) > WIDE_PHASES
    header = ["arm", "ops", "app errors", "floor", "attempts/op", "Jain"]
    header += [] if split else goodput_header
    header += ["p99 ms", "refusals/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    goodput_lines = ["| " + " | ".join(["arm", *goodput_header]) + " |"]
    goodput_lines.append("|" + "---|" * (len(goodput_header) + 1))
    for arm in arms:
        floor = arm.floor_fraction
        if floor is None:
            floor = arm.physical_min_errors / arm.ops if arm.ops else 0.0
        cells = [
            display_name(arm.name),
            f"{arm.ops:,}",
            f"{_percent(arm.error_fraction)} ({arm.app_errors:,})",
            f"{_percent(floor)} ({arm.physical_min_errors:,})",
            f"{arm.attempts_per_op:.2f}",
            "-" if arm.jain is None else f"{arm.jain:.3f}",
        ]
        goodput: list[str] = []
        for index in range(len(phases)):
            if goodput_as == "rate":
                if index < len(arm.phase_goodput):
                    goodput.append(f"{arm.phase_goodput[index].goodput_per_s:,.0f}")
                else:
                    goodput.append("-")
            else:
                goodput.append(_phase_cell(arm, index))
        cells += [] if split else goodput
        cells += [_ms(arm.p99_ms), f"{arm.refusals_per_s:,.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
        goodput_lines.append("| " + " | ".join([display_name(arm.name), *goodput]) + " |")
    if split:
        lines += ["", *goodput_lines]
    return "\n".join(lines)


def write_json(result: Result, path: Path) -> None:
    """Write ``result.to_json()`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")


def write_chart(
    result: Result,
    path: Path,
    title: Optional[str] = None,
    *,
    show_offered: bool = True,
    log_scale: bool = False,
) -> None:
    """Draw goodput, app errors and server load against capacity over time, per arm.

    ``show_offered``: draw the offered load (the first arm's; leave it out for closed loops,
    whose arrivals each arm makes itself).  ``log_scale``: errors and server load on a
    symmetric log scale, so an arm that spins does not flatten the others.
    """
    matplotlib = require("matplotlib", "sim", "The simulator's chart")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    colours = plt.get_cmap("tab10")
    arms = ordered(result)
    first = arms[0]
    t = list(first.timeline["t"])
    width = t[1] - t[0] if len(t) > 1 else 1.0
    centres = [x + width / 2 for x in t]
    goodput_ax, errors_ax, load_ax = axes
    if show_offered:
        goodput_ax.plot(
            centres, first.timeline["offered"], color="0.6", linestyle="--", label="offered"
        )
    capacity = [c if c != float("inf") else float("nan") for c in first.timeline["capacity"]]
    load_ax.step(t, capacity, where="post", color="black", linestyle="--", label="capacity")
    for index, arm in enumerate(arms):
        colour = colours(index % 10)
        name = display_name(arm.name)
        timeline: Any = arm.timeline
        goodput_ax.plot(centres, timeline["goodput"], color=colour, label=name)
        errors_ax.plot(centres, timeline["errors"], color=colour, label=name)
        load_ax.plot(centres, timeline["received"], color=colour, label=name)
    goodput_ax.set_ylabel("goodput (ops/s)")
    errors_ax.set_ylabel("app errors (ops/s)")
    load_ax.set_ylabel("server load (requests/s)")
    load_ax.set_xlabel("simulated time (s)")
    if log_scale:
        for ax in (errors_ax, load_ax):
            ax.set_yscale("symlog", linthresh=10.0)
            ax.set_ylabel(ax.get_ylabel() + ", log")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        for start, _label in result.phases:
            ax.axvline(start, color="0.8", linewidth=0.8)
    for start, label in result.phases:
        goodput_ax.annotate(
            label,
            (start, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            fontsize=8,
            color="0.35",
        )
    goodput_ax.legend(loc="upper right", fontsize=8, ncol=3)
    load_ax.legend(loc="upper right", fontsize=8, ncol=3)
    figure.suptitle(title or f"{result.scenario} (seed {result.seed})")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
