"""``python -m realrun``: the policies of batchsim on a real model, measured and compared.

Commands:
    (none)               compare on tiny-gpt2, CPU, a small load (about a minute on 2 cores)
    compare [SCENARIO]   each policy simulated (calibrated) and measured on one workload:
                         predicted vs measured, with errors, and a figure
    run [SCENARIO]       measure one policy on one workload (batchsim's flags, unchanged)
    profile              measure step times over a grid, fit the cost model, write a calibration
    doctor               device, dtype, versions, model source, threads, memory: the first check

Bad input prints one line naming the field and the value, and exits with code 2, before
the model is loaded. Ctrl-C stops a measurement cleanly: what was measured is printed,
and the exit code is 130. As in batchsim: ``--json`` prints one object
``{config, runs, notes}``; ``--out DIR`` writes records and figures under
``DIR/<scenario>/`` (``realrun-run``/``realrun-compare`` without a scenario), after the
results are printed, each file whole or not at all.

The workload, policy and SLO flags are batchsim's own definitions
(``batchsim.core.config``), resolved into the same frozen configurations: the
command line of batchsim itself is not imported.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from batchsim.core import rejections, sizing
from batchsim.core.config import (
    POLICY_DEFAULTS, POLICY_FLAGS, SLO_FLAGS, WORKLOAD_FLAGS, Flag, PolicyConfig, WorkloadConfig, add_flags, check_conflicts,
    dash_hint, given,
    ignored_knob_notes, policy_names, resolve, slo_config,
)
from batchsim.core.errors import ConfigError, check_int_at_least, show
from batchsim.core.files import Staging, check_out_dir
from batchsim.machine.memory import check_kv_tokens
from batchsim.teach.scenarios import get_scenario

__all__ = ["main", "build_parser", "REALRUN_DEFAULTS", "LONG_REAL_RUN_S", "MAX_REAL_RUN_S"]

#: A load a 2-core laptop serves in seconds per policy: ~60 % of the taxi's capacity on tiny-gpt2.
REALRUN_DEFAULTS = {
    "rate": 4.0, "requests": 32, "prompt_len": "uniform:16,128", "output_len": "uniform:16,96",
    "max_batch": 8, "max_wait": 0.1, "max_seqs": 32, "max_batched_tokens": 1024,
}
# Scenario defaults that describe batchsim's simulated GPU server: the real server replaces them.
_SIM_SERVER_KEYS = {"gpu", "model", "dtype", "gpu_price", "mem_util", "compute_eff", "memory_eff", "overhead",
                    "catalog", "step_time_model", "kv_budget_bytes", "table_keys"}
_PADDED = ("taxi", "static", "dynamic")
#: A real run whose arrivals alone span longer than this says how long it will take, before it starts.
LONG_REAL_RUN_S = 60.0
#: ... and one longer than a day is refused (``--no-size-check`` runs it anyway).
MAX_REAL_RUN_S = 86_400.0

_KV_FLAG = Flag("--kv-budget-tokens", "kv_budget_tokens", int, "KV-cache budget in tokens, enforced by the policy (default: unlimited)")
_CAL_FLAG = Flag("--calibration", "calibration", str, "step-time model for the prediction (JSON from `python -m realrun profile`; default: profile now)")


class _FlagError(Exception):
    """argparse found a bad flag: main prints it as one line and returns 2 (never SystemExit)."""


class _Parser(argparse.ArgumentParser):
    argv: list[str] = []  # the words being parsed (set by main), for dash_hint

    def error(self, message: str):  # type: ignore[override]
        raise _FlagError(f"{self.prog}: error: {dash_hint(message, self.argv)}")


# -- parser -----------------------------------------------------------------------------------

def _add_model_args(p: argparse.ArgumentParser, engine: bool = True) -> None:
    g = p.add_argument_group("real model (the server that is measured)")
    g.add_argument("--model", default="tiny-gpt2", help="tiny-gpt2 (default, offline), gpt2-random (124M shape, offline), or a Hugging Face id / local path (cached or reachable)")
    g.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    g.add_argument("--dtype", default="auto", help="auto (fp16 on CUDA, fp32 on CPU), fp32, fp16 or bf16")
    g.add_argument("--threads", type=int, default=None, help="torch intra-op threads, 1 to this machine's cores (default: half the cores, at least 1)")
    g.add_argument("--stop-on-eos", action="store_true", help="a request ends at its first EOS token (default: run to the workload's length)")
    if engine:
        g.add_argument("--engine", default="ours", help="ours (default), hf-generate (generate() on padded batches) or hf-continuous (transformers' continuous batching)")


def _add_output_args(p: argparse.ArgumentParser, out_help: str) -> None:
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print one JSON object {config, runs, notes} instead of a table")
    o.add_argument("--out", default=None, help=out_help)
    o.add_argument("--no-plots", action="store_true", help="skip the figure")
    o.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar on stderr (default: at a terminal)")
    o.add_argument(sizing.OVERRIDE_FLAG, dest="no_size_check", action="store_true",
                   help="run even when the run would take more than a day or more memory than this machine has")


def _add_workload_run_args(p: argparse.ArgumentParser, calibration: bool) -> None:
    p.add_argument("scenario", nargs="?", default=None, help="a batchsim scenario to take the workload and policies from (default: a small load)")
    _add_model_args(p)
    add_flags(p.add_argument_group("workload (who arrives when, with how many tokens)"), WORKLOAD_FLAGS)
    add_flags(p.add_argument_group("batching policy"), POLICY_FLAGS)
    # batchsim's server flags describe a simulated GPU; here the server is the real model, so only
    # the KV budget (a policy matter) and, for compare, the calibration carry over.
    g = p.add_argument_group("server")
    _KV_FLAG.add_to(g)
    if calibration:
        _CAL_FLAG.add_to(g)
        g.add_argument("--grid", default="auto", help="profile grid when no calibration is given: auto (fitted to the workload), quick or full")
    add_flags(p.add_argument_group("service-level objectives (for goodput)"), SLO_FLAGS)
    _add_output_args(p, "root folder for the figure, calibration and CSV records: they go to OUT/SCENARIO/ "
                        "(default out/realrun-COMMAND/, figure and calibration only)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m realrun",
        description="The same batching policies on a real model: measured, and compared with the simulator.",
        epilog="With no command: compare on tiny-gpt2, on the CPU, at a small load.",
    )
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    cmp_ = sub.add_parser("compare", help="predicted (batchsim, calibrated) vs measured (real model) for each policy")
    _add_workload_run_args(cmp_, calibration=True)
    run = sub.add_parser("run", help="measure one policy on one workload")
    _add_workload_run_args(run, calibration=False)
    prof = sub.add_parser("profile", help="measure step times and fit batchsim's linear cost model")
    _add_model_args(prof, engine=False)
    prof.add_argument("--grid", default="quick", help="quick (default) or full")
    prof.add_argument("--repeats", type=int, default=None, help="repetitions per point (median is kept)")
    prof.add_argument("--out", default=None, help="folder for the calibration (default out/realrun); "
                      "it is written as calibration-MODEL-DEVICE.json; a path ending in .json names the file itself")
    prof.add_argument("--json", action="store_true", help="print one JSON object {config, runs, notes} instead of a table")
    prof.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help="a progress bar on stderr")
    doc = sub.add_parser("doctor", help="device, dtype, versions, model source, threads, memory")
    _add_model_args(doc, engine=False)
    doc.add_argument("--json", action="store_true", help="print one JSON object {config, runs, notes} instead of text")
    return p


# -- resolving a run, before the model loads -------------------------------------------------------

def _overrides(args: argparse.Namespace) -> tuple[str, dict, list[str]]:
    """(name, defaults, notes): realrun's small load, or a scenario's shape at realrun's size."""
    notes: list[str] = []
    if not getattr(args, "scenario", None):
        return f"realrun-{args.command}", dict(REALRUN_DEFAULTS), notes
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


def machine_cores() -> int:
    from .model import available_cores

    return max(os.cpu_count() or 1, available_cores())


def check_threads(threads: int | None) -> None:
    """Torch with 100,000 intra-op threads dies in a segfault: bound the count by the machine."""
    if threads is None:
        return
    check_int_at_least("threads", threads, 1)
    cores = machine_cores()
    if threads > cores:
        raise ConfigError(f"threads must be between 1 and {cores} (this machine's cores), got {show(threads)}")


def _check_model_flags(args: argparse.Namespace) -> None:
    check_threads(args.threads)  # device and dtype are checked by load_model, before it loads anything


class Plan:
    """Everything a run or compare needs, resolved and checked before the model is loaded."""

    def __init__(self, args: argparse.Namespace) -> None:
        _check_model_flags(args)
        flags = given(args)
        check_conflicts(flags)
        self.name, d, self.notes = _overrides(args)
        if args.command == "run" and args.policy is None:
            d["policy"] = "continuous" if "policy" not in d or "," in str(d["policy"]) else d["policy"]
        self.engine = _engine_name(args)
        self.names = _usable_policies(self.engine, policy_names(resolve("policy", flags, d, POLICY_DEFAULTS)), self.notes, args.command)
        self.notes += ignored_knob_notes(flags, self.names)
        self.workload_config = WorkloadConfig.from_flags(flags, d)
        self.policies = [PolicyConfig.from_flags(n, flags, d) for n in self.names]
        self.kv = resolve("kv_budget_tokens", flags, d)
        if self.kv is not None:
            check_kv_tokens("kv-budget-tokens", self.kv)
        self.slo = slo_config(flags, d)
        self.seed = int(resolve("seed", flags, d) or 0)
        self.out = Path(args.out or "out") / self.name
        self.writes = bool(args.out) or not args.no_plots or args.command == "compare"
        if self.writes:
            check_out_dir(self.out, "out")
        if args.command == "compare" and getattr(args, "calibration", None):
            _check_calibration(args.calibration)
        elif args.command == "compare":
            from .profile import GRIDS

            if args.grid != "auto" and args.grid not in GRIDS:
                raise ConfigError(f"grid must be auto, {', '.join(GRIDS)}, got {show(args.grid)}")
        self.workload = self.workload_config.build()
        self._check_time(args)

    def _check_time(self, args: argparse.Namespace) -> None:
        """A real run takes at least as long as its arrivals span: say so when that is long."""
        if not args.no_size_check:
            sizing.check(sizing.estimate(len(self.workload), float(self.workload.output_tokens.mean()), len(self.names)))
        span = float(self.workload.arrivals[-1]) if len(self.workload) else 0.0
        runs = len(self.names)
        if span * runs > MAX_REAL_RUN_S and not args.no_size_check:
            raise ConfigError(f"the arrivals span {_hours(span)} per policy ({runs} to measure): more than a day of "
                              f"real time; raise --rate, lower --requests or --duration, or pass {sizing.OVERRIDE_FLAG}")
        if span * runs > LONG_REAL_RUN_S:
            print(f"realrun: note: this will take at least {_hours(span * runs)}: the arrivals span {_hours(span)} per "
                  f"policy ({runs} to measure); Ctrl-C stops it and keeps what was measured", file=sys.stderr)


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"


def _check_calibration(path: str) -> None:
    """Read a calibration now (one line if it is bad), families included, before anything is measured."""
    from batchsim.core.errors import is_number
    from batchsim.core.files import read_json
    from batchsim.sim.steptime import LinearStepTime

    LinearStepTime.from_json(path)
    fams = read_json(path, "calibration").get("families") or {}
    if not isinstance(fams, dict):
        raise ConfigError(f"calibration {path!r}: families must be a table, got {show(fams)}")
    for name, f in fams.items():
        bad = [k for k in ("c0", "c1", "c2", "c3") if not isinstance(f, dict) or not is_number(f.get(k))]
        if bad:
            raise ConfigError(f"calibration {path!r}: family {name!r} must have numbers c0..c3, "
                              f"got {show(f.get(bad[0]) if isinstance(f, dict) else f)} for {bad[0]}")


def _engine_name(args) -> str:
    from .baselines import ENGINE_NAMES

    name = getattr(args, "engine", "ours")
    if name not in ENGINE_NAMES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINE_NAMES)}, got {show(name)}")
    return name


def _usable_policies(engine_name: str, names: list[str], notes: list[str], command: str) -> list[str]:
    if command == "run" and len(names) != 1:
        raise ConfigError(f"run measures one policy; use compare for several, got {','.join(names)}")
    if engine_name == "hf-generate":
        kept = [n for n in names if n in _PADDED]
        if not kept:
            raise ConfigError("engine hf-generate runs padded batches only: policy must be taxi, static or dynamic")
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


def write_outputs(plan: Plan, results: dict, args, figure=None) -> list[Path]:
    """Records (with --out) and the figure, staged and moved in whole; returns the final paths."""
    if not (args.out or (figure is not None and not args.no_plots)):
        return []
    with Staging(plan.out) as staging:
        paths = []
        if args.out:
            for prefix, res in results.items():
                paths += [staging.final(p) for p in res.records.write_csv(staging.dir, prefix=prefix)]
        if figure is not None and not args.no_plots:
            paths.append(staging.final(figure(staging.dir)))
        staging.commit()
    return paths


def rejection_lines(results: dict) -> list[str]:
    return rejections.lines(results)


def nothing_served(results: dict) -> bool:
    return rejections.all_rejected({k: r for k, r in results.items() if not r.meta.get("stopped")})


# -- entry point ---------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["compare"]
    parser = build_parser()
    _Parser.argv = argv
    try:
        args = parser.parse_args(argv)
    except _FlagError as e:
        print(str(e), file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    from . import commands

    try:
        if args.command == "compare":
            return commands.compare(args, Plan(args))
        if args.command == "run":
            return commands.run(args, Plan(args))
        if args.command == "profile":
            return commands.profile(args)
        if args.command == "doctor":
            _check_model_flags(args)
            from .doctor import doctor

            return doctor(commands.load(args), args.device, args.dtype, as_json=args.json)
        parser.print_help()
        return 0
    except ConfigError as e:
        print(f"realrun: error: {e}", file=sys.stderr)
        return 2
    except MemoryError:
        print("realrun: error: out of memory: lower --requests, --max-batch or --max-seqs", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("realrun: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
