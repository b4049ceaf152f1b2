"""Where a pass's time goes on a GPU: the host (Python, launches, waiting to be woken) or the
device.

realrun's engine runs one forward pass per step and waits for it (``torch.cuda.synchronize``)
so each pass has a time of its own. On a GPU a small model's pass is short enough that the host's
share can be most of it, and a host that sleeps while it waits can add a scheduler tick. This
script times, on the device at hand:

- ``sync``: a tiny kernel and a synchronize, over and over (the round trip a pass pays at least),
  then the same after a 2 ms sleep (as an engine that idled between arrivals);
- ``engine``: realrun's decode passes (KV in blocks on a CPU, in padded rows on either) at 1, 16 and
  64 rows, with 1 and with 8 torch threads: the wall time of each pass (what the profile and the run
  record) beside the device's own time for the same passes (CUDA events), so the host's share is
  their difference.

    # from the repo root, installed:
    python bench/gpu_host.py [--model gpt2-random] [--device cuda] [--json out/host.json]
    python bench/gpu_host.py --device cpu --model tiny-gpt2     # a dry run
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from batchsim import Request, Workload
from batchsim.core.step import Step
from realrun.engine.engine import Engine
from realrun.engine.model import load_model

WARMUP = 3


def pct(xs) -> dict:
    a = np.asarray(xs, dtype=float) * 1e3
    return {
        "p10_ms": float(np.percentile(a, 10)),
        "p50_ms": float(np.median(a)),
        "p90_ms": float(np.percentile(a, 90)),
        "max_ms": float(a.max()),
        "n": int(a.size),
    }


def sync_round_trip(device: str, n: int, sleep: float) -> dict:
    x = torch.zeros(16, device=device)
    out = []
    for _ in range(n + WARMUP):
        if sleep:
            time.sleep(sleep)
        t = time.perf_counter()
        x.add_(1)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t)
    return pct(out[WARMUP:])


def engine_passes(
    model: str, device: str, threads: int, kv: str, rows: int, ctx: int, passes: int
) -> dict:
    lm = load_model(model, device=device, threads=threads)
    engine = Engine(lm, kv=kv)
    ids = list(range(rows))
    engine.start(
        Workload(
            tuple(Request(i, 0.0, ctx + passes + WARMUP + 1, 1 << 30) for i in ids), "host check"
        )
    )
    engine.fill_rows(ids, [ctx] * rows)
    engine.pass_log.clear()
    cuda = device.startswith("cuda")
    if cuda:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
    t = time.perf_counter()
    engine.execute(
        Step(decode=tuple(ids), kv_read=rows * ctx, decode_width=ctx, repeat=passes + WARMUP)
    )
    wall = time.perf_counter() - t
    r = pct([x for _, x in engine.pass_log][WARMUP:])
    r.update(
        threads=threads, kv=kv, rows=rows, ctx=ctx, wall_per_pass_ms=wall / (passes + WARMUP) * 1e3
    )
    if cuda:
        b.record()
        b.synchronize()
        r["device_per_pass_ms"] = a.elapsed_time(b) / (passes + WARMUP)
    engine.release(ids)
    del engine, lm
    if cuda:
        torch.cuda.empty_cache()
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt2-random")
    ap.add_argument("--device", default="cuda")
    ap.add_argument(
        "--passes", type=int, default=40, help="decode passes timed per case (default 40)"
    )
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "gpu_host: --device cuda, but torch sees no GPU (--device cpu for a dry run)",
            file=sys.stderr,
        )
        return 2
    if a.passes < 5:
        print(f"gpu_host: --passes must be at least 5, got {a.passes}", file=sys.stderr)
        return 2
    out: dict = {
        "device": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "model": a.model,
        "sync": {},
        "engine": [],
    }
    for name, sleep in (("back to back", 0.0), ("after a 2 ms sleep", 0.002)):
        r = out["sync"][name] = sync_round_trip(a.device, 300, sleep)
        print(
            f"sync round trip, {name}: p50 {r['p50_ms']:.3f} ms, p90 {r['p90_ms']:.3f}, max "
            f"{r['max_ms']:.3f}",
            flush=True,
        )
    print(
        f"\n{'kv':>6} {'threads':>7} {'rows':>4} {'pass p10/p50/p90 ms':>22} {'max':>7} "
        f"{'device ms':>9}"
    )
    # The block pool's engine runs on the CPU only (its packed body is the CPU kernel's); on CUDA
    # the engine holds its KV in padded rows, so only those are timed there.
    layouts = ("padded",) if a.device.startswith("cuda") else ("paged", "padded")
    for kv in layouts:
        for threads in (1, 8):
            for rows in (1, 16, 64):
                try:
                    r = engine_passes(a.model, a.device, threads, kv, rows, 256, a.passes)
                except Exception as e:  # one case that fails is reported; the rest still run
                    print(
                        f"{kv:>6} {threads:>7} {rows:>4} FAILED: {type(e).__name__}: {e}",
                        flush=True,
                    )
                    continue
                out["engine"].append(r)
                dev = (
                    f"{r['device_per_pass_ms']:9.2f}" if "device_per_pass_ms" in r else f"{'-':>9}"
                )
                print(
                    f"{kv:>6} {threads:>7} {rows:>4} {r['p10_ms']:6.2f} {r['p50_ms']:6.2f} "
                    f"{r['p90_ms']:7.2f} {r['max_ms']:7.2f} {dev}",
                    flush=True,
                )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
