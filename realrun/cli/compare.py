"""The work behind ``python -m realrun compare`` (and the bare ``python -m realrun``), once ``cli``
has checked the flags.

The model loads only after every flag and file was checked (``RunSetup``); then the step-time
model (a calibration file, the course's reference, or a profile taken now), the measured runs
with a canary around each (``realrun.judge.compare.compare_policies``), and the report, printed
before any file is written (``realrun.cli.compare_report``). A run that takes more than a few
seconds says what it is doing on stderr (``realrun.clock.progress``).
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Callable
from pathlib import Path

from batchsim.core.errors import ConfigError, check_at_most, check_int_at_least, show

from ..clock.progress import Progress, progress_lines
from ..clock.real_span import check_real_span
from ..reference.course import REFERENCE
from .calibration import calibration as _calibration
from .engines import load, make_engine, measure_fn, vllm_server, wants_progress
from .run_setup import RunSetup

__all__ = ["compare", "PROFILE_S"]

#: About how long a profile fitted to a small workload takes on a 2-core laptop (for the progress
#: lines).
PROFILE_S = 40.0


def _check_compare_flags(args) -> None:
    """compare's own flags, refused before the model loads."""
    from batchsim.core.errors import check_choice
    from batchsim.sim.busy import check_busy
    from batchsim.sim.sampled import NOISE_CHOICES

    if args.step_noise is not None:
        check_choice("step-noise", args.step_noise, NOISE_CHOICES)
    for name, most in (("seeds", 200), ("repeats", 50)):
        v = getattr(args, name)
        if v is not None:
            check_int_at_least(name, v, 1)
            check_at_most(name, v, most, "runs")
    if args.seeds is not None and args.seeds > 1 and args.step_noise == "none":
        raise ConfigError(
            f"--seeds {args.seeds} draws step times, and --step-noise none prices every pass at "
            f"its mean: "
            "give one of them"
        )
    if args.busy is not None:
        check_busy(args.busy)
    if getattr(args, "run_spread", None) is not None:
        given_spread(args.run_spread)
    if getattr(args, "level_move", None) is not None:
        given_move(args.level_move)
    budget = getattr(args, "profile_budget", None)
    if budget is not None and not (budget == budget and 5 <= budget <= 3600):
        raise ConfigError(f"--profile-budget must be seconds in [5, 3600], got {budget:g}")


def _expected_s(args, setup: RunSetup) -> float:
    """A floor on the run's length: every measured run lasts its arrivals' span; a profile,
    ``PROFILE_S``."""
    span = float(setup.workload.arrivals[-1]) if len(setup.workload) else 0.0
    return span * len(setup.names) * (args.repeats or 1) + (0.0 if args.calibration else PROFILE_S)


def compare(args: argparse.Namespace, setup: RunSetup, then: Callable | None = None) -> int:
    """``then(report, run_once)``, when given, is called once the compare has measured, while its
    engine still serves: ``run_once(label)`` is one more measured run of that policy (a bench's
    held-out runs)."""
    _check_compare_flags(args)
    say = Progress(progress_lines(args, _expected_s(args, setup)))
    if getattr(args, "bare", None):
        say.line(args.bare)
    # No line before the model loads: a refusal (a file's model without a spread, say) stays one
    # line.
    lm = load(args, setup.notes)
    server = vllm_server(args, setup, lm)
    try:
        return _compare(args, setup, lm, server, say, then)
    finally:
        if server is not None:
            server.close()


def _compare(
    args: argparse.Namespace,
    setup: RunSetup,
    lm,
    server,
    say: Progress,
    then: Callable | None = None,
) -> int:
    from ..clock.runner import limits_for
    from ..judge.compare import compare_policies
    from ..timing.drift import load_warning
    from .compare_report import report_compare

    notes, workload = setup.notes, setup.workload
    if not args.calibration and server is not None:
        say.line(
            f"profiling {lm.name} on {lm.device} over the shapes this workload needs (about "
            f"{PROFILE_S:.0f} s "
            "on a 2-core laptop)"
        )
    pairs, ours, step_times, cal_info = _sides(args, setup, lm, server, say)
    engine = (
        ours
        if setup.engine == "ours"
        else (
            None
            if setup.engine in ("hf-continuous", "vllm")
            else make_engine(setup.engine, lm, args, setup.seed)
        )
    )
    warn = load_warning(lm.threads)
    # The replay (decomposition b) re-runs a fresh copy of each policy on the measured step times.
    builders = dict(zip(setup.names, setup.policies))
    replay = (lambda label: builders[label].build()) if setup.engine == "ours" else None
    limits = limits_for(lm, setup.kv)
    seeds = _seeds(args, step_times, server is not None, notes)
    # --busy is set on the simulated side the prediction uses: vLLM's flavour where vLLM serves.
    sim_builders = (
        {n: (lambda sim=sim: copy.deepcopy(sim)) for n, sim, _ in pairs}
        if server is not None
        else {n: c.build for n, c in builders.items()}
    )
    workloads = (
        _busy_workloads(args, workload, sim_builders, step_times, limits, notes)
        if args.busy is not None
        else workload
    )
    repeats = args.repeats or 1
    if args.busy is not None:  # the span is known only now that --busy has set each policy's rate
        spans = [float(w.arrivals[-1]) if len(w) else 0.0 for w in workloads.values()] * repeats
        check_real_span(
            spans,
            args.no_size_check,
            cause=f"--busy {args.busy:g} sets the rates so that ",
            fix="raise --busy",
        )
    canary = _canary(ours, step_times, setup, notes, server, lm)
    per_label = workloads if isinstance(workloads, dict) else None
    measure = say.runs(len(pairs) * repeats, measure_fn(setup, engine, lm, args, server, per_label))
    adjust = None
    if server is not None:  # vLLM's tokens reach the client a profiled lag after their step
        from ..reference.vllm.commands import delivered

        lag = float(cal_info.get("delivery_s") or 0.0)
        adjust = lambda result: delivered(result, lag)  # noqa: E731
    report = compare_policies(
        workloads,
        pairs,
        measure,
        step_times,
        slo=setup.slo,
        limits=limits,
        replay_policy=replay,
        seeds=seeds,
        repeats=repeats,
        order_seed=setup.seed,
        canary=canary,
        noise=args.step_noise or "profiled",
        level=not getattr(args, "no_speed_check", False),
        adjust=adjust,
        stored_spread=given_spread(args.run_spread)
        if getattr(args, "run_spread", None)
        else stored_spread(cal_info),
        stored_move=given_move(args.level_move)
        if getattr(args, "level_move", None)
        else stored_move(cal_info),
    )
    keep_spread(report, cal_info, fresh=not args.calibration, notes=notes)
    if then is not None:  # before the notes put the engine into each row's label
        once = measure_fn(setup, engine, lm, args, server, per_label)
        then(report, lambda label: once(label, builders[label].build()))
    _report_notes(
        report,
        setup,
        lm,
        server,
        ours,
        canary,
        step_times,
        cal_info,
        say,
        warn,
        reference=args.calibration == REFERENCE,
    )
    return report_compare(
        args, setup, lm, report, step_times, cal_info, seeds, repeats, say.elapsed
    )


def given_spread(text: str):
    """``--run-spread SD:DF``: an sd of ln(level) as a share or a percentage (0.08, 8%), and the
    degrees of freedom it was read with (a whole number from 1; without one, 1: a guess weighs
    little)."""
    from ..judge.interval import RunSpread
    from ..judge.level_move import parse_sd_df

    try:
        sd, df = parse_sd_df(text, "--run-spread")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if sd <= 0:
        raise ConfigError(f"--run-spread must be an sd above 0, got {show(text)}")
    return RunSpread(sd, f"given (--run-spread {text})", df + 1, df)


def given_move(text: str):
    """``--level-move SD:DF``: the level's move from a profile to its runs, read earlier on this
    machine (``realrun.judge.level_move``), as ``given_spread`` reads its flag."""
    from ..judge.level_move import LevelMove, parse_sd_df

    try:
        sd, df = parse_sd_df(text, "--level-move")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return LevelMove(sd, f"given (--level-move {text})", df)


def stored_move(cal_info: dict):
    """The level's move an earlier compare stored with this calibration (None: none, or
    unreadable)."""
    from ..judge.level_move import LevelMove

    return _stored(
        cal_info, "level_move", lambda got, src: LevelMove(float(got["sd"]), src, int(got["df"]))
    )


def stored_spread(cal_info: dict):
    """The run-to-run spread an earlier compare stored with this calibration (None: none, or
    unreadable)."""
    from ..judge.interval import RunSpread

    return _stored(
        cal_info,
        "run_spread",
        lambda got, src: RunSpread(
            float(got["sd"]), src, int(got.get("runs", 0)), int(got.get("df", 0))
        ),
    )


def _stored(cal_info: dict, key: str, make):
    """``make(the stored dict, its source as the report says it)`` for what an earlier compare
    stored under ``key`` (``realrun.judge.spread.STORED``); None where there is none or it cannot
    be read."""
    got = cal_info.get(key)
    if not isinstance(got, dict):
        return None
    try:
        return make(got, f"stored with the calibration by an earlier compare: {got['source']}")
    except (KeyError, TypeError, ValueError):
        return None


def keep_spread(report, cal_info: dict, fresh: bool, notes: list[str]) -> None:
    """Store the spread this compare measured from its runs' passes (two or more runs of a policy)
    and the level's move from the profile to its runs with the calibration it profiled, so a later
    compare on it with one run per policy stands on this machine's spread, not an assumed one, and
    its interval made before the runs holds the move. Only a calibration profiled now is written to:
    a given file (the course's reference, say) is never touched."""
    from batchsim.core.files import dumps

    spread, path = report.spread, cal_info.get("file")
    spread = spread if spread is not None and spread.df >= 2 else None
    move = report.move_next
    if not fresh or not path or (spread is None and move is None):
        return
    kept = []
    try:
        obj = json.loads(Path(path).read_text())
        if spread is not None:
            obj["run_spread"] = spread.as_dict()
            kept.append(f"this machine's run-to-run spread ({spread.sd:.1%})")
        if move is not None:
            obj["level_move"] = move.as_dict()
            kept.append(f"the level's move from the profile to the runs ({move.sd:.1%})")
        tmp = Path(path).with_suffix(".json.tmp")
        tmp.write_text(dumps(obj))
        tmp.replace(path)
        notes.append(f"{' and '.join(kept)} stored in {path} for later compares")
    except (OSError, ValueError) as e:
        notes.append(f"note: the run spread and the level's move were not stored in {path}: {e}")


def _sides(args: argparse.Namespace, setup: RunSetup, lm, server, say: Progress):
    """(pairs of (label, simulated policy, measured policy), our engine or None, the step-time model
    and what made it): vLLM's side schedules as vLLM V1 does, with the very knobs vLLM was given."""
    if server is not None:
        from ..reference.vllm import commands as vllm_commands

        pairs = [
            (n, vllm_commands.sim_policy(c, server.knobs.async_scheduling), c.build())
            for n, c in zip(setup.names, setup.policies)
        ]
        step_times, cal_info = vllm_commands.calibration(
            args, server, lm, setup, wants_progress(args)
        )
        return pairs, None, step_times, cal_info
    pairs = [(n, c.build(), c.build()) for n, c in zip(setup.names, setup.policies)]
    ours = make_engine("ours", lm, args, setup.seed)
    step_times, cal_info = _calibration(
        args, lm, ours, setup, pairs, wants_progress(args), say=say.line if say.enabled else None
    )
    return pairs, ours, step_times, cal_info


def _canary(ours, step_times, setup: RunSetup, notes: list[str], server=None, lm=None):
    """Fixed passes against the profile's price before and after every run: the machine's level over
    the session, prefill and decode apart; the prediction is made there (unless --no-speed-check).
    vLLM's steps have a canary of their own (``realrun.reference.vllm.canary``). None where there is
    no profile of the measured engine to hold them to."""
    from batchsim.sim.profiled import ProfiledStepTime

    if not isinstance(step_times, ProfiledStepTime) or setup.engine not in ("ours", "vllm"):
        return None
    if setup.engine == "vllm":
        if server is None or step_times.plan != "fused":
            return None  # (a calibration of another engine: its price is not vLLM's steps')
        from ..reference.vllm.canary import VLLMCanary

        canary = VLLMCanary(server, step_times, lm.vocab_size)
    else:
        from ..timing.canary import Canary

        canary = Canary(ours, step_times)
    if canary.reference is None:
        notes.append(
            "note: the calibration kept no canary of its own (an older profile), so the canaries "
            "are held up to the profiled price alone; profile again for a level that cancels the "
            "canary's own cost"
        )
    return canary


def _report_notes(
    report,
    setup: RunSetup,
    lm,
    server,
    ours,
    canary,
    step_times,
    cal_info: dict,
    say: Progress,
    warn: str | None,
    reference: bool = False,
) -> None:
    """What the report says beside its table: the canaries, vLLM's delivery and schedule, the drift
    since the profile, the machine's load; and the engine in each row's label when it is not
    ours."""
    from batchsim.sim.profiled import ProfiledStepTime

    from ..timing.drift import load_warning, recheck

    for row in report.rows:
        if row.canary:
            against = (
                "the profile's own canary"
                if canary.reference is not None
                else "their profiled price"
            )
            report.notes.append(
                f"{row.label}: canary before / after each run, prefill and decode passes against "
                f"{against}: " + "; ".join(f"{_reading(b)} / {_reading(a)}" for b, a in row.canary)
            )
    if server is not None:
        from ..reference.vllm import commands as vllm_commands

        # (each prediction already carries vLLM's delivery lag: compare_policies' adjust)
        for row in report.rows:
            row.decomposition = vllm_commands.decompose_vllm(row, step_times)
            report.notes.append(vllm_commands.schedule_note(row))
        if report.rows and hasattr(step_times, "decode"):
            from ..reference.vllm.drift import recheck_note

            report.notes.append(recheck_note(server, step_times, lm.vocab_size))
    if isinstance(step_times, ProfiledStepTime) and report.rows and setup.engine == "ours":
        say.line("timing the calibration's shapes once more (drift)")
        report.notes.append(recheck(ours, step_times).text(reference=reference))
    if warn or (warn := load_warning(lm.threads)):
        report.notes.append(warn)
    for row in report.rows:
        if setup.engine != "ours":
            row.label = f"{row.label} ({setup.engine})"


def _reading(r) -> str:
    return f"{r.prefill:.2f}x {r.decode:.2f}x" if r is not None else "no reading"


def _seeds(args, model, vllm: bool, notes: list[str]) -> int:
    """How many seeded simulations the prediction takes: --seeds with --step-noise profiled (the
    default), 1 when the calibration kept no spread (an older file: noted) or the noise is off."""
    from batchsim.sim.sampled import spread_of

    if (args.step_noise or "profiled") == "none":
        return 1
    models = model.values() if isinstance(model, dict) else [model]
    if any(spread_of(m) is None for m in models):
        what = "vLLM's profile" if vllm else "the calibration"
        if args.step_noise in ("profiled", "passes"):
            raise ConfigError(
                f"step-noise {args.step_noise} needs a profile that kept each shape's spread, and "
                f"{what} has none: "
                "re-profile, or use --step-noise none"
            )
        notes.append(
            f"note: {what} kept no spread of its step times, so each pass is priced at its mean "
            f"(one prediction, "
            "no band); profile again for a band"
        )
        return 1
    return args.seeds or 5


def _busy_workloads(args, workload, builders, model, limits, notes) -> dict:
    """One workload per policy, its arrivals scaled so the simulated server is busy --busy of the
    time."""
    from batchsim.sim.busy import rate_factor_for_busy, scaled

    out = {}
    base = (
        len(workload) / max(float(workload.arrivals[-1] - workload.arrivals[0]), 1e-9)
        if len(workload) > 1
        else 0.0
    )
    for label, build in builders.items():
        st = model[label] if isinstance(model, dict) else model
        f = rate_factor_for_busy(workload, build, st, args.busy, limits)
        out[label] = scaled(
            workload, f, f"{workload.description}, arrivals x {f:.3g} (busy {args.busy:.0%})"
        )
        notes.append(
            f"--busy {args.busy:g}: {label} at {f:.3g}x the workload's rate ({base * f:.3g} "
            f"requests/s)"
        )
    return out
