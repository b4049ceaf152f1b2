"""Notebook 5: the roofline, the physical reason batching works."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...core.errors import check_int_at_least, check_nonneg
from ...machine.roofline import knee_batch
from ...machine.server import Server
from ._common import LESSON_GPU, LESSON_MODEL
from .prefill import prefill_knee


def roofline(
    gpu: str = LESSON_GPU,
    model: str = LESSON_MODEL,
    batch: int = 32,
    context: int = 512,
    dtype: str | None = None,
    max_batch: int = 1024,
    prompt: int = 512,
) -> tuple[dict, Figure]:
    """Step time and tokens/s of one decode step against batch size, and of a prefill: the two
    phases.

    Below the knee the step is memory-bound (every step reads all the weights, however
    many rows share it), so tokens/s grows almost in proportion to the batch. Past the
    knee it is compute-bound and tokens/s flattens. ``context``: cached tokens per row,
    whose KV reads grow with the batch and push the knee out (or remove it). The third
    panel is the other phase: a prefill of ``prompt`` tokens computes them all in one
    pass, so it is the batch that comes for free, and compute-bound from a hundred or so
    tokens on.
    """
    check_int_at_least("batch", batch, 1)
    check_int_at_least("prompt", prompt, 1)
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
    pre = st.prefill(prompt)
    pknee = prefill_knee(st)
    summary = {
        "prefill_ms": pre["step_s"] * 1e3,
        "prefill_tokens_per_s": prompt / pre["step_s"],
        "prefill_knee": pknee,
        "prefill_bound": "compute" if pre["compute_s"] >= pre["memory_s"] else "memory",
        "prompt": prompt,
        "knee": knee,
        "knee_no_context": knee0,
        "batch": batch,
        "step_ms": float(at["step_s"][0] * 1e3),
        "tokens_per_s": float(at["tokens_per_s"][0]),
        "bound": "compute" if bool(at["compute_bound"][0]) else "memory",
        "speedup_vs_batch1": float(at["tokens_per_s"][0] / one["tokens_per_s"][0]),
        "weight_gb": server.model.weight_bytes(server.dtype) / 1e9,
        "table": "\n".join(
            [
                f"{server.model.name} ({server.dtype}) on {server.gpu.name}, {context} cached "
                f"tokens per row",
                f"batch {batch}: step {at['step_s'][0] * 1e3:.2f} ms "
                f"({'compute' if at['compute_bound'][0] else 'memory'}-bound), "
                f"{at['tokens_per_s'][0]:,.0f} tokens/s = "
                f"{at['tokens_per_s'][0] / one['tokens_per_s'][0]:.1f}x batch 1",
                f"knee (first compute-bound batch): "
                f"{knee if knee is not None else 'none: KV reads keep it memory-bound'}; with no "
                f"context: {knee0}",
                f"prefill of {prompt} tokens: {pre['step_s'] * 1e3:.1f} ms "
                f"({'compute' if pre['compute_s'] >= pre['memory_s'] else 'memory'}-bound), "
                f"{prompt / pre['step_s']:,.0f} prompt tokens/s; compute-bound from {pknee} tokens",
            ]
        ),
    }
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    ax1.plot(b, t["step_s"] * 1e3, color="k", lw=2, label="step time")
    ax1.plot(b, t["memory_s"] * 1e3, color="tab:blue", ls="--", label="memory: weights + KV")
    ax1.plot(b, t["compute_s"] * 1e3, color="tab:orange", ls="--", label="compute: FLOPs")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("decode batch size")
    ax1.set_ylabel("ms per step")

    ax2.plot(b, t["tokens_per_s"], color="tab:purple", lw=2)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("decode batch size")
    ax2.set_ylabel("tokens per second")

    for ax in (ax1, ax2):
        if knee is not None:
            ax.axvline(knee, color="tab:red", ls=":", lw=1.5, label=f"knee: {knee}")
        ax.axvline(batch, color="0.3", lw=1, alpha=0.6)
    ax1.plot([batch], at["step_s"] * 1e3, "o", color="tab:red")
    ax2.plot([batch], at["tokens_per_s"], "o", color="tab:red")
    ax1.legend(fontsize=8)
    # The other phase: one prompt of n tokens in one pass. Its arithmetic grows with n from the
    # start, its memory traffic (the weights, once) does not: compute-bound almost at once.
    n = np.unique(np.round(np.logspace(0, np.log10(max(8192, 2 * prompt)), 80)).astype(int))
    sides = [st.prefill(int(k)) for k in n]
    ax3.plot(n, [p_["step_s"] * 1e3 for p_ in sides], color="k", lw=2, label="prefill step")
    ax3.plot(
        n,
        [p_["memory_s"] * 1e3 for p_ in sides],
        color="tab:blue",
        ls="--",
        label="memory: weights",
    )
    ax3.plot(
        n,
        [p_["compute_s"] * 1e3 for p_ in sides],
        color="tab:orange",
        ls="--",
        label="compute: FLOPs",
    )
    if pknee is not None:
        ax3.axvline(pknee, color="tab:red", ls=":", lw=1.5, label=f"compute-bound from {pknee}")
    ax3.plot([prompt], [pre["step_s"] * 1e3], "o", color="tab:red")
    ax3.set_xscale("log", base=2)
    ax3.set_yscale("log")
    ax3.set_xlabel("prompt tokens in one prefill")
    ax3.set_ylabel("ms per prefill")
    ax3.set_title("prefill: compute-bound from the start", fontsize=10)
    ax3.legend(fontsize=7, loc="upper left")
    ax1.set_title("decode step: the slower side wins", fontsize=10)
    ax2.set_title("decode tokens/s: grows, then flattens", fontsize=10)
    fig.suptitle(
        f"roofline: {server.model.name} ({server.dtype}) on {server.gpu.name}, {context} cached "
        f"tokens per row"
    )
    return summary, fig
