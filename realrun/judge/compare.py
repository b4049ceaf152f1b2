"""Predicted against measured: the simulator's forecast held up to the real server.

For each policy, the same workload runs twice: once through ``batchsim.simulate`` with a
step-time model calibrated on this machine (``realrun.timing.profile``), once through the
wall-clock runner on the real model. Both go through the same driver loop under the same
server limits and produce batchsim records, so one ``summarize`` reads both, and the gap
between them is the cost model's error (the scheduling is literally the same code: the
decomposition, ``realrun.judge.decompose``, checks that on every run by replaying the measured
step times).

The table gives, per policy, predicted and measured throughput, TTFT, TPOT and E2E
latency with the error in percent of the measured value; the figure plots predicted
against measured on log axes (a 10 ms point and a 3 s point are both readable) beside the
errors per metric. When the measured run was cut short (Ctrl-C), both sides are compared
over the requests the measured run finished, and throughput is not compared.

With ``seeds`` > 1 and a model that carries its profiled spread, the prediction is the median
of that many simulations, each pass's time drawn from the spread with its own seed
(``batchsim.sim.sampled``), and each metric has a 90 % band; with ``repeats`` > 1 each policy
is measured that many times, interleaved (rounds, the policies' order shuffled per round by a
seeded generator, as Google Benchmark's random interleaving does, so a slow minute of the
machine spreads over every policy instead of spoiling one), with a short canary of fixed
passes timed before and after each run. Each metric then gets a verdict (``realrun.judge.verdict``).

When the canary is ``realrun.timing.canary.Canary`` (it reads each kind of pass against the model's
own price), the prediction is made at the machine's level over the session (``session_level``: the
median of every reading, prefill and decode apart), each seed at a level drawn from that median's
standard error, so the band holds the level's uncertainty besides the passes' luck; the prediction
at the profile's own level is kept beside it (``predicted_at_profile``), for the ablation.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from batchsim.core.limits import ServerLimits
from batchsim.core.metrics import SLO, summarize
from batchsim.core.policies import Policy
from batchsim.core.result import RunResult
from batchsim.core.workload import Workload
from batchsim.sim.sampled import with_noise
from batchsim.sim.simulator import simulate
from batchsim.sim.steptime import StepTimeModel

from ..timing.canary import CanaryReading, Level, session_level
from ..timing.pass_level import PassLevel, machine_level, pass_level, run_level
from .decompose import decompose
from .interval import RunSpread
from .level_move import LevelMove
from .plot import plot_compare
from .row import COMPARE_METRICS, KEYS, CompareReport, CompareRow, error_pct
from .spread import judge_rows, metric_parts
from .table import format_compare
from .verdict import band_of, median_summary

__all__ = [
    "COMPARE_METRICS",
    "CompareRow",
    "CompareReport",
    "compare_policies",
    "error_pct",
    "format_compare",
    "plot_compare",
    "predict_runs",
    "worst_error",
    "counted_only",
]


def counted_only(result: RunResult, keep: np.ndarray) -> RunResult:
    """The result with only the ``keep`` requests counted (the others set aside, with a reason)."""
    r = result.records
    recs = replace(
        r,
        start=np.where(keep, r.start, np.nan),
        first_token=np.where(keep, r.first_token, np.nan),
        finish=np.where(keep, r.finish, np.nan),
        last_token=np.where(keep, r.last_token, np.nan),
        tokens=np.where(keep, r.tokens, 0),
        rejected=[
            x if k else (x or "set aside: the measured run did not finish it")
            for x, k in zip(r.rejected, keep)
        ],
    )
    return replace(result, records=recs)


def compare_policies(
    workload: Workload | dict[str, Workload],
    pairs: list[tuple[str, Policy, Policy]],
    measure,
    step_time: StepTimeModel | dict[str, StepTimeModel],
    kv_budget_tokens: int | None = None,
    slo: SLO | None = None,
    limits: ServerLimits | None = None,
    replay_policy=None,
    seeds: int = 1,
    repeats: int = 1,
    order_seed: int = 0,
    canary=None,
    noise: str = "profiled",
    level: bool = True,
    adjust=None,
    stored_spread: RunSpread | None = None,
    stored_move: LevelMove | None = None,
) -> CompareReport:
    """``pairs``: (label, policy for the simulator, fresh identical policy for the real run).

    ``measure(label, policy) -> RunResult`` runs the real side (the runner with an engine, or a
    baseline); the simulated side is ``simulate`` with ``step_time`` (one model, or one per label)
    under the same ``limits``; ``workload`` is one for every policy, or one per label (``--busy``
    sets each policy's own rate). When the measured result kept its trace, the error is decomposed;
    ``replay_policy(label)`` makes the fresh policy the replay needs.

    ``seeds`` > 1: that many simulations, passes sampled from the model's spread, seeds 0..seeds-1
    (``ConfigError`` if the model has none). ``repeats`` > 1: that many measurements per policy,
    interleaved, the order of each round shuffled by ``numpy.random.default_rng(order_seed)``.
    ``canary()``, when given, runs before and after every measured run: a ``CanaryReading`` (then,
    with ``level``, the prediction is made at the session's level) or plain seconds (kept, not
    used). ``noise``: ``with_noise``'s choice for the seeds (``profiled``: the passes' spread and
    the slow drift). ``adjust(result) -> result``, when given, is applied to every simulated result
    before it is read (vLLM's side: each token reaches the client a profiled delivery lag after its
    step), so the median and the band are of what the client would see. ``stored_spread``: the
    machine's run-to-run spread from an earlier compare, used where this one cannot measure its own
    (``spread.run_spread``); ``stored_move``: the level's move from a profile to its runs, read
    earlier on this machine (``realrun.judge.level_move``).
    """
    limits = limits or ServerLimits(kv_budget_tokens=kv_budget_tokens)
    report = CompareReport()
    wl_of = (
        (lambda label: workload[label]) if isinstance(workload, dict) else (lambda label: workload)
    )
    # Fresh policies for the later repeats and seeds, copied before any run touches the originals.
    spare_real = {label: [copy.deepcopy(p) for _ in range(repeats - 1)] for label, _, p in pairs}
    spare_sim = {label: [copy.deepcopy(p) for _ in range(seeds - 1)] for label, p, _ in pairs}
    models = {
        label: step_time[label] if isinstance(step_time, dict) else step_time
        for label, _, _ in pairs
    }
    runs, canaries = _measure_interleaved(
        pairs, measure, spare_real, repeats, np.random.default_rng(order_seed), canary, report.notes
    )
    readings = [
        pair
        for pairs_ in canaries.values()
        for pair in pairs_
        if all(isinstance(x, CanaryReading) for x in pair)
    ]
    report.level = session_level(readings) if level else None
    if report.level is not None:
        report.notes.append(report.level.text())
    off = _machine(
        report, [(runs[label], models[label], p.name) for label, p, _ in pairs if runs[label]]
    )
    for label, sim_policy, _ in pairs:
        if runs[label]:
            report.rows.append(
                _row(
                    label,
                    sim_policy,
                    spare_sim[label],
                    runs[label],
                    models[label],
                    wl_of(label),
                    limits,
                    slo,
                    seeds,
                    replay_policy,
                    canaries[label],
                    report.notes,
                    noise,
                    report.level,
                    order_seed,
                    adjust,
                    off,
                )
            )
    judge_rows(report, stored_spread, stored_move)
    return report


def _machine(report: CompareReport, groups) -> PassLevel | None:
    """The machine's level over every policy's passes (``report.machine_level``), returned where it
    lies beyond ``CONTRADICTS`` and its error from the level predicted at: this machine is not the
    one the prediction was made for (a laptop against the course's reference calibration), and the
    verdict judges the prediction again at this level (``realrun.judge.bottom_line``)."""
    report.machine_level = ml = machine_level(groups)
    used = report.level.applied() if report.level is not None else (1.0, 1.0)
    if ml is None or not ml.contradicts(*used):
        return None
    report.notes.append(
        f"this machine ran its passes at {ml.text()} the profile's price, pooled over every "
        f"policy, where the prediction was made at {used[0]:.2f}x, {used[1]:.2f}x: the verdict "
        f"judges the "
        "prediction again at this machine's level (made after the run); the table keeps the one "
        "made before"
    )
    return ml


def _measure_interleaved(
    pairs,
    measure,
    spare_real: dict,
    repeats: int,
    rng: np.random.Generator,
    canary,
    notes: list[str],
) -> tuple[dict[str, list[RunResult]], dict[str, list]]:
    """Each policy measured ``repeats`` times, a round's order shuffled by ``rng`` (the first run of
    each uses its given policy, later ones a spare copy), a canary before and after each run; a run
    that stopped (Ctrl-C, an engine that ended) stops the rest. Returns (runs, canary readings) by
    label."""
    runs: dict[str, list[RunResult]] = {label: [] for label, _, _ in pairs}
    canaries: dict[str, list] = {label: [] for label, _, _ in pairs}
    for r in range(repeats):
        order = rng.permutation(len(pairs)) if repeats > 1 else range(len(pairs))
        for i in order:
            label, _, real_policy = pairs[int(i)]
            before = canary() if canary is not None else None
            real = measure(label, real_policy if r == 0 else spare_real[label][r - 1])
            if canary is not None:
                canaries[label].append((before, canary()))
            runs[label].append(real)
            stopped = str(real.meta.get("stopped") or "")
            if stopped:
                if stopped.startswith("interrupted"):
                    notes.append(f"interrupted during {label}: the runs after it were not measured")
                return runs, canaries
    return runs, canaries


def predict_runs(
    workload, policies, st, limits, seeds, noise, lv: Level | None, order_seed: int, adjust=None
) -> list[RunResult]:
    """One simulation per policy (fresh copies, one per seed): seed k draws its passes with seed k
    (``noise``: ``with_noise``'s choice), every seed at the level ``lv`` (or the profile's); each
    result passed through ``adjust`` when given. ``order_seed`` is kept for the callers' signature:
    the seeds alone set the draws."""
    out = []
    for k, p in enumerate(policies):
        # Every seed at the same level: the level's move from one run to the next enters the
        # intervals analytically (realrun.judge.interval), so drawing it here as well would count it
        # twice.
        m = lv.model(st) if lv is not None else st
        sim = simulate(workload, p, with_noise(m, k, noise) if seeds > 1 else m, limits=limits)
        out.append(adjust(sim) if adjust is not None else sim)
    return out


def _row(
    label,
    sim_policy,
    spares,
    reals,
    st,
    workload,
    limits,
    slo,
    seeds,
    replay_policy,
    canary,
    notes,
    noise="profiled",
    lv: Level | None = None,
    order_seed: int = 0,
    adjust=None,
    machine: PassLevel | None = None,
) -> CompareRow:
    # The level the runs' own passes read; a canary level they contradict moves nothing
    # (realrun.timing.pass_level).
    pl = pass_level(reals, st, sim_policy.name)
    if (
        lv is not None
        and pl is not None
        and lv.applied() != (1.0, 1.0)
        and pl.contradicts(*lv.applied())
    ):
        notes.append(
            f"{label}: the canaries' level ({', '.join(f'{f:.2f}x' for f in lv.applied())} "
            f"prefill, decode) is contradicted by the runs' own passes ({pl.text()}): predicted at "
            f"the profile's level"
        )
        lv = None
    # Fresh policies for the predictions beside the first, made before any simulation touches them.
    fresh = [copy.deepcopy(p) for p in [sim_policy, *spares]] if lv is not None else None
    after = [copy.deepcopy(p) for p in [sim_policy, *spares]] if pl is not None else None
    at_machine = [copy.deepcopy(p) for p in [sim_policy, *spares]] if machine is not None else None
    probes = [copy.deepcopy(sim_policy) for _ in range(2)]
    sims = predict_runs(
        workload, [sim_policy, *spares], st, limits, seeds, noise, lv, order_seed, adjust
    )
    first = reals[0]
    stopped = str(reals[-1].meta.get("stopped") or "")
    if stopped:  # compare over what the cut run finished, on its first prediction only
        real = reals[-1]
        both = real.records.completed_mask & sims[0].records.completed_mask
        pred, meas = (
            summarize(counted_only(sims[0], both), slo),
            summarize(counted_only(real, both), slo),
        )
        notes.append(
            f"{label}: the measured run stopped early ({stopped}); compared over the "
            f"{int(both.sum())} requests it finished, throughput not compared"
        )
        return CompareRow(
            label, repr(sim_policy), pred, meas, sims[0], real, partial=True, canary=canary
        )
    preds = [summarize(x, slo) for x in sims]
    meas = [summarize(x, slo) for x in reals]
    row = CompareRow(
        label,
        repr(sim_policy),
        median_summary(preds),
        median_summary(meas),
        sims[0],
        first,
        band=band_of(preds, KEYS) if seeds > 1 else {},
        repeats=meas,
        canary=canary,
        seeds=seeds,
    )
    row.parts = metric_parts(
        preds,
        workload,
        probes,
        lv.model(st) if lv is not None else st,
        limits,
        seeds,
        noise,
        adjust,
        slo,
    )
    row.run_levels = [
        x for x in (run_level(r, st, sim_policy.name) for r in reals) if x is not None
    ]
    # against the prices the prediction used: the move its interval holds (realrun.judge.level_move)
    row.move_levels = (
        [x for x in (run_level(r, lv.model(st), sim_policy.name) for r in reals) if x is not None]
        if lv is not None
        else list(row.run_levels)
    )
    if lv is not None:
        at_profile = predict_runs(
            workload, fresh, st, limits, seeds, noise, None, order_seed, adjust
        )
        row.predicted_at_profile = median_summary([summarize(x, slo) for x in at_profile])
    if machine is not None:
        at = predict_runs(
            workload, at_machine, machine.model(st), limits, seeds, noise, None, order_seed, adjust
        )
        row.predicted_at_machine = median_summary([summarize(x, slo) for x in at])
    if pl is not None:
        _after_the_run(
            row,
            pl,
            reals,
            after,
            st,
            workload,
            limits,
            slo,
            seeds,
            noise,
            order_seed,
            adjust,
            lv,
            notes,
        )
    if first.meta.get("trace") is not None and replay_policy is not None:
        # Against the model at the level predicted with: what is left is the cost model's shape, not
        # the level.
        row.decomposition = decompose(
            workload, replay_policy(label), first, lv.model(st) if lv is not None else st, limits
        )
    return row


def _after_the_run(
    row: CompareRow,
    pl: PassLevel,
    reals,
    policies,
    st,
    workload,
    limits,
    slo,
    seeds,
    noise,
    order_seed,
    adjust,
    lv: Level | None,
    notes: list[str],
) -> None:
    """The prediction again at the level the runs' passes read (labelled as made after the run), and
    the canaries held up to the passes.

    Each run is predicted at its own passes' level (the median over the seeds), and the prediction
    is the median over the runs, as the measurement is the median of the runs. One level pooled over
    the runs would stand for none of them where they differ: a ratio of totals leans to the slowest
    run, and near saturation a metric is far from linear in the level, so the prediction at the mean
    level is not the median run's. With one run, or runs without passes of their own, it is the
    pooled level."""
    per_run = [pass_level([r], st, policies[0].name) for r in reals] if len(reals) > 1 else [pl]
    per_run = [x if x is not None else pl for x in per_run]
    each = []
    for level in per_run:
        # one set of fresh policies per run's prediction
        fresh = [copy.deepcopy(p) for p in policies]
        at = predict_runs(
            workload, fresh, level.model(st), limits, seeds, noise, None, order_seed, adjust
        )
        each.append(median_summary([summarize(x, slo) for x in at]))
    row.pass_level, row.predicted_at_passes = pl, median_summary(each)
    errs = row.errors_at_passes
    shown = ", ".join(
        f"{k.replace('_', ' ')} {errs[k]:+.0f} %"
        for k in ("p50_e2e", "p99_e2e", "p50_ttft", "mean_tpot")
        if errs.get(k) is not None
    )
    each_run = (
        " (each run predicted at its own passes' level, the median taken)"
        if len(per_run) > 1
        else ""
    )
    notes.append(
        f"{row.label}: the runs' own passes ran at {pl.text()} the profile's price; predicted "
        f"again at that level{each_run} (after the run, to split a miss into the machine's part "
        f"and the model's): {shown}"
    )
    if lv is not None and pl.contradicts(lv.prefill, lv.decode):
        notes.append(
            f"{row.label}: the canaries read {lv.prefill:.2f}x prefill, {lv.decode:.2f}x decode, "
            f"which the runs' own passes contradict "
            f"({', '.join(pl.contradicts(lv.prefill, lv.decode))}): trust the passes"
        )


def worst_error(report: CompareReport) -> tuple[str, str, float] | None:
    """(policy, metric, error %) of the largest error in the report."""
    worst = None
    for row in report.rows:
        for k, e in row.errors.items():
            if e is not None and (worst is None or abs(e) > abs(worst[2])):
                worst = (row.label, k, e)
    return worst
