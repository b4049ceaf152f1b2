"""Notebook 4: dollars per request and per million tokens."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...core.arrivals import Constant
from ...core.errors import check_int_at_least
from ...core.lengths import Fixed
from ...core.metrics import format_table
from ...core.policies import Static
from ...core.workload import make_workload
from ...machine.cost import implied_price_per_hour
from ._common import CLAIM, LESSON_GPU, LESSON_MODEL, lesson_server, run_each

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)


def cost(
    gpu: str = LESSON_GPU,
    price_per_hour: float | None = None,
    max_batch: int = 32,
    model: str = LESSON_MODEL,
    requests: int = 256,
    prompt_tokens: int = 256,
    output_tokens: int = 128,
) -> tuple[dict, Figure]:
    """Dollars per request and per million tokens against batch size, on a GPU kept busy.

    A backlog of ``requests`` identical requests is served in static batches of each size
    in 1, 2, 4, ..., 128; a rented GPU is paid by the hour, so $/request = $/hour /
    (3600 x requests per second). Also checks the seed material's claim ("10 RPS =
    $0.10/request ... 100 RPS = $0.01/request"): what hourly price do those figures imply?
    """
    check_int_at_least("max_batch", max_batch, 1)
    check_int_at_least("requests", requests, 1)
    server = lesson_server(gpu, model, price_per_hour)
    price = server.price
    wl = make_workload(
        Constant(1000.0), Fixed(prompt_tokens), Fixed(output_tokens), n=requests, seed=0
    )
    batches = sorted(set(b for b in BATCHES if b <= max(max_batch, 1)) | {1, max_batch})
    _, rows = run_each(wl, {f"batch {b}": Static(b) for b in batches}, server, price=price)
    taxi, chosen = rows["batch 1"], rows[f"batch {max_batch}"]
    claim_price = implied_price_per_hour(CLAIM["taxi_rps"], CLAIM["taxi_per_request"])
    claim_price_batch = implied_price_per_hour(CLAIM["batch_rps"], CLAIM["batch_per_request"])
    ratio = taxi["cost_per_request"] / chosen["cost_per_request"]
    keys = [
        "request_throughput",
        "output_throughput",
        "mean_batch_size",
        "cost_per_request",
        "cost_per_1m_tokens",
    ]
    summary = {
        "batches": rows,
        "table": format_table(rows, keys),
        "price_per_hour": price,
        "saving": ratio,
        "cost_per_request": chosen["cost_per_request"],
        "cost_per_1m_tokens": chosen["cost_per_1m_tokens"],
        "claim_implied_price": claim_price,
        "claim_implied_price_batch": claim_price_batch,
        "claim_ratio": CLAIM["taxi_per_request"] / CLAIM["batch_per_request"],
        "notes": [
            f"{server.describe()}",
            f"batch {max_batch} is {ratio:.1f}x cheaper per request than batch 1 on this GPU "
            f"(${chosen['cost_per_request'] * 1000:.3f} vs ${taxi['cost_per_request'] * 1000:.3f} "
            f"per 1,000 requests)",
            f"the claim '10 RPS = $0.10/request' implies 10 x 3600 x $0.10 = ${claim_price:,.0f} "
            f"per GPU-hour; this GPU is assumed to cost ${price:.2f}",
        ],
    }

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3, width_ratios=[1.2, 1.2, 1])
    b = np.array(batches)
    per_req = np.array([rows[f"batch {k}"]["cost_per_request"] for k in batches])
    per_tok = np.array([rows[f"batch {k}"]["cost_per_1m_tokens"] for k in batches])
    ax1.plot(b, per_req * 1000, "o-", color="tab:blue")
    ax1.plot([max_batch], [chosen["cost_per_request"] * 1000], "o", color="tab:red", ms=10)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("batch size")
    ax1.set_ylabel("\\$ per 1,000 requests")
    ax1.set_title(f"\\$ per request at \\${price:.2f}/hour")
    ax2.plot(b, per_tok, "s-", color="tab:green")
    ax2.plot([max_batch], [chosen["cost_per_1m_tokens"]], "s", color="tab:red", ms=10)
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.set_xlabel("batch size")
    ax2.set_ylabel("\\$ per 1M output tokens")
    ax2.set_title(f"{max_batch} vs 1: {ratio:.1f}x cheaper")
    ax3.bar(
        ["claim\n(10 RPS at \\$0.10)", f"{server.gpu.name}\n(assumed)"],
        [claim_price, price],
        color=["tab:red", "tab:blue"],
    )
    ax3.set_yscale("log")
    ax3.set_ylabel("\\$ per GPU-hour")
    ax3.set_title("the price the claim implies")
    for x, v in enumerate([claim_price, price]):
        ax3.text(
            x,
            v,
            f"\\${v:,.2f}" if v < 100 else f"\\${v:,.0f}",
            ha="center",
            va="bottom",
            fontsize=9,
        )
    fig.suptitle(
        f"{server.model.name} on {server.gpu.name}: a backlog of {requests} requests, "
        f"{prompt_tokens} tokens in, {output_tokens} out"
    )
    return summary, fig
