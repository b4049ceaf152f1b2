"""What ``realrun run/compare --engine vllm`` do beyond our engine's commands: start vLLM, profile
it, decompose.

``realrun.cli.run`` stays the one place that prints and writes; these helpers supply
the vLLM side: the server (started once per command, its knob mapping printed), the
calibration (a file, or vLLM profiled now on the workload's shapes), the simulated
policy (batchsim's continuous policy in its ``"vllm-v1"`` flavour, with the very knobs
vLLM was given) and the part of the error decomposition that applies to an engine whose
steps we see only through its scheduler's log.
"""

from __future__ import annotations

import sys

from batchsim.core.errors import ConfigError
from batchsim.core.files import Staging, read_json
from batchsim.core.policies import VLLMV1, make_policy

from .knobs import knobs_for
from .server import VLLMServer, model_dir, save_model
from .warm import warm, warm_sizes

__all__ = [
    "start_server",
    "calibration",
    "sim_policy",
    "decompose_vllm",
    "delivered",
    "schedule_note",
    "REPLAY_NOTE",
]

#: What the replay identity (decomposition b) means for vLLM, said plainly.
REPLAY_NOTE = (
    "does not apply to vLLM: its scheduler is vLLM's code, not a batchsim policy, so there is no "
    "decision trace to replay; its steps are priced in (a) from its scheduler's log, and the "
    "schedule batchsim predicts (the vllm-v1 flavour) is compared by step count and batch size "
    "above"
)


def start_server(args, setup, lm, progress: bool = False) -> VLLMServer:
    """vLLM with the run setup's continuous knobs, on the saved copy of ``lm`` (saved now if
    missing)."""
    from ...engine.model import OFFLINE_MODELS

    path = save_model(lm.name) if lm.name in OFFLINE_MODELS else model_dir(lm.name)
    policy = setup.policies[0].build()
    knobs = knobs_for(
        policy, path, lm.n_positions, setup.kv, device=lm.device, dtype=lm.dtype, seed=0
    )
    setup.notes.extend(knobs.mapping())
    if progress:
        print("realrun: starting vLLM (about 15 s on 2 cores) ...", file=sys.stderr)
    server = VLLMServer(knobs, lm.kv_bytes_per_token)
    setup.notes.append(f"{server.describe()}; model folder {path}")
    # Before the profile and the runs: every step size the workload reaches, once (``warm``).
    sizes = warm_sizes(setup.workload, knobs)
    say = (lambda s: print(f"realrun: {s}", file=sys.stderr)) if progress else None
    if say is not None:
        say(f"warming vLLM's kernels for steps of 1 to {sizes[-1]} tokens ...")
    secs = warm(server, lm.vocab_size, sizes, say)
    setup.notes.append(
        f"vLLM warmed: one step of every size from 1 to {sizes[-1]} tokens ({secs:.1f} s) before "
        "anything was timed (its CPU build makes a kernel for each new number of tokens in a step "
        "the first time it runs; a fresh server's prefill steps measured 2.7x their price)"
    )
    return server


def sim_policy(config, async_scheduling: bool = True) -> VLLMV1:
    """The simulated side of a vLLM comparison: the continuous policy, scheduled as vLLM V1
    schedules, ahead of the running step or not as the server does (``VLLMKnobs.async_scheduling``:
    not on the CPU). On the CPU, with the rule of scheduling ahead, a request that arrived while a
    step ran was predicted 22 % slower to its first token than vLLM served it; without, 9 % faster,
    and every request's mean 4 % (13.4 against 13.96 ms measured, 16.4 with the rule)."""
    # vLLM has one scheduler: its flavour is the continuous policy's
    if config.name != "continuous":
        raise ConfigError(f"policy must be continuous, got {config.name}")
    flavour = make_policy(config.name, **config.knobs(), scheduler="vllm-v1")
    if flavour.async_scheduling == async_scheduling:
        return flavour
    # the same knobs, make_policy's defaults filled in (it has no say in the scheduling mode)
    knobs = ("max_seqs", "max_batched_tokens", "block_size", "chunked_prefill", "watermark")
    return VLLMV1(**{k: getattr(flavour, k) for k in knobs}, async_scheduling=async_scheduling)


def calibration(args, server, lm, setup, progress: bool = False):
    """(step-time model, info): ``--calibration FILE``, or vLLM profiled now on this workload's
    shapes."""
    from ...judge.spread import STORED
    from ...timing.profile import load_calibration
    from .profile import profile_vllm

    if args.calibration:
        model = load_calibration(args.calibration)
        info = read_json(args.calibration, "calibration")
        if info.get("engine") != "vllm":
            setup.notes.append(
                f"warning: calibration {args.calibration} was not profiled on vLLM (engine "
                f"{info.get('engine', '?')}): the prediction prices vLLM's steps with another "
                f"engine's times"
            )
        return model, {
            "file": args.calibration,
            **{
                k: info.get(k)
                for k in ("model", "version", "source", "heldout", "delivery_s", *STORED)
            },
        }
    cap = None
    if server.knobs.kv_budget_tokens is None and lm.kv_bytes_per_token:
        from .knobs import DEFAULT_CPU_KV_GIB

        cap = int(0.9 * DEFAULT_CPU_KV_GIB * 2**30 // lm.kv_bytes_per_token)
    prof = profile_vllm(
        server,
        setup.workload,
        lm.vocab_size,
        quick=args.grid == "quick",
        progress=progress,
        capacity_tokens=cap,
    )
    with Staging(setup.out) as staging:
        prof.write(staging.path("calibration-vllm.json"))
        path = staging.commit()[0]
    setup.notes.append(
        f"calibration (vLLM profiled now, {len(prof.points)} shapes, {prof.seconds:.1f} s): {path}"
    )
    setup.notes.append(prof.text())
    setup.notes.append(
        f"  vLLM's delivery to the client: {prof.info['delivery_s'] * 1e3:.2f} ms after each "
        f"step's end "
        "(added to every predicted token)"
    )
    info = {k: v for k, v in prof.as_dict().items() if k != "points"}
    info["file"] = str(path)
    return prof.model, info


def decompose_vllm(row, step_time):
    """Decomposition (a) on vLLM's own steps (one fused pass each, from its scheduler's log); (b)
    explained."""
    import numpy as np

    from ...judge.decompose import Decomposition, error_summary, priced_by_kind

    steps = row.real.records.steps
    d = Decomposition(replay_note=REPLAY_NOTE)
    if not len(steps["start"]):
        return d
    # Each step as the one fused pass the profile prices (``meta['passes']``), a step after an idle
    # with its cold start (``meta['pass_idle']``), as the simulator prices it.
    kinds = priced_by_kind(row.real, step_time.for_policy("continuous"))
    d.passes = {kind: error_summary(a[:, 0], a[:, 1]) for kind, a in kinds.items()}
    if kinds:
        a = np.concatenate(list(kinds.values()))
        d.steps = error_summary(a[:, 0], a[:, 1])
    return d


def schedule_note(row) -> str:
    """How batchsim's schedule (the vllm-v1 flavour, simulated) and vLLM's (logged) compare, in
    steps and rows."""
    import numpy as np

    sim, real = row.sim.records.steps, row.real.records.steps
    n_sim = int(sim["repeat"].sum()) if len(sim["repeat"]) else 0
    n_real = int(len(real["start"]))

    def rows(st):
        return (
            float(np.average(st["batch_size"], weights=st["repeat"])) if len(st["repeat"]) else 0.0
        )

    def pre(st):
        return int((st["prompt_tokens"] > 0).sum())

    return (
        f"{row.label}: schedule, predicted vs vLLM's log: {n_sim:,} vs {n_real:,} steps, mean rows "
        f"per step {rows(sim):.2f} vs {rows(real):.2f}, steps with prompt tokens {pre(sim):,} vs "
        f"{pre(real):,}"
    )


def delivered(result, seconds: float):
    """A simulated result with every token reaching the client ``seconds`` after its step ended.

    The simulator's token is out when its step ends; vLLM's reaches the client after a hop between
    processes (engine core to the frontend), which the profile measures. That shifts first tokens,
    last tokens and finishes alike: TTFT and E2E grow by it, the gaps between tokens do not."""
    from dataclasses import replace

    if not seconds:
        return result
    r = result.records
    recs = replace(
        r,
        first_token=r.first_token + seconds,
        last_token=r.last_token + seconds,
        finish=r.finish + seconds,
    )
    return replace(result, records=recs, meta={**result.meta, "delivery_s": seconds})
