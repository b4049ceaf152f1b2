"""A run's knobs as frozen dataclasses that check themselves: one place for every rule.

Both command lines (batchsim's and realrun's) and Python code meet here. A knob has
one default, one flag, one help text and one validation, so ``--max-wait nan`` on
either command line and ``PolicyConfig("dynamic", max_wait=float("nan"))`` in a
notebook fail with the same sentence.

- ``WorkloadConfig``: who arrives when, with how many tokens (or a trace to replay).
- ``PolicyConfig``: one batching policy and its knobs; ``build()`` makes the policy.
- ``slo_config``: the service-level objectives (``batchsim.core.metrics.SLO``).
- ``Flag`` and ``add_flags``: the flags each knob has, for any argparse-like parser,
  so realrun gets batchsim's flags without importing batchsim's command line.
- ``resolve``: flag given > scenario default > package default, once per run.
- ``check_conflicts``: flags that contradict each other or mean nothing together
  (``--trace`` with ``--rate``) are refused, naming both, rather than silently ignored.

The server knobs (step time, GPU, memory) live beside the machine model, in
``batchsim.machine.serverconfig``.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, fields
from typing import Any, Mapping

from .arrivals import MAX_REQUESTS, ArrivalProcess, check_rate, parse_arrival
from .errors import ConfigError, check_at_most, check_bool, check_int_at_least, check_nonneg, check_positive, show
from .lengths import LengthDist, parse_length
from .metrics import SLO
from .policies import POLICY_NAMES
from .workload import Workload

__all__ = [
    "Flag", "add_flags", "flag_name", "dash_hint", "given", "resolve", "check_conflicts", "WorkloadConfig", "PolicyConfig", "policy_names",
    "slo_config", "ignored_knob_notes", "WORKLOAD_FLAGS", "POLICY_FLAGS", "SLO_FLAGS", "WORKLOAD_DEFAULTS",
    "POLICY_DEFAULTS", "MAX_SECONDS", "POLICY_NAMES",
]

#: The longest any knob measured in seconds may be (a day): a batcher that waits longer, or a pass
#: that lasts longer, is no server, and 1e308 seconds overflow the first sum they enter.
MAX_SECONDS = 86_400.0


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
    Flag("--arrival", "arrival", str, "poisson (default), gamma:CV (bursty; CV=1 is Poisson), constant, "
         "rush-hour[:S@R,...], or trace:PATH to replay a trace file"),
    Flag("--trace", "trace", str, "replay this trace file (CSV: arrival_s,prompt_tokens,output_tokens, or Azure's "
         "TIMESTAMP,ContextTokens,GeneratedTokens); its own arrivals and lengths, so no --rate or --prompt-len"),
    Flag("--rate", "rate", float, "mean arrivals per second (default 5)"),
    Flag("--requests", "requests", int, "number of requests (default 500); with a trace, its first N rows"),
    Flag("--duration", "duration", float, "seconds of arrivals instead of a request count (not with --requests)"),
    Flag("--prompt-len", "prompt_len", str, "prompt tokens: N, uniform:LO,HI or lognormal:MEAN,MEDIAN (default uniform:32,512)"),
    Flag("--output-len", "output_len", str, "output tokens: N, uniform:LO,HI or lognormal:MEAN,MEDIAN (default lognormal:128,96)"),
    Flag("--speedup", "speedup", float, "with a trace: replay this many times faster (default 1)"),
    Flag("--seed", "seed", int, "one seed for the whole workload (default 0)"),
)
POLICY_FLAGS = (
    Flag("--policy", "policy", str, f"one of {', '.join(POLICY_NAMES)}, or several separated by commas"),
    Flag("--max-batch", "max_batch", int, "static: seats on the bus (wait for this many); dynamic: the most per batch (default 8)"),
    Flag("--max-wait", "max_wait", float, "dynamic: seconds the oldest request may wait before the batch leaves (default 0.05)"),
    Flag("--max-seqs", "max_seqs", int, "continuous: the most requests running at once (default 64)"),
    Flag("--max-batched-tokens", "max_batched_tokens", int, "continuous: prompt tokens per step (default 2048)"),
    Flag("--block-size", "block_size", int, "continuous: KV block size in tokens (default 16)"),
    Flag("--chunked-prefill", "chunked_prefill", action=argparse.BooleanOptionalAction,
         help="continuous: split long prompts across steps (--no-chunked-prefill: admit a prompt whole or not at all)"),
)
SLO_FLAGS = (
    Flag("--slo-ttft", "slo_ttft", float, "seconds to first token"),
    Flag("--slo-tpot", "slo_tpot", float, "seconds per output token"),
    Flag("--slo-e2e", "slo_e2e", float, "seconds end to end"),
)

WORKLOAD_DEFAULTS = {
    "arrival": "poisson", "trace": None, "rate": 5.0, "requests": 500, "duration": None,
    "prompt_len": "uniform:32,512", "output_len": "lognormal:128,96", "speedup": 1.0, "seed": 0,
}
POLICY_DEFAULTS = {
    "policy": ",".join(POLICY_NAMES), "max_batch": 8, "max_wait": 0.05, "max_seqs": 64,
    "max_batched_tokens": 2048, "block_size": 16, "chunked_prefill": None,
}


def dash_hint(message: str, argv: list[str]) -> str:
    """argparse reads ``--rate -inf`` as two flags: name the value and the spelling that works."""
    m = re.match(r"argument (--[\w-]+)(?:/[\w-]+)*: expected one argument", message)
    if m and m.group(1) in argv:
        i = argv.index(m.group(1))
        if i + 1 < len(argv) and argv[i + 1].startswith("-"):
            return f"{message}: got {argv[i + 1]!r}, which reads as a flag; write {m.group(1)}={argv[i + 1]}"
    return message


def given(values: Mapping[str, Any] | argparse.Namespace) -> dict[str, Any]:
    """The flags a user actually gave (argparse leaves the others None)."""
    d = vars(values) if isinstance(values, argparse.Namespace) else dict(values)
    return {k: v for k, v in d.items() if v is not None and not k.startswith("_")}


def resolve(key: str, flags: Mapping[str, Any], *layers: Mapping[str, Any]) -> Any:
    """Flag given > each layer in turn (a scenario's defaults, then the package's); None if none has it."""
    v = flags.get(key)
    if v is not None:
        return v
    for layer in layers:
        if layer and layer.get(key) is not None:
            return layer[key]
    return None


def _trace_of(flags: Mapping[str, Any]) -> str | None:
    arrival = str(flags.get("arrival") or "")
    return flags.get("trace") or (arrival[len("trace:"):] if arrival.startswith("trace:") else None)


def check_conflicts(flags: Mapping[str, Any]) -> None:
    """Refuse flag pairs that contradict each other or mean nothing together (flags as given)."""
    f = {k: v for k, v in flags.items() if v is not None}

    def both(a: str, b: str, why: str) -> None:
        if a in f and b in f:
            raise ConfigError(f"{flag_name(a)} and {flag_name(b)} {why} (got {show(f[a])} and {show(f[b])})")

    both("requests", "duration", "both set the run's extent: give one")
    both("step_time", "calibration", "are two step-time models: give one")
    both("kv_budget_tokens", "kv_budget_bytes", "are two KV budgets: give one")
    both("trace", "arrival", "both say who arrives when: give one")
    if _trace_of(f):
        for k in ("rate", "prompt_len", "output_len"):
            if k in f:
                raise ConfigError(f"{flag_name(k)} means nothing with a trace, which brings its own arrivals and "
                                  f"lengths (got {show(f[k])}); drop it, or use --speedup to replay faster")
    elif "speedup" in f:
        raise ConfigError(f"--speedup replays a trace faster, and no --trace is given (got {show(f['speedup'])})")
    for k in ("compute_eff", "memory_eff", "step_overhead"):
        for model in ("step_time", "calibration"):
            both(k, model, "do not mix: the first tunes the roofline model, the second replaces it")


def flag_name(dest: str) -> str:
    """The flag a dest comes from: ``sim_model`` -> ``--model``."""
    return "--" + {"sim_model": "model", "sim_dtype": "dtype"}.get(dest, dest).replace("_", "-")


# --- the workload -------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkloadConfig:
    """Who arrives when, with how many tokens: a seeded synthetic workload or a trace replayed."""

    arrival: str = "poisson"
    rate: float = 5.0
    requests: int | None = 500
    duration: float | None = None
    prompt_len: str | int = "uniform:32,512"
    output_len: str | int = "lognormal:128,96"
    seed: int = 0
    trace: str | None = None
    speedup: float = 1.0

    def __post_init__(self) -> None:
        check_int_at_least("seed", self.seed, 0)
        if (self.requests is None) == (self.duration is None):
            raise ConfigError(f"give requests or duration, exactly one (got {show(self.requests)} and {show(self.duration)})")
        if self.requests is not None:
            check_int_at_least("requests", self.requests, 1)
            check_at_most("requests", self.requests, MAX_REQUESTS, "more than any machine holds")
        if self.duration is not None:
            check_positive("duration", self.duration)
        if self.trace is not None:
            if not isinstance(self.trace, str) or not self.trace.strip():
                raise ConfigError(f"trace must be a file name, got {show(self.trace)}")
            check_positive("speedup", self.speedup)
            if not (1e-6 <= float(self.speedup) <= 1e9):
                raise ConfigError(f"speedup must be between 1e-06 and 1e+09, got {show(self.speedup)}")
            return
        if str(self.arrival).startswith("trace:"):
            raise ConfigError("arrival trace:PATH is spelt trace=PATH here (or --trace PATH)")
        check_rate("rate", self.rate)
        process = self.arrival_process()  # validates the spec
        self.prompt_dist()
        self.output_dist()
        if self.duration is not None and self.duration * process.mean_rate < 1:
            raise ConfigError(f"duration {show(self.duration)} s holds less than one expected arrival at "
                              f"{process.mean_rate:g} requests/s: make it longer, or give --requests")

    def arrival_process(self) -> ArrivalProcess:
        return parse_arrival(str(self.arrival), self.rate)

    def prompt_dist(self) -> LengthDist:
        return parse_length(self.prompt_len, "prompt-len")

    def output_dist(self) -> LengthDist:
        return parse_length(self.output_len, "output-len")

    @property
    def expected_requests(self) -> float | None:
        """How many requests the run will have (None for a trace cut by duration: known after reading)."""
        if self.requests is not None:
            return float(self.requests)
        if self.trace is not None:
            return None
        return float(self.duration) * self.arrival_process().mean_rate

    def build(self) -> Workload:
        """The workload; a trace is read only as far as the run needs."""
        from .traces import read_trace
        from .workload import make_workload, trace_workload

        if self.trace is not None:
            max_seconds = None if self.duration is None else float(self.duration) * float(self.speedup)
            tr = read_trace(self.trace, max_rows=self.requests, max_seconds=max_seconds)
            wl = trace_workload(tr, n=self.requests, duration=self.duration, speedup=self.speedup)
        else:
            wl = make_workload(self.arrival_process(), self.prompt_dist(), self.output_dist(),
                               n=self.requests, duration=self.duration, seed=self.seed)
        if not len(wl):
            raise ConfigError(f"the workload has no requests ({wl.description}): lengthen --duration")
        return wl

    @classmethod
    def from_flags(cls, flags: Mapping[str, Any], *layers: Mapping[str, Any]) -> "WorkloadConfig":
        """Resolve from the flags given and the defaults under them (a scenario's, realrun's, the package's)."""
        layers = (*layers, WORKLOAD_DEFAULTS)
        g = lambda k: resolve(k, flags, *layers)  # noqa: E731
        trace = _trace_of(flags) or next((_trace_of(layer) for layer in layers if _trace_of(layer)), None)
        requests, duration = flags.get("requests"), flags.get("duration")
        if requests is None and duration is None:  # neither flag: the scenario's extent, else the package's
            duration = resolve("duration", {}, *layers[:-1])
            requests = None if duration is not None else g("requests")
        arrival = g("arrival") if trace is None else "poisson"
        return cls(arrival=arrival, rate=g("rate"), requests=requests, duration=duration, prompt_len=g("prompt_len"),
                   output_len=g("output_len"), seed=g("seed"), trace=trace, speedup=g("speedup"))


# --- the policy ---------------------------------------------------------------------------

#: Upper bounds for the policies' integer knobs: far past any server, inside what the arrays hold.
_POLICY_MAX = {"max_batch": 1_000_000, "max_seqs": 1_000_000, "max_batched_tokens": 10**9, "block_size": 1_000_000}


@dataclass(frozen=True)
class PolicyConfig:
    """One policy and its knobs; each policy reads only the knobs that concern it."""

    name: str
    max_batch: int = 8
    max_wait: float = 0.05
    max_seqs: int = 64
    max_batched_tokens: int = 2048
    block_size: int = 16
    chunked_prefill: bool | None = None  # None: the policy's own default

    def __post_init__(self) -> None:
        if self.name not in POLICY_NAMES:
            raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {show(self.name)}")
        for k, most in _POLICY_MAX.items():
            check_int_at_least(k, getattr(self, k), 1)
            check_at_most(k, getattr(self, k), most)
        check_nonneg("max_wait", self.max_wait)
        check_at_most("max_wait", self.max_wait, MAX_SECONDS, "seconds: a day")
        if self.chunked_prefill is not None:
            check_bool("chunked_prefill", self.chunked_prefill)

    def build(self):
        """A fresh policy object (policies hold a run's state: one per run)."""
        from .policies import make_policy

        kw = {k: getattr(self, k) for k in ("max_batch", "max_wait", "max_seqs", "max_batched_tokens", "block_size")}
        kw = {k: (float(v) if k == "max_wait" else int(v)) for k, v in kw.items()}
        if self.chunked_prefill is not None:
            kw["chunked_prefill"] = bool(self.chunked_prefill)
        return make_policy(self.name, **kw)

    @classmethod
    def from_flags(cls, name: str, flags: Mapping[str, Any], *layers: Mapping[str, Any]) -> "PolicyConfig":
        layers = (*layers, POLICY_DEFAULTS)
        kw = {f.name: resolve(f.name, flags, *layers) for f in fields(cls) if f.name != "name"}
        return cls(name, **kw)


def policy_names(spec: Any) -> list[str]:
    """``taxi,continuous`` -> ["taxi", "continuous"]; every name checked."""
    names = [n.strip() for n in str(spec).split(",") if n.strip()]
    if not names:
        raise ConfigError(f"policy must name at least one policy, got {show(spec)}")
    for n in names:
        if n not in POLICY_NAMES:
            raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {n!r}")
    return names


_KNOB_POLICIES = {"max_batch": ("static", "dynamic"), "max_wait": ("dynamic",), "max_seqs": ("continuous",),
                  "max_batched_tokens": ("continuous",), "block_size": ("continuous",),
                  "chunked_prefill": ("continuous",)}


def ignored_knob_notes(flags: Mapping[str, Any], names: list[str]) -> list[str]:
    """One note per policy flag given that no policy of the run reads (it is not an error: a sweep
    or a script may pass the same flags to every run; but it must not pass unnoticed)."""
    notes = []
    for k, users in _KNOB_POLICIES.items():
        if flags.get(k) is not None and not set(users) & set(names):
            notes.append(f"note: {flag_name(k)} {show(flags[k])} is ignored: only {' and '.join(users)} "
                         f"read{'s' if len(users) == 1 else ''} it, "
                         f"and this run has {', '.join(names)}")
    return notes


def slo_config(flags: Mapping[str, Any], *layers: Mapping[str, Any]) -> SLO:
    return SLO(ttft=resolve("slo_ttft", flags, *layers), tpot=resolve("slo_tpot", flags, *layers),
               e2e=resolve("slo_e2e", flags, *layers))
