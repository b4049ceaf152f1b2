"""How far one run lands from the next on this machine, and what each metric makes of it.

Every row's intervals and verdicts stand on two readings, made here once the compare has measured:

- the machine's run-to-run spread (``run_spread``): from the levels the runs' own passes read
  (two or more runs of a policy), pooled with one read earlier on this machine where the two
  agree; else the canaries'; else one stored with the calibration; else an assumed one;
- per metric, the parts of its spread (``metric_parts``): the seeds' spread of ln(metric), a run's
  own luck, and its elasticity to the machine's level, read from two simulations at the level
  divided and multiplied by ``LEVEL_STEP``.
"""

from __future__ import annotations

import numpy as np

from batchsim.core.metrics import summarize
from batchsim.sim.level import LevelStepTime
from batchsim.sim.sampled import with_noise
from batchsim.sim.simulator import simulate

from .equivalence import pooled_log_sd
from .interval import (
    ASSUMED,
    LEVEL_STEP,
    STORED_DF_MAX,
    MetricSpread,
    RunSpread,
    elasticity,
    seed_log_sd,
)
from .level_move import LevelMove, read_move
from .row import KEYS, CompareReport

__all__ = ["run_spread", "judge_rows", "metric_parts", "STORED"]

#: What a compare stores with the calibration it profiled (``realrun.cli.compare.keep_spread``) and
#: a later compare reads back from it, on either engine: the run spread and the level's move.
STORED = ("run_spread", "level_move")


def metric_parts(
    preds: list[dict], workload, probes, st, limits, seeds: int, noise: str, adjust, slo
) -> dict[str, MetricSpread]:
    """Per metric, the seeds' spread of ln(metric) and its elasticity to the machine's level, read
    from the policy at the level ÷ and × ``LEVEL_STEP``, with the first seed's draws on both sides
    (the same luck, so the difference is the level's alone)."""
    at = []
    for f, p in zip((1.0 / LEVEL_STEP, LEVEL_STEP), probes):
        m = LevelStepTime(st, f, f)
        sim = simulate(workload, p, with_noise(m, 0, noise) if seeds > 1 else m, limits=limits)
        at.append(summarize(adjust(sim) if adjust is not None else sim, slo))
    return {
        k: MetricSpread(
            seed_log_sd([x.get(k) for x in preds]), elasticity(at[0].get(k), at[1].get(k))
        )
        for k in KEYS
    }


def run_spread(report: CompareReport, stored: RunSpread | None = None) -> RunSpread:
    """The machine's run-to-run spread for this compare: from its runs' passes (two or more runs of
    a policy; pooled with ``stored``, read earlier on this machine, where the two agree), else the
    canaries' (when they could tell), else ``stored`` (an earlier compare's), else ``ASSUMED``; each
    says where it came from."""
    found = RunSpread.from_levels({r.label: r.run_levels for r in report.rows if not r.partial})
    if found is not None:
        return found.pooled_with(stored)
    lv = report.level
    if lv is not None and (lv.prefill_run_sd > 0 or lv.decode_run_sd > 0):
        sd = float(np.sqrt((lv.prefill_run_sd**2 + lv.decode_run_sd**2) / 2))
        return RunSpread(
            sd,
            f"the canaries around {lv.readings // 2} runs (a few passes each)",
            lv.readings // 2,
            0,
        )
    return stored if stored is not None else ASSUMED


def judge_rows(
    report: CompareReport, stored: RunSpread | None, stored_move: LevelMove | None = None
) -> None:
    """The compare's run-to-run spread, the level's move from the prediction's reference to the runs
    (pooled with ``stored_move``, read earlier on this machine: ``realrun.judge.level_move``), and
    per metric the repeats' spread pooled over the policies: what every row's intervals and
    verdicts stand on."""
    report.spread = run_spread(report, stored)
    report.move, report.move_here = read_move(
        [x for r in report.rows if not r.partial for x in r.move_levels],
        report.spread.sd,
        stored_move,
        STORED_DF_MAX,
    )
    whole = [r for r in report.rows if not r.partial]
    for k in KEYS:
        sd, df = pooled_log_sd([[x.get(k) for x in r.repeats] for r in whole])
        report.metric_sd[k] = (sd, df) if sd is not None and df >= 2 else None
    for r in report.rows:
        r.spread, r.metric_sd, r.move = report.spread, report.metric_sd, report.move
