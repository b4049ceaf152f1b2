"""Command-line flags, defined once, for any argparse-like parser: the knobs' outside.

Each knob of a run has one ``Flag`` (spelling, destination, type, help); batchsim's and
realrun's command lines both put these on their parsers with ``add_flags``, so realrun
gets batchsim's flags without importing batchsim's command line. What the flags hold
is resolved by ``resolve`` (flag given > scenario default > package default) into the
frozen configurations of ``batchsim.core.config``, which check every value.

``check_conflicts`` refuses flag pairs that contradict each other or mean nothing
together (``--trace`` with ``--rate``), naming both, rather than silently ignoring one;
``ignored_knob_notes`` says, in a note, when a policy knob reaches no policy of the run.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, show
from .knobs import FLAG_KNOBS, KNOBS, flag_knobs, knob_defaults, knob_help
from .knobs import knob_users as _users

__all__ = [
    "Flag",
    "add_flags",
    "flag_name",
    "dash_hint",
    "given",
    "resolve",
    "resolve_arg",
    "comma_list",
    "check_conflicts",
    "ignored_knob_notes",
    "ignored_router_notes",
    "knob_users",
    "trace_of",
    "policy_flags",
    "WORKLOAD_FLAGS",
    "POLICY_FLAGS",
    "SLO_FLAGS",
    "FLEET_FLAGS",
    "RECORDS_FLAGS",
]


@dataclass(frozen=True)
class Flag:
    """One command-line flag: its spelling, where it lands, how it is read, and what it means."""

    flag: str
    dest: str
    type: Any = str
    help: str = ""
    metavar: str | None = None
    action: Any = None

    def add_to(self, parser) -> None:
        kw: dict = {"dest": self.dest, "default": None, "help": self.help}
        if self.action is not None:
            kw["action"] = self.action
        else:
            kw["type"] = self.type
            if self.metavar:
                kw["metavar"] = self.metavar
        parser.add_argument(self.flag, **kw)


def add_flags(parser, flags: tuple[Flag, ...], skip: tuple[str, ...] = ()) -> None:
    """Put ``flags`` on an argparse parser or group (all default to None: "not given")."""
    for f in flags:
        if f.flag not in skip:
            f.add_to(parser)


WORKLOAD_FLAGS = (
    Flag(
        "--arrival",
        "arrival",
        str,
        "poisson (default), gamma:CV (bursty; CV=1 is Poisson), constant, rush-hour[:S@R,...], or "
        "trace:PATH to replay a trace file",
    ),
    Flag(
        "--trace",
        "trace",
        str,
        "replay this trace file (CSV: arrival_s,prompt_tokens,output_tokens, or Azure's "
        "TIMESTAMP,ContextTokens,GeneratedTokens); its own arrivals and lengths, so no --rate or "
        "--prompt-len",
    ),
    Flag("--rate", "rate", float, "mean arrivals per second (default 5)"),
    Flag(
        "--requests",
        "requests",
        int,
        "number of requests (default 500); with a trace, its first N rows",
    ),
    Flag(
        "--duration",
        "duration",
        float,
        "seconds of arrivals instead of a request count (not with --requests)",
    ),
    Flag(
        "--prompt-len",
        "prompt_len",
        str,
        "prompt tokens: N, uniform:LO,HI or lognormal:MEAN,MEDIAN (default uniform:32,512)",
    ),
    Flag(
        "--output-len",
        "output_len",
        str,
        "output tokens: N, uniform:LO,HI or lognormal:MEAN,MEDIAN (default lognormal:128,96)",
    ),
    Flag("--speedup", "speedup", float, "with a trace: replay this many times faster (default 1)"),
    Flag("--seed", "seed", int, "one seed for the whole workload (default 0)"),
)


def policy_flags(knobs: dict | None = None) -> tuple[Flag, ...]:
    """``--policy`` and one flag per knob of ``batchsim.core.knobs`` (its type, and help from the
    field)."""
    knobs = knobs or KNOBS
    out = [
        Flag(
            "--policy", "policy", str, f"one of {', '.join(knobs)}, or several separated by commas"
        )
    ]
    for name in flag_knobs(knobs):
        kind = type(knob_defaults(knobs)[name])
        spelling, text = "--" + name.replace("_", "-"), knob_help(name, knobs)
        if kind is bool:
            out.append(Flag(spelling, name, action=argparse.BooleanOptionalAction, help=text))
        else:
            out.append(Flag(spelling, name, kind, text))
    return tuple(out)


POLICY_FLAGS = policy_flags()
FLEET_FLAGS = (
    Flag(
        "--replicas",
        "replicas",
        int,
        "servers in the fleet, each with its own policy and KV cache (default 1); the bill is "
        "replicas x $/hour",
    ),
    Flag(
        "--router",
        "router",
        str,
        "with --replicas > 1: which server takes each arrival: least-loaded (default: fewest "
        "requests held), least-kv (least KV cache in use), round-robin or random",
    ),
)
RECORDS_FLAGS = (
    Flag(
        "--summary-only",
        "summary_only",
        action="store_true",
        help="keep sums and quantile sketches (p99 within 0.5 %%) instead of every request: ten "
        "million requests in constant memory; no records or figures",
    ),
)
SLO_FLAGS = (
    Flag("--slo-ttft", "slo_ttft", float, "seconds to first token"),
    Flag("--slo-tpot", "slo_tpot", float, "seconds per output token"),
    Flag("--slo-e2e", "slo_e2e", float, "seconds end to end"),
)


def dash_hint(message: str, argv: list[str]) -> str:
    """argparse reads ``--rate -inf`` as two flags: name the value and the spelling that works."""
    m = re.match(r"argument (--[\w-]+)(?:/[\w-]+)*: expected one argument", message)
    if m and m.group(1) in argv:
        i = argv.index(m.group(1))
        if i + 1 < len(argv) and argv[i + 1].startswith("-"):
            return (
                f"{message}: got {argv[i + 1]!r}, which reads as a flag; write "
                f"{m.group(1)}={argv[i + 1]}"
            )
    return message


def given(values: Mapping[str, Any] | argparse.Namespace) -> dict[str, Any]:
    """The flags a user actually gave (argparse leaves the others None)."""
    d = vars(values) if isinstance(values, argparse.Namespace) else dict(values)
    return {k: v for k, v in d.items() if v is not None and not k.startswith("_")}


def resolve(key: str, flags: Mapping[str, Any], *layers: Mapping[str, Any]) -> Any:
    """Flag given > each layer in turn (a scenario's defaults, then the package's); None if none has
    it."""
    v = flags.get(key)
    if v is not None:
        return v
    for layer in layers:
        if layer and layer.get(key) is not None:
            return layer[key]
    return None


def resolve_arg(args: Any, key: str, *layers: Mapping[str, Any]) -> Any:
    """``resolve`` for a flag read from a namespace (argparse's, or any object with the
    attribute)."""
    return resolve(key, {key: getattr(args, key, None)}, *layers)


def comma_list(spec: Any, field: str, known, among: str = "one of") -> list[str]:
    """``taxi,continuous`` -> ["taxi", "continuous"]: at least one name, each known, none twice."""
    names = [n.strip() for n in str(spec).split(",") if n.strip()]
    if not names:
        raise ConfigError(f"{field} must name at least one, got {show(spec)}")
    for i, n in enumerate(names):
        if n not in known:
            raise ConfigError(f"{field} must be {among} {', '.join(known)}, got {n!r}")
        if n in names[:i]:  # one row per name: a repeat would be run twice and shown once
            raise ConfigError(
                f"{field} names {n} more than once (got {show(spec)}): list each once"
            )
    return names


def trace_of(flags: Mapping[str, Any]) -> str | None:
    arrival = str(flags.get("arrival") or "")
    return flags.get("trace") or (
        arrival[len("trace:") :] if arrival.startswith("trace:") else None
    )


def check_conflicts(flags: Mapping[str, Any]) -> None:
    """Refuse flag pairs that contradict each other or mean nothing together (flags as given)."""
    f = {k: v for k, v in flags.items() if v is not None}

    def both(a: str, b: str, why: str) -> None:
        if a in f and b in f:
            raise ConfigError(
                f"{flag_name(a)} and {flag_name(b)} {why} (got {show(f[a])} and {show(f[b])})"
            )

    both("requests", "duration", "both set the run's extent: give one")
    both("step_time", "calibration", "are two step-time models: give one")
    both("kv_budget_tokens", "kv_budget_bytes", "are two KV budgets: give one")
    both("trace", "arrival", "both say who arrives when: give one")
    if trace_of(f):
        for k in ("rate", "prompt_len", "output_len"):
            if k in f:
                raise ConfigError(
                    f"{flag_name(k)} means nothing with a trace, which brings its own arrivals and "
                    f"lengths (got {show(f[k])}); drop it, or use --speedup to replay faster"
                )
    elif "speedup" in f:
        raise ConfigError(
            f"--speedup replays a trace faster, and no --trace is given (got {show(f['speedup'])})"
        )
    for k in ("compute_eff", "memory_eff", "step_overhead"):
        for model in ("step_time", "calibration"):
            both(k, model, "do not mix: the first tunes the roofline model, the second replaces it")


def flag_name(dest: str) -> str:
    """The flag a dest comes from: ``sim_model`` -> ``--model``."""
    return "--" + {"sim_model": "model", "sim_dtype": "dtype"}.get(dest, dest).replace("_", "-")


#: The policies that read each knob the command line has a flag for.
_KNOB_POLICIES = {k: _users(k) for k in FLAG_KNOBS}


def ignored_knob_notes(flags: Mapping[str, Any], names: list[str]) -> list[str]:
    """One note per policy flag given that no policy of the run reads (it is not an error: a sweep
    or a script may pass the same flags to every run; but it must not pass unnoticed)."""
    notes = []
    for k, users in _KNOB_POLICIES.items():
        if flags.get(k) is not None and not set(users) & set(names):
            notes.append(
                f"note: {flag_name(k)} {show(flags[k])} is ignored: only {' and '.join(users)} "
                f"read{'s' if len(users) == 1 else ''} it, and this run has {', '.join(names)}"
            )
    return notes


def knob_users(knob: str) -> tuple[str, ...] | None:
    """The policies that read a policy knob (None: not a policy knob, every run reads it)."""
    return _KNOB_POLICIES.get(knob)


def ignored_router_notes(flags: Mapping[str, Any], replicas: int) -> list[str]:
    """A router chooses among servers: on a fleet of one, ``--router`` does nothing, and says so."""
    if flags.get("router") is not None and replicas <= 1:
        return [
            f"note: --router {show(flags['router'])} is ignored: one server has no choice to make "
            "(give --replicas N, N >= 2, for a fleet behind a router)"
        ]
    return []
