"""Steady state: does a fleet hold its latency for as long as the traffic lasts?

A finite run can flatter a fleet that is too small: its queue grows the whole time, but a
run shorter than the time the queue takes to pass the objective never shows it. Two checks
close the gap. Theory: a server carries at most ``cap`` requests a second (back-to-back full
batches), so a fleet of n with n x cap below the arrival rate has a queue that grows
without end, whatever a run shows. Measurement: in steady state the requests arriving in the
last third of the run wait as long as those of the middle third; a growing queue makes
the later ones wait longer. ``plan`` applies both to every fleet, and sizes its runs so the
arrivals span several times the objective where it can (``batchsim.cli.capacity``).
"""

from __future__ import annotations

__all__ = ["GROWTH_RATIO", "GROWTH_FLOOR", "SHORT_RUN_LOAD", "thirds", "steady_misses", "secs"]

#: A fleet's queue is growing when the requests arriving in the last third of the run wait this much
#: longer (end to end, on average) than those of the middle third, and by more than ``GROWTH_FLOOR``
#: of the objective: a steady queue gives both thirds the same mean, up to noise.
GROWTH_RATIO = 1.25
GROWTH_FLOOR = 0.05
#: The most of theory's capacity a fleet may be loaded to when the run is shorter than the objective
#: can show: an M/G/1 queue at 90 % load already waits 9 times its service time on average, and the
#: wait doubles by 95 %.
SHORT_RUN_LOAD = 0.9


def secs(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.2f} s"


def thirds(rec) -> dict:
    """Mean E2E of the requests arriving in the middle and in the last third of the run: the queue's
    growth."""
    if rec.summary_only or len(rec) < 30:
        return {}
    done = rec.completed_mask
    span = float(rec.arrival[-1] - rec.arrival[0])
    cut1, cut2 = rec.arrival[0] + span / 3, rec.arrival[0] + 2 * span / 3
    e2e = rec.finish - rec.arrival
    mid, last = done & (rec.arrival >= cut1) & (rec.arrival < cut2), done & (rec.arrival >= cut2)
    if mid.sum() < 10 or last.sum() < 10:
        return {}
    return {"e2e_mid": float(e2e[mid].mean()), "e2e_last": float(e2e[last].mean())}


def steady_misses(
    s: dict, servers: int, cap: float | None, rate: float, objective, max_load: float = 1.0
) -> list[str]:
    """Why a fleet cannot hold its latency in steady state: theory says it carries less than the
    traffic, or the run measured its queue growing (see ``GROWTH_RATIO``). ``max_load`` < 1: a run
    too short to show a slow queue's growth, so theory's capacity must keep that much headroom
    (``SHORT_RUN_LOAD``)."""
    out = []
    if cap is not None and servers * cap < rate:
        out.append(
            f"cannot keep up: {servers} x {cap:,.3g} requests/s at most < {rate:,.4g}/s arriving "
            f"(queue grows)"
        )
    elif cap is not None and servers * cap * max_load < rate:
        out.append(
            f"loaded to {rate / (servers * cap):.0%} of theory's capacity, past the {max_load:.0%} "
            f"a run this "
            "short can vouch for (its queue may grow unseen)"
        )
    mid, last = s.get("e2e_mid"), s.get("e2e_last")
    target = min(
        v for v in (objective.p99_e2e, objective.p99_ttft, objective.p99_tpot) if v is not None
    )
    if (
        mid is not None
        and last is not None
        and last > GROWTH_RATIO * mid
        and last - mid > GROWTH_FLOOR * target
    ):
        out.append(
            f"queue grows: mean E2E {secs(mid)} for the middle third of arrivals, {secs(last)} for "
            f"the last"
        )
    return out
