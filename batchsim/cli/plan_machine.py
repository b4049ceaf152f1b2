"""What ``plan`` adds to its search from the machine flags of ``run``, and how long it simulates.

The machine flags (precision, split, engine preset, efficiencies, a calibration) reach every
simulated fleet as they would reach ``run``; the same knobs as ``Server`` arguments price the
fleets and give theory's capacity. Without ``--tp`` each GPU kind is tried at the two smallest
splits that hold the model (a 70B model on H100s: TP2 and TP4), so a split is chosen on cost
like everything else. The run is sized for steady state (``SPAN_OBJECTIVES``), and traffic no
fleet in the search space can carry is refused before anything is simulated.
"""

from __future__ import annotations

import argparse
import math

from ..core.config import WorkloadConfig
from ..core.errors import ConfigError, show
from ..core.flags import given
from ..machine.catalog import DEFAULT_CATALOG
from ..machine.engines import engine_profile
from ..machine.parallel import TP_CHOICES, check_tp
from ..machine.server import Server
from ..machine.serverconfig import ServerConfig
from ..sim.steptime import load_step_time
from ..teach.scenarios.capacity import Candidate, Objective, server_capacity
from ..teach.scenarios.steady import SHORT_RUN_LOAD, secs

__all__ = [
    "machine_of",
    "size_for_steady_state",
    "splits",
    "check_reachable",
    "MACHINE",
    "PLAN_REQUESTS",
    "PLAN_MAX_REQUESTS",
    "SPAN_OBJECTIVES",
]

PLAN_REQUESTS = 2000
PLAN_MAX_REQUESTS = 20_000
SPAN_OBJECTIVES = 3
#: Machine flags of ``run`` that plan takes too (--gpu and --model are its search space).
MACHINE = (
    "calibration",
    "sim_dtype",
    "weights",
    "kv_dtype",
    "tp",
    "engine_profile",
    "compute_eff",
    "memory_eff",
    "step_overhead",
    "mem_util",
)
_KW = {
    "sim_dtype": "dtype",
    "weights": "weights",
    "kv_dtype": "kv_dtype",
    "compute_eff": "compute_eff",
    "memory_eff": "memory_eff",
    "step_overhead": "overhead",
    "mem_util": "mem_util",
}


def machine_of(args: argparse.Namespace) -> tuple[dict, dict]:
    """(the machine flags each simulated fleet gets, the same as ``Server`` keyword arguments);
    checked now."""
    given_ = {d: getattr(args, d, None) for d in MACHINE if getattr(args, d, None) is not None}
    ServerConfig(
        **{
            (
                "model"
                if d == "sim_model"
                else "dtype"
                if d == "sim_dtype"
                else "overhead"
                if d == "step_overhead"
                else d
            ): v
            for d, v in given_.items()
        }
    )
    if given_.get("calibration"):
        # a missing or bad file is one line now, not one per fleet
        load_step_time(given_["calibration"])
    kw = {**engine_profile(given_["engine_profile"]).knobs} if given_.get("engine_profile") else {}
    kw.update({_KW[d]: v for d, v in given_.items() if d in _KW})
    flags = {d: v for d, v in given_.items() if d != "tp"}  # the split is each candidate's own
    return flags, kw


def _horizon(o: Objective, output: float) -> float:
    """The objective as a time: the longest target, a TPOT target times the mean answer."""
    return max(v for v in (o.p99_e2e, o.p99_ttft, (o.p99_tpot or 0) * output) if v is not None)


def size_for_steady_state(flags: dict, wl, objective: Objective, resize: bool = True):
    """(the workload to simulate, the line that says how steady state is judged, the most of
    theory's capacity a fleet may be loaded to). ``resize`` False: the user set the requests; judge
    them, do not change them."""
    span = float(wl.arrivals[-1] - wl.arrivals[0]) if len(wl) > 1 else 0.0
    rate = (len(wl) - 1) / span if span > 0 else math.inf
    horizon = _horizon(objective, float(wl.output_tokens.mean()))
    # 10 % over: random arrivals may span a little less
    need = 1.1 * SPAN_OBJECTIVES * horizon * rate
    if resize:
        n = int(min(max(len(wl), math.ceil(min(need, 1e12))), PLAN_MAX_REQUESTS))
        if n > len(wl):
            flags["requests"] = n
            wl = WorkloadConfig.from_flags(given(flags)).build()
            span = float(wl.arrivals[-1] - wl.arrivals[0])
    short = need > len(wl)
    ratio = span / horizon if horizon > 0 else math.inf
    checks = (
        "every fleet is also held to theory's capacity and checked for a queue growing over the run"
    )
    if not short:
        return (
            wl,
            (
                f"steady state: {len(wl):,} requests span {secs(span)} of arrivals, {ratio:.3g}x "
                f"the objective's {secs(horizon)}; {checks}"
            ),
            1.0,
        )
    why = "the most plan simulates a fleet with; --requests sets more" if resize else "as given"
    return (
        wl,
        (
            f"steady state: warning: {len(wl):,} requests ({why}) span only {secs(span)} of "
            f"arrivals, {ratio:.2g}x the objective's {secs(horizon)}, too short to show a queue "
            f"growing slowly; {checks}, and none may be loaded past {SHORT_RUN_LOAD:.0%} of "
            f"theory's capacity"
        ),
        SHORT_RUN_LOAD,
    )


def splits(args: argparse.Namespace, gpus: list[str], model: str, kw: dict) -> dict[str, list[int]]:
    """Each GPU kind's tensor-parallel splits to try: --tp's, or the two smallest that hold the
    model."""
    m = DEFAULT_CATALOG.model(model)
    out: dict[str, list[int]] = {}
    for name in gpus:
        g = DEFAULT_CATALOG.gpu(name)
        if args.tp is not None:
            try:
                check_tp(g, args.tp, m)
            except ConfigError:
                if len(gpus) == 1:
                    raise
                out[name] = []
                continue
            out[name] = [args.tp]
            continue
        fits = []
        for tp in TP_CHOICES:
            try:
                check_tp(g, tp, m)
                Server.named(name, model, tp=tp, **kw)
            except ConfigError:
                continue
            fits.append(tp)
        out[name] = fits[:2] or [1]  # none fits: the search says so for the GPU
    if not any(out.values()):
        raise ConfigError(f"tp {show(args.tp)} suits none of the GPUs {', '.join(gpus)}")
    return out


def check_reachable(
    cands: list[Candidate], model: str, rate: float, prompt: float, output: float, kw: dict
) -> None:
    """Refuse traffic that no fleet plan may try (``MAX_REPLICAS`` servers) can carry in steady
    state. Below that the search runs, marks each fleet that cannot keep up, and a miss names the
    closest."""
    from ..core.fleet import MAX_REPLICAS

    caps = [(c, server_capacity(c, model, prompt, output, kw)) for c in cands]
    caps = [(c, cap) for c, cap in caps if cap]
    if not caps:
        splits_ = sorted({f"{c.gpu} TP{c.tp}" if c.tp > 1 else c.gpu for c in cands})
        raise ConfigError(
            f"model {model} fits on none of {', '.join(splits_)}: give a larger --tp (or leave it "
            f"out: "
            "plan then tries the splits that hold it) or smaller --weights"
        )
    best, cap = max(caps, key=lambda x: x[1])
    if rate / cap > MAX_REPLICAS:
        raise ConfigError(
            f"steady state cannot be reached: at {rate:,.4g} requests/s theory needs "
            f"{math.ceil(min(rate / cap, 1e18)):,} servers of the fastest candidate "
            f"({best.label()}, {cap:,.3g} requests/s each at most), more than the {MAX_REPLICAS:,} "
            f"a plan may try; plan "
            "will not judge a burst as if it were that rate"
        )
