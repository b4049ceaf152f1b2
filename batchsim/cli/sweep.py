"""``python -m batchsim sweep PARAM=v1,v2,...``: turn one knob and watch the trade-off.

Each value of the knob is a separate simulation of the same workload (same seed), run
on a Dask cluster (``--scheduler``: a local one by default, an existing one, or none);
the table has one line per value and policy, and the figure plots throughput against
p99 latency, one curve per policy.

    python -m batchsim sweep max_batch=1,2,4,8,16,32,64
    python -m batchsim sweep rate=1,2,4,8 --policy taxi,continuous
    python -m batchsim sweep max_wait=0,0.05,0.2,1 --scenario rush-hour
    python -m batchsim sweep replicas=1,2,4 --policy continuous --scheduler tcp://10.0.0.5:8786

Knobs: any workload, policy or server flag, written with underscores (max_batch,
max_wait, max_seqs, max_batched_tokens, block_size, rate, requests, prompt_len,
output_len, seed, gpu, model, dtype, gpu_price, mem_util, kv_budget_tokens, step_time,
replicas, router, tp, weights, kv_dtype, engine_profile).
Without --policy, a knob of one policy sweeps that policy (max_wait: dynamic;
max_seqs: continuous; max_batch: static and dynamic); others sweep all four.
Without --scenario the server is run's own (llama-3-8b on an A100-80GB, with its KV
budget and bill; --step-time or --calibration replace it). A sweep whose rows would all
be the same (a knob no policy of it reads, a router on one server, a value twice, the
knob also given as a flag) is refused; a flag that reaches no run gets run's note.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..core import sizing
from ..core.errors import ConfigError, show
from ..core.files import Staging, check_out_dir, dumps
from ..core.flags import (
    check_conflicts,
    flag_name,
    given,
    ignored_knob_notes,
    ignored_router_notes,
    knob_users,
)
from ..core.metrics import format_table
from ..sim.tasks import add_scheduler_args, check_scheduler, run_tasks, worker_count
from ..teach.scenarios import Run, Scenario, get_scenario, run_set
from ..teach.scenarios.base import Interrupted, plan_runs, size_of
from . import add_run_args, default_server

__all__ = ["add_arguments", "run", "SWEEPABLE", "parse_sweep", "sweep"]

# knob -> (flag dest, type)
SWEEPABLE: dict[str, tuple[str, type]] = {
    "max_batch": ("max_batch", int),
    "max_wait": ("max_wait", float),
    "max_seqs": ("max_seqs", int),
    "max_batched_tokens": ("max_batched_tokens", int),
    "block_size": ("block_size", int),
    "rate": ("rate", float),
    "requests": ("requests", int),
    "duration": ("duration", float),
    "prompt_len": ("prompt_len", str),
    "output_len": ("output_len", str),
    "seed": ("seed", int),
    "arrival": ("arrival", str),
    "gpu": ("gpu", str),
    "model": ("sim_model", str),
    "dtype": ("sim_dtype", str),
    "gpu_price": ("gpu_price", float),
    "mem_util": ("mem_util", float),
    "kv_budget_tokens": ("kv_budget_tokens", int),
    "step_time": ("step_time", float),
    "compute_eff": ("compute_eff", float),
    "memory_eff": ("memory_eff", float),
    "speedup": ("speedup", float),
    "replicas": ("replicas", int),
    "router": ("router", str),
    "tp": ("tp", int),
    "weights": ("weights", str),
    "kv_dtype": ("kv_dtype", str),
    "engine_profile": ("engine_profile", str),
}
_POLICIES_FOR = {
    "max_batch": "static,dynamic",
    "max_wait": "dynamic",
    "max_seqs": "continuous",
    "max_batched_tokens": "continuous",
    "block_size": "continuous",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="KNOB=v1,v2,... e.g. max_batch=1,2,4,8,16,32")
    p.add_argument(
        "--scenario",
        default=None,
        help="take defaults (server, workload, policies) from this scenario",
    )
    add_scheduler_args(p)
    add_run_args(p)


def parse_sweep(spec: str) -> tuple[str, str, list]:
    """``max_batch=1,2,4`` -> ("max_batch", "max_batch", [1, 2, 4]); errors name the knob or
    value."""
    knob, sep, values = spec.partition("=")
    knob = knob.strip().replace("-", "_")
    if not sep or not values.strip():
        raise ConfigError(f"sweep must look like KNOB=v1,v2,..., got {spec!r}")
    if knob not in SWEEPABLE:
        raise ConfigError(f"sweep knob must be one of {', '.join(SWEEPABLE)}, got {knob!r}")
    dest, typ = SWEEPABLE[knob]
    out = []
    # Length specs contain commas themselves (uniform:5,500), so they are separated by ';'.
    parts = values.split(";") if typ is str and knob.endswith("_len") else values.split(",")
    if len(parts) > 1000:
        raise ConfigError(f"sweep takes at most 1000 values, got {len(parts)}")
    for v in parts:
        v = v.strip()
        try:
            out.append(typ(v))
        except ValueError:
            raise ConfigError(f"{knob} values must be {typ.__name__}s, got {v[:40]!r}") from None
        if out[-1] in out[:-1]:  # one row per value: a repeat would be run twice and shown once
            raise ConfigError(
                f"{knob} values must differ: {show(out[-1])} is given twice (got "
                f"{values.strip()[:80]!r})"
            )
    return knob, dest, out


def _check_knob_matters(
    knob: str, dest: str, args: argparse.Namespace, names: list[str], defaults: dict
) -> None:
    """A sweep whose every row is the same says nothing: refuse it, naming the knob and why."""
    users = knob_users(knob)
    if users is not None and not set(users) & set(names):
        raise ConfigError(
            f"sweep of {knob} changes nothing: only {' and '.join(users)} "
            f"read{'s' if len(users) == 1 else ''} it, and this sweep runs {', '.join(names)} "
            f"(every row would be the same); add --policy {users[0]}"
        )
    if knob == "router":
        replicas = getattr(args, "replicas", None) or defaults.get("replicas") or 1
        if replicas <= 1:
            raise ConfigError(
                f"sweep of router changes nothing on one server (replicas {show(replicas)}): "
                "give --replicas N, N >= 2, for a fleet behind a router"
            )
    if getattr(args, dest, None) is not None:
        raise ConfigError(
            f"{flag_name(dest)} {show(getattr(args, dest))} and the sweep of {knob} both set "
            f"{knob}: drop {flag_name(dest)} (the sweep gives each row its value)"
        )


def _one(job: tuple) -> tuple[str, dict, dict]:
    """Worker: run one value of the knob (all policies) and return summaries (picklable, no
    RunResult)."""
    args, scenario, runs, value_label = job
    try:
        report = run_set(args, scenario, runs)
    # Ctrl-C reaches the workers too; the parent reports it
    except (
        Interrupted,
        KeyboardInterrupt,
    ):
        return None
    return value_label, report.summaries, {"notes": report.notes, "config": report.config}


def sweep(args: argparse.Namespace) -> tuple[dict[str, dict], list[str], dict]:
    """Run the sweep; returns (summaries by "knob=value policy" label, notes, config).

    Every value's configuration is checked, and the whole sweep sized, before the first run.
    Ctrl-C raises ``Interrupted`` with the values that finished.
    """
    knob, dest, values = parse_sweep(args.spec)
    # Without a scenario, the same server as `run` (one default for every command that simulates);
    # a sweep of step_time is a step-time flag, so it runs without a GPU, as `run --step-time` does.
    server = default_server({**given(args), **({dest: values[0]} if knob == "step_time" else {})})
    base = (
        get_scenario(args.scenario)
        if args.scenario
        else Scenario("sweep", f"sweep of {knob}", "", server)
    )
    d = dict(base.defaults)
    if getattr(args, "policy", None) is None and knob in _POLICIES_FOR and "policy" not in d:
        d["policy"] = _POLICIES_FOR[knob]
    scenario = Scenario(base.name, base.summary, base.story, d)
    from .options import policies_from_args

    names = policies_from_args(args, d)
    flags = {k: v for k, v in given(args).items() if k != dest}
    knob_notes = ignored_knob_notes(flags, names) + ignored_router_notes(
        flags,
        max(values)
        if knob == "replicas"
        else (getattr(args, "replicas", None) or d.get("replicas") or 1),
    )
    jobs = []
    # the command's module does not pickle
    plain = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    sizes = []
    for v in values:
        a = argparse.Namespace(**plain)
        setattr(a, dest, v)
        check_conflicts(given(a))
        label = f"{knob}={v}"
        runs = [Run(f"{label} {n}", n) for n in names]
        sizes.append(size_of(plan_runs(a, scenario, runs)))
        jobs.append((a, scenario, runs, label))
    scheduler = check_scheduler(getattr(args, "scheduler", None))
    workers = 1 if scheduler == "none" else worker_count(getattr(args, "jobs", None), len(jobs))
    if not getattr(args, "no_size_check", False):
        sizing.check(
            sizing.combined(sizes, workers),
            extent_flag="--duration" if getattr(args, "duration", None) else "--requests",
        )
    _check_knob_matters(knob, dest, args, names, d)
    where: list[str] = []
    if workers == 1 and scheduler is None:
        scheduler = "none"  # --jobs 1: here, one by one
    done = run_tasks(
        _one,
        jobs,
        scheduler,
        getattr(args, "jobs", None),
        progress=getattr(args, "progress", None),
        desc=f"sweep of {knob}",
        notes=where,
    )
    summaries: dict[str, dict] = {}
    for (
        n
    ) in names:  # one block per policy, values in order: each block is one curve of the trade-off
        for _, s, _ in done:
            summaries.update({k: v for k, v in s.items() if k.endswith(" " + n)})
    notes: list[str] = list(knob_notes)
    for _, _, extra in done:
        for n in extra["notes"]:
            if not n.startswith("workload:") and n not in notes:
                notes.append(n)
    notes.extend(where)
    wl = done[0][2]["config"].get("workload", "") if done else ""
    notes.append(
        f"workload: {wl}"
        + (f" ({knob} varies)" if knob in ("rate", "requests", "seed", "arrival") else "")
    )
    cfg = {"sweep": {"param": knob, "values": values, "policies": names}, "workload": wl}
    if len(done) < len(jobs):
        raise SweepInterrupted(summaries, notes, cfg, jobs[len(done)][3])
    return summaries, notes, cfg


class SweepInterrupted(Exception):
    """Ctrl-C: the values before ``label`` finished."""

    def __init__(self, summaries: dict, notes: list[str], cfg: dict, label: str) -> None:
        super().__init__(f"interrupted during {label}")
        self.summaries, self.notes, self.cfg, self.label = summaries, notes, cfg, label


def run(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else Path("out") / "sweep"
    if not getattr(args, "no_plots", False):
        check_out_dir(out, "out")
    code = 0
    try:
        summaries, notes, cfg = sweep(args)
    except SweepInterrupted as e:
        summaries, notes, cfg, code = (
            e.summaries,
            [
                f"interrupted (Ctrl-C) during {e.label}: it and the values after it did not finish",
                *e.notes,
            ],
            e.cfg,
            130,
        )
    knob = cfg["sweep"]["param"]
    keys = [
        "completed",
        "request_throughput",
        "output_throughput",
        "mean_ttft",
        "p99_ttft",
        "mean_tpot",
        "p50_e2e",
        "p99_e2e",
        "busy_fraction",
        "mean_batch_size",
        "preemptions",
    ]
    if any(s.get("cost_per_request") is not None for s in summaries.values()):
        keys += ["cost_per_request", "cost_per_1m_tokens"]
    if any("goodput" in s for s in summaries.values()):
        keys.append("goodput")
    if getattr(args, "json", False):
        print(
            dumps(
                {
                    "config": cfg,
                    "sweep": cfg["sweep"],
                    "runs": [{"label": k, "summary": s} for k, s in summaries.items()],
                    "notes": notes,
                }
            )
        )
    else:
        print(f"sweep of {knob}: {', '.join(str(v) for v in cfg['sweep']['values'])}\n")
        print(format_table(summaries, keys))
        print()
        print("\n".join(notes))
    if code:
        print(f"batchsim: {notes[0]}", file=sys.stderr)
        return code
    if not getattr(args, "no_plots", False):
        from ..teach.plots import save, sweep_figure

        with Staging(out) as staging:
            save(
                sweep_figure(summaries, cfg["sweep"]["policies"], knob),
                staging.path(f"sweep_{knob}.png"),
            )
            path = staging.commit()[0]
        if not getattr(args, "json", False):
            print(f"\nfigure: {path}")
    return 0
