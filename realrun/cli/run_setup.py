"""A real run, resolved and checked before the model loads: the workload, the policies, the limits,
the folder.

``RunSetup(args)`` turns realrun's flags into batchsim's frozen configurations (the same
``WorkloadConfig`` and ``PolicyConfig`` batchsim's own command line builds), checks every
file and folder it will read or write, builds the workload, and says how long the run
will take when that is long: a real run lasts at least as long as its arrivals span.
Any problem is one ``ConfigError`` line, before a second is spent loading a model.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from batchsim.core import rejections, sizing
from batchsim.core.config import (
    POLICY_DEFAULTS,
    PolicyConfig,
    WorkloadConfig,
    policy_names,
    slo_config,
)
from batchsim.core.errors import ConfigError, check_int_at_least, check_kv_tokens, show
from batchsim.core.files import Staging, check_out_dir
from batchsim.core.flags import (
    check_conflicts,
    given,
    ignored_knob_notes,
    ignored_router_notes,
    resolve,
)
from batchsim.teach.scenarios import get_scenario

from ..clock.real_span import LONG_REAL_RUN_S, MAX_REAL_RUN_S, check_real_span

__all__ = [
    "RunSetup",
    "REALRUN_DEFAULTS",
    "LONG_REAL_RUN_S",
    "MAX_REAL_RUN_S",
    "check_model_flags",
    "check_threads",
    "check_real_span",
    "check_fleet_count",
    "write_outputs",
    "stage_outputs",
    "rejection_lines",
    "nothing_served",
]

#: A load a 2-core laptop serves in seconds per policy, and busy enough that predicted against
#: measured means something: the taxi is busy 73 % of the time predicted, 80 % measured, in the
#: shipped reference (realrun/reference/data, tiny-gpt2 on one CPU thread); the batching policies
#: 29-69 %.
REALRUN_DEFAULTS = {
    "rate": 4.0,
    "requests": 32,
    "prompt_len": "uniform:16,128",
    "output_len": "uniform:16,96",
    "max_batch": 8,
    "max_wait": 0.1,
    "max_seqs": 32,
    "max_batched_tokens": 1024,
}
# Scenario defaults that describe batchsim's simulated GPU server: the real server replaces them.
_SIM_SERVER_KEYS = {
    "gpu",
    "model",
    "dtype",
    "gpu_price",
    "mem_util",
    "compute_eff",
    "memory_eff",
    "overhead",
    "catalog",
    "step_time_model",
    "kv_budget_bytes",
    "table_keys",
}
_PADDED = ("taxi", "static", "dynamic")


def _overrides(args: argparse.Namespace) -> tuple[str, dict, list[str]]:
    """(name, defaults, notes): realrun's small load, or a scenario's shape at realrun's size."""
    notes: list[str] = []
    if not getattr(args, "scenario", None):
        return f"realrun-{args.command}", dict(REALRUN_DEFAULTS), notes
    sc = get_scenario(args.scenario)
    d = {k: v for k, v in sc.defaults.items() if k not in _SIM_SERVER_KEYS}
    if args.requests is None and args.duration is None:
        d.pop("duration", None)
        d["requests"] = REALRUN_DEFAULTS["requests"]
        notes.append(
            f"scenario {sc.name}: its workload shape and policies, at {d['requests']} requests "
            "(its own size is for the simulator; --requests or --duration to change)"
        )
    if sc.runner is not None:
        notes.append(
            f"scenario {sc.name} has its own runner in batchsim; here only its defaults are used"
        )
    return sc.name, {**REALRUN_DEFAULTS, **d}, notes


def machine_cores() -> int:
    from ..engine.model import available_cores

    return max(os.cpu_count() or 1, available_cores())


def check_threads(threads: int | None) -> None:
    """Torch with 100,000 intra-op threads dies in a segfault: bound the count by the machine."""
    if threads is None:
        return
    check_int_at_least("threads", threads, 1)
    cores = machine_cores()
    if threads > cores:
        raise ConfigError(
            f"threads must be between 1 and {cores} (this machine's cores), got {show(threads)}"
        )


def check_model_flags(args: argparse.Namespace) -> None:
    # device and dtype are checked by load_model, before it loads anything
    check_threads(args.threads)
    check_model_path(getattr(args, "model", None))


def check_model_path(name) -> None:
    """A name written as a path (/x, ./x, ~/x) that is not there is a typo, not a hub id: say so
    now, rather than after a probe of the hub that blames the network."""
    if not isinstance(name, str):
        return
    if name.startswith(("/", "./", "../", "~", ".\\")) and not Path(name).expanduser().exists():
        raise ConfigError(f"model {name!r}: no such folder")


class RunSetup:
    """Everything a run or compare needs, resolved and checked before the model is loaded."""

    def __init__(self, args: argparse.Namespace) -> None:
        check_model_flags(args)
        flags = given(args)
        check_conflicts(flags)
        self.name, d, self.notes = _overrides(args)
        if args.command == "run" and args.policy is None:
            d["policy"] = (
                "continuous" if "policy" not in d or "," in str(d["policy"]) else d["policy"]
            )
        self.engine = _engine_name(args)
        self.names = _usable_policies(
            self.engine,
            policy_names(resolve("policy", flags, d, POLICY_DEFAULTS)),
            self.notes,
            args.command,
            "policy" in flags,
        )
        # The fleet and the model folder are checked before vLLM is looked for: each is the user's
        # to fix whether or not vLLM is installed, and neither needs it to be judged.
        self.fleet = _fleet(flags, d, self.engine)
        if self.engine == "vllm":
            _check_vllm_model(args.model)
            d = _vllm_defaults(args, flags, d, self.notes)
        self.notes += ignored_knob_notes(flags, self.names)
        self.notes += ignored_router_notes(flags, self.fleet.replicas)
        self.workload_config = WorkloadConfig.from_flags(flags, d)
        self.policies = [PolicyConfig.from_flags(n, flags, d) for n in self.names]
        if self.engine == "hf-continuous":
            _check_hf_block_size(self.policies[0].block_size)
        self.kv = resolve("kv_budget_tokens", flags, d)
        if self.kv is not None:
            check_kv_tokens("kv-budget-tokens", self.kv)
        self.slo = slo_config(flags, d)
        self.seed = int(resolve("seed", flags, d) or 0)
        self.out = Path(args.out or "out") / self.name
        # run draws no figure; compare keeps its calibration
        self.writes = bool(args.out) or args.command == "compare"
        if self.writes:
            check_out_dir(self.out, "out")
        if args.command == "compare" and getattr(args, "calibration", None):
            _check_calibration(args.calibration)
        elif args.command == "compare":
            from ..timing.profile import GRIDS

            if args.grid != "auto" and args.grid not in GRIDS:
                raise ConfigError(f"grid must be auto, {', '.join(GRIDS)}, got {show(args.grid)}")
        self.workload = self.workload_config.build()
        check_fleet_count(self.fleet.replicas, len(self.workload))
        self._check_time(args)

    def _check_time(self, args: argparse.Namespace) -> None:
        """A real run takes at least as long as its arrivals span: say so when that is long."""
        if not args.no_size_check:
            sizing.check(
                sizing.estimate(
                    len(self.workload), float(self.workload.output_tokens.mean()), len(self.names)
                )
            )
        if getattr(args, "busy", None) is not None:
            # --busy sets the rate from the step times: compare checks the span once it has set it
            return
        span = float(self.workload.arrivals[-1]) if len(self.workload) else 0.0
        check_real_span([span] * len(self.names), args.no_size_check)


def _fleet(flags: dict, d: dict, engine: str):
    """The fleet of engines to run (``run --replicas N``), checked against the engine chosen."""
    from batchsim.core.config import FleetConfig

    fleet = FleetConfig.from_flags(flags, d)
    if fleet.replicas > 1 and engine == "hf-continuous":
        raise ConfigError(
            f"replicas {fleet.replicas} needs engine ours or hf-generate: hf-continuous runs "
            f"transformers' "
            "own scheduler thread, which does not take turns with another engine"
        )
    if fleet.replicas > 1 and engine == "vllm":
        raise ConfigError(
            f"replicas {fleet.replicas} needs engine ours or hf-generate: engine vllm is one vLLM "
            f"server "
            "with its own scheduler, which does not take turns with another engine (batchsim run "
            f"--replicas {fleet.replicas} simulates a fleet)"
        )
    return fleet


def check_fleet_count(replicas: int, requests: int) -> None:
    """Each engine of a real fleet holds its own copy of the packed weights: one that can never be
    given a request is memory spent for nothing (4,096 engines of tiny-gpt2 fill 200 GB before the
    first step)."""
    if replicas > requests:
        raise ConfigError(
            f"replicas {replicas} is more engines than the run's {requests} requests: "
            f"{replicas - requests} would never serve one, and each holds a copy of the model; "
            f"lower --replicas to at most {requests}"
        )


def _check_hf_block_size(block_size: int) -> None:
    from ..reference.baselines import HF_MIN_BLOCK

    if block_size < HF_MIN_BLOCK:
        raise ConfigError(
            f"block-size must be at least {HF_MIN_BLOCK} for engine hf-continuous (transformers' "
            f"smallest page), got {show(block_size)}"
        )


def _check_vllm_model(name: str) -> None:
    """vLLM loads a folder (or an offline model, which realrun saves for it): say so of a path that
    is not one, before our own loader, which would look for it on the hub, blames the network."""
    from ..engine.model import OFFLINE_MODELS
    from ..reference.vllm.server import model_dir

    if name not in OFFLINE_MODELS:
        model_dir(name)


def _check_calibration(path: str) -> None:
    """Read a calibration now (one line if it is bad), before anything is measured."""
    from batchsim.sim.steptime import load_step_time

    load_step_time(path)


def _engine_name(args) -> str:
    from ..reference.baselines import ENGINE_NAMES

    name = getattr(args, "engine", "ours")
    if name not in ENGINE_NAMES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINE_NAMES)}, got {show(name)}")
    kv = getattr(args, "kv", "auto")
    if name != "ours" and kv != "auto":
        # Only our engine reads --kv: another holds its KV its own way, and a flag it ignores would
        # label the run with a layout it never had.
        raise ConfigError(
            f"--kv {kv} chooses how engine ours holds its KV cache; engine {name} keeps its own: "
            "drop --kv, or pass --engine ours"
        )
    return name


def _usable_policies(
    engine_name: str, names: list[str], notes: list[str], command: str, policy_given: bool = True
) -> list[str]:
    if command == "run" and len(names) != 1:
        raise ConfigError(
            f"run measures one policy; use compare for several, got {','.join(names)}"
        )
    if engine_name == "hf-generate":
        kept = [n for n in names if n in _PADDED]
        if not kept:
            raise ConfigError(
                "engine hf-generate runs padded batches only: policy must be taxi, static or "
                "dynamic"
            )
        if len(kept) < len(names):
            notes.append("engine hf-generate runs padded batches only: continuous is left out")
        return kept
    if engine_name == "vllm":
        others = [n for n in names if n != "continuous"]
        if others and policy_given:
            raise ConfigError(
                f"engine vllm is vLLM's own scheduler (continuous batching): policy must be "
                f"continuous, got {','.join(names)}"
            )
        if others:
            notes.append(
                "engine vllm schedules by itself (vLLM V1, continuous batching): only policy "
                "continuous is run"
            )
        return ["continuous"]
    if engine_name == "hf-continuous":
        if "continuous" not in names:
            raise ConfigError(
                "engine hf-continuous is continuous batching: policy must include continuous"
            )
        if len(names) > 1:
            notes.append(
                "engine hf-continuous schedules by itself: only the continuous policy's limits are "
                "passed on"
            )
        return ["continuous"]
    return names


def _vllm_defaults(args, flags: dict, d: dict, notes: list[str]) -> dict:
    """vLLM must be importable, and on the CPU its blocks are a multiple of 32 tokens: checked
    before anything loads."""
    from ..reference.vllm.knobs import CPU_BLOCK_MULTIPLE
    from ..reference.vllm.server import require_vllm

    require_vllm()
    on_cpu = not str(args.device).startswith("cuda")
    if on_cpu and "block_size" not in flags:
        notes.append(
            f"engine vllm on the CPU: block size {CPU_BLOCK_MULTIPLE} (its kernels take multiples "
            f"of {CPU_BLOCK_MULTIPLE}), on both the measured and the simulated side"
        )
        return {**d, "block_size": CPU_BLOCK_MULTIPLE}
    if on_cpu and int(flags["block_size"]) % CPU_BLOCK_MULTIPLE:
        raise ConfigError(
            f"block-size must be a multiple of {CPU_BLOCK_MULTIPLE} for engine vllm on the CPU "
            f"(its attention kernels), got {show(flags['block_size'])}"
        )
    return d


def write_outputs(setup: RunSetup, results: dict, args, figure=None) -> list[Path]:
    """Records (with --out) and the figure, staged and moved in whole; returns the final paths."""
    if not (args.out or (figure is not None and not args.no_plots)):
        return []
    with Staging(setup.out) as staging:
        paths = stage_outputs(staging, results, args, figure)
        staging.commit()
    return paths


def stage_outputs(staging: Staging, results: dict, args, figure=None) -> list[Path]:
    """Write into ``staging`` the records (with --out) and the figure (unless --no-plots); the paths
    they will have once it is committed."""
    paths = []
    if args.out:
        for prefix, res in results.items():
            paths += [staging.final(p) for p in res.records.write_csv(staging.dir, prefix=prefix)]
    if figure is not None and not args.no_plots:
        paths.append(staging.final(figure(staging.dir)))
    return paths


def rejection_lines(results: dict) -> list[str]:
    return rejections.lines(results)


def nothing_served(results: dict) -> bool:
    return rejections.all_rejected({k: r for k, r in results.items() if not r.meta.get("stopped")})
