"""``python -m realrun``: the policies of batchsim on a real model, measured and compared.

Commands:
    (none)               compare on tiny-gpt2, CPU, a small load (about a minute on 2 cores)
    compare [SCENARIO]   each policy simulated (calibrated) and measured on one workload:
                         predicted vs measured, with errors, and a figure
    run [SCENARIO]       measure one policy on one workload (batchsim's flags, unchanged)
    profile              measure step times over a grid, fit the cost model, write a calibration
    doctor               device, dtype, versions, model source, threads, memory: the first check

Bad input prints one line naming the field and the value, and exits with code 2.
Ctrl-C stops a measurement cleanly: what was measured is printed, and the exit code is 130.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from batchsim.cli import OneLineParser
from batchsim.cli.options import (
    add_policy_args,
    add_slo_args,
    add_workload_args,
    kv_budget_from_args,
    policies_from_args,
    policy_from_args,
    slo_from_args,
    workload_from_args,
)
from batchsim.core.errors import ConfigError, check_int_at_least
from batchsim.core.metrics import format_table, summarize
from batchsim.sim.profiled import ProfiledStepTime
from batchsim.teach.scenarios import get_scenario

__all__ = ["main", "build_parser", "REALRUN_DEFAULTS"]

#: A load a 2-core laptop serves in seconds per policy: ~60 % of the taxi's capacity on tiny-gpt2.
REALRUN_DEFAULTS = {
    "rate": 4.0, "requests": 32, "prompt_len": "uniform:16,128", "output_len": "uniform:16,96",
    "max_batch": 8, "max_wait": 0.1, "max_seqs": 32, "max_batched_tokens": 1024,
}
# Scenario defaults that describe batchsim's simulated GPU server: the real server replaces them.
_SIM_SERVER_KEYS = {"gpu", "model", "dtype", "gpu_price", "mem_util", "compute_eff", "memory_eff", "overhead",
                    "catalog", "step_time_model", "kv_budget_bytes", "table_keys"}
_PADDED = ("taxi", "static", "dynamic")


# -- parser -----------------------------------------------------------------------------------

def _add_model_args(p: argparse.ArgumentParser, engine: bool = True) -> None:
    g = p.add_argument_group("real model (the server that is measured)")
    g.add_argument("--model", default="tiny-gpt2", help="tiny-gpt2 (default, offline), gpt2-random (124M shape, offline), or a Hugging Face id / local path (cached or reachable)")
    g.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    g.add_argument("--dtype", default="auto", help="auto (fp16 on CUDA, fp32 on CPU), fp32, fp16 or bf16")
    g.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: half the cores, at least 1)")
    g.add_argument("--stop-on-eos", action="store_true", help="a request ends at its first EOS token (default: run to the workload's length)")
    if engine:
        g.add_argument("--engine", default="ours", help="ours (default), hf-generate (generate() on padded batches) or hf-continuous (transformers' continuous batching)")


def _add_workload_run_args(p: argparse.ArgumentParser, calibration: bool) -> None:
    p.add_argument("scenario", nargs="?", default=None, help="a batchsim scenario to take the workload and policies from (default: a small load)")
    _add_model_args(p)
    add_workload_args(p)
    add_policy_args(p)
    # batchsim's server flags describe a simulated GPU; here the server is the real model, so only
    # the KV budget (a policy matter) and, for compare, the calibration carry over.
    g = p.add_argument_group("server")
    g.add_argument("--kv-budget-tokens", type=int, default=None, help="KV-cache budget in tokens, enforced by the policy (default: unlimited)")
    if calibration:
        g.add_argument("--calibration", default=None, help="step-time model for the prediction (JSON from `python -m realrun profile`; default: profile now)")
        g.add_argument("--grid", default="auto", help="profile grid when no calibration is given: auto (fitted to the workload), quick or full")
    add_slo_args(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    o.add_argument("--out", default=None, help="folder for the figure, calibration and CSV records (default: out/realrun-COMMAND)")
    o.add_argument("--no-plots", action="store_true", help="skip the figure")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m realrun",
        description="The same batching policies on a real model: measured, and compared with the simulator.",
        epilog="With no command: compare on tiny-gpt2, on the CPU, at a small load.",
    )
    sub = p.add_subparsers(dest="command", parser_class=OneLineParser)
    cmp_ = sub.add_parser("compare", help="predicted (batchsim, calibrated) vs measured (real model) for each policy")
    _add_workload_run_args(cmp_, calibration=True)
    run = sub.add_parser("run", help="measure one policy on one workload")
    _add_workload_run_args(run, calibration=False)
    prof = sub.add_parser("profile", help="measure step times and fit batchsim's linear cost model")
    _add_model_args(prof, engine=False)
    prof.add_argument("--grid", default="quick", help="quick (default) or full")
    prof.add_argument("--repeats", type=int, default=None, help="repetitions per point (median is kept)")
    prof.add_argument("--out", default=None, help="calibration JSON to write (default: out/realrun/calibration-MODEL-DEVICE.json)")
    prof.add_argument("--json", action="store_true", help="print the fit as JSON")
    doc = sub.add_parser("doctor", help="device, dtype, versions, model source, threads, memory")
    _add_model_args(doc, engine=False)
    return p


# -- helpers ----------------------------------------------------------------------------------

def _overrides(args: argparse.Namespace) -> tuple[str, dict, list[str]]:
    """(name, defaults, notes): realrun's small load, or a scenario's shape at realrun's size."""
    notes: list[str] = []
    if not getattr(args, "scenario", None):
        return "realrun", dict(REALRUN_DEFAULTS), notes
    sc = get_scenario(args.scenario)
    d = {k: v for k, v in sc.defaults.items() if k not in _SIM_SERVER_KEYS}
    if args.requests is None and args.duration is None:
        d.pop("duration", None)
        d["requests"] = REALRUN_DEFAULTS["requests"]
        notes.append(f"scenario {sc.name}: its workload shape and policies, at {d['requests']} requests "
                     "(its own size is for the simulator; --requests or --duration to change)")
    if sc.runner is not None:
        notes.append(f"scenario {sc.name} has its own runner in batchsim; here only its defaults are used")
    return sc.name, {**REALRUN_DEFAULTS, **d}, notes


def _load(args: argparse.Namespace):
    from .model import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype, threads=args.threads)


def _seed(args, overrides) -> int:
    return int(args.seed if args.seed is not None else overrides.get("seed", 0))


def _engine_name(args) -> str:
    from .baselines import ENGINE_NAMES

    name = getattr(args, "engine", "ours")
    if name not in ENGINE_NAMES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINE_NAMES)}, got {name!r}")
    return name


def _make_engine(name: str, lm, args, seed: int):
    from .baselines import HFGenerateEngine
    from .engine import Engine

    if name == "hf-generate":
        return HFGenerateEngine(lm, stop_on_eos=args.stop_on_eos, prompt_seed=seed)
    return Engine(lm, stop_on_eos=args.stop_on_eos, prompt_seed=seed)


def _measure_fn(engine_name: str, engine, lm, args, workload, kv, seed: int, progress: bool):
    from .baselines import run_hf_continuous
    from .runner import run_real

    def measure(label, policy):
        if engine_name == "hf-continuous":
            p = policy
            return run_hf_continuous(
                workload, lm, max_seqs=p.max_seqs, max_batched_tokens=p.max_batched_tokens, block_size=p.block_size,
                kv_budget_tokens=kv, stop_on_eos=args.stop_on_eos, prompt_seed=seed, progress=progress,
            )[0]
        return run_real(workload, policy, engine, kv_budget_tokens=kv, progress=progress, trace=True)

    return measure


def _usable_policies(engine_name: str, names: list[str], notes: list[str]) -> list[str]:
    if engine_name == "hf-generate":
        kept = [n for n in names if n in _PADDED]
        if len(kept) < len(names):
            notes.append("engine hf-generate runs padded batches only: continuous is left out")
        return kept
    if engine_name == "hf-continuous":
        if "continuous" not in names:
            raise ConfigError("engine hf-continuous is continuous batching: policy must include continuous")
        if len(names) > 1:
            notes.append("engine hf-continuous schedules by itself: only the continuous policy's limits are passed on")
        return ["continuous"]
    return names


def _out_dir(args, command: str) -> Path:
    return Path(args.out) if args.out else Path("out") / f"realrun-{command}"


def _memory_line(meta: dict) -> str:
    parts = [f"peak RSS {meta.get('peak_rss_bytes', 0) / 2**20:.0f} MiB"]
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


def _progress() -> bool:
    return sys.stderr.isatty()


# -- commands ---------------------------------------------------------------------------------

def _cmd_run(args: argparse.Namespace) -> int:
    name, d, notes = _overrides(args)
    if args.policy is None:
        d["policy"] = "continuous" if "policy" not in d or "," in str(d["policy"]) else d["policy"]
    names = policies_from_args(args, d)
    if len(names) != 1:
        raise ConfigError(f"run measures one policy; use compare for several, got {','.join(names)}")
    engine_name = _engine_name(args)
    names = _usable_policies(engine_name, names, notes)
    if not names:
        raise ConfigError("engine hf-generate runs padded batches only: policy must be taxi, static or dynamic")
    workload = workload_from_args(args, d)
    policy = policy_from_args(args, names[0], d)
    kv = kv_budget_from_args(args, d)
    slo = slo_from_args(args, d)
    seed = _seed(args, d)
    lm = _load(args)
    engine = None if engine_name == "hf-continuous" else _make_engine(engine_name, lm, args, seed)
    measure = _measure_fn(engine_name, engine, lm, args, workload, kv, seed, _progress())
    label = names[0] if engine_name == "ours" else f"{names[0]} ({engine_name})"
    if engine_name == "hf-continuous":
        notes.append("hf-continuous runs its own scheduler: its steps are not observed, so busy, batch and KV peak read 0")
    result = measure(label, policy)
    summary = summarize(result, slo)
    meta = result.meta
    if args.out:
        result.records.write_csv(_out_dir(args, "run"), prefix=f"{names[0]}-measured-")
    if args.json:
        obj = {
            "scenario": name,
            "config": {"workload": workload.description, "requests": len(workload), "policy": result.policy,
                       "engine": engine_name, "kv_budget_tokens": kv, "model": lm.describe()},
            "runs": [{"label": label, "policy": result.policy, "summary": summary, "meta": meta}],
            "summary": summary,
            "notes": notes,
        }
        print(json.dumps(obj, indent=2, default=str))
    else:
        print(f"realrun run: {label} measured on {lm.describe()}")
        print()
        print(format_table({label: summary}))
        print()
        for n in notes:
            print(n)
        print(f"workload: {len(workload)} requests, {workload.description}")
        print(_memory_line(meta))
        if meta.get("stopped"):
            print(f"note: {meta['stopped']}")
    return 130 if (meta.get("stopped") or "").startswith("interrupted") else 0


def _calibration(args, lm, engine, workload, pairs, out: Path, notes: list[str]):
    """The step-time model for the prediction: from --calibration FILE, else profiled now on a grid
    fitted to the workload (saved under out). Returns (model, calibration info)."""
    from .profile import GRIDS, grid_for_workload, load_calibration, profile

    policies = [p for _, p, _ in pairs]
    if args.calibration:
        model = load_calibration(args.calibration)
        info = json.loads(Path(args.calibration).read_text())
        for key, have in (("model_name", lm.name), ("device", lm.device), ("dtype", lm.dtype), ("threads", lm.threads)):
            if key in info and info[key] != have:
                notes.append(f"warning: calibration {args.calibration} was measured with {key}={info[key]}, this run uses {have}")
        cal_info = {"file": args.calibration, **{k: info.get(k) for k in ("model", "version", "source", "heldout", "linear")}}
        notes.extend(_coverage_notes(info, workload))
        return model, cal_info
    if args.grid == "auto":
        rows = max(p.max_rows for p in policies)
        cont = [p for p in policies if hasattr(p, "max_batched_tokens")]
        chunk = min((p.max_batched_tokens for p in cont if p.chunked_prefill), default=None)
        padded = [p for p in policies if not hasattr(p, "max_batched_tokens")]
        p_max = int(workload.prompt_tokens.max()) if len(workload) else 1
        max_prefill = max([p.max_batched_tokens for p in cont] + [p.max_rows * p_max for p in padded] + [p_max])
        grid = grid_for_workload(workload, rows, max_prefill, chunk, policies=tuple(p.name for p in policies))
    elif args.grid in GRIDS:
        grid = GRIDS[args.grid]
    else:
        raise ConfigError(f"grid must be auto, {', '.join(GRIDS)}, got {args.grid!r}")
    prof = profile(engine, grid, policies={p.name: p for p in policies}, progress=_progress())
    path = prof.write(out / "calibration.json")
    notes.append(f"calibration (profiled now, {len(prof.points)} shapes, {prof.seconds:.1f} s): {path}")
    notes.append(prof.text())
    cal_info = {k: v for k, v in prof.as_dict().items() if k != "points"}
    cal_info["file"] = str(path)
    return prof.model, cal_info


def _coverage_notes(info: dict, workload) -> list[str]:
    """A calibration predicts well only where it was measured: say when the workload goes beyond."""
    if not len(workload) or info.get("model") != "profiled":
        return []
    try:
        rows, width = max(info["decode"]["rows"]), max(info["decode"]["columns"])
        prompt = max(info["prefill"]["columns"])
    except (KeyError, TypeError, ValueError):
        return []
    need_ctx = int((workload.prompt_tokens + workload.output_tokens).max())
    need_prompt = int(workload.prompt_tokens.max())
    if need_ctx > 1.25 * width or need_prompt > 1.25 * prompt:
        return [f"warning: the calibration was measured up to contexts of ~{width:.0f} tokens and prompts of {prompt:.0f}; "
                f"this workload reaches contexts of {need_ctx} and prompts of {need_prompt}: predictions extrapolate "
                "(omit --calibration to profile for this workload)"]
    return []


def _cmd_compare(args: argparse.Namespace) -> int:
    from .compare import compare_policies, format_compare, plot_compare
    from .engine import Engine

    name, d, notes = _overrides(args)
    engine_name = _engine_name(args)
    names = _usable_policies(engine_name, policies_from_args(args, d), notes)
    if not names:
        raise ConfigError("engine hf-generate runs padded batches only: policy must include taxi, static or dynamic")
    workload = workload_from_args(args, d)
    pairs = [(n, policy_from_args(args, n, d), policy_from_args(args, n, d)) for n in names]
    kv = kv_budget_from_args(args, d)
    slo = slo_from_args(args, d)
    seed = _seed(args, d)
    out = _out_dir(args, "compare")
    lm = _load(args)
    ours = Engine(lm, stop_on_eos=args.stop_on_eos, prompt_seed=seed)
    step_times, cal_info = _calibration(args, lm, ours, workload, pairs, out, notes)
    from .runner import limits_for
    engine = ours if engine_name == "ours" else (None if engine_name == "hf-continuous" else _make_engine(engine_name, lm, args, seed))
    measure = _measure_fn(engine_name, engine, lm, args, workload, kv, seed, _progress())
    replay = (lambda label: policy_from_args(args, label, d)) if engine_name == "ours" else None
    from .drift import load_warning, recheck

    warn = load_warning(lm.threads)
    report = compare_policies(workload, pairs, measure, step_times, slo=slo, limits=limits_for(lm, kv), replay_policy=replay)
    if isinstance(step_times, ProfiledStepTime) and report.rows and engine_name == "ours":
        report.notes.append(recheck(ours, step_times).text())
    if warn or (warn := load_warning(lm.threads)):
        report.notes.append(warn)
    for row in report.rows:
        if engine_name != "ours":
            row.label = f"{row.label} ({engine_name})"
        if args.out:
            row.real.records.write_csv(out, prefix=f"{row.label.split()[0]}-measured-")
            row.sim.records.write_csv(out, prefix=f"{row.label.split()[0]}-predicted-")
    title = f"{name}: predicted (batchsim, calibrated) vs measured ({lm.name} on {lm.device})"
    if not args.no_plots and report.rows:
        report.figures.append(plot_compare(report, out / "predicted_vs_measured.png", title))
    stopped = [r.real.meta.get("stopped") for r in report.rows if r.real.meta.get("stopped")]
    if args.json:
        obj = {
            "scenario": name,
            "config": {"workload": workload.description, "requests": len(workload), "engine": engine_name,
                       "kv_budget_tokens": kv, "model": lm.describe(),
                       "step_time": repr(step_times)},
            "calibration": cal_info,
            "runs": [{"label": r.label, "policy": r.policy, "predicted": r.predicted, "measured": r.measured,
                      "error_pct": r.errors,
                      "decomposition": r.decomposition.as_dict() if r.decomposition else None,
                      "meta": {k: v for k, v in r.real.meta.items() if k not in ("trace", "passes")}} for r in report.rows],
            "figures": [str(f) for f in report.figures],
            "notes": notes + report.notes,
        }
        print(json.dumps(obj, indent=2, default=str))
    else:
        print(title)
        print(f"model: {lm.describe()}")
        print()
        print(format_compare(report))
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
        if report.figures:
            print("figure: " + ", ".join(str(f) for f in report.figures))
    return 130 if any(s.startswith("interrupted") for s in stopped) else 0


def _cmd_profile(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .engine import Engine
    from .profile import GRIDS, profile

    if args.grid not in GRIDS:
        raise ConfigError(f"grid must be one of {', '.join(GRIDS)}, got {args.grid!r}")
    grid = GRIDS[args.grid]
    if args.repeats is not None:
        check_int_at_least("repeats", args.repeats, 1)
        grid = replace(grid, repeats=args.repeats)
    lm = _load(args)
    engine = Engine(lm)
    prof = profile(engine, grid, progress=_progress())
    path = Path(args.out) if args.out else Path("out") / "realrun" / f"calibration-{lm.name.replace('/', '_')}-{lm.device.replace(':', '')}.json"
    if args.json:
        obj = {k: v for k, v in prof.as_dict().items() if k != "points"}
        print(json.dumps({"calibration": str(path), **obj, "shapes": len(prof.points)}, indent=2))
        prof.write(path)
        return 0
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
    prof.write(path)
    print(f"calibration written: {path}")
    print(f"use it: python -m batchsim run --calibration {path}   (or python -m realrun compare --calibration {path})")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["compare"]
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "compare":
            return _cmd_compare(args)
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "profile":
            return _cmd_profile(args)
        if args.command == "doctor":
            from .doctor import doctor

            return doctor(_load(args), args.device, args.dtype)
        parser.print_help()
        return 0
    except ConfigError as e:
        print(f"realrun: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("realrun: interrupted", file=sys.stderr)
        return 130
