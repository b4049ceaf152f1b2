"""``python -m batchsim``: run the stories of batching from the command line.

Commands:
    (none)                 run the flagship scenario, taxi-vs-bus
    scenarios              list the named scenarios
    run [SCENARIO]         run a scenario (or your own workload) and print a table
    compare                run several policies on one workload, one table
    theory                 simulation against queueing theory, side by side
    roofline               why batching works: step time vs batch size on a GPU
    sweep PARAM=v1,v2,...  vary one knob, print the trade-off, plot it

Every knob is a flag; ``python -m batchsim run --help`` lists them. Bad input
prints one line naming the field and the value, and exits with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from .options import add_policy_args, add_server_args, add_slo_args, add_workload_args
from ..core.errors import ConfigError
from ..teach.scenarios import FLAGSHIP, SCENARIOS, SERVER, Scenario, get_scenario

__all__ = ["main", "build_parser", "OneLineParser", "add_run_args", "emit_report"]

# Commands that live in modules of their own; each module has add_arguments(parser) and run(args) -> int.
_EXTERNAL = {
    "theory": ("batchsim.cli.theory", "simulation against queueing theory, side by side"),
    "roofline": ("batchsim.cli.roofline", "step time and tokens/s vs batch size on a GPU: why batching works"),
    "sweep": ("batchsim.cli.sweep", "vary one knob (max_batch=1,2,4,...) and plot the throughput-latency trade-off"),
    "doctor": ("batchsim.cli.doctor", "is this machine ready for class? notebooks, widgets, plotting, the trace"),
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line on stderr and exit code 2 (no usage dump)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_run_args(p: argparse.ArgumentParser) -> None:
    add_workload_args(p)
    add_policy_args(p)
    add_server_args(p)
    add_slo_args(p)
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help="print one JSON object (config and summaries) instead of a table")
    g.add_argument("--out", default=None, help="folder for figures and CSV records (default: out/SCENARIO)")
    g.add_argument("--no-plots", action="store_true", help="skip the figures")


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
    run.add_argument("scenario", nargs="?", default=None, help="a name from `scenarios` (default: your flags alone)")
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
        sp = sub.add_parser(name, help=help_, description=(mod.__doc__ or help_))
        mod.add_arguments(sp)
        sp.set_defaults(_module=mod)
    return p


_CUSTOM = Scenario("custom", "your own workload and policies", "Every knob from the command line.")
# Without a step-time flag, your own run happens on the scenarios' server (a GPU, a model, a price),
# so its numbers sit beside the named stories'. With --step-time or --calibration it does not: a
# calibrated CPU must not inherit an A100's price and memory.
_CUSTOM_GPU = Scenario("custom", _CUSTOM.summary, _CUSTOM.story, defaults=dict(SERVER))


def emit_report(report, args: argparse.Namespace, out_default: str) -> None:
    """Print a scenario report as a table (or JSON) and write figures and records under --out."""
    out = Path(args.out) if getattr(args, "out", None) else Path("out") / out_default
    if not getattr(args, "no_plots", False):
        try:
            from ..teach import plots
        except ImportError:
            plots = None
        if plots is not None and hasattr(plots, "figures_for_report"):
            report.figures.extend(plots.figures_for_report(report, out))
    if getattr(args, "json", False):
        runs = [{"label": k, "policy": report.config.get("policies", [None] * len(report.summaries))[i] if i < len(report.config.get("policies", [])) else k, "summary": s}
                for i, (k, s) in enumerate(report.summaries.items())]
        obj = {"scenario": report.name, "config": report.config, "runs": runs, "notes": report.notes,
               "figures": [str(f) for f in report.figures]}
        if len(runs) == 1:
            obj["summary"] = runs[0]["summary"]
        print(json.dumps(obj, indent=2, default=str))
    else:
        print(report.text())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["run", FLAGSHIP]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a bad flag already reported in one line
        return int(e.code or 0)
    try:
        if args.command == "scenarios":
            width = max(len(n) for n in SCENARIOS)
            for s in SCENARIOS.values():
                print(f"{s.name.ljust(width)}  {s.summary}")
            print("\nrun one with: python -m batchsim run NAME   (flags override its defaults)")
            return 0
        if args.command in ("run", "compare"):
            if getattr(args, "scenario", None):
                scenario = get_scenario(args.scenario)
            elif args.step_time is not None or args.calibration:
                scenario = _CUSTOM
            else:
                scenario = _CUSTOM_GPU
            report = scenario.run(args)
            emit_report(report, args, scenario.name)
            return 0
        if hasattr(args, "_module"):
            return int(args._module.run(args) or 0)
        parser.print_help()
        return 0
    except ConfigError as e:
        print(f"batchsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("batchsim: interrupted", file=sys.stderr)
        return 130
