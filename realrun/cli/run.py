"""The work behind ``python -m realrun run`` and ``profile`` (``compare``'s is
``realrun.cli.compare``), once ``cli`` has checked the flags.

Each command loads the model only after every flag and file was checked (``cli.RunSetup``),
prints its results, and only then writes files, whole (``batchsim.core.files.Staging``),
so neither a bad path nor Ctrl-C loses a measurement.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from batchsim.core.errors import ConfigError, check_at_most, check_int_at_least, show
from batchsim.core.files import Staging, check_out_dir, dumps
from batchsim.core.metrics import format_table, summarize

from ..clock.progress import Progress, progress_lines
from .engines import (
    all_rejected,
    kv_line,
    load,
    make_engine,
    measure_fn,
    memory_line,
    printable,
    stopped_code,
    vllm_server,
    wants_progress,
)
from .run_setup import RunSetup, check_model_flags, rejection_lines, write_outputs

__all__ = ["run", "compare", "profile", "load"]


# -- run ------------------------------------------------------------------------------------------


def run(args: argparse.Namespace, setup: RunSetup) -> int:
    if setup.fleet.replicas > 1:
        from .fleet import run_fleet

        return run_fleet(args, setup)
    notes = setup.notes
    lm = load(args, notes)
    engine = (
        None
        if setup.engine in ("hf-continuous", "vllm")
        else make_engine(setup.engine, lm, args, setup.seed)
    )
    server = vllm_server(args, setup, lm)
    measure = measure_fn(setup, engine, lm, args, server)
    name = setup.names[0]
    label = name if setup.engine == "ours" else f"{name} ({setup.engine})"
    if setup.engine == "hf-continuous":
        notes.append(
            "hf-continuous runs its own scheduler: its steps are not observed, so busy, batch and "
            "KV peak read 0"
        )
    span = float(setup.workload.arrivals[-1]) if len(setup.workload) else 0.0
    measure = Progress(progress_lines(args, span)).runs(1, measure)
    try:
        result = measure(label, setup.policies[0].build())
    finally:
        if server is not None:
            server.close()
    summary = summarize(result, setup.slo)
    meta = result.meta
    workload = setup.workload
    from batchsim.core import rejections

    if args.json:
        print(
            dumps(
                {
                    "scenario": setup.name,
                    "config": {
                        "workload": workload.description,
                        "requests": len(workload),
                        "policy": result.policy,
                        "engine": setup.engine,
                        "kv_budget_tokens": setup.kv,
                        "model": lm.describe(),
                    },
                    "runs": [
                        {
                            "label": label,
                            "policy": result.policy,
                            "summary": summary,
                            "meta": printable(meta),
                            "rejections": rejections.counts(result.records.rejected),
                        }
                    ],
                    "summary": summary,
                    "notes": notes,
                }
            )
        )
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
        print(memory_line(meta))
        kv = kv_line(meta, result.kv_peak_tokens)
        if kv:
            print(kv)
        if meta.get("stopped"):
            print(f"note: {meta['stopped']}")
    paths = write_outputs(setup, {f"{name}-measured-": result}, args)
    if paths and not args.json:
        print(f"records: {', '.join(str(p) for p in paths)}")
    code = stopped_code([meta.get("stopped") or ""])
    return code or all_rejected({label: result})


# -- compare ---------------------------------------------------------------------------------------


def compare(args: argparse.Namespace, setup: RunSetup) -> int:
    """``python -m realrun compare`` (and the bare ``python -m realrun``): see
    ``realrun.cli.compare``."""
    from .compare import compare as run_compare

    return run_compare(args, setup)


# -- profile ---------------------------------------------------------------------------------------


def _profile_path(args, lm_name: str | None = None, device: str | None = None) -> Path:
    """--out is a folder, as everywhere; a path ending in .json (the older form) names the file."""
    out = Path(args.out) if args.out else Path("out") / "realrun"
    if out.suffix.lower() == ".json":
        return out
    model = (lm_name or "MODEL").replace("/", "_")
    name = f"calibration-{model}-{(device or 'DEVICE').replace(':', '')}.json"
    return out / name


def profile(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from ..engine.engine import Engine
    from ..timing.profile import GRIDS
    from ..timing.profile import profile as run_profile

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
    # A profile always takes longer than a few seconds (the quick grid: about 10 on a laptop).
    Progress(progress_lines(args, float("inf"))).line(
        f"profiling {lm.name} on {lm.device} over the {args.grid} grid"
    )
    prof = run_profile(Engine(lm), grid, progress=wants_progress(args))
    path = _profile_path(args, lm.name, lm.device)
    if args.json:
        obj = {k: v for k, v in prof.as_dict().items() if k != "points"}
        print(
            dumps(
                {
                    "config": {"model": lm.describe(), "grid": args.grid, **prof.info},
                    "calibration": str(path),
                    "runs": [
                        {
                            "label": "profile",
                            "shapes": len(prof.points),
                            "heldout": prof.heldout,
                            "seconds": prof.seconds,
                        }
                    ],
                    "notes": [prof.text()],
                    "model": obj,
                }
            )
        )
    else:
        from ..timing.profile import point_pass

        print(f"realrun profile: {lm.describe()}")
        print()
        print(
            f"{'kind':18s} {'rows':>5s} {'query':>6s} {'past':>7s} {'measured ms':>11s} "
            f"{'model ms':>9s} {'error':>7s} {'spread':>7s}"
        )
        for q in prof.points:
            t = prof.model.pass_time(point_pass(q))
            print(
                f"{q.kind:18s} {q.rows:5d} {q.query:6d} {q.past:7.0f} {q.seconds * 1e3:11.3f} "
                f"{t * 1e3:9.3f} {(t - q.seconds) / q.seconds * 100:+6.0f}% {q.spread * 100:6.0f}%"
            )
        print()
        print(prof.text())
    with Staging(path.parent) as staging:
        prof.write(staging.path(path.name))
        staging.commit()
    if not args.json:
        print(f"calibration written: {path}")
        print(
            f"use it: python -m batchsim run --calibration {path}   (or python -m realrun compare "
            f"--calibration {path})"
        )
    return 0
