"""``python -m realrun predict RECORD``: batchsim's prediction of what ``realrun serve`` measured.

The step-time model is ``--calibration FILE`` (from ``realrun profile``, on the machine that
served), or, without it, a profile taken now of the model the sidecar names, on this machine,
on a grid fitted to the record's shapes (offline: tiny-gpt2's random weights by default). The
table is printed first; ``--out DIR`` then writes the figure (the TTFT's CDF, predicted and
measured) and, when profiled now, the calibration. Bad input is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batchsim.core.errors import ConfigError, check_at_most, check_choice, check_int_at_least
from batchsim.core.files import Staging, check_out_dir, dumps, read_json
from batchsim.sim.sampled import NOISE_CHOICES, spread_of

from ..classroom.predict import (
    Prediction,
    ServedRecord,
    format_prediction,
    predict_record,
    read_record,
)
from .flags import FlagError, Parser

__all__ = ["add_parser", "run", "main", "plot_ttft_cdf"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="batchsim's prediction of a `realrun serve --record` CSV, against what it measured",
        description="Simulate the very arrivals a `realrun serve --record` CSV holds, under the "
        "policy and limits its sidecar (FILE.json) names, with a calibrated step-time model; print "
        "predicted against measured per metric, with a verdict.",
        epilog="The record alone (no sidecar) still replays: python -m batchsim run --trace RECORD",
    )
    p.add_argument(
        "record", help="the CSV `realrun serve --record` wrote (its sidecar RECORD.json beside it)"
    )
    p.add_argument(
        "--calibration",
        default=None,
        help="step-time model (JSON from `python -m realrun profile` on the machine that served; "
        "default: profile the sidecar's model now, on this machine)",
    )
    p.add_argument(
        "--step-noise",
        default=None,
        help="profiled (default: each simulated pass drawn from the profiled spread and the "
        "machine's slow drift, over --seeds seeds: a median and a 90 %% band), passes (the passes' "
        "spread alone) or none (every pass at its mean)",
    )
    p.add_argument(
        "--seeds", type=int, default=None, help="simulations with --step-noise profiled (default 5)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {config, runs, notes} instead of a table",
    )
    p.add_argument(
        "--out",
        default=None,
        help="folder for the figure (predict-ttft-cdf.png) and a calibration profiled now",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar while profiling",
    )


def _check(args) -> None:
    if args.step_noise is not None:
        check_choice("step-noise", args.step_noise, NOISE_CHOICES)
    if args.seeds is not None:
        check_int_at_least("seeds", args.seeds, 1)
        check_at_most("seeds", args.seeds, 200, "runs")
        if args.seeds > 1 and args.step_noise == "none":
            raise ConfigError(
                f"--seeds {args.seeds} draws step times, and --step-noise none prices every pass "
                f"at its "
                "mean: give one of them"
            )
    if not Path(args.record).is_file():
        raise ConfigError(
            f"record {args.record!r}: no such file (the CSV `realrun serve --record FILE` writes "
            f"at its stop)"
        )
    if args.calibration is not None and not Path(args.calibration).is_file():
        raise ConfigError(
            f"calibration {args.calibration!r}: no such file (`python -m realrun profile` writes "
            f"one)"
        )
    if args.out is not None:
        check_out_dir(args.out, "out")


def _calibrated(args, rec: ServedRecord, notes: list[str]):
    """(step-time model, where it came from, the profile taken now or None)."""
    from batchsim.sim.steptime import load_step_time

    meta = rec.meta
    if args.calibration:
        model = load_step_time(args.calibration)
        info = read_json(args.calibration, "calibration")
        for key, side in (
            ("model_name", "model"),
            ("device", "device"),
            ("dtype", "dtype"),
            ("threads", "threads"),
        ):
            if isinstance(info, dict) and key in info and side in meta and info[key] != meta[side]:
                notes.append(
                    f"warning: calibration {args.calibration} was measured with {key}={info[key]}, "
                    f"the record was served with {side}={meta[side]}"
                )
        return model, args.calibration, None
    from ..engine.engine import Engine
    from ..engine.model import load_model
    from .calibration import sized_profile

    name = str(meta.get("model") or "tiny-gpt2")
    try:
        lm = load_model(
            name,
            device=str(meta.get("device") or "auto"),
            dtype=str(meta.get("dtype") or "auto"),
            threads=meta.get("threads"),
        )
    except ConfigError as e:
        raise ConfigError(
            f"profiling the record's model now ({e}); profile it where it was served "
            "(python -m realrun profile) and pass --calibration"
        ) from None
    policy = rec.policy.build()
    progress = sys.stderr.isatty() if args.progress is None else bool(args.progress)
    from ..clock.progress import Progress, progress_lines

    lines = Progress(progress_lines(args, float("inf")))
    prof = sized_profile(
        Engine(lm),
        rec.workload,
        {policy.name: rec.policy.build},
        [policy],
        say=lines.line if lines.enabled else None,
        notes=notes,
        bar=progress,
    )
    notes.append(
        f"calibration profiled now on this machine ({lm.describe()}, {len(prof.points)} shapes, "
        f"{prof.seconds:.1f} s): the prediction is for this machine; if the record was served "
        f"elsewhere, "
        "pass that machine's calibration"
    )
    return prof.model, f"profiled now ({lm.describe()})", prof


def _seeds(args, model, notes: list[str]) -> int:
    if (args.step_noise or "profiled") == "none":
        return 1
    if spread_of(model) is None:
        if args.step_noise in ("profiled", "passes"):
            raise ConfigError(
                f"step-noise {args.step_noise} needs a calibration that kept each shape's spread "
                f"(realrun profile "
                "writes one), and this one has none: re-profile, or use --step-noise none"
            )
        notes.append(
            "note: the calibration kept no spread of its step times, so each pass is priced at its "
            "mean (one prediction, no band, no noise)"
        )
        return 1
    return args.seeds or 5


def plot_ttft_cdf(p: Prediction, path: str | Path, title: str = "") -> Path:
    """The TTFT's CDF: measured (black) against each seed's prediction (light) and over the requests
    compared."""
    import numpy as np
    from matplotlib.figure import Figure

    from ..judge.compare import counted_only

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    keep = p.record.finished.copy()
    for s in p.sims:
        keep &= s.records.completed_mask

    def cdf(result, **kw):
        r = counted_only(result, keep).records
        t = np.sort((r.first_token - r.arrival)[keep]) * 1e3
        ax.step(t, np.arange(1, len(t) + 1) / len(t), where="post", **kw)

    for k, s in enumerate(p.sims):
        cdf(
            s,
            color="C0",
            alpha=1.0 if k == 0 else 0.35,
            lw=1.5 if k == 0 else 0.8,
            label=f"predicted ({p.seeds} seeds)" if k == 0 else None,
        )
    cdf(p.record.measured, color="black", lw=2, label="measured (the record)")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("time to first token, ms (log)")
    ax.set_ylabel("share of requests")
    ax.set_title(title or "TTFT: predicted vs measured", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.savefig(path, dpi=120)
    return Path(path)


def run(args: argparse.Namespace) -> int:
    """Check, read, calibrate, simulate, print; then write the figure. 0, or 2 for bad input."""
    _check(args)
    rec = read_record(args.record)
    notes: list[str] = []
    model, source, prof = _calibrated(args, rec, notes)
    seeds = _seeds(args, model, notes)
    pred = predict_record(rec, model, seeds, args.step_noise or "profiled")
    meta = rec.meta
    title = (
        f"{Path(rec.path).name}: predicted vs "
        f"measured\n{meta.get('policy_repr') or rec.policy.name} on {meta.get('model')} "
        f"({meta.get('device')})"
    )
    if args.json:
        print(
            dumps(
                {
                    "config": {
                        "record": rec.path,
                        "served": meta,
                        "step_time": repr(model),
                        "calibration": source,
                        "seeds": seeds,
                        "step_noise": args.step_noise or "profiled",
                    },
                    "runs": [
                        {
                            "label": rec.policy.name,
                            "policy": repr(rec.policy.build()),
                            **pred.as_dict(),
                        }
                    ],
                    "notes": notes + pred.notes,
                }
            )
        )
    else:
        print(title.replace("\n", ", "))
        print(f"step time: {model!r}" + (f", {seeds} seeds" if seeds > 1 else ""))
        print()
        print(format_prediction(pred))
        print(
            "error = (predicted - measured) / measured; seeds ±: the farthest seed from their "
            "median, % of measured; within noise: off by no more than that"
        )
        for n in notes:
            print(n)
    if args.out:
        with Staging(args.out) as staging:
            plot_ttft_cdf(pred, staging.path("predict-ttft-cdf.png"), title)
            if prof is not None:
                prof.write(staging.path("calibration.json"))
            paths = staging.commit()
        if not args.json:
            print("wrote: " + ", ".join(str(p) for p in paths))
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command on its own (``realrun.cli`` registers it as ``predict``): tests call this
    in-process."""
    parser = Parser(prog="python -m realrun")
    add_parser(parser.add_subparsers(dest="command", parser_class=Parser))
    words = ["predict", *(sys.argv[1:] if argv is None else argv)]
    Parser.argv = words
    try:
        args = parser.parse_args(words)
        return run(args)
    except FlagError as e:
        print(str(e), file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    except ConfigError as e:
        print(f"realrun: error: {e}", file=sys.stderr)
        return 2
