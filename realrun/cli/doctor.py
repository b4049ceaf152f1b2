"""``python -m realrun doctor``: what this machine will measure with, before measuring anything.

A classroom's first check on a new machine (a laptop, a lab server, a GPU box): which
device and precision, which versions, where the model came from, how many threads,
how much memory, and a smoke test (one decode step at batch 1 and at batch 16, and
the first greedy tokens) that shows the model runs and that batching pays. It also says
whether the machine is quiet enough to measure on: the load average (other work on the
machine stretches every measured time, never a predicted one) and how much one small pass
varies when timed forty times over.
"""

from __future__ import annotations

import os
import platform

from batchsim.core.files import dumps
from batchsim.core.step import Chunk, Step
from batchsim.core.workload import Request, Workload

from ..engine.model import RANDOM_WEIGHTS_NOTE, LoadedModel, available_cores

__all__ = ["doctor", "diagnose", "DRIFT_PROBE_S"]

#: Seconds of the drift probe: a time constant of a second shows in a few.
DRIFT_PROBE_S = 3.0


def diagnose(lm: LoadedModel, asked_device: str = "auto", asked_dtype: str = "auto") -> dict:
    """What doctor reports, as plain data: the machine, the model, and a smoke test."""
    import torch
    import transformers

    from ..clock.memory import memory_stats
    from ..engine.engine import Engine
    from ..reference.baselines import has_hf_continuous

    cuda = torch.cuda.is_available()
    eng = Engine(lm)
    times = {}
    for b in (1, 16):
        wl = Workload(tuple(Request(i, 0.0, 32, 8) for i in range(b)))
        eng.start(wl)
        eng.execute(Step(prefill=tuple(Chunk(i, 0, 32, True) for i in range(b))))
        t0, ends = eng.execute(Step(decode=tuple(range(b)), repeat=5))
        times[b] = (ends[-1] - t0) / 5
    from batchsim.sim.slowdrift import fit_slow_drift

    from ..timing.jitter import pass_jitter
    from ..timing.probe import probe_passes, probe_series

    sample = lm.tokenizer.decode(eng.outputs()[0][:6])
    jitter = pass_jitter(eng)  # (it starts the engine afresh: the sample is taken first)
    steady = {"passes": jitter["passes"], **jitter["pass"]}
    # Some seconds of the same pass: how the machine's speed wanders over seconds (what a queue
    # feels).
    eng.start(Workload((Request(0, 0.0, 64, 1 << 30),), "drift probe"))
    probe = probe_series(eng, 64, probe_passes(DRIFT_PROBE_S, steady["median_s"]))
    eng.start(Workload(()))
    drift = fit_slow_drift(probe)
    mem = memory_stats(lm)
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    info = {
        "python": f"{platform.python_version()} on {platform.system()} {platform.machine()}",
        "torch": torch.__version__,
        "cuda_available": cuda,
        "cuda_device": torch.cuda.get_device_name(0) if cuda else None,
        "transformers": transformers.__version__,
        "hf_continuous_batching": has_hf_continuous(lm),
        "device": lm.device,
        "asked_device": asked_device,
        "dtype": lm.dtype,
        "asked_dtype": asked_dtype,
        "threads": lm.threads,
        "cores": available_cores(),
        "model": lm.name,
        "model_source": lm.source,
        "params": lm.n_params,
        "positions": lm.n_positions,
        "kv_bytes_per_token": lm.kv_bytes_per_token,
        "random_weights": lm.random_weights,
        "hf_hub_offline": os.environ.get("HF_HUB_OFFLINE"),
        "decode_step_s": {"1": times[1], "16": times[16]},
        "sample": sample,
        "peak_rss_bytes": mem["peak_rss_bytes"],
        "load_average": load,
        "timing_stability": steady,
        "machine_jitter": {k: jitter[k] for k in ("torch loop", "python loop", "excess")},
        "slow_drift": drift.as_dict() if drift is not None else None,
        "drift_probe_s": float(sum(probe)),
    }
    try:
        info["ram_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        info["ram_bytes"] = None
    if cuda and lm.device.startswith("cuda"):
        free, tot = torch.cuda.mem_get_info()
        info.update(
            gpu_memory_bytes=tot,
            gpu_free_bytes=free,
            cuda_max_memory_allocated_bytes=mem.get("cuda_max_memory_allocated_bytes", 0),
        )
    return info


def _quiet(spread: float) -> str:
    return (
        "steady enough to measure on"
        if spread < 0.15
        else "noisy: expect measured times to move by that much"
    )


def _whose(excess: float) -> str:
    """Whose the pass's jitter is: the machine's when fixed loops of its length spread as much.
    Up to 0.10 above the noisier loop still counts as the machine's: the same loop's spread moved by
    0.01 to 0.49 from one round of 300 to the next here (``realrun.timing.jitter``)."""
    if excess <= 0.10:
        return (
            "the pass spreads no more than they do, so its jitter is this machine's, not the "
            "engine's"
        )
    return (
        f"the pass spreads {excess:.2f} more than the noisier of them: that much is the engine's "
        f"own, "
        "not the machine's"
    )


def doctor(
    lm: LoadedModel, asked_device: str = "auto", asked_dtype: str = "auto", as_json: bool = False
) -> int:
    d = diagnose(lm, asked_device, asked_dtype)
    t1, t16 = d["decode_step_s"]["1"], d["decode_step_s"]["16"]
    smoke = (
        f"decode step: batch 1 {t1 * 1e3:.1f} ms, batch 16 {t16 * 1e3:.1f} ms (16 rows cost "
        f"{t16 / t1:.1f}x one row); greedy sample {d['sample']!r}"
    )
    notes = [RANDOM_WEIGHTS_NOTE] if d["random_weights"] else []
    if as_json:
        print(
            dumps(
                {
                    "config": {k: v for k, v in d.items() if k not in ("decode_step_s", "sample")},
                    "runs": [
                        {
                            "label": "smoke test",
                            "decode_step_s": d["decode_step_s"],
                            "sample": d["sample"],
                        }
                    ],
                    "notes": notes,
                }
            )
        )
        return 0
    cuda = f"available: {d['cuda_device']}" if d["cuda_available"] else "not available"
    print("realrun doctor")
    print(f"  python        {d['python']}")
    print(f"  torch         {d['torch']} (CUDA {cuda})")
    print(
        f"  transformers  {d['transformers']} (continuous batching: "
        f"{'yes' if d['hf_continuous_batching'] else 'no'})"
    )
    print(f"  device        {d['device']} (asked: {d['asked_device']})")
    print(f"  dtype         {d['dtype']} (asked: {d['asked_dtype']})")
    print(
        f"  threads       {d['threads']} torch intra-op threads; {d['cores']} cores available to "
        f"this process"
    )
    print(
        f"  model         {d['model']}: {d['model_source']}; {d['params'] / 1e6:.1f}M parameters; "
        f"{d['positions']} positions; KV {d['kv_bytes_per_token']} bytes per token"
    )
    for n in notes:
        print(f"                {n}")
    print(
        f"  hub           HF_HUB_OFFLINE={d['hf_hub_offline'] or 'unset'}; other models load from "
        f"the cache or, if reachable, the hub"
    )
    print(f"  smoke test    {smoke}")
    line = f"  memory        process peak RSS {d['peak_rss_bytes'] / 2**20:.0f} MiB"
    if d["ram_bytes"]:
        line += f" of {d['ram_bytes'] / 2**30:.1f} GiB RAM"
    if "gpu_memory_bytes" in d:
        line += (
            f"; GPU {d['gpu_memory_bytes'] / 2**30:.1f} GiB, {d['gpu_free_bytes'] / 2**30:.1f} GiB "
            f"free; max allocated {d['cuda_max_memory_allocated_bytes'] / 2**20:.0f} MiB"
        )
    print(line)
    s, m = d["timing_stability"], d["machine_jitter"]
    print(
        f"  timing        one 1-row decode pass timed {s['passes']} times: median "
        f"{s['median_s'] * 1e3:.2f} ms, p90/p10 {1 + s['spread']:.2f} ({_quiet(s['spread'])})"
    )
    print(
        f"  jitter        timed in turn with those passes, loops of the same length: bare torch "
        f"products p90/p10 {1 + m['torch loop']['spread']:.2f}, pure Python "
        f"{1 + m['python loop']['spread']:.2f}: " + _whose(m["excess"])
    )
    if d["slow_drift"] is not None:
        sd, tau = d["slow_drift"]["sd"], d["slow_drift"]["tau_s"]
        print(
            f"  drift         over {d['drift_probe_s']:.1f} s of the same pass, its speed wanders "
            f"by {sd:.0%} (sd) with a time constant of {tau:.2f} s: a queue feels that more than "
            f"the spread above (the profile measures it, "
            "and --step-noise profiled samples it)"
        )
    else:
        print(
            f"  drift         over {d['drift_probe_s']:.1f} s of the same pass, no slow drift of "
            f"its speed showed"
        )
    from ..timing.drift import load_warning

    if d["load_average"] is not None:
        la = d["load_average"]
        print(
            f"  load          load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f} on {d['cores']} "
            f"cores"
        )
        warn = load_warning(d["threads"])
        if warn:
            print(f"                {warn}")
    return 0
