"""The work behind ``python -m realrun run``, ``compare`` and ``profile``, once ``cli`` has checked the flags.

Each command loads the model only after every flag and file was checked (``cli.Plan``),
prints its results, and only then writes files, whole (``batchsim.core.files.Staging``),
so neither a bad path nor Ctrl-C loses a measurement.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from batchsim.core.errors import ConfigError, check_at_most, check_int_at_least, show
from batchsim.core.files import Staging, check_out_dir, dumps
from batchsim.core.metrics import format_table, summarize

from .calibrate import calibration as _calibration
from .plan import Plan, check_model_flags, nothing_served, rejection_lines, write_outputs

__all__ = ["run", "compare", "profile", "load"]


def load(args: argparse.Namespace, notes: list[str] | None = None):
    """The model; what loading it had to decide (an EOS past the vocabulary, say) goes to ``notes``."""
    from .model import load_model

    lm = load_model(args.model, device=args.device, dtype=args.dtype, threads=args.threads)
    if notes is not None:
        notes.extend(n for n in lm.extra.get("notes", ()) if n not in notes)
    return lm


def _progress(args) -> bool:
    p = getattr(args, "progress", None)
    return sys.stderr.isatty() if p is None else bool(p)


def _make_engine(name: str, lm, args, seed: int):
    from .baselines import HFGenerateEngine
    from .engine import Engine

    if name == "hf-generate":
        return HFGenerateEngine(lm, stop_on_eos=args.stop_on_eos, prompt_seed=seed)
    if name != "ours":  # vllm and hf-continuous run their own schedulers: never stand in for them quietly
        raise ConfigError(f"engine {name} has no step-by-step engine to build here (only ours and hf-generate do)")
    return Engine(lm, stop_on_eos=args.stop_on_eos, prompt_seed=seed)


def _measure_fn(plan: Plan, engine, lm, args, server=None, workloads: dict | None = None):
    from .baselines import run_hf_continuous
    from .runner import limits_for, run_real

    def measure(label, policy):
        workload = workloads[label] if workloads else plan.workload
        if plan.engine == "vllm":
            from .vllm.serve import run_vllm

            return run_vllm(workload, server, limits_for(lm, plan.kv), lm.vocab_size, lm.tokenizer, plan.seed,
                            args.stop_on_eos, _progress(args), f": {lm.name} on {lm.device} ({lm.dtype})")
        if plan.engine == "hf-continuous":
            p = policy
            return run_hf_continuous(
                workload, lm, max_seqs=p.max_seqs, max_batched_tokens=p.max_batched_tokens, block_size=p.block_size,
                kv_budget_tokens=plan.kv, stop_on_eos=args.stop_on_eos, prompt_seed=plan.seed, progress=_progress(args),
            )[0]
        # The trace and the engine's pass log let compare decompose the error (a run keeps them too:
        # a few records per step, small beside the model).
        return run_real(workload, policy, engine, kv_budget_tokens=plan.kv, progress=_progress(args), trace=True)

    return measure


def _memory_line(meta: dict) -> str:
    if "peak_rss_bytes" in meta:
        parts = [f"peak RSS {meta['peak_rss_bytes'] / 2**20:.0f} MiB"]
    else:  # vLLM's engine core keeps its memory in a process of its own: not measured is not 0 MiB
        parts = [f"peak RSS not measured (engine {meta.get('engine', 'unknown')} runs its model outside this process's count)"]
    if "cuda_max_memory_allocated_bytes" in meta:
        parts.append(f"CUDA max allocated {meta['cuda_max_memory_allocated_bytes'] / 2**20:.0f} MiB")
    if meta.get("kv_peak_bytes_measured"):
        parts.append(f"KV buffers peak {meta['kv_peak_bytes_measured'] / 2**20:.1f} MiB")
    return "memory: " + ", ".join(parts)


def _load_line() -> str:
    from .model import available_cores

    try:
        la = os.getloadavg()
    except OSError:
        return "machine load: unknown"
    return (f"machine load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f} on {available_cores()} cores "
            "(other busy processes stretch the measured times, not the predicted ones)")


def _stopped_code(stopped: list[str]) -> int:
    return 130 if any(s.startswith("interrupted") for s in stopped) else 0


def _all_rejected(results: dict) -> int:
    if nothing_served(results):
        print(f"realrun: error: every request was rejected, so nothing was measured ({rejection_lines(results)[0]})",
              file=sys.stderr)
        return 2
    return 0


def _printable(meta: dict) -> dict:
    """The meta a JSON report prints: without the per-step and per-token logs a run keeps for compare."""
    return {k: v for k, v in meta.items() if k not in ("trace", "passes", "outputs", "step_shapes")}


def _vllm_server(args, plan: Plan, lm):
    if plan.engine != "vllm":
        return None
    from .vllm.commands import start_server

    return start_server(args, plan, lm, _progress(args))


# -- run ------------------------------------------------------------------------------------------

def run(args: argparse.Namespace, plan: Plan) -> int:
    if plan.fleet.replicas > 1:
        from .fleet_command import run_fleet

        return run_fleet(args, plan)
    notes = plan.notes
    lm = load(args, notes)
    engine = None if plan.engine in ("hf-continuous", "vllm") else _make_engine(plan.engine, lm, args, plan.seed)
    server = _vllm_server(args, plan, lm)
    measure = _measure_fn(plan, engine, lm, args, server)
    name = plan.names[0]
    label = name if plan.engine == "ours" else f"{name} ({plan.engine})"
    if plan.engine == "hf-continuous":
        notes.append("hf-continuous runs its own scheduler: its steps are not observed, so busy, batch and KV peak read 0")
    try:
        result = measure(label, plan.policies[0].build())
    finally:
        if server is not None:
            server.close()
    summary = summarize(result, plan.slo)
    meta = result.meta
    workload = plan.workload
    from batchsim.core import rejections

    if args.json:
        print(dumps({
            "scenario": plan.name,
            "config": {"workload": workload.description, "requests": len(workload), "policy": result.policy,
                       "engine": plan.engine, "kv_budget_tokens": plan.kv, "model": lm.describe()},
            "runs": [{"label": label, "policy": result.policy, "summary": summary, "meta": _printable(meta),
                      "rejections": rejections.counts(result.records.rejected)}],
            "summary": summary,
            "notes": notes,
        }))
    else:
        print(f"realrun run: {label} measured on {lm.describe()}")
        print()
        print(format_table({label: summary}))
        for line in rejection_lines({label: result}):
            print(line)
        print()
        for n in notes:
            print(n)
        print(f"workload: {len(workload)} requests, {workload.description}")
        print(_memory_line(meta))
        if meta.get("stopped"):
            print(f"note: {meta['stopped']}")
    paths = write_outputs(plan, {f"{name}-measured-": result}, args)
    if paths and not args.json:
        print(f"records: {', '.join(str(p) for p in paths)}")
    code = _stopped_code([meta.get("stopped") or ""])
    return code or _all_rejected({label: result})


# -- compare ----------------------------------------------------------------------------------------

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
        raise ConfigError(f"--seeds {args.seeds} draws step times, and --step-noise none prices every pass at its mean: "
                          "give one of them")
    if args.busy is not None:
        check_busy(args.busy)


def compare(args: argparse.Namespace, plan: Plan) -> int:
    _check_compare_flags(args)
    lm = load(args, plan.notes)
    server = _vllm_server(args, plan, lm)
    try:
        return _compare(args, plan, lm, server)
    finally:
        if server is not None:
            server.close()


def _compare(args: argparse.Namespace, plan: Plan, lm, server) -> int:
    from .compare import compare_policies, format_compare, plot_compare
    from .engine import Engine

    notes, workload = plan.notes, plan.workload
    if server is not None:
        from .vllm import commands as vllm_commands

        # The simulated side schedules as vLLM V1 does, with the very knobs vLLM was given.
        pairs = [(n, vllm_commands.sim_policy(c), c.build()) for n, c in zip(plan.names, plan.policies)]
        ours = None
        step_times, cal_info = vllm_commands.calibration(args, server, lm, plan, _progress(args))
    else:
        pairs = [(n, c.build(), c.build()) for n, c in zip(plan.names, plan.policies)]
        ours = Engine(lm, stop_on_eos=args.stop_on_eos, prompt_seed=plan.seed)
        step_times, cal_info = _calibration(args, lm, ours, plan, pairs, _progress(args))
    engine = ours if plan.engine == "ours" else (None if plan.engine in ("hf-continuous", "vllm") else _make_engine(plan.engine, lm, args, plan.seed))
    from batchsim.sim.profiled import ProfiledStepTime

    from .drift import load_warning, recheck
    from .runner import limits_for

    warn = load_warning(lm.threads)
    # The replay (decomposition b) re-runs a fresh copy of each policy on the measured step times.
    builders = dict(zip(plan.names, plan.policies))
    replay = (lambda label: builders[label].build()) if plan.engine == "ours" else None
    limits = limits_for(lm, plan.kv)
    seeds = _seeds(args, step_times, server is not None, notes)
    workloads = _busy_workloads(args, workload, builders, step_times, limits, notes) if args.busy is not None else workload
    canary = None
    repeats = args.repeats or 1
    if isinstance(step_times, ProfiledStepTime) and plan.engine == "ours":
        # Fixed passes against the profile's price before and after every run: the machine's level over
        # the session, prefill and decode apart; the prediction is made there (unless --no-speed-check).
        from .canary import Canary

        canary = Canary(ours, step_times)
        if canary.reference is None:
            notes.append("note: the calibration kept no canary of its own (an older profile), so the canaries are held "
                         "up to the profiled price alone; profile again for a level that cancels the canary's own cost")
    per_label = workloads if isinstance(workloads, dict) else None
    report = compare_policies(workloads, pairs, _measure_fn(plan, engine, lm, args, server, per_label), step_times, slo=plan.slo,
                              limits=limits, replay_policy=replay, seeds=seeds, repeats=repeats,
                              order_seed=plan.seed, canary=canary, noise=args.step_noise or "profiled",
                              level=not getattr(args, "no_speed_check", False))
    for row in report.rows:
        if row.canary:
            against = "the profile's own canary" if canary.reference is not None else "their profiled price"
            report.notes.append(f"{row.label}: canary before / after each run, prefill and decode passes against {against}: "
                                + "; ".join(f"{b.prefill:.2f}x {b.decode:.2f}x / {a.prefill:.2f}x {a.decode:.2f}x"
                                                              for b, a in row.canary))
    if server is not None:
        for row in report.rows:
            row.sim = vllm_commands.delivered(row.sim, float(cal_info.get("delivery_s") or 0.0))
            row.predicted = summarize(row.sim, plan.slo)
            row.decomposition = vllm_commands.decompose_vllm(row, step_times)
            report.notes.append(vllm_commands.schedule_note(row))
        if report.rows and hasattr(step_times, "decode"):
            from .vllm.profile import recheck as vllm_recheck

            report.notes.append(vllm_recheck(server, step_times, lm.vocab_size))
    if isinstance(step_times, ProfiledStepTime) and report.rows and plan.engine == "ours":
        report.notes.append(recheck(ours, step_times).text())
    if warn or (warn := load_warning(lm.threads)):
        report.notes.append(warn)
    for row in report.rows:
        if plan.engine != "ours":
            row.label = f"{row.label} ({plan.engine})"
    title = f"{plan.name}: predicted (batchsim, calibrated) vs measured ({lm.name} on {lm.device})"
    stopped = [r.real.meta.get("stopped") for r in report.rows if r.real.meta.get("stopped")]
    results = {}
    for r in report.rows:
        results[f"{r.label} (predicted)"] = r.sim
        results[f"{r.label} (measured)"] = r.real
    outputs = {}
    for r in report.rows:
        outputs[f"{r.label.split()[0]}-measured-"] = r.real
        outputs[f"{r.label.split()[0]}-predicted-"] = r.sim
    figure = (lambda d: plot_compare(report, Path(d) / "predicted_vs_measured.png", title)) if report.rows else None
    from batchsim.core import rejections

    if args.json:
        # The object names the files it is about to move into place; they are complete before it prints.
        with Staging(plan.out) as staging:
            paths = _stage(staging, outputs, args, figure)
            print(dumps({
                "scenario": plan.name,
                "config": {"workload": workload.description, "requests": len(workload), "engine": plan.engine,
                           "kv_budget_tokens": plan.kv, "model": lm.describe(),
                           "step_time": repr(step_times), "seeds": seeds, "repeats": repeats, "busy": args.busy,
                           "step_noise": args.step_noise or "profiled",
                           "level": report.level.as_dict() if report.level is not None else None},
                "calibration": cal_info,
                "runs": [{"label": r.label, "policy": r.policy, **r.as_dict(),
                          "decomposition": r.decomposition.as_dict() if r.decomposition else None,
                          "meta": _printable(r.real.meta),
                          "rejections": {"predicted": rejections.counts(r.sim.records.rejected),
                                         "measured": rejections.counts(r.real.records.rejected)}} for r in report.rows],
                "figures": [str(p) for p in paths if p.suffix == ".png"],
                "notes": notes + report.notes,
            }))
            staging.commit()
    else:
        print(title)
        print(f"model: {lm.describe()}")
        print()
        print(format_compare(report))
        for line in rejection_lines(results):
            print(line)
        print()
        print("error = (predicted - measured) / measured")
        for n in notes + report.notes:
            print(n)
        print(f"workload: {len(workload)} requests, {workload.description}")
        if report.rows:
            print(_memory_line(report.rows[-1].real.meta))
        print(_load_line())
        for s in stopped:
            print(f"note: {s}")
        paths = write_outputs(plan, outputs, args, figure)
        figs = [p for p in paths if p.suffix == ".png"]
        if figs:
            print("figure: " + ", ".join(str(f) for f in figs))
    return _stopped_code(stopped) or _all_rejected({k: v for k, v in results.items() if k.endswith("(measured)")})


def _seeds(args, model, vllm: bool, notes: list[str]) -> int:
    """How many seeded simulations the prediction takes: --seeds with --step-noise profiled (the
    default), 1 when the calibration kept no spread (an older file: noted) or the noise is off."""
    from batchsim.sim.sampled import spread_of

    if (args.step_noise or "profiled") == "none":
        return 1
    models = model.values() if isinstance(model, dict) else [model]
    if vllm or any(spread_of(m) is None for m in models):
        what = "vLLM's profile" if vllm else "the calibration"
        if args.step_noise in ("profiled", "passes"):
            raise ConfigError(f"step-noise {args.step_noise} needs a profile that kept each shape's spread, and {what} has none: "
                              "re-profile, or use --step-noise none")
        notes.append(f"note: {what} kept no spread of its step times, so each pass is priced at its mean (one prediction, "
                     "no band); profile again for a band")
        return 1
    return args.seeds or 5


def _busy_workloads(args, workload, builders, model, limits, notes) -> dict:
    """One workload per policy, its arrivals scaled so the simulated server is busy --busy of the time."""
    from batchsim.sim.busy import rate_factor_for_busy, scaled

    out = {}
    base = len(workload) / max(float(workload.arrivals[-1] - workload.arrivals[0]), 1e-9) if len(workload) > 1 else 0.0
    for label, cfg in builders.items():
        st = model[label] if isinstance(model, dict) else model
        f = rate_factor_for_busy(workload, cfg.build, st, args.busy, limits)
        out[label] = scaled(workload, f, f"{workload.description}, arrivals x {f:.3g} (busy {args.busy:.0%})")
        notes.append(f"--busy {args.busy:g}: {label} at {f:.3g}x the workload's rate ({base * f:.3g} requests/s)")
    return out


def _stage(staging: Staging, outputs: dict, args, figure) -> list[Path]:
    paths = []
    if args.out:
        for prefix, res in outputs.items():
            paths += [staging.final(p) for p in res.records.write_csv(staging.dir, prefix=prefix)]
    if figure is not None and not args.no_plots:
        paths.append(staging.final(figure(staging.dir)))
    return paths


# -- profile ----------------------------------------------------------------------------------------

def _profile_path(args, lm_name: str | None = None, device: str | None = None) -> Path:
    """--out is a folder, as everywhere; a path ending in .json (the older form) names the file."""
    out = Path(args.out) if args.out else Path("out") / "realrun"
    if out.suffix.lower() == ".json":
        return out
    name = f"calibration-{(lm_name or 'MODEL').replace('/', '_')}-{(device or 'DEVICE').replace(':', '')}.json"
    return out / name


def profile(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .engine import Engine
    from .profile import GRIDS, profile as run_profile

    check_model_flags(args)
    if args.grid not in GRIDS:
        raise ConfigError(f"grid must be one of {', '.join(GRIDS)}, got {show(args.grid)}")
    grid = GRIDS[args.grid]
    if args.repeats is not None:
        check_int_at_least("repeats", args.repeats, 1)
        check_at_most("repeats", args.repeats, 1000, "repetitions per point")
        grid = replace(grid, repeats=args.repeats)
    target = _profile_path(args)
    if target.exists() and target.is_dir() and target.suffix.lower() == ".json":
        raise ConfigError(f"out {str(target)!r} is a folder, not a file")
    check_out_dir(target.parent, "out")
    lm = load(args)
    prof = run_profile(Engine(lm), grid, progress=_progress(args))
    path = _profile_path(args, lm.name, lm.device)
    if args.json:
        obj = {k: v for k, v in prof.as_dict().items() if k != "points"}
        print(dumps({"config": {"model": lm.describe(), "grid": args.grid, **prof.info}, "calibration": str(path),
                     "runs": [{"label": "profile", "shapes": len(prof.points), "heldout": prof.heldout,
                               "seconds": prof.seconds}],
                     "notes": [prof.text()], "model": obj}))
    else:
        from .profile import point_pass

        print(f"realrun profile: {lm.describe()}")
        print()
        print(f"{'kind':18s} {'rows':>5s} {'query':>6s} {'past':>7s} {'measured ms':>11s} {'model ms':>9s} {'error':>7s} {'spread':>7s}")
        for q in prof.points:
            t = prof.model.pass_time(point_pass(q))
            print(f"{q.kind:18s} {q.rows:5d} {q.query:6d} {q.past:7.0f} {q.seconds * 1e3:11.3f} {t * 1e3:9.3f} "
                  f"{(t - q.seconds) / q.seconds * 100:+6.0f}% {q.spread * 100:6.0f}%")
        print()
        print(prof.text())
    with Staging(path.parent) as staging:
        prof.write(staging.path(path.name))
        staging.commit()
    if not args.json:
        print(f"calibration written: {path}")
        print(f"use it: python -m batchsim run --calibration {path}   (or python -m realrun compare --calibration {path})")
    return 0
