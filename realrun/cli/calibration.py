"""The step-time model behind ``realrun compare``: a calibration file, or our engine profiled now.

A calibration predicts well only where it was measured, so a file is checked against the
model and the workload it is used on, and a profile taken now is fitted to the workload's
own shapes (``grid_for_policies``), as far as the workload reaches and within a time budget
(``sized_profile``, with ``realrun.timing.profile_size``). The vLLM engine has its own
(``realrun.reference.vllm.commands``).
"""

from __future__ import annotations

import copy
import time

from batchsim.core.errors import ConfigError, show
from batchsim.core.files import Staging, read_json

from .run_setup import RunSetup

__all__ = ["calibration", "grid_for_policies", "sized_profile", "PROFILE_BUDGET_S"]

#: Seconds a profile taken for a compare may spend by default (``--profile-budget``): a grid whose
#: estimate is above it is thinned (``realrun.timing.profile_size.within_budget``), and rounds after
#: the first are left out once they would end beyond it.
PROFILE_BUDGET_S = 90.0


def calibration(args, lm, engine, setup: RunSetup, pairs, progress: bool = False, say=None):
    """The step-time model for the prediction: from --calibration FILE, else profiled now on a grid
    fitted to the workload (saved whole under the output folder; ``say(text)`` prints its progress
    lines). Returns (model, calibration info). A profiled model knows each policy's own gap between
    steps; ``simulate`` picks it."""
    from ..judge.spread import STORED
    from ..timing.profile import GRIDS, load_calibration
    from ..timing.profile import profile as run_profile

    notes, workload = setup.notes, setup.workload
    policies = [p for _, p, _ in pairs]
    if args.calibration:
        model = load_calibration(args.calibration)
        info = read_json(args.calibration, "calibration")
        for key, have in (
            ("model_name", lm.name),
            ("device", lm.device),
            ("dtype", lm.dtype),
            ("threads", lm.threads),
        ):
            if key in info and info[key] != have:
                notes.append(
                    f"warning: calibration {args.calibration} was measured with {key}={info[key]}, "
                    f"this run uses {have}"
                )
        runs = getattr(engine, "plan", None)
        if runs is not None and getattr(model, "plan", runs) != runs:
            notes.append(
                f"warning: calibration {args.calibration} prices steps as the {model.plan!r} pass "
                f"plan, but this engine runs them as {runs!r} (its KV {engine.kv_layout}): profile "
                f"again (omit --calibration), or run with --kv "
                f"{'padded' if model.plan == 'grouped' else 'auto'}"
            )
        cal_info = {
            "file": args.calibration,
            **{
                k: info.get(k) for k in ("model", "version", "source", "heldout", "linear", *STORED)
            },
        }
        notes.extend(_coverage_notes(info, workload))
        return model, cal_info
    if args.grid != "auto" and args.grid not in GRIDS:
        raise ConfigError(f"grid must be auto, {', '.join(GRIDS)}, got {show(args.grid)}")
    budget = getattr(args, "profile_budget", None) or PROFILE_BUDGET_S
    if args.grid == "auto":
        from ..clock.runner import limits_for

        builders = {label: (lambda sim=sim: copy.deepcopy(sim)) for label, sim, _ in pairs}
        prof = sized_profile(
            engine,
            workload,
            builders,
            policies,
            limits_for(engine.lm, setup.kv),
            budget,
            say,
            busy=getattr(args, "busy", None),
            notes=notes,
            bar=progress,
        )
    else:
        prof = run_profile(
            engine, GRIDS[args.grid], policies={p.name: p for p in policies}, progress=progress
        )
    with Staging(setup.out) as staging:
        prof.write(staging.path("calibration.json"))
        path = staging.commit()[0]
    notes.append(
        f"calibration (profiled now, {len(prof.points)} shapes, {prof.seconds:.1f} s): {path}"
    )
    notes.append(prof.text())
    cal_info = {k: v for k, v in prof.as_dict().items() if k != "points"}
    cal_info["file"] = str(path)
    return prof.model, cal_info


def sized_profile(
    engine,
    workload,
    builders: dict,
    policies: list,
    limits=None,
    budget_s: float = PROFILE_BUDGET_S,
    say=None,
    busy: float | None = None,
    notes: list[str] | None = None,
    bar: bool = False,
):
    """Profile ``engine`` for this workload: a pilot prices a pass, each policy is simulated at that
    price (slowed) to find how far the workload reaches, the grid goes that far and is thinned to
    the budget, and progress lines (``say(text)``, every few seconds) say how much is left.
    ``builders``: label -> a function making a fresh simulated policy; ``busy``: the compare's
    --busy, whose rates the reach is found at. Returns the ``Profile``; ``notes`` gets what was
    sized and why."""
    from ..timing.measure import schedule
    from ..timing.profile import profile as run_profile
    from ..timing.profile_size import (
        SLOWER,
        Ticker,
        estimate,
        pilot,
        point_costs,
        reach,
        within_budget,
    )

    notes = notes if notes is not None else []
    t0 = time.monotonic()
    price = pilot(engine)
    workloads = workload
    if busy is not None and len(workload) > 1:
        from batchsim.sim.busy import rate_factor_for_busy, scaled

        workloads = {
            label: scaled(workload, rate_factor_for_busy(workload, build, price, busy, limits))
            for label, build in builders.items()
        }
    got = reach(workloads, builders, price, limits)
    full = grid_for_policies(workload, policies).clipped(engine.lm.n_positions)
    grid = grid_for_policies(workload, policies, got).clipped(engine.lm.n_positions)
    grid, est = within_budget(grid, price, budget_s)
    before = estimate(full, price)
    notes.append(
        f"profile sized to the workload: steps reach {got.rows} rows and {got.prefill_tokens} "
        f"prompt tokens (simulated at the pilot's price x {SLOWER:g}); the policies allow "
        f"{full.decode_rows[-1]} rows: about {est:.0f} s to time (the policies' whole range: about "
        f"{before:.0f} s)"
    )
    if est > budget_s:
        notes.append(
            f"warning: the thinnest grid for this workload needs about {est:.0f} s, above the "
            f"profile budget of {budget_s:.0f} s; rounds after the first are left out if they "
            f"would end beyond it"
        )
    if say is not None:
        say(
            f"profiling {engine.lm.name} on {engine.lm.device} over the shapes this workload "
            f"reaches (up to {grid.decode_rows[-1]} rows, prompts of {grid.prefill_lengths[-1]} "
            f"tokens): about {est:.0f} s"
        )
    ticker = Ticker(point_costs(grid, price), say, every=5.0) if say is not None else bar
    try:
        prof = run_profile(
            engine, grid, policies={p.name: p for p in policies}, progress=ticker, budget_s=budget_s
        )
    finally:
        if isinstance(ticker, Ticker):
            ticker.close()
    timed = (
        f"{prof.info['rounds_timed']} of {grid.rounds} rounds"
        if prof.info["rounds_timed"] < grid.rounds
        else "every round"
    )
    # the pilot and the simulations that sized the grid
    sizing_s = time.monotonic() - t0 - prof.seconds
    notes.append(
        f"profile: {prof.seconds:.0f} s against an estimate of {est:.0f} s ({timed}; pilot and "
        f"sizing {sizing_s:.1f} s)"
    )
    prof.info.update(
        {
            "estimate_s": round(est, 1),
            "pilot_s": round(sizing_s, 2),
            "reach": {"rows": got.rows, "prefill_tokens": got.prefill_tokens},
            "budget_s": budget_s,
            "schedule_points": len(schedule(grid)),
        }
    )
    return prof


def grid_for_policies(workload, policies, reach=None):
    """The profile grid this workload needs under these policies: their rows, prefill sizes and
    chunks; with ``reach`` (``realrun.timing.profile_size.reach``), no more rows and prompt tokens
    than its steps held."""
    from ..timing.profile import grid_for_workload

    rows = max(p.max_rows for p in policies)
    cont = [p for p in policies if hasattr(p, "max_batched_tokens")]
    chunk = min((p.max_batched_tokens for p in cont if p.chunked_prefill), default=None)
    padded = [p for p in policies if not hasattr(p, "max_batched_tokens")]
    p_max = int(workload.prompt_tokens.max()) if len(workload) else 1
    max_prefill = max(
        [p.max_batched_tokens for p in cont] + [p.max_rows * p_max for p in padded] + [p_max]
    )
    if reach is not None:
        # A padded pass computes its rows x its longest prompt, more than the tokens the step log
        # counts.
        rows = min(rows, max(1, reach.rows))
        max_prefill = min(
            max_prefill, max(p_max, reach.prefill_tokens, rows * p_max if padded else 0)
        )
    # padded ones, unchunked continuous
    whole = any(not getattr(p, "chunked_prefill", False) for p in policies)
    return grid_for_workload(
        workload,
        rows,
        max_prefill,
        chunk,
        policies=tuple(p.name for p in policies),
        whole_prompts=whole,
    )


def _coverage_notes(info: dict, workload) -> list[str]:
    """A calibration predicts well only where it was measured: say when the workload goes beyond."""
    if not len(workload) or not isinstance(info, dict) or info.get("model") != "profiled":
        return []
    try:
        width = max(info["decode"]["columns"])
        prompt = max(info["prefill"]["columns"])
    except (KeyError, TypeError, ValueError):
        return [
            "warning: the calibration's grids are unreadable: its coverage of this workload is "
            "unknown"
        ]
    need_ctx = int((workload.prompt_tokens + workload.output_tokens).max())
    need_prompt = int(workload.prompt_tokens.max())
    if need_ctx > 1.25 * width or need_prompt > 1.25 * prompt:
        return [
            f"warning: the calibration was measured up to contexts of ~{width:.0f} tokens and "
            f"prompts of {prompt:.0f}; this workload reaches contexts of {need_ctx} and prompts of "
            f"{need_prompt}: predictions extrapolate "
            "(omit --calibration to profile for this workload)"
        ]
    return []
