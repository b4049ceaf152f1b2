"""``python -m realrun load``: batchsim's workload flags, sent open-loop to an OpenAI-compatible
server.

The workload is built exactly as ``realrun run`` builds it (``WorkloadConfig.from_flags`` over
realrun's small defaults), so ``--rate``, ``--arrival gamma:2``, ``--trace FILE`` and the
lengths mean here what they mean to the simulator; only the server is elsewhere: ours
(``python -m realrun serve``) or ``vllm serve``. Every flag, the output file and the server
itself are checked before the first request leaves; the table is printed before the file
is written. This module imports only the standard library and batchsim, so that the whole
command line's ``--help`` works without httpx installed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from batchsim.core.config import WorkloadConfig
from batchsim.core.errors import ConfigError
from batchsim.core.files import dumps, write_atomic
from batchsim.core.flags import WORKLOAD_FLAGS, check_conflicts, given

from ..classroom.load.metrics import format_report
from ..classroom.load.outfile import check_output
from ..classroom.load.runner import DEFAULT_URL, LoadConfig, run_load, span_seconds
from .flags import add_realrun_flags

__all__ = ["add_parser", "run"]

_PREFIX = "realrun load: "


def add_parser(sub) -> None:
    """Add the ``load`` command to realrun's subcommands."""
    from .run_setup import REALRUN_DEFAULTS

    d = REALRUN_DEFAULTS
    p = sub.add_parser(
        "load",
        help="an open-loop load generator against any OpenAI-compatible server (ours, vllm serve)",
        description="Send batchsim's workload to an OpenAI-compatible server, each request at its "
        "own arrival time (open loop), streamed; measure TTFT, TPOT, ITL and E2E latency as vllm "
        "bench serve does.",
        epilog=f"Defaults here are realrun's small load: --rate {d['rate']:g}, --requests "
        f"{d['requests']}, --prompt-len {d['prompt_len']}, --output-len {d['output_len']}, as each "
        f"flag's help says. "
        "Ctrl-C prints what was measured and exits 130.",
    )
    s = p.add_argument_group("server")
    s.add_argument(
        "--url", default=DEFAULT_URL, help=f"the server's base URL (default {DEFAULT_URL})"
    )
    s.add_argument(
        "--endpoint",
        default="/v1/completions",
        metavar="PATH",
        help="/v1/completions (default: the prompt as token ids) or /v1/chat/completions (the "
        "prompt as text)",
    )
    s.add_argument(
        "--model",
        default=None,
        metavar="NAME",
        help="model name to ask for (default: the first the server lists at /v1/models)",
    )
    s.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        metavar="N",
        help="at most this many requests in flight; later arrivals wait on the client (default: no "
        "cap)",
    )
    # No default from $OPENAI_API_KEY (vllm bench serve reads it): a student's real OpenAI key would
    # be sent to whatever server the room points at. A key is given only on purpose.
    s.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="send 'Authorization: Bearer KEY' (a server started with --api-key needs it; with "
        "--client-by key, your own key names you in the class's record; default: none)",
    )
    s.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="seconds one request may take before it counts as failed (default 600)",
    )
    w = p.add_argument_group("workload (who arrives when, with how many tokens)")
    add_realrun_flags(w, WORKLOAD_FLAGS)
    w.add_argument(
        "--prompt-text",
        default=None,
        metavar="TEXT",
        help="send this text as every prompt (default: --prompt-len token ids below 256, seeded by "
        "--seed)",
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="write the figures to FILE with vllm bench serve's field names",
    )
    o.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr (default: at a terminal)",
    )


def run(args: argparse.Namespace) -> int:
    """The command: 0 when any request completed, 1 when none did, 2 for bad input, 130 on
    Ctrl-C."""
    try:
        flags = given(args)
        check_conflicts(flags)
        wconf = WorkloadConfig.from_flags(flags, _defaults())
        cfg = LoadConfig(
            url=args.url,
            endpoint=args.endpoint,
            model=args.model,
            max_concurrency=args.max_concurrency,
            timeout=args.timeout,
            prompt_text=args.prompt_text,
            seed=wconf.seed,
            api_key=args.api_key,
        )
        json_path = None if args.json is None else check_output(args.json, "json")
        workload = wconf.build()
        _notes(flags, span_seconds(workload))
        report = run_load(cfg, workload, progress=_progress(args))
    except ConfigError as e:
        print(f"{_PREFIX}error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(
            f"{_PREFIX}error: {e.name or e} is not installed: pip install 'batchsim[serve]'",
            file=sys.stderr,
        )
        return 2
    report = replace(report, **_traffic(wconf))
    print(format_report(report))
    if json_path is not None:
        try:
            write_atomic(json_path, dumps(report.summary()) + "\n")
        except OSError as e:
            print(
                f"{_PREFIX}error: json {str(json_path)!r}: writing failed ({e.strerror or e}); "
                "the table above is complete, the file is not written",
                file=sys.stderr,
            )
            return 2
    if report.interrupted:
        print(
            f"{_PREFIX}interrupted (Ctrl-C): {len(report.results)} of {report.requests} requests "
            f"finished",
            file=sys.stderr,
        )
        return 130
    return 0 if report.completed else 1


def _defaults() -> dict:
    from .run_setup import REALRUN_DEFAULTS

    return dict(REALRUN_DEFAULTS)


def _progress(args: argparse.Namespace) -> bool:
    return sys.stderr.isatty() if args.progress is None else bool(args.progress)


def _traffic(wconf: WorkloadConfig) -> dict:
    """vLLM's ``request_rate`` and ``burstiness`` (its gamma shape, 1/CV^2; 1 is Poisson) for the
    JSON."""
    if wconf.trace is not None:
        return {"request_rate": "trace", "burstiness": None}
    process = wconf.arrival_process()
    cv = getattr(process, "cv", None)
    burst = (
        1.0 / float(cv) ** 2
        if cv is not None
        else (1.0 if type(process).__name__ == "Poisson" else None)
    )
    return {"request_rate": float(process.mean_rate), "burstiness": burst}


def _notes(flags: dict, span: float) -> None:
    from .run_setup import LONG_REAL_RUN_S

    if flags.get("prompt_text") is not None and flags.get("prompt_len") is not None:
        print(
            f"{_PREFIX}note: --prompt-len {flags['prompt_len']} is ignored: --prompt-text is every "
            f"prompt",
            file=sys.stderr,
        )
    if span > LONG_REAL_RUN_S:
        print(
            f"{_PREFIX}note: the arrivals span {span:.0f} s, so this takes at least that long; "
            "Ctrl-C stops it and prints what was measured",
            file=sys.stderr,
        )
