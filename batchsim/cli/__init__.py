"""``python -m batchsim``: run the stories of batching from the command line.

Commands:
    (none)                 run the flagship scenario, taxi-vs-bus
    scenarios              list the named scenarios
    run [SCENARIO]         run a scenario (or your own workload) and print a table
    compare                run several policies on one workload, one table
    theory                 simulation against queueing theory, side by side
    roofline               why batching works: step time vs batch size on a GPU
    sweep PARAM=v1,v2,...  vary one knob, print the trade-off, plot it
    plan                   the cheapest fleet (GPU kind x servers x policy) that meets a p99
                           objective

Every knob is a flag; ``python -m batchsim run --help`` lists them. Bad input
prints one line naming the field and the value, and exits with code 2.

One contract for every command: ``--json`` prints one object ``{config, runs, notes}``;
``--out DIR`` writes the records (CSV) and figures (PNG) under ``DIR/<scenario>/``, so
two scenarios written to one folder keep both sets of files. Results are printed before
any file is written, and files appear whole or not at all. Ctrl-C prints what finished,
names the run cut short and exits with code 130.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

from ..core import rejections
from ..core.errors import ConfigError
from ..core.files import Staging, check_out_dir, dumps
from ..core.flags import check_conflicts, dash_hint, given, ignored_knob_notes, ignored_router_notes
from ..machine.server import DEFAULT_SERVER
from ..teach.scenarios import FLAGSHIP, SCENARIOS, Scenario, get_scenario
from ..teach.scenarios.base import Interrupted
from .options import (
    add_fleet_args,
    add_output_args,
    add_policy_args,
    add_server_args,
    add_slo_args,
    add_workload_args,
    policies_from_args,
)

__all__ = [
    "main",
    "build_parser",
    "OneLineParser",
    "add_run_args",
    "emit_report",
    "out_dir",
    "default_server",
]

# Commands that live in modules of their own; each module has add_arguments(parser) and run(args) ->
# int.
_EXTERNAL = {
    "theory": ("batchsim.cli.theory", "simulation against queueing theory, side by side"),
    "roofline": (
        "batchsim.cli.roofline",
        "step time and tokens/s vs batch size on a GPU: why batching works",
    ),
    "sweep": (
        "batchsim.cli.sweep",
        "vary one knob (max_batch=1,2,4,...) and plot the throughput-latency trade-off",
    ),
    "plan": (
        "batchsim.cli.capacity",
        "capacity planning: the cheapest GPUs x servers x policy that meets a p99 objective",
    ),
    "doctor": (
        "batchsim.cli.doctor",
        "is this machine ready for class? notebooks, widgets, plotting, the trace",
    ),
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line on stderr and exit code 2 (no usage dump)."""

    #: The words being parsed, for the one hint argparse cannot give (set by ``main``).
    argv: list[str] = []

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {dash_hint(message, self.argv)}\n")


def add_run_args(p: argparse.ArgumentParser) -> None:
    add_workload_args(p)
    add_policy_args(p)
    add_server_args(p)
    add_fleet_args(p)
    add_slo_args(p)
    add_output_args(
        p,
        "root folder for records (CSV) and figures (PNG): they go to OUT/SCENARIO/ (default: "
        "figures only, under out/SCENARIO/)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m batchsim",
        description="Simulate an inference server and see why batching pays: the taxi and the bus.",
        epilog="With no command, runs the flagship scenario: " + FLAGSHIP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", parser_class=OneLineParser)
    sub.add_parser("scenarios", help="list the named scenarios")
    run = sub.add_parser("run", help="run a named scenario or your own workload")
    run.add_argument(
        "scenario",
        nargs="?",
        default=None,
        help="a name from `scenarios` (default: your flags alone)",
    )
    add_run_args(run)
    cmp_ = sub.add_parser("compare", help="several policies on one identical workload")
    add_run_args(cmp_)
    for name, (module, help_) in _EXTERNAL.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            continue
        # the docstring's examples, as written
        sp = sub.add_parser(
            name,
            help=help_,
            description=(mod.__doc__ or help_),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.add_arguments(sp)
        sp.set_defaults(_module=mod)
    return p


def default_server(flags) -> dict:
    """The server defaults of a run of your own flags: one rule for run, compare and sweep.

    Without a step-time flag, your own run happens on the scenarios' server (a GPU, a model, a
    price), so its numbers sit beside the named stories'. With --step-time or --calibration it
    does not: a calibrated CPU must not inherit an A100's price and memory.
    """
    if flags.get("step_time") is not None or flags.get("calibration"):
        return {}
    return dict(DEFAULT_SERVER)


_CUSTOM = Scenario("custom", "your own workload and policies", "Every knob from the command line.")
_CUSTOM_GPU = Scenario("custom", _CUSTOM.summary, _CUSTOM.story, defaults=default_server({}))


def out_dir(args: argparse.Namespace, name: str) -> Path:
    """Where a run named ``name`` writes: OUT/name (default out/name)."""
    return Path(getattr(args, "out", None) or "out") / name


def _writes(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "out", None)) or not getattr(args, "no_plots", False)


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", label).strip("-") or "run"


def _write_records(report, staging: Staging) -> list[Path]:
    paths = []
    for label, res in report.results.items():
        paths += [
            staging.final(p) for p in res.records.write_csv(staging.dir, prefix=f"{_slug(label)}-")
        ]
    return paths


def _json(report) -> dict:
    labels = list(report.summaries)
    policies = report.config.get("policies", [])
    runs = [
        {
            "label": k,
            "policy": policies[i] if i < len(policies) else k,
            "summary": report.summaries[k],
            "rejections": rejections.counts(report.results[k].records.rejected),
        }
        for i, k in enumerate(labels)
    ]
    for r in runs:
        if r["label"] in report.replica_summaries:
            r["servers"] = report.replica_summaries[r["label"]]
    obj = {
        "scenario": report.name,
        "config": report.config,
        "runs": runs,
        "notes": report.notes,
        "figures": [str(f) for f in report.figures],
    }
    if len(runs) == 1:
        obj["summary"] = runs[0]["summary"]
    return obj


def emit_report(report, args: argparse.Namespace, out_default: str) -> None:
    """Print a scenario report (table or JSON), then write its records and figures under
    OUT/<name>/.

    Files are drawn into a hidden folder and moved into place once complete; as JSON the object
    is printed once they are drawn (it names them) and before they are moved in.
    """
    as_json = getattr(args, "json", False)
    dest = out_dir(args, out_default)
    if not _writes(args):
        print(dumps(_json(report)) if as_json else report.text())
        return
    if not as_json:
        print(report.text())
    with Staging(dest) as staging:
        records = _write_records(report, staging) if getattr(args, "out", None) else []
        if not getattr(args, "no_plots", False):
            from ..teach import plots

            report.figures.extend(
                staging.final(p) for p in plots.figures_for_report(report, staging.dir)
            )
        if as_json:
            obj = _json(report)
            obj["records"] = [str(p) for p in records]
            print(dumps(obj))
        staging.commit()
    if not as_json:
        if report.figures:
            print("\nfigures: " + ", ".join(str(p) for p in report.figures))
        if records:
            print(f"records: {len(records)} CSV files in {dest}")


def _interrupted(e: Interrupted, args: argparse.Namespace, name: str) -> int:
    """Ctrl-C: what finished is printed (and its records written, whole); the run cut short is
    named."""
    report = e.report
    note = f"interrupted (Ctrl-C) during {e.label}: it and any run after it did not finish"
    report.notes.insert(0, note)
    if report.results:
        args.no_plots = True  # figures of a partial set would mislead; the records are kept
        emit_report(report, args, name)
    print(f"batchsim: {note}", file=sys.stderr)
    return 130


def _run_scenario(args: argparse.Namespace) -> int:
    flags = given(args)
    check_conflicts(flags)
    if getattr(args, "scenario", None):
        scenario = get_scenario(args.scenario)
    elif args.step_time is not None or args.calibration:
        scenario = _CUSTOM
    else:
        scenario = _CUSTOM_GPU
    if getattr(args, "summary_only", None):
        if getattr(args, "out", None):
            raise ConfigError(
                f"--summary-only keeps no records to write to --out (got {args.out!r}): drop one "
                f"of them"
            )
        args.no_plots = True  # a summary-only run keeps no per-request times to draw
    if _writes(args):
        check_out_dir(out_dir(args, scenario.name), "out")
    try:
        report = scenario.run(args)
    except Interrupted as e:
        return _interrupted(e, args, scenario.name)
    report.notes.extend(ignored_knob_notes(flags, policies_from_args(args, scenario.defaults)))
    report.notes.extend(
        ignored_router_notes(
            flags, max((s.get("replicas", 1) for s in report.summaries.values()), default=1)
        )
    )
    emit_report(report, args, scenario.name)
    if rejections.all_rejected(report.results):
        print(
            f"batchsim: error: every request was rejected in every run, so nothing was served "
            f"({rejections.lines(report.results)[0]})",
            file=sys.stderr,
        )
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["run", FLAGSHIP]
    parser = build_parser()
    OneLineParser.argv = argv
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a bad flag already reported in one line
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    try:
        if args.command == "scenarios":
            width = max(len(n) for n in SCENARIOS)
            for s in SCENARIOS.values():
                print(f"{s.name.ljust(width)}  {s.summary}")
            print("\nrun one with: python -m batchsim run NAME   (flags override its defaults)")
            return 0
        if args.command in ("run", "compare"):
            return _run_scenario(args)
        if hasattr(args, "_module"):
            return int(args._module.run(args) or 0)
        parser.print_help()
        return 0
    except ConfigError as e:
        print(f"batchsim: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:  # a command other than run/compare that runs scenarios
        return _interrupted(e, args, e.report.name)
    except MemoryError:
        print(
            "batchsim: error: out of memory: the run is larger than this machine holds; lower "
            "--requests, --duration or --output-len",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("batchsim: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head`: the reader left; nothing to say to it
        return 0
