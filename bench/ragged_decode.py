"""Ragged decode on the block pool: does a pass cost its rows' real context, or the longest row's?

A padded batch (taxi, static, dynamic) left-pads its prompts to the longest one. In a
rectangle every row then reads the longest context, padding included; on realrun's block
pool the padding was a throwaway row, dropped after the prefill, so each row holds and reads
only its own prompt and tokens. batchsim's pass plan "paged" prices the pool that way
(``Step.kv_padding`` is left out of what the decode reads). This script measures it:

    python bench/ragged_decode.py [--model gpt2-6l] [--rows 16] [--short 16] [--long 496] \
        [--rounds 12]

One decode pass of ``rows`` rows, timed in three shapes, the shapes interleaved round by round
(so the machine's drift reaches all three alike): half the rows at ``short`` and half at
``long`` tokens (ragged), every row at their mean, every row at ``long`` (what a rectangle
reads). It prints each shape's median pass with its p10-p90 over the rounds, and where the
ragged pass sits between the mean's price (0 %) and the longest's (100 %).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from batchsim import Request, Workload
from batchsim.core.step import Step
from realrun.engine.engine import Engine
from realrun.engine.model import load_model

WARMUP = 2  # a pass over freshly filled rows runs cold: not kept (as the profiler does)


def yardstick() -> float:
    t = time.perf_counter()
    for _ in range(10_000_000):
        pass
    return time.perf_counter() - t


def _median_pass(engine: Engine, ids: list[int], contexts: list[int], passes: int) -> float:
    engine.fill_rows(ids, contexts)
    engine.pass_log.clear()
    engine.execute(
        Step(
            decode=tuple(ids),
            kv_read=sum(contexts),
            decode_width=max(contexts),
            repeat=passes + WARMUP,
        )
    )
    secs = [x for _, x in engine.pass_log][WARMUP:]
    engine.release(ids)
    return float(np.median(secs))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2-6l")
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--short", type=int, default=16, help="the short rows' context (default 16)")
    p.add_argument("--long", type=int, default=496, help="the long rows' context (default 496)")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument(
        "--passes", type=int, default=6, help="passes timed per shape and round (default 6)"
    )
    args = p.parse_args(argv)
    for name in ("rows", "short", "long", "rounds", "passes"):
        if getattr(args, name) < 1:
            print(
                f"ragged_decode: error: --{name} must be at least 1, got {getattr(args, name)}",
                file=sys.stderr,
            )
            return 2
    if args.rows < 2 or args.short >= args.long:
        print(
            f"ragged_decode: error: needs --rows >= 2 and --short < --long, got {args.rows}, "
            f"{args.short}, {args.long}",
            file=sys.stderr,
        )
        return 2
    host = yardstick()
    lm = load_model(args.model, device="cpu", threads=1)
    engine = Engine(lm)
    if args.long + args.passes + WARMUP > lm.n_positions:
        print(
            f"ragged_decode: error: --long {args.long} leaves no room for the passes in "
            f"{lm.n_positions} positions",
            file=sys.stderr,
        )
        return 2
    n, half = args.rows, args.rows // 2
    mean = (half * args.short + (n - half) * args.long) // n
    shapes = {
        f"ragged ({half} at {args.short}, {n - half} at {args.long})": [args.short] * half
        + [args.long] * (n - half),
        f"every row at the mean ({mean})": [mean] * n,
        f"every row at the longest ({args.long})": [args.long] * n,
    }
    ids = list(range(n))
    room = args.long + args.passes + WARMUP
    engine.start(Workload(tuple(Request(i, 0.0, room, 1 << 30) for i in ids), "ragged decode"))
    print(f"model: {lm.describe()}; KV {engine.kv_note}")
    print(
        f"host yardstick (10M-iteration Python loop) {host:.2f} s; load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    got: dict[str, list[float]] = {k: [] for k in shapes}
    for _ in range(args.rounds):
        for k, ctx in shapes.items():
            got[k].append(_median_pass(engine, ids, ctx, args.passes))
    for k, v in got.items():
        ms = np.array(v) * 1e3
        print(
            f"{k:<36} {np.median(ms):8.2f} ms  (p10 {np.percentile(ms, 10):.2f}, p90 "
            f"{np.percentile(ms, 90):.2f}; {args.rounds} rounds)"
        )
    rag, at_mean, at_long = (float(np.median(v)) for v in got.values())
    where = (rag - at_mean) / (at_long - at_mean)
    print(
        f"the ragged pass sits {where:.0%} of the way from the mean's price (0 %) to the longest's "
        f"(100 %): "
        + (
            "it reads its rows' own context, as the paged plan prices it"
            if abs(where) < 0.25
            else "it does not cost what the paged plan prices"
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
