"""Notebook 3: the KV cache and the memory wall."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...core.arrivals import Constant
from ...core.errors import ConfigError, check_int_at_least, check_positive
from ...core.lengths import Fixed
from ...core.metrics import format_table
from ...core.policies import Continuous, Static
from ...core.workload import make_workload
from ..figures import POLICY_COLORS, draw_step_series
from ._common import LESSON_GPU, lesson_server, run_each


def memory_wall(
    kv_budget_gb: float = 8.0,
    prompt_tokens: int = 1024,
    output_tokens: int = 512,
    max_batch: int = 32,
    requests: int = 96,
    gpu: str = LESSON_GPU,
    model: str = "llama-2-7b",
    block_size: int = 16,
) -> tuple[dict, Figure]:
    """How many requests fit in the KV cache: the memory wall, and preemption in continuous
    batching.

    A burst of ``requests`` identical requests (``prompt_tokens`` in, ``output_tokens``
    out) arrives almost at once, as in an offline job. The KV cache gets ``kv_budget_gb``
    gigabytes (at the model's bytes per token). A padded batch reserves prompt + output
    for every row when it forms, so at most budget / (prompt + output) rows ride. A
    continuous batch allocates blocks as tokens are produced: it admits more rows, and
    when the blocks run out it preempts the newest request, which later recomputes.
    """
    check_positive("kv_budget_gb", kv_budget_gb)
    check_int_at_least("prompt_tokens", prompt_tokens, 1)
    check_int_at_least("output_tokens", output_tokens, 1)
    check_int_at_least("max_batch", max_batch, 1)
    check_int_at_least("requests", requests, 1)
    server = lesson_server(gpu, model, kv_bytes=kv_budget_gb * 1e9)
    gb = f"{kv_budget_gb:.3g}"  # a log slider gives 31.6227766; a title says 31.6
    budget = server.kv.tokens
    context = prompt_tokens + output_tokens
    if context > budget:
        raise ConfigError(
            f"kv_budget_gb must hold one request of {context} tokens "
            f"({context * server.kv.bytes_per_token / 1e9:.2f} GB), got {kv_budget_gb!r}"
        )
    wl = make_workload(
        Constant(1000.0), Fixed(prompt_tokens), Fixed(output_tokens), n=requests, seed=0
    )
    policies = {
        "static": Static(max_batch),
        "continuous": Continuous(
            max_seqs=max_batch, max_batched_tokens=max(2048, prompt_tokens), block_size=block_size
        ),
    }
    results, rows = run_each(wl, policies, server)
    fits = budget // context
    keys = [
        "completed",
        "output_throughput",
        "mean_e2e",
        "p99_e2e",
        "mean_batch_size",
        "max_batch_size",
        "kv_peak_tokens",
        "preemptions",
    ]
    summary = {
        "policies": rows,
        "table": format_table(rows, keys),
        "kv_budget_tokens": budget,
        "kv_bytes_per_token": server.kv.bytes_per_token,
        "rows_that_fit": int(fits),
        "memory_bound": fits < max_batch,
        "notes": [
            f"{server.model.name}: {server.kv.bytes_per_token / 1024:.0f} KiB of KV per token; "
            f"{gb} GB holds {budget:,} tokens = {fits} requests of {context} tokens",
            f"you asked for {max_batch} rows: "
            + (
                f"memory caps a padded batch at {fits}"
                if fits < max_batch
                else "memory is not the limit"
            ),
        ],
    }

    fig = Figure(figsize=(11, 7.2), layout="constrained")
    axes = fig.subplots(2, 2)
    ax = axes[0, 0]
    ctx = np.linspace(128, max(8192, 2 * context), 200)
    ax.plot(ctx, budget / ctx, color="k", lw=1.5, label=f"rows that fit in {gb} GB")
    ax.axhline(
        max_batch, color="tab:red", ls="--", lw=1, label=f"batch you asked for ({max_batch})"
    )
    ax.plot([context], [fits], "o", color="tab:red", ms=8)
    ax.fill_between(ctx, budget / ctx, max(max_batch, fits) * 4, color="tab:red", alpha=0.08)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_ylim(0.5, max(max_batch, fits) * 4)
    ax.set_xlabel("context per request (prompt + output tokens)")
    ax.set_ylabel("requests in the batch")
    ax.set_title("the memory wall: above the line does not fit")
    ax.legend(fontsize=8)
    ax = axes[0, 1]
    for name, res in results.items():
        draw_step_series(ax, res.records, "kv_in_use", name, POLICY_COLORS[name])
    ax.axhline(budget, color="k", ls="--", lw=1, label="budget")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("KV tokens in use")
    ax.set_title("KV cache in use (padded batches reserve up front)")
    ax.legend(fontsize=8)
    ax = axes[1, 0]
    for name, res in results.items():
        draw_step_series(ax, res.records, "batch_size", name, POLICY_COLORS[name])
    ax.axhline(max_batch, color="tab:red", ls="--", lw=1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("rows in the step")
    ax.set_title("batch size over time")
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    names = list(rows)
    x = np.arange(len(names))
    ax.bar(
        x - 0.2,
        [rows[n]["output_throughput"] for n in names],
        width=0.4,
        color=[POLICY_COLORS[n] for n in names],
    )
    ax.set_ylabel("output tokens/s")
    ax2 = ax.twinx()
    pre = [rows[n]["preemptions"] for n in names]
    ax2.bar(x + 0.2, pre, width=0.4, color="0.6")
    ax2.set_ylim(0, max(1, max(pre)) * 1.2)  # from zero, even when nobody was preempted
    ax2.set_ylabel("preemptions (grey)")
    ax.set_xticks(x, names)
    ax.set_title("throughput (colour) and preemptions (grey)")
    fig.suptitle(
        f"{server.model.name}: {gb} GB of KV cache, {context}-token requests, batch {max_batch}"
    )
    return summary, fig
