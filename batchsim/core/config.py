"""A run's knobs as frozen dataclasses that check themselves: one place for every rule.

Both command lines (batchsim's and realrun's) and Python code meet here. A knob has
one default, one flag, one help text and one validation, so ``--max-wait nan`` on
either command line and ``PolicyConfig("dynamic", max_wait=float("nan"))`` in a
notebook fail with the same sentence.

- ``WorkloadConfig``: who arrives when, with how many tokens (or a trace to replay).
- ``PolicyConfig``: one batching policy and its knobs; ``build()`` makes the policy.
- ``slo_config``: the service-level objectives (``batchsim.core.metrics.SLO``).

Each has ``from_flags(flags, *layers)``: flag given > each layer of defaults (a
scenario's, realrun's) > the package's, resolved once per run. The flags themselves
are in ``batchsim.core.flags``; the server knobs (step time, GPU, memory) live beside
the machine model, in ``batchsim.machine.serverconfig``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

from .arrivals import MAX_REQUESTS, ArrivalProcess, check_rate, parse_arrival
from .errors import (
    MAX_SECONDS,
    ConfigError,
    check_at_most,
    check_bool,
    check_choice,
    check_int_at_least,
    check_positive,
    show,
)
from .flags import comma_list, resolve, trace_of
from .knobs import DEFAULTS, FLAG_KNOBS, POLICY_NAMES, READS, check_knob_value
from .lengths import LengthDist, parse_length
from .metrics import SLO
from .workload import Workload

__all__ = [
    "WorkloadConfig",
    "PolicyConfig",
    "FleetConfig",
    "policy_names",
    "slo_config",
    "WORKLOAD_DEFAULTS",
    "POLICY_DEFAULTS",
    "FLEET_DEFAULTS",
    "MAX_SECONDS",
    "POLICY_NAMES",
]


WORKLOAD_DEFAULTS = {
    "arrival": "poisson",
    "trace": None,
    "rate": 5.0,
    "requests": 500,
    "duration": None,
    "prompt_len": "uniform:32,512",
    "output_len": "lognormal:128,96",
    "speedup": 1.0,
    "seed": 0,
}
#: Every policy, and each knob the command line sets, at its default (``batchsim.core.knobs``).
POLICY_DEFAULTS = {"policy": ",".join(POLICY_NAMES), **{k: DEFAULTS[k] for k in FLAG_KNOBS}}


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
            raise ConfigError(
                f"give requests or duration, exactly one (got {show(self.requests)} and "
                f"{show(self.duration)})"
            )
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
                raise ConfigError(
                    f"speedup must be between 1e-06 and 1e+09, got {show(self.speedup)}"
                )
            return
        if str(self.arrival).startswith("trace:"):
            raise ConfigError("arrival trace:PATH is spelt trace=PATH here (or --trace PATH)")
        check_rate("rate", self.rate)
        process = self.arrival_process()  # validates the spec
        self.prompt_dist()
        self.output_dist()
        if self.duration is not None and self.duration * process.mean_rate < 1:
            raise ConfigError(
                f"duration {show(self.duration)} s holds less than one expected arrival at "
                f"{process.mean_rate:g} requests/s: make it longer, or give --requests"
            )

    def arrival_process(self) -> ArrivalProcess:
        return parse_arrival(str(self.arrival), self.rate)

    def prompt_dist(self) -> LengthDist:
        return parse_length(self.prompt_len, "prompt-len")

    def output_dist(self) -> LengthDist:
        return parse_length(self.output_len, "output-len")

    @property
    def expected_requests(self) -> float | None:
        """How many requests the run will have (None for a trace cut by duration: known after
        reading)."""
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
            max_seconds = (
                None if self.duration is None else float(self.duration) * float(self.speedup)
            )
            tr = read_trace(self.trace, max_rows=self.requests, max_seconds=max_seconds)
            wl = trace_workload(tr, n=self.requests, duration=self.duration, speedup=self.speedup)
        else:
            wl = make_workload(
                self.arrival_process(),
                self.prompt_dist(),
                self.output_dist(),
                n=self.requests,
                duration=self.duration,
                seed=self.seed,
            )
        if not len(wl):
            raise ConfigError(
                f"the workload has no requests ({wl.description}): lengthen --duration"
            )
        return wl

    @classmethod
    def from_flags(cls, flags: Mapping[str, Any], *layers: Mapping[str, Any]) -> WorkloadConfig:
        """Resolve from the flags given and the defaults under them (a scenario's, realrun's, the
        package's)."""
        layers = (*layers, WORKLOAD_DEFAULTS)
        g = lambda k: resolve(k, flags, *layers)  # noqa: E731
        trace = trace_of(flags) or next(
            (trace_of(layer) for layer in layers if trace_of(layer)), None
        )
        requests, duration = flags.get("requests"), flags.get("duration")
        # neither flag: the scenario's extent, else the package's
        if requests is None and duration is None:
            duration = resolve("duration", {}, *layers[:-1])
            requests = None if duration is not None else g("requests")
        arrival = g("arrival") if trace is None else "poisson"
        return cls(
            arrival=arrival,
            rate=g("rate"),
            requests=requests,
            duration=duration,
            prompt_len=g("prompt_len"),
            output_len=g("output_len"),
            seed=g("seed"),
            trace=trace,
            speedup=g("speedup"),
        )


# --- the policy ---------------------------------------------------------------------------


class _PolicyRules:
    """PolicyConfig's methods; its fields are ``name`` and each knob the command line sets."""

    def __post_init__(self) -> None:
        if self.name not in POLICY_NAMES:
            raise ConfigError(
                f"policy must be one of {', '.join(POLICY_NAMES)}, got {show(self.name)}"
            )
        for k in FLAG_KNOBS:  # every knob, whichever policy reads it: one set serves every policy
            if getattr(self, k) is not None:  # None: the knob's default, as make_policy reads it
                check_knob_value(k, getattr(self, k))

    def knobs(self) -> dict[str, Any]:
        """The knobs this policy reads, as make_policy takes them (numpy scalars made Python
        numbers)."""
        return {
            k: type(DEFAULTS[k])(getattr(self, k))
            for k in READS[self.name]
            if k in FLAG_KNOBS and getattr(self, k) is not None
        }

    def build(self):
        """A fresh policy object (policies hold a run's state: one per run)."""
        from .policies import make_policy

        return make_policy(self.name, **self.knobs())

    @classmethod
    def from_flags(
        cls, name: str, flags: Mapping[str, Any], *layers: Mapping[str, Any]
    ) -> PolicyConfig:
        layers = (*layers, POLICY_DEFAULTS)
        kw = {f.name: resolve(f.name, flags, *layers) for f in fields(cls) if f.name != "name"}
        return cls(name, **kw)


#: One policy and its knobs; each policy reads only the knobs that concern it. Its fields are made
#: from ``batchsim.core.knobs`` (``name``, ``max_batch``, ``max_wait``, ``max_seqs``,
#: ``max_batched_tokens``, ``block_size``, ``chunked_prefill``), so a knob added there is a field
#: here.
PolicyConfig = make_dataclass(
    "PolicyConfig",
    [
        ("name", str),
        *(
            (k, f"{type(DEFAULTS[k]).__name__} | None", field(default=DEFAULTS[k]))
            for k in FLAG_KNOBS
        ),
    ],
    bases=(_PolicyRules,),
    frozen=True,
    namespace={
        "__module__": __name__,
        "__doc__": "One policy and its knobs; each policy reads only the knobs that concern it "
        "(defaults and checks: ``batchsim.core.knobs``; None: the knob's default).",
    },
)


def policy_names(spec: Any) -> list[str]:
    """``taxi,continuous`` -> ["taxi", "continuous"]; every name checked."""
    return comma_list(spec, "policy", POLICY_NAMES)


# --- the fleet ------------------------------------------------------------------------------

FLEET_DEFAULTS = {"replicas": 1, "router": "least-loaded", "summary_only": False}


@dataclass(frozen=True)
class FleetConfig:
    """How many servers serve the run, behind which router; and whether it keeps only a summary.

    The default router is least-loaded: it is what production load balancers in front of LLM
    servers do, and round-robin, blind to a long answer holding a server, is the lesson's foil.
    """

    replicas: int = 1
    router: str = "least-loaded"
    summary_only: bool = False

    def __post_init__(self) -> None:
        from .fleet import check_replicas
        from .router import ROUTER_NAMES

        check_replicas(self.replicas)
        check_choice("router", self.router, ROUTER_NAMES)
        check_bool("summary_only", self.summary_only)

    @classmethod
    def from_flags(cls, flags: Mapping[str, Any], *layers: Mapping[str, Any]) -> FleetConfig:
        layers = (*layers, FLEET_DEFAULTS)
        return cls(*(resolve(k, flags, *layers) for k in ("replicas", "router", "summary_only")))

    def describe(self) -> str:
        return (
            "one server"
            if self.replicas == 1
            else f"{self.replicas} servers behind a {self.router} router"
        )


def slo_config(flags: Mapping[str, Any], *layers: Mapping[str, Any]) -> SLO:
    return SLO(
        ttft=resolve("slo_ttft", flags, *layers),
        tpot=resolve("slo_tpot", flags, *layers),
        e2e=resolve("slo_e2e", flags, *layers),
    )
