"""Prefill and decode: the two phases of a request, and the long prompt that stalls everyone.

A request is served in two phases. *Prefill* computes the whole prompt in one pass
(thousands of tokens at once: compute-bound, like a big matrix product) and yields
the first token, so it sets the time to first token. *Decode* then produces one
token per pass (memory-bound: the weights are read for a single token per row), so
it sets the time per output token. In continuous batching both share the same
steps: a newcomer's prefill runs inside the step that also decodes everyone else's
next token. A long prompt prefilled whole makes that one step long, and every
running request's next token waits for it. Chunked prefill (vLLM, Sarathi) splits
the prompt over several steps of at most ``chunk_tokens`` prompt tokens: each step
is a little longer instead of one step being very long.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...core.errors import check_int_at_least, check_positive
from ...core.policies import Continuous
from ...core.workload import Workload
from ._common import LESSON_GPU, LESSON_MODEL, lesson_server, run_each

__all__ = ["prefill_stall", "prefill_knee"]


def prefill_knee(step_time, limit: int = 1 << 15) -> int | None:
    """The shortest prompt whose prefill is compute-bound (None if none up to ``limit``)."""
    n = 1
    while n <= limit:
        p = step_time.prefill(n)
        if p["compute_s"] >= p["memory_s"]:
            lo, hi = n // 2 + 1, n
            while lo < hi:  # the first compute-bound length between the last two powers of two
                mid = (lo + hi) // 2
                q = step_time.prefill(mid)
                lo, hi = (mid + 1, hi) if q["compute_s"] < q["memory_s"] else (lo, mid)
            return lo
        n *= 2
    return None


def prefill_stall(
    prompt_tokens: int = 8192,
    running: int = 32,
    chunk_tokens: int = 512,
    arrive: float = 1.0,
    output_tokens: int = 400,
    gpu: str = LESSON_GPU,
    model: str = LESSON_MODEL,
) -> tuple[dict, Figure]:
    """``running`` chat requests are decoding when one long prompt arrives: with and without chunks.

    At t = 0 ``running`` requests (128-token prompts, ``output_tokens`` each) start decoding
    under continuous batching. At ``arrive`` seconds one request with a ``prompt_tokens``-token
    prompt (a pasted document) joins. Without chunked prefill its whole prompt runs in one
    step, and that step is every running request's next token. With chunked prefill the
    prompt runs ``chunk_tokens`` at a time alongside the decodes. Returns, for both, the
    running requests' worst gap between two tokens and the long request's time to first token.
    """
    check_int_at_least("prompt_tokens", prompt_tokens, 1)
    check_int_at_least("running", running, 1)
    check_int_at_least("chunk_tokens", chunk_tokens, 1)
    check_positive("arrive", arrive)
    check_int_at_least("output_tokens", output_tokens, 2)
    server = lesson_server(gpu, model)
    n = running + 1
    arrivals = np.zeros(n)
    arrivals[-1] = arrive
    prompts = np.full(n, 128)
    prompts[-1] = prompt_tokens
    outputs = np.full(n, output_tokens)
    outputs[-1] = 32
    wl = Workload.from_arrays(arrivals, prompts, outputs)
    budget = max(prompt_tokens, 128 * running)
    policies = {
        "whole prompt": Continuous(max_seqs=n, max_batched_tokens=budget, chunked_prefill=False),
        f"chunks of {chunk_tokens}": Continuous(
            max_seqs=n, max_batched_tokens=chunk_tokens, chunked_prefill=True
        ),
    }
    results, rows = run_each(wl, policies, server)
    decode_ms = float(
        server.step_time.decode(np.array([running]), 128 + output_tokens / 2)["step_s"][0] * 1e3
    )
    whole_ms = server.step_time.prefill(prompt_tokens)["step_s"] * 1e3
    knee = prefill_knee(server.step_time)
    out: dict[str, dict] = {}
    for label, res in results.items():
        r = res.records
        gap = float(np.nanmax(r.itl_max[:running]))
        out[label] = {
            "worst_gap_ms": gap * 1e3,
            "long_ttft_ms": float(r.first_token[-1] - r.arrival[-1]) * 1e3,
            "stall_steps": int(
                (
                    (res.records.steps["prompt_tokens"] > 0)
                    & (res.records.steps["start"] >= arrive - 1e-9)
                ).sum()
            ),
        }
        rows[label].update(out[label])
    lines = [
        "mode            worst gap ms  running TPOT ms  long prompt's TTFT ms  steps with its "
        "prefill"
    ]
    for label, o in out.items():
        lines.append(
            f"{label:15s} {o['worst_gap_ms']:12.0f} {rows[label]['mean_tpot'] * 1e3:16.1f} "
            f"{o['long_ttft_ms']:22.0f} {o['stall_steps']:23d}"
        )
    whole, chunked = out["whole prompt"], out[f"chunks of {chunk_tokens}"]
    summary = {
        "modes": out,
        "rows": rows,
        "decode_ms": decode_ms,
        "whole_prefill_ms": whole_ms,
        "prefill_knee": knee,
        "table": "\n".join(lines),
        "notes": [
            f"server: {server.describe()}",
            f"a decode step of {running} rows takes about {decode_ms:.1f} ms (memory-bound); a "
            f"{prompt_tokens:,}-token prefill alone takes {whole_ms:,.0f} ms (compute-bound: any "
            f"prompt from {knee} tokens is)",
            f"whole prompt: every running request waits {whole['worst_gap_ms']:,.0f} ms for one "
            f"token; in chunks of {chunk_tokens} the worst gap is {chunked['worst_gap_ms']:,.0f} "
            f"ms, and the long prompt's first token comes after {chunked['long_ttft_ms']:,.0f} ms "
            f"instead of {whole['long_ttft_ms']:,.0f} ms",
        ],
    }

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1.6, 1])
    colors = ["tab:red", "tab:green"]
    lo, hi = (
        arrive - 0.15,
        arrive + max(whole["long_ttft_ms"], chunked["long_ttft_ms"]) / 1e3 + 0.15,
    )
    for (label, res), c in zip(results.items(), colors):
        st = res.records.steps
        reps = st["repeat"]
        # A logged row may stand for k repeated steps (its duration is their sum): unroll it.
        start = np.concatenate(
            [s + np.arange(k) * d / k for s, d, k in zip(st["start"], st["duration"], reps)]
        )
        dur = np.repeat(st["duration"] / reps, reps)
        keep = (start + dur >= lo) & (start <= hi)
        ax1.step(
            np.append(start[keep], start[keep][-1] + dur[keep][-1]) if keep.any() else [],
            np.append(dur[keep], dur[keep][-1]) * 1e3 if keep.any() else [],
            where="post",
            color=c,
            lw=1.8,
            label=f"{label}: worst gap {out[label]['worst_gap_ms']:,.0f} ms",
        )
    ax1.axvline(arrive, color="0.4", ls=":", lw=1)
    ax1.annotate(
        f"{prompt_tokens:,}-token prompt arrives",
        (arrive, 0.97),
        xycoords=("data", "axes fraction"),
        fontsize=8,
        ha="left",
        va="top",
        xytext=(4, 0),
        textcoords="offset points",
    )
    ax1.set_yscale("log")
    ax1.set_xlim(lo, hi)
    ax1.set_xlabel("time (s)")
    ax1.set_ylabel("length of each step = gap between two tokens (ms)")
    ax1.set_title(f"{running} requests decoding: each step is everyone's next token", fontsize=10)
    ax1.legend(fontsize=8, loc="center right")
    ax1.grid(alpha=0.3, which="both")
    labels = list(out)
    x = np.arange(len(labels))
    ax2.bar(
        x - 0.2,
        [out[k]["worst_gap_ms"] for k in labels],
        width=0.4,
        color=colors,
        label="worst gap, running",
    )
    ax2.bar(
        x + 0.2,
        [out[k]["long_ttft_ms"] for k in labels],
        width=0.4,
        color=colors,
        alpha=0.35,
        hatch="//",
        label="TTFT of the long prompt",
    )
    for xi, k in zip(x, labels):
        ax2.annotate(
            f"{out[k]['worst_gap_ms']:,.0f}",
            (xi - 0.2, out[k]["worst_gap_ms"]),
            ha="center",
            va="bottom",
            fontsize=8,
        )
        ax2.annotate(
            f"{out[k]['long_ttft_ms']:,.0f}",
            (xi + 0.2, out[k]["long_ttft_ms"]),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax2.set_xticks(x, labels)
    ax2.set_ylabel("ms")
    ax2.set_ylim(0, max(max(o["worst_gap_ms"], o["long_ttft_ms"]) for o in out.values()) * 1.2)
    ax2.set_title("the stall, and what chunking costs the newcomer", fontsize=10)
    ax2.legend(fontsize=8, loc="upper right")
    fig.suptitle(
        f"prefill vs decode on {server.model.name}, {server.gpu.name}: one long prompt among "
        f"{running} chats"
    )
    return summary, fig
