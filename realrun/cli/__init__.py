"""``python -m realrun``: the policies of batchsim on a real model, measured and compared.

Commands:
    (none)               lesson 7's compare (``realrun.cli.default_run``): the four policies
                         on tiny-gpt2, one CPU thread, realrun's small load, predicted from the
                         course's reference calibration, each measured twice; ends with one
                         verdict line (its time: ``--help``)
    compare [SCENARIO]   each policy simulated (calibrated) and measured on one workload:
                         predicted vs measured, with errors, and a figure
    run [SCENARIO]       measure one policy on one workload (batchsim's flags, unchanged)
    profile              measure step times over a grid, fit the cost model, write a calibration
    doctor               device, dtype, versions, model source, threads, memory: the first check
    serve                an OpenAI-compatible HTTP server with the chosen policy: the class is
                         the traffic
    load                 an open-loop load generator against any OpenAI-compatible server
                         (ours, vllm serve)
    predict RECORD       batchsim's prediction of a `serve --record` CSV, against what the
                         server measured

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
import sys
import textwrap

from batchsim.core import sizing
from batchsim.core.errors import ConfigError
from batchsim.core.flags import (
    FLEET_FLAGS,
    POLICY_FLAGS,
    SLO_FLAGS,
    WORKLOAD_FLAGS,
    Flag,
    add_flags,
)

from .default_run import BARE_ARGV, BARE_COMMAND, bare_line, time_text, workload_text
from .flags import FlagError, Parser, add_model_args, add_realrun_flags
from .run_setup import REALRUN_DEFAULTS, RunSetup, check_model_flags

__all__ = ["main", "build_parser", "REALRUN_DEFAULTS", "RunSetup"]

_KV_FLAG = Flag(
    "--kv-budget-tokens",
    "kv_budget_tokens",
    int,
    "KV-cache budget in tokens, enforced by the policy (default: unlimited)",
)
_CAL_FLAG = Flag(
    "--calibration",
    "calibration",
    str,
    "step-time model for the prediction: JSON from `python -m realrun profile`, or reference (the "
    "course's, of tiny-gpt2 on one CPU thread: what the bare run uses); default: profile now",
)


# -- parser -----------------------------------------------------------------------------------


def _add_output_args(p: argparse.ArgumentParser, out_help: str) -> None:
    o = p.add_argument_group("output")
    o.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {config, runs, notes} instead of a table",
    )
    o.add_argument("--out", default=None, help=out_help)
    o.add_argument("--no-plots", action="store_true", help="skip the figure")
    o.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="on stderr, a line as each part of a run begins (default: when the run takes more "
        "than a few seconds) and progress bars (default: at a terminal); --no-progress: neither",
    )
    o.add_argument(
        sizing.OVERRIDE_FLAG,
        dest="no_size_check",
        action="store_true",
        help="run even when the run would take more than a day or more memory than this machine "
        "has",
    )


_DEFAULTS_NOTE = (
    "the defaults are realrun's small load; a SCENARIO sets its own workload shape and policies"
)


def _add_workload_run_args(p: argparse.ArgumentParser, calibration: bool) -> None:
    p.add_argument(
        "scenario",
        nargs="?",
        default=None,
        help="a batchsim scenario to take the workload and policies from (default: a small load)",
    )
    add_model_args(p)
    add_realrun_flags(
        p.add_argument_group("workload (who arrives when, with how many tokens)", _DEFAULTS_NOTE),
        WORKLOAD_FLAGS,
    )
    add_realrun_flags(p.add_argument_group("batching policy", _DEFAULTS_NOTE), POLICY_FLAGS)
    # batchsim's server flags describe a simulated GPU; here the server is the real model, so only
    # the KV budget (a policy matter) and, for compare, the calibration carry over.
    g = p.add_argument_group("server")
    _KV_FLAG.add_to(g)
    if calibration:
        _CAL_FLAG.add_to(g)
        g.add_argument(
            "--grid",
            default="auto",
            help="profile grid when no calibration is given: auto (fitted to the workload), quick "
            "or full",
        )
        g.add_argument(
            "--profile-budget",
            type=float,
            default=None,
            metavar="SECONDS",
            help="seconds the profile taken now may spend (default 90): with --grid auto it times "
            "only the shapes the workload reaches, thins a grid whose estimate is above the "
            "budget, and leaves out rounds that would end beyond it",
        )
        g.add_argument(
            "--step-noise",
            default=None,
            help="profiled (default: each simulated pass drawn from the spread the profile "
            "measured, times the machine's slow drift, over --seeds seeds: a median prediction and "
            "a 90 %% band), passes (the passes' own spread, no slow drift) or none (every pass at "
            "its mean)",
        )
        g.add_argument(
            "--seeds",
            type=int,
            default=None,
            help="simulations per policy with --step-noise profiled (default 5)",
        )
        g.add_argument(
            "--repeats",
            type=int,
            default=None,
            help="measure each policy R times, interleaved in rounds of shuffled order, a canary "
            "of fixed passes timed before and after each run (default 1)",
        )
        g.add_argument(
            "--run-spread",
            default=None,
            metavar="SD:DF",
            help="this machine's run-to-run spread read earlier, as a compare prints it (\"8.0%% "
            "from one "
            'run to the next ... 4 degrees of freedom": 8%%:4) or lab 7 measures it; pooled with '
            "the one this compare reads from its --repeats, for a narrower interval that still "
            "holds nine runs in ten (default: the one an earlier compare stored with "
            "--calibration, if any)",
        )
        g.add_argument(
            "--level-move",
            default=None,
            metavar="SD:DF",
            help="how far the runs' level lay from the profile's on this machine, read by earlier "
            'compares (their JSON\'s level_move_next, as "12%%:3"): the interval made before '
            "the runs holds it where it is larger than the run-to-run spread's share (a profile "
            "and runs minutes later lie further apart than consecutive runs); pooled with this "
            "compare's own reading (default: the one an earlier compare stored with "
            "--calibration, if any)",
        )
        g.add_argument(
            "--busy",
            type=float,
            default=None,
            help="set each policy's arrival rate so the simulated server is busy this fraction of "
            "the time (0.7: 70 %% load); the workload's own rate is only its shape",
        )
        g.add_argument(
            "--explain",
            action="store_true",
            help="besides the one-screen table: every metric, the seeds' band, the canaries, the "
            "notes and where each error came from (the replay and the cost model per kind of pass)",
        )
        g.add_argument(
            "--no-speed-check",
            action="store_true",
            help="predict at the profile's level as it was measured; by default a canary of fixed "
            "profiled passes is timed before and after every run and the prediction is moved to "
            "the machine's level over the runs (prefill and decode apart: the median of every "
            "canary)",
        )
    if not calibration:  # run: a fleet of engines taking turns (compare measures one server)
        add_flags(
            p.add_argument_group("fleet (several engines in this process, taking turns)"),
            FLEET_FLAGS,
        )
    add_flags(p.add_argument_group("service-level objectives (for goodput)"), SLO_FLAGS)
    _add_output_args(
        p,
        "root folder for the figure, calibration and CSV records: they go to OUT/SCENARIO/ "
        "(default out/realrun-COMMAND/, figure and calibration only)",
    )


def _wrap(text: str) -> str:
    """An epilog wrapped by hand: argparse breaks lines at hyphens, and a flag cut in two
    (--no-\nspeed-check) cannot be copied into a shell."""
    return textwrap.fill(text, 79, break_on_hyphens=False, break_long_words=False)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m realrun",
        description="The same batching policies on a real model: measured, and compared with the "
        "simulator.",
        epilog=_wrap(
            f"With no command: {BARE_COMMAND} ({workload_text()}; ends with one verdict line): "
            f"{time_text()}."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", parser_class=Parser)
    cmp_ = sub.add_parser(
        "compare",
        help="predicted (batchsim, calibrated) vs measured (real model) for each policy",
        description="Each policy simulated (calibrated) and measured on one workload: predicted vs "
        "measured, with errors, verdicts, a figure and, last, one verdict line.",
        epilog=_wrap(
            f"With no flags: {workload_text()}, the four policies, profiled first, one run each: "
            f"{time_text('compare_wall_s')}. The bare `python -m realrun` is {BARE_COMMAND}: "
            f"{time_text()}."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_workload_run_args(cmp_, calibration=True)
    run = sub.add_parser("run", help="measure one policy on one workload")
    _add_workload_run_args(run, calibration=False)
    prof = sub.add_parser("profile", help="measure step times and fit batchsim's linear cost model")
    add_model_args(prof, engine=False)
    prof.add_argument("--grid", default="quick", help="quick (default) or full")
    prof.add_argument(
        "--repeats", type=int, default=None, help="repetitions per point (median is kept)"
    )
    prof.add_argument(
        "--out",
        default=None,
        help="folder for the calibration (default out/realrun); it is written as "
        "calibration-MODEL-DEVICE.json; a path ending in .json names the file itself",
    )
    prof.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {config, runs, notes} instead of a table",
    )
    prof.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr",
    )
    doc = sub.add_parser("doctor", help="device, dtype, versions, model source, threads, memory")
    add_model_args(doc, engine=False)
    doc.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {config, runs, notes} instead of text",
    )
    from .load import add_parser as add_load
    from .predict import add_parser as add_predict
    from .serve import add_parser as add_serve

    add_serve(sub)
    add_load(sub)
    add_predict(sub)
    return p


# -- entry point ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bare = not argv
    if bare:
        argv = list(BARE_ARGV)
    parser = build_parser()
    Parser.argv = argv
    try:
        args = parser.parse_args(argv)
    except FlagError as e:
        print(str(e), file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0) if not isinstance(e.code, str) else 2
    from . import run as commands

    try:
        if args.command == "compare":
            from ..reference.course import calibration_path

            args.bare = bare_line() if bare else None
            args.calibration = calibration_path(args.calibration)
            return commands.compare(args, RunSetup(args))
        if args.command == "run":
            return commands.run(args, RunSetup(args))
        if args.command == "profile":
            return commands.profile(args)
        if args.command == "doctor":
            check_model_flags(args)
            from .doctor import doctor

            return doctor(commands.load(args), args.device, args.dtype, as_json=args.json)
        if args.command == "serve":
            from .serve import run as serve

            return serve(args)
        if args.command == "load":
            from .load import run as load

            return load(args)
        if args.command == "predict":
            from .predict import run as predict

            return predict(args)
        parser.print_help()
        return 0
    except ConfigError as e:
        print(f"realrun: error: {e}", file=sys.stderr)
        return 2
    except MemoryError:
        print(
            "realrun: error: out of memory: lower --requests, --max-batch or --max-seqs",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("realrun: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
