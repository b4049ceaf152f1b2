"""The roofline picture: step time and tokens/s against decode batch size, with the knee and the
memory wall."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .canvas import COLORS, new_figure

__all__ = ["roofline_figure"]


# --- the roofline ---------------------------------------------------------------------------------


def roofline_figure(
    model,
    batches=None,
    context: float = 0.0,
    max_batch_memory: int | None = None,
    title: str = "",
    max_batch: int = 512,
) -> Figure:
    """Decode step time (compute and memory sides) and tokens/s against batch size, with the
    knee."""
    from ...machine.roofline import knee_batch

    if batches is None:
        batches = np.unique(np.round(np.geomspace(1, max(2, max_batch), 120)).astype(int))
    b = np.asarray(batches)
    t = model.decode(b, context)
    knee = knee_batch(model, context)
    fig = new_figure(10, 4.2)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(
        b,
        t["step_s"] * 1e3,
        color="k",
        lw=2,
        label=f"step time (max + {model.overhead * 1e3:g} ms overhead)",
    )
    ax1.plot(b, t["memory_s"] * 1e3, color=COLORS[1], ls="--", label="memory side (weights + KV)")
    ax1.plot(b, t["compute_s"] * 1e3, color=COLORS[0], ls="--", label="compute side (FLOPs)")
    ax2.plot(b, t["tokens_per_s"], color=COLORS[2], lw=2)
    memory_full = max_batch_memory is not None and max_batch_memory <= b.max()
    ticks = [
        x
        for x in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
        if b.min() <= x <= b.max()
    ]
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(x) for x in ticks])
        ax.set_xlabel("decode batch size (rows)")
        ax.grid(alpha=0.3, which="both")
        if knee is not None and knee <= b.max():
            ax.axvline(knee, color=COLORS[3], ls=":", lw=1.5, label=f"knee: batch {knee}")
        if memory_full:
            ax.axvspan(
                max(max_batch_memory, 1),
                b.max(),
                color="0.85",
                alpha=0.6,
                label="KV cache does not fit",
            )
    ax1.set_yscale("log")
    ax1.set_ylabel("ms per step")
    ax1.legend(fontsize=8, loc="upper left")
    ax2.set_ylabel("output tokens/s")
    knee_txt = f"knee at batch {knee}" if knee is not None else "never compute-bound"
    ax1.set_title(f"step time: flat while memory-bound ({knee_txt})", fontsize=9)
    mid = len(b) // 2
    gain = t["tokens_per_s"][-1] / t["tokens_per_s"][mid]
    ax2.set_title(
        f"tokens/s: batch {b[mid]} -> {b[-1]} (x{b[-1] / b[mid]:.0f} rows) buys x{gain:.1f}",
        fontsize=9,
    )
    if (knee is not None and knee <= b.max()) or memory_full:
        ax2.legend(fontsize=8, loc="upper left")
    fig.suptitle(
        title
        or f"roofline: {model.model.name} ({model.dtype}) on {model.gpu.name}, context {context:g} "
        f"tokens",
        fontsize=10,
    )
    return fig
