"""Command-line knobs shared by every command that runs a workload through a policy.

``add_workload_args``, ``add_policy_args`` and ``add_server_args`` put the same flags
on any argparse parser (batchsim's ``run``, ``compare`` and ``sweep``, and realrun's
``run`` and ``compare`` take them unchanged); ``workload_from_args``,
``policy_from_args`` and ``step_time_from_args`` turn the parsed flags into objects.
Bad values raise ``ConfigError`` naming the flag, which the CLI prints as one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.arrivals import parse_arrival
from ..machine.catalog import DEFAULT_CATALOG
from ..core.errors import ConfigError, check_int_at_least, check_nonneg, check_positive
from ..core.lengths import parse_length
from ..core.metrics import SLO
from ..core.policies import POLICY_NAMES, Policy, make_policy
from ..sim.steptime import ConstantStepTime, LinearStepTime, StepTimeModel, load_step_time
from ..core.traces import read_trace
from ..core.workload import Workload, make_workload, trace_workload

__all__ = [
    "add_workload_args", "add_policy_args", "add_server_args", "add_slo_args",
    "workload_from_args", "policy_from_args", "step_time_from_args", "slo_from_args", "policies_from_args",
    "kv_budget_from_args", "server_from_args", "price_from_args", "parse_bytes", "DEFAULT_STEP_TIME",
]

#: An illustrative server when nothing else is given: 10 ms per pass plus small per-token costs,
#: roughly a small model on one GPU. ``--step-time``, ``--calibration`` or a GPU/model pick replace it.
DEFAULT_STEP_TIME = LinearStepTime(c0=0.010, c1=2e-5, c2=5e-5, c3=1e-8, source="illustrative default")


def add_workload_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload (who arrives when, with how many tokens)")
    g.add_argument("--arrival", default=None, help="poisson (default), gamma:CV (bursty; CV=1 is Poisson), constant, rush-hour[:S@R,...], or trace:PATH to replay a trace file")
    g.add_argument("--trace", default=None, help="replay this trace file (same as --arrival trace:PATH)")
    g.add_argument("--rate", type=float, default=None, help="mean arrivals per second (default 5)")
    g.add_argument("--requests", type=int, default=None, help="number of requests (default 500)")
    g.add_argument("--duration", type=float, default=None, help="seconds of arrivals instead of a request count")
    g.add_argument("--prompt-len", default=None, help="prompt tokens: N, uniform:LO,HI or lognormal:MEAN,MEDIAN (default uniform:32,512)")
    g.add_argument("--output-len", default=None, help="output tokens: N, uniform:LO,HI or lognormal:MEAN,MEDIAN (default lognormal:128,96)")
    g.add_argument("--speedup", type=float, default=None, help="with a trace: replay this many times faster (default 1)")
    g.add_argument("--seed", type=int, default=None, help="one seed for the whole workload (default 0)")


def add_policy_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("batching policy")
    g.add_argument("--policy", default=None, help=f"one of {', '.join(POLICY_NAMES)}, or several separated by commas")
    g.add_argument("--max-batch", type=int, default=None, help="static: seats on the bus (wait for this many); dynamic: the most per batch (default 8)")
    g.add_argument("--max-wait", type=float, default=None, help="dynamic: seconds the oldest request may wait before the batch leaves (default 0.05)")
    g.add_argument("--max-seqs", type=int, default=None, help="continuous: the most requests running at once (default 64)")
    g.add_argument("--max-batched-tokens", type=int, default=None, help="continuous: prompt tokens per step (default 2048)")
    g.add_argument("--block-size", type=int, default=None, help="continuous: KV block size in tokens (default 16)")
    g.add_argument("--chunked-prefill", action="store_true", default=None, help="continuous: split long prompts across steps")


def add_server_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server (how long a step takes, how much KV memory, what it costs)")
    opt = _OptionAdder(p, g)
    opt("--step-time", type=float, default=None, help="constant seconds per step, whatever its size (a textbook server)")
    opt("--calibration", default=None, help="linear step-time model from a JSON file (python -m realrun profile writes one)")
    opt("--gpu", default=None, help=f"simulate this GPU with a roofline model: {', '.join(DEFAULT_CATALOG.gpus)}")
    opt("--model", dest="sim_model", metavar="MODEL", default=None, help=f"the model it runs: {', '.join(DEFAULT_CATALOG.models)}")
    opt("--dtype", dest="sim_dtype", metavar="DTYPE", default=None, help="fp16 (default on GPUs), bf16 or fp32")
    opt("--catalog", default=None, help="JSON or TOML file adding GPUs and models to the built-in catalog")
    opt("--gpu-price", type=float, default=None, help="dollars per GPU-hour (default: the catalog's assumed 2026 on-demand price)")
    opt("--mem-util", type=float, default=None, help="share of GPU memory for weights + KV cache (default 0.9, as vLLM)")
    opt("--compute-eff", type=float, default=None, help="share of peak FLOP/s a step achieves (default 0.6)")
    opt("--memory-eff", type=float, default=None, help="share of peak memory bandwidth a step achieves (default 0.8)")
    opt("--step-overhead", type=float, default=None, help="fixed seconds per step: launches, sampling (default 0.0005)")
    opt("--kv-budget-tokens", type=int, default=None, help="KV-cache budget in tokens (default: unlimited, or from the GPU's memory)")
    opt("--kv-budget-bytes", default=None, help="KV-cache budget in bytes, e.g. 20e9 or 20GB (needs a --gpu/--model server)")


class _OptionAdder:
    """Adds a flag unless the parser has it already: a command with its own --model or --dtype
    (realrun's real model) keeps its flag, and the simulated server's is left out."""

    def __init__(self, parser: argparse.ArgumentParser, group) -> None:
        self.parser, self.group = parser, group

    def __call__(self, flag: str, **kw) -> None:
        if flag not in self.parser._option_string_actions:
            self.group.add_argument(flag, **kw)


def add_slo_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("service-level objectives (for goodput)")
    g.add_argument("--slo-ttft", type=float, default=None, help="seconds to first token")
    g.add_argument("--slo-tpot", type=float, default=None, help="seconds per output token")
    g.add_argument("--slo-e2e", type=float, default=None, help="seconds end to end")


WORKLOAD_DEFAULTS = {
    "arrival": "poisson", "rate": 5.0, "requests": 500, "duration": None,
    "prompt_len": "uniform:32,512", "output_len": "lognormal:128,96", "speedup": 1.0, "seed": 0,
}
POLICY_DEFAULTS = {
    "policy": ",".join(POLICY_NAMES), "max_batch": 8, "max_wait": 0.05, "max_seqs": 64,
    "max_batched_tokens": 2048, "block_size": 16, "chunked_prefill": False,
}


def _get(args: argparse.Namespace, key: str, defaults: dict, overrides: dict | None):
    """Flag given on the command line > scenario default > package default."""
    v = getattr(args, key, None)
    if v is not None:
        return v
    if overrides and key in overrides:
        return overrides[key]
    return defaults[key]


def workload_from_args(args: argparse.Namespace, overrides: dict | None = None) -> Workload:
    g = lambda k: _get(args, k, WORKLOAD_DEFAULTS, overrides)  # noqa: E731
    arrival = str(g("arrival")) if not getattr(args, "trace", None) else f"trace:{args.trace}"
    seed = g("seed")
    check_int_at_least("seed", seed, 0)
    duration = getattr(args, "duration", None)
    requests = getattr(args, "requests", None)
    if duration is None and requests is None:  # neither flag: the scenario's or the package's extent
        duration = (overrides or {}).get("duration")
        requests = None if duration is not None else g("requests")
    if duration is not None:
        check_positive("duration", duration)
        requests = None
    else:
        check_int_at_least("requests", requests, 1)
    if arrival.startswith("trace:"):
        path = arrival[len("trace:"):]
        if not Path(path).is_file():
            raise ConfigError(f"arrival: trace file {path!r} not found")
        speedup = g("speedup")
        check_positive("speedup", speedup)
        return trace_workload(read_trace(path), n=requests, duration=duration, speedup=speedup)
    rate = g("rate")
    check_positive("rate", rate)
    return make_workload(
        parse_arrival(arrival, rate),
        parse_length(g("prompt_len"), "prompt-len"),
        parse_length(g("output_len"), "output-len"),
        n=requests,
        duration=duration,
        seed=seed,
    )


def policies_from_args(args: argparse.Namespace, overrides: dict | None = None) -> list[str]:
    names = [n.strip() for n in str(_get(args, "policy", POLICY_DEFAULTS, overrides)).split(",") if n.strip()]
    if not names:
        raise ConfigError("policy must name at least one policy")
    for n in names:
        if n not in POLICY_NAMES:
            raise ConfigError(f"policy must be one of {', '.join(POLICY_NAMES)}, got {n!r}")
    return names


def policy_from_args(args: argparse.Namespace, name: str, overrides: dict | None = None) -> Policy:
    g = lambda k: _get(args, k, POLICY_DEFAULTS, overrides)  # noqa: E731
    max_wait = g("max_wait")
    check_nonneg("max_wait", max_wait)
    return make_policy(
        name,
        max_batch=g("max_batch"),
        max_wait=max_wait,
        max_seqs=g("max_seqs"),
        max_batched_tokens=g("max_batched_tokens"),
        block_size=g("block_size"),
        chunked_prefill=bool(g("chunked_prefill")),
    )


# Keys of a scenario's defaults (and of ``overrides``) that describe the server, by flag dest.
_SERVER_KEYS = {"gpu": "gpu", "sim_model": "model", "sim_dtype": "dtype", "gpu_price": "gpu_price",
                "mem_util": "mem_util", "compute_eff": "compute_eff", "memory_eff": "memory_eff",
                "step_overhead": "overhead", "catalog": "catalog"}


def _server_value(args: argparse.Namespace, dest: str, overrides: dict | None):
    """(value, given as a flag?): the flag wins over the scenario's default."""
    v = getattr(args, dest, None)
    if v is not None:
        return v, True
    return (overrides or {}).get(_SERVER_KEYS[dest]), False


def server_from_args(args: argparse.Namespace, overrides: dict | None = None):
    """The GPU-and-model server the flags (or the scenario's defaults) name, or None if none is named.

    Naming only a GPU runs the default model on it, and the other way round. Returns a
    ``batchsim.machine.server.Server``; a model too big for the GPU is a ConfigError naming both.
    """
    from ..machine.catalog import load_catalog
    from ..machine.server import DEFAULT_GPU, DEFAULT_MODEL, Server

    gpu = _server_value(args, "gpu", overrides)[0]
    model = _server_value(args, "sim_model", overrides)[0]
    if gpu is None and model is None:
        return None
    catalog = load_catalog(_server_value(args, "catalog", overrides)[0])
    kw = {}
    for dest, key in (("mem_util", "mem_util"), ("compute_eff", "compute_eff"), ("memory_eff", "memory_eff"),
                      ("step_overhead", "overhead"), ("gpu_price", "price_per_hour")):
        v = _server_value(args, dest, overrides)[0]
        if v is not None:
            kw[key] = v
    kv_tokens = getattr(args, "kv_budget_tokens", None)
    kv_bytes = getattr(args, "kv_budget_bytes", None)
    if kv_tokens is None and kv_bytes is None and overrides:
        kv_tokens = overrides.get("kv_budget_tokens")
    if kv_tokens is not None:
        kw["kv_tokens"] = kv_tokens
    elif kv_bytes is not None:
        kw["kv_bytes"] = parse_bytes(kv_bytes, "kv-budget-bytes")
    server = Server.named(gpu or DEFAULT_GPU, model or DEFAULT_MODEL, catalog, _server_value(args, "sim_dtype", overrides)[0], **kw)
    return server


def _server_named_by_flags(args: argparse.Namespace) -> bool:
    return getattr(args, "gpu", None) is not None or getattr(args, "sim_model", None) is not None


def parse_bytes(text, field: str = "bytes") -> float:
    """``20e9``, ``20GB``, ``20GiB``, ``512MB``: a byte count."""
    t = str(text).strip()
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "b": 1}
    scale = 1.0
    for u, f in units.items():
        if t.lower().endswith(u):
            t, scale = t[: -len(u)].strip(), float(f)
            break
    try:
        v = float(t) * scale
    except ValueError:
        raise ConfigError(f"{field} must be a number of bytes such as 20e9 or 20GB, got {text!r}") from None
    check_positive(field, v)
    return v


def price_from_args(args: argparse.Namespace, overrides: dict | None = None, server=None) -> float | None:
    """$/hour: --gpu-price, else the scenario's, else the server's GPU's catalog price, else None."""
    from ..machine.cost import check_price

    v = _server_value(args, "gpu_price", overrides)[0]
    if v is not None:
        check_price(v)
        return float(v)
    if server is None:
        server = server_from_args(args, overrides)
    return server.price if server is not None else None


def step_time_from_args(args: argparse.Namespace, overrides: dict | None = None) -> StepTimeModel:
    """--calibration, then --step-time, then --gpu/--model, then the scenario's model, then its
    GPU and model, then the illustrative default."""
    cal = getattr(args, "calibration", None)
    if cal:
        return load_step_time(cal)
    st = getattr(args, "step_time", None)
    if st is not None:
        check_positive("step-time", st)
        return ConstantStepTime(st)
    server = server_from_args(args, overrides)
    if server is not None and _server_named_by_flags(args):
        return server.step_time
    if overrides and "step_time_model" in overrides:
        return overrides["step_time_model"]
    if server is not None:
        return server.step_time
    return DEFAULT_STEP_TIME


def kv_budget_from_args(args: argparse.Namespace, overrides: dict | None = None) -> int | None:
    """--kv-budget-tokens, then --kv-budget-bytes, then the scenario's, then the server's memory, else unlimited."""
    v = getattr(args, "kv_budget_tokens", None)
    if v is not None:
        check_int_at_least("kv-budget-tokens", v, 1)
    server = server_from_args(args, overrides)  # also refuses a model too big for its GPU
    if server is not None:
        return server.kv.tokens
    if getattr(args, "kv_budget_bytes", None) is not None:
        raise ConfigError("kv-budget-bytes needs a server (--gpu and/or --model) to turn bytes into tokens; "
                          f"got {args.kv_budget_bytes!r} without one")
    if v is None and overrides:
        v = overrides.get("kv_budget_tokens")
    if v is not None:
        check_int_at_least("kv-budget-tokens", v, 1)
    return v


def slo_from_args(args: argparse.Namespace, overrides: dict | None = None) -> SLO:
    o = overrides or {}
    pick = lambda k: getattr(args, k, None) if getattr(args, k, None) is not None else o.get(k)  # noqa: E731
    return SLO(ttft=pick("slo_ttft"), tpot=pick("slo_tpot"), e2e=pick("slo_e2e"))
