"""``python -m realrun doctor``: what this machine will measure with, before measuring anything.

A classroom's first check on a new machine (a laptop, a lab server, a GPU box): which
device and precision, which versions, where the model came from, how many threads,
how much memory, and a smoke test (one decode step at batch 1 and at batch 16, and
the first greedy tokens) that shows the model runs and that batching pays.
"""

from __future__ import annotations

import os
import platform

from batchsim.core.step import Chunk, Step
from batchsim.core.workload import Request, Workload

from .model import RANDOM_WEIGHTS_NOTE, LoadedModel, available_cores

__all__ = ["doctor"]


def doctor(lm: LoadedModel, asked_device: str = "auto", asked_dtype: str = "auto") -> int:
    import torch
    import transformers

    from .baselines import has_hf_continuous
    from .engine import Engine, memory_stats

    cuda = torch.cuda.is_available()
    print("realrun doctor")
    print(f"  python        {platform.python_version()} on {platform.system()} {platform.machine()}")
    print(f"  torch         {torch.__version__} (CUDA {'available: ' + torch.cuda.get_device_name(0) if cuda else 'not available'})")
    print(f"  transformers  {transformers.__version__} (continuous batching: {'yes' if has_hf_continuous(lm) else 'no'})")
    print(f"  device        {lm.device} (asked: {asked_device})")
    print(f"  dtype         {lm.dtype} (asked: {asked_dtype})")
    print(f"  threads       {lm.threads} torch intra-op threads; {available_cores()} cores available to this process")
    print(f"  model         {lm.name}: {lm.source}; {lm.n_params / 1e6:.1f}M parameters; {lm.n_positions} positions; "
          f"KV {lm.kv_bytes_per_token} bytes per token")
    if lm.random_weights:
        print(f"                {RANDOM_WEIGHTS_NOTE}")
    hub = os.environ.get("HF_HUB_OFFLINE")
    print(f"  hub           HF_HUB_OFFLINE={hub or 'unset'}; other models load from the cache or, if reachable, the hub")
    eng = Engine(lm)
    times = {}
    for b in (1, 16):
        wl = Workload(tuple(Request(i, 0.0, 32, 8) for i in range(b)))
        eng.start(wl)
        eng.execute(Step(prefill=tuple(Chunk(i, 0, 32, True) for i in range(b))))
        t0, ends = eng.execute(Step(decode=tuple(range(b)), repeat=5))
        times[b] = (ends[-1] - t0) / 5
    sample = lm.tokenizer.decode(eng.outputs()[0][:6])
    print(f"  smoke test    decode step: batch 1 {times[1] * 1e3:.1f} ms, batch 16 {times[16] * 1e3:.1f} ms "
          f"(16 rows cost {times[16] / times[1]:.1f}x one row); greedy sample {sample!r}")
    mem = memory_stats(lm)
    line = f"  memory        process peak RSS {mem['peak_rss_bytes'] / 2**20:.0f} MiB"
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        line += f" of {total / 2**30:.1f} GiB RAM"
    except (ValueError, OSError, AttributeError):
        pass
    if cuda and lm.device.startswith("cuda"):
        free, tot = torch.cuda.mem_get_info()
        line += (f"; GPU {tot / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free; "
                 f"max allocated {mem.get('cuda_max_memory_allocated_bytes', 0) / 2**20:.0f} MiB")
    print(line)
    return 0
