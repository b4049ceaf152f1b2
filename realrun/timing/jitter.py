"""Whose jitter is it: the engine's one-row decode pass timed between two yardsticks of the same
length.

A pass that jitters by 50 % says nothing about the engine until one knows how much a fixed
loop of the same length jitters on the same machine at the same moment. So each engine pass
here is followed by a bare torch loop (matrix products of the model's width into a buffer
allocated once: no model, no cache, no Python objects made per call) and a pure-Python loop,
each sized to last about as long as the pass. The three are timed in turn, pass by pass, so
a change in the machine's speed reaches all three alike.

What it found on the course's 2-core VM (a shared host), in three rounds of 300 each:
tiny-gpt2's pass 71-85 % (p90/p10 - 1), the bare torch loop 46-47 %, pure Python 57-69 %;
gpt2-6l's pass 48-67 %, the torch loop 58-72 %, Python 67-74 %. No garbage collection ran
in 3 of 4 rounds of 300 passes, and a pass took 2-7 page faults: the spread is the machine's
speed from one millisecond to the next, which a pass made mostly of Python (tiny-gpt2's)
feels as Python does, and a pass made mostly of products (gpt2-6l's) as the torch loop does.
"""

from __future__ import annotations

import time

import numpy as np

from batchsim.core.step import Step
from batchsim.core.workload import Request, Workload

__all__ = ["pass_jitter", "jitter_summary", "spread"]


def spread(t) -> float:
    """p90 / p10 - 1 of some timings: how far apart a fast and a slow one are."""
    p10, p90 = np.percentile(np.asarray(t, float), [10, 90])
    return float(p90 / p10 - 1)


def _torch_loop(width: int):
    import torch

    x, w = torch.randn(1, width), torch.randn(width, width)
    y = torch.empty(1, width)

    def run(n: int) -> float:
        t = time.perf_counter()
        for _ in range(n):
            torch.mm(x, w, out=y)
        return time.perf_counter() - t

    return run


def _python_loop(n: int) -> float:
    t, s = time.perf_counter(), 0
    for i in range(n):
        s += i
    return time.perf_counter() - t


def _sized(run, target_s: float) -> int:
    """How many iterations of ``run`` last about ``target_s`` (from the fastest of a few tries)."""
    n = 64
    per = min(run(n) for _ in range(3)) / n
    return max(1, int(target_s / max(per, 1e-9)))


def pass_jitter(engine, passes: int = 120, context: int = 64, yardsticks=None) -> dict:
    """The one-row decode pass and two yardsticks of its length, timed in turn ``passes`` times.

    Returns ``jitter_summary`` of the three series. ``yardsticks`` (for tests): a function of the
    pass's length returning the two loops as ``{"torch loop": run, "python loop": run}``, each
    ``run()`` giving the seconds of one go; by default, the bare torch and pure-Python loops sized
    to that length."""
    engine.start(Workload((Request(0, 0.0, context, 1 << 30),), "jitter"))
    engine.fill_rows([0], [context])
    step = Step(decode=(0,), kv_read=context, decode_width=context)
    for _ in range(5):  # the first passes after a fill build caches; not the steady pass
        engine.execute(step)
    t0, ends = engine.execute(step)
    loops = (yardsticks or _machine_yardsticks(engine))(ends[-1] - t0)
    got = {"pass": [], "torch loop": [], "python loop": []}
    for _ in range(passes):
        t0, ends = engine.execute(step)
        got["pass"].append(ends[-1] - t0)
        got["torch loop"].append(loops["torch loop"]())
        got["python loop"].append(loops["python loop"]())
    engine.start(Workload(()))
    return jitter_summary(got["pass"], got["torch loop"], got["python loop"])


def _machine_yardsticks(engine):
    def sized(length: float) -> dict:
        torch_run = _torch_loop(int(engine.lm.model.config.hidden_size))
        n_torch, n_py = _sized(torch_run, length), _sized(_python_loop, length)
        return {"torch loop": lambda: torch_run(n_torch), "python loop": lambda: _python_loop(n_py)}

    return sized


def jitter_summary(pass_s, torch_s, python_s) -> dict:
    """Each series' median seconds and spread (p90 / p10 - 1), and ``excess``: how much more the
    pass spreads than the noisier of the two yardsticks.

    A pass is partly Python and partly products, so a spread between the two loops' is what
    their mix shows on this machine: only what lies above both is the engine's own (0 or less:
    the jitter is the machine's)."""
    got = {"pass": pass_s, "torch loop": torch_s, "python loop": python_s}
    out = {k: {"median_s": float(np.median(v)), "spread": spread(v)} for k, v in got.items()}
    noisier = max(out["torch loop"]["spread"], out["python loop"]["spread"])
    return {"passes": len(pass_s), **out, "excess": out["pass"]["spread"] - noisier}
