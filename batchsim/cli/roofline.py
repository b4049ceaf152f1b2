"""``python -m batchsim roofline``: why batching works, as a table and a plot.

For one GPU and one model, the time of a decode step for batch sizes 1, 2, 4 ... 512:
while the step is memory-bound (reading the weights dominates), adding rows is
nearly free and tokens/s rise almost in proportion; past the *knee* the step is
compute-bound and tokens/s flatten. The knee is printed for several context
lengths, because every row's KV cache adds memory traffic and pushes it out.

    python -m batchsim roofline --gpu A100-80GB --model gpt2
    python -m batchsim roofline --gpu H100-SXM --model llama-3-8b --context 2048
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import ConfigError, check_at_most, check_int_at_least, check_nonneg
from ..core.files import Staging, check_out_dir, dumps
from ..machine.catalog import DEFAULT_CATALOG, load_catalog
from ..machine.memory import DEFAULT_MEM_UTIL
from ..machine.roofline import (
    DEFAULT_COMPUTE_EFF,
    DEFAULT_MEMORY_EFF,
    DEFAULT_OVERHEAD,
    bytes_label,
    decode_table,
    knee_batch,
)
from ..machine.server import DEFAULT_GPU, DEFAULT_MODEL, Server

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpu",
        default=DEFAULT_GPU,
        help=f"one of {', '.join(DEFAULT_CATALOG.gpus)} (default {DEFAULT_GPU})",
    )
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"one of {', '.join(DEFAULT_CATALOG.models)} (default {DEFAULT_MODEL})",
    )
    p.add_argument("--dtype", default=None, help="fp16 (default on GPUs), bf16 or fp32")
    p.add_argument("--catalog", default=None, help="JSON or TOML file adding GPUs and models")
    p.add_argument(
        "--context",
        type=int,
        default=0,
        help="cached tokens per row for the table (default 0: weights only)",
    )
    p.add_argument(
        "--max-batch",
        type=int,
        default=512,
        help="largest batch in the table, a power of two (default 512)",
    )
    p.add_argument(
        "--prompt", type=int, default=512, help="prompt length for the prefill line (default 512)"
    )
    p.add_argument(
        "--compute-eff",
        type=float,
        default=DEFAULT_COMPUTE_EFF,
        help=f"share of peak FLOP/s achieved (default {DEFAULT_COMPUTE_EFF})",
    )
    p.add_argument(
        "--memory-eff",
        type=float,
        default=DEFAULT_MEMORY_EFF,
        help=f"share of peak bandwidth achieved (default {DEFAULT_MEMORY_EFF})",
    )
    p.add_argument(
        "--step-overhead",
        type=float,
        default=DEFAULT_OVERHEAD,
        help=f"fixed seconds per step (default {DEFAULT_OVERHEAD})",
    )
    p.add_argument(
        "--mem-util",
        type=float,
        default=DEFAULT_MEM_UTIL,
        help=f"share of GPU memory for weights + KV (default {DEFAULT_MEM_UTIL})",
    )
    p.add_argument(
        "--gpu-price",
        type=float,
        default=None,
        help="dollars per GPU-hour (default: the catalog's assumption)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {config, runs, notes} instead of a table",
    )
    p.add_argument("--out", default=None, help="folder for the plot (default out/roofline)")
    p.add_argument("--no-plots", action="store_true", help="skip the plot")


def _knee_contexts(context: int, max_context: int) -> list[int]:
    picks = {0, 512, 2048, max_context, context}
    return sorted(c for c in picks if 0 <= c <= max_context)


def run(args: argparse.Namespace) -> int:
    check_int_at_least("max-batch", args.max_batch, 1)
    check_at_most("max-batch", args.max_batch, 2**20, "rows")
    check_nonneg("context", args.context)
    check_int_at_least("prompt", args.prompt, 1)
    out = Path(args.out) if args.out else Path("out") / "roofline"
    if not args.no_plots:
        check_out_dir(out, "out")
    catalog = load_catalog(args.catalog)
    server = Server.named(
        args.gpu,
        args.model,
        catalog,
        args.dtype,
        mem_util=args.mem_util,
        compute_eff=args.compute_eff,
        memory_eff=args.memory_eff,
        overhead=args.step_overhead,
        price_per_hour=args.gpu_price,
    )
    model, gpu, st = server.model, server.gpu, server.step_time
    if args.context > model.max_context:
        raise ConfigError(
            f"context must be <= {model.name}'s {model.max_context} tokens, got {args.context}"
        )
    if args.prompt > model.max_context:
        raise ConfigError(
            f"prompt must be <= {model.name}'s {model.max_context} tokens, got {args.prompt}"
        )
    batches = [1 << i for i in range(args.max_batch.bit_length()) if (1 << i) <= args.max_batch]
    rows = decode_table(st, batches, args.context)
    per_row = max(args.context, 1)
    mem_batch = server.kv.max_batch(per_row)
    knees = {c: knee_batch(st, c) for c in _knee_contexts(args.context, model.max_context)}
    pre = st.prefill(args.prompt)
    if args.json:
        _print_json(args, server, rows, knees, mem_batch, pre)
    else:
        _print_text(args, server, rows, knees, mem_batch, pre)
    if not args.no_plots:
        from ..teach.plots import roofline_figure, save

        fig = roofline_figure(
            st, context=args.context, max_batch_memory=mem_batch, max_batch=args.max_batch
        )
        with Staging(out) as staging:
            name = f"roofline_{gpu.name}_{model.name}.png"
            save(fig, staging.path(name))
            path = staging.commit()[0]
        if not args.json:
            print(f"\nfigure: {path}")
    return 0


def _print_json(
    args: argparse.Namespace,
    server: Server,
    rows: list[dict],
    knees: dict,
    mem_batch: int,
    pre: dict,
) -> None:
    # {config, runs, notes} as every command prints; the roofline's own keys stay beside them.
    print(
        dumps(
            {
                "config": {
                    "server": server.config(),
                    "context": args.context,
                    "prompt": args.prompt,
                },
                "runs": [{"label": f"batch {r['batch']}", **r} for r in rows],
                "notes": [
                    f"knee (decode turns compute-bound) at context {c}: "
                    + (f"batch {k}" if k is not None else "never")
                    for c, k in knees.items()
                ],
                "server": server.config(),
                "context": args.context,
                "rows": rows,
                "knee": {str(c): k for c, k in knees.items()},
                "max_batch_memory": mem_batch,
                "prefill": {"tokens": args.prompt, **pre},
            }
        )
    )


def _print_text(
    args: argparse.Namespace,
    server: Server,
    rows: list[dict],
    knees: dict,
    mem_batch: int,
    pre: dict,
) -> None:
    """The roofline as a student reads it: the GPU, the decode table by batch, the knees, a
    prefill."""
    model, gpu, st, price = server.model, server.gpu, server.step_time, server.price
    print(f"roofline: {model.name} ({server.dtype}) on {gpu.name}")
    print(
        f"  peak {gpu.peak_flops(server.dtype) / 1e12:g} TFLOP/s x {st.compute_eff:g}, bandwidth "
        f"{gpu.bandwidth_gbs:,.0f} GB/s x {st.memory_eff:g}, overhead {st.overhead * 1e3:g} ms per "
        f"step"
    )
    print(
        f"  weights {bytes_label(st.weight_bytes)}; KV cache {st.kv_bytes_per_token / 1024:,.0f} "
        f"KiB per token; KV budget {server.kv.describe()}"
    )
    print(
        f"  decode with {args.context} cached tokens per row; memory holds a batch of "
        f"{mem_batch:,} at that context\n"
    )
    head = ["batch", "step ms", "compute ms", "memory ms", "bound", "tokens/s", "$/1M tok"]
    body = []
    for r in rows:
        usd = price / 3600 / r["tokens_per_s"] * 1e6
        mark = "" if r["batch"] <= mem_batch else " (KV does not fit)"
        body.append(
            [
                str(r["batch"]),
                f"{r['step_ms']:.2f}",
                f"{r['compute_ms']:.2f}",
                f"{r['memory_ms']:.2f}",
                r["bound"],
                f"{r['tokens_per_s']:,.0f}",
                (f"{usd:.2f}" if usd >= 0.1 else f"{usd:.4f}") + mark,
            ]
        )
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    print("  ".join("-" * w for w in widths))
    for line in body:
        print("  ".join(c.rjust(w) for c, w in zip(line, widths)))
    print()
    for c, k in knees.items():
        verdict = (
            f"batch {k}"
            if k is not None
            else "never (each row's KV reads grow as fast as its FLOPs: memory-bound at any batch)"
        )
        if k is not None and k > server.kv.max_batch(max(c, 1)):
            verdict += (
                f", beyond the {server.kv.max_batch(max(c, 1)):,} rows memory holds at that context"
            )
        print(f"knee (decode turns compute-bound) at context {c:>6}: {verdict}")
    print(
        f"prefill of one {args.prompt}-token prompt: {pre['step_s'] * 1e3:.1f} ms, "
        f"{'compute' if pre['compute_bound'] else 'memory'}-bound (a prompt is a batch of tokens: "
        f"it needs no company to fill the GPU)"
    )
    print(
        f"dollars at ${price:.2f}/hour{'' if args.gpu_price is not None else ' (assumed, 2026)'}: "
        "$/1M tok above assumes every step is full and the GPU never idles"
    )
