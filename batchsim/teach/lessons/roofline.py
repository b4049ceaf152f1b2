"""Notebook 5: the roofline, the physical reason batching works."""

from __future__ import annotations


import numpy as np
from matplotlib.figure import Figure

from ...core.errors import check_int_at_least, check_nonneg
from ...machine.roofline import knee_batch
from ...machine.server import Server
from ._common import LESSON_GPU, LESSON_MODEL


def roofline(gpu: str = LESSON_GPU, model: str = LESSON_MODEL, batch: int = 32, context: int = 512,
             dtype: str | None = None, max_batch: int = 1024) -> tuple[dict, Figure]:
    """Step time and tokens/s of one decode step against batch size: why batching works.

    Below the knee the step is memory-bound (every step reads all the weights, however
    many rows share it), so tokens/s grows almost in proportion to the batch. Past the
    knee it is compute-bound and tokens/s flattens. ``context``: cached tokens per row,
    whose KV reads grow with the batch and push the knee out (or remove it).
    """
    check_int_at_least("batch", batch, 1)
    check_nonneg("context", context)
    check_int_at_least("max_batch", max_batch, 2)
    server = Server.named(gpu, model, dtype=dtype)
    st = server.step_time
    b = np.unique(np.round(np.logspace(0, np.log10(max_batch), 120)).astype(int))
    t = st.decode(b, context)
    at = st.decode(np.array([batch]), context)
    knee = knee_batch(st, context)
    knee0 = knee_batch(st, 0)
    one = st.decode(np.array([1]), context)
    summary = {
        "knee": knee, "knee_no_context": knee0, "batch": batch,
        "step_ms": float(at["step_s"][0] * 1e3), "tokens_per_s": float(at["tokens_per_s"][0]),
        "bound": "compute" if bool(at["compute_bound"][0]) else "memory",
        "speedup_vs_batch1": float(at["tokens_per_s"][0] / one["tokens_per_s"][0]),
        "weight_gb": server.model.weight_bytes(server.dtype) / 1e9,
        "table": "\n".join([
            f"{server.model.name} ({server.dtype}) on {server.gpu.name}, {context} cached tokens per row",
            f"batch {batch}: step {at['step_s'][0] * 1e3:.2f} ms ({'compute' if at['compute_bound'][0] else 'memory'}-bound), "
            f"{at['tokens_per_s'][0]:,.0f} tokens/s = {at['tokens_per_s'][0] / one['tokens_per_s'][0]:.1f}x batch 1",
            f"knee (first compute-bound batch): {knee if knee is not None else 'none: KV reads keep it memory-bound'}"
            f"; with no context: {knee0}",
        ]),
    }
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(b, t["step_s"] * 1e3, color="k", lw=2, label="step time")
    ax1.plot(b, t["memory_s"] * 1e3, color="tab:blue", ls="--", label="memory: weights + KV")
    ax1.plot(b, t["compute_s"] * 1e3, color="tab:orange", ls="--", label="compute: FLOPs")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("decode batch size")
    ax1.set_ylabel("ms per step")
    ax1.set_title("one decode step: the slower side wins")
    ax2.plot(b, t["tokens_per_s"], color="tab:purple", lw=2)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("decode batch size")
    ax2.set_ylabel("tokens per second")
    ax2.set_title("throughput: grows with the batch, then flattens")
    for ax in (ax1, ax2):
        if knee is not None:
            ax.axvline(knee, color="tab:red", ls=":", lw=1.5, label=f"knee: {knee}")
        ax.axvline(batch, color="0.3", lw=1, alpha=0.6)
    ax1.plot([batch], at["step_s"] * 1e3, "o", color="tab:red")
    ax2.plot([batch], at["tokens_per_s"], "o", color="tab:red")
    ax1.legend(fontsize=8)
    fig.suptitle(f"roofline: {server.model.name} ({server.dtype}) on {server.gpu.name}, {context} cached tokens per row")
    return summary, fig
