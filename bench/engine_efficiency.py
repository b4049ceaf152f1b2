"""Engine efficiency: useful output tokens per second, our engine against two baselines.

The workload (from the issue): 64 requests, prompts uniform 8..64 tokens, outputs uniform
8..128, all arriving at once, on tiny-gpt2 on the CPU. Useful tokens are the ones each
request asked for (a padded batch's extra rows do not count); tokens/s is over the time
from the first arrival to the last answer.

    ours-continuous   our engine driven by batchsim's Continuous policy (max_seqs 64), KV in
                      blocks of one pool
    ours-padded       the same with the KV in left-padded rows (the layout before the pool),
                      for the padding lesson
    ours-static16     our engine driven by Static(16): padded batches, for reference
    hf-generate       model.generate() on the same Static(16) batches
    hf-continuous     transformers' continuous batching, each request with its own max_new_tokens
    vllm              vLLM's AsyncLLM (when vLLM is installed: run this in .venv-vllm/), the 64
                      requests submitted at once, max_num_seqs 64, max_num_batched_tokens 4096,
                      block 32, eager (no compilation), prefix caching off

Targets: ours-continuous >= 2x hf-generate and >= 1.5x hf-continuous, and >= 1.0x vLLM. Each engine
runs --rounds times, interleaved so that a burst of load from elsewhere hits all of them; the
medians are compared. The machine's load average is printed: on a shared machine the absolute
figures move, the ratios less so.

    python bench/engine_efficiency.py [--rounds 3] [--threads N] [--json PATH]
        [--model tiny-gpt2|tiny-gpt2-50k|gpt2-random]
    .venv-vllm/bin/python bench/engine_efficiency.py      # the same, with vLLM alongside

vLLM binds one core to its model and keeps torch at one thread, so ours runs with one thread too
(--threads 1, the default here) for a like-for-like ratio. ``--json PATH`` writes the figures
(every round, the medians, the KV bytes of both layouts, the host's yardstick) for lesson 5,
which quotes them from ``course/data/engine-kv.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host import yardstick  # noqa: E402 - bench/ is the script's own folder

from batchsim import Continuous, Static, summarize
from batchsim.core.workload import Workload
from realrun.clock.runner import limits_for, run_real
from realrun.engine.engine import Engine
from realrun.engine.model import load_model
from realrun.reference.baselines import HFGenerateEngine, has_hf_continuous, run_hf_continuous
from realrun.reference.vllm.serve import run_vllm


def workload(seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    n = 64
    return Workload.from_arrays(
        np.zeros(n),
        rng.integers(8, 65, n),
        rng.integers(8, 129, n),
        "64 at once, prompts uniform 8..64, outputs uniform 8..128",
    )


def _engines(wl, lm, ours, padded, hfgen) -> tuple[dict, object]:
    """The runs to interleave, by name, and vLLM's server (None where it cannot start)."""
    runs = {
        "ours-continuous": lambda: run_real(
            wl, Continuous(max_seqs=64, max_batched_tokens=4096), ours
        ),
        "ours-padded": lambda: run_real(
            wl, Continuous(max_seqs=64, max_batched_tokens=4096), padded
        ),
        "ours-static16": lambda: run_real(wl, Static(16), ours),
        "hf-generate": lambda: run_real(wl, Static(16), hfgen),
    }
    if has_hf_continuous(lm):
        runs["hf-continuous"] = lambda: run_hf_continuous(
            wl, lm, max_seqs=64, max_batched_tokens=4096
        )[0]
    else:
        print("hf-continuous: not in this transformers; left out")
    server = _vllm(lm)
    if server is not None:
        runs["vllm"] = lambda: run_vllm(wl, server, limits_for(lm), lm.vocab_size, lm.tokenizer)
    return runs, server


def _rounds(runs: dict, wl, useful: int, rounds: int) -> tuple[dict[str, list[float]], dict]:
    """Every run once a round, in turn (the host's drift reaches them alike): tokens/s per round,
    and each run's last result."""
    tps: dict[str, list[float]] = {k: [] for k in runs}
    last: dict = {}
    for r in range(rounds):
        line = []
        for name, go in runs.items():
            t = time.perf_counter()
            res = go()
            s = summarize(res)
            assert s["completed"] == len(wl) and s["total_output_tokens"] == useful, (
                name,
                s["completed"],
            )
            tps[name].append(s["output_throughput"])
            line.append(
                f"{name} {s['output_throughput']:7.0f} tok/s ({time.perf_counter() - t:5.2f} s)"
            )
            last[name] = res
        print(f"round {r + 1}: " + " | ".join(line))
    return tps, last


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default="tiny-gpt2")
    p.add_argument(
        "--json",
        default=None,
        metavar="PATH",
        help="also write the figures to PATH (lesson 5's data)",
    )
    args = p.parse_args(argv)
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        print(
            f"engine_efficiency: error: --json: no folder "
            f"{os.path.dirname(os.path.abspath(args.json))!r}",
            file=sys.stderr,
        )
        return 2
    host_s = yardstick()
    lm = load_model(args.model, device="cpu", threads=args.threads)
    wl = workload()
    useful = int(wl.output_tokens.sum())
    print(f"model: {lm.describe()}")
    print(f"workload: {wl.description}; {useful} useful output tokens")
    load_before = os.getloadavg()
    print(
        f"load average before: {' '.join(f'{x:.2f}' for x in load_before)}; host yardstick "
        f"(10M-iteration Python loop) {host_s:.2f} s"
    )
    ours, padded, hfgen = Engine(lm), Engine(lm, kv="padded"), HFGenerateEngine(lm)
    print(f"ours: KV {ours.kv_note}")
    runs, server = _engines(wl, lm, ours, padded, hfgen)
    tps, last = _rounds(runs, wl, useful, args.rounds)
    outputs: dict[str, dict] = {}
    outputs["ours"] = {k: list(v) for k, v in ours.outputs().items()}
    outputs["ours-padded"] = {k: list(v) for k, v in padded.outputs().items()}
    _kv_bytes(last["ours-continuous"].meta, last["ours-padded"].meta)
    outputs["hf-generate"] = {k: list(v) for k, v in hfgen.outputs().items()}
    if "hf-continuous" in runs:
        _, outputs["hf-continuous"] = run_hf_continuous(
            wl, lm, max_seqs=64, max_batched_tokens=4096
        )
    if server is not None:
        outputs["vllm"] = dict(enumerate(last["vllm"].meta["outputs"]))
        server.close()
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    med = {k: statistics.median(v) for k, v in tps.items()}
    same = _report(med, tps, outputs, len(wl))
    if args.json:
        _write_figures(args, argv, lm, wl, useful, tps, med, same, last, (host_s, load_before))
    return 0


def _report(med: dict, tps: dict, outputs: dict, n: int) -> bool:
    """The table, the ratios against their targets, and whether the greedy tokens agree
    (returned)."""
    print()
    print(f"{'engine':18s} {'median tok/s':>12s}   rounds")
    for k, v in med.items():
        print(f"{k:18s} {v:12.0f}   {', '.join(f'{x:.0f}' for x in tps[k])}")
    r_gen = med["ours-continuous"] / med["hf-generate"]
    print()
    print(
        f"ours-continuous / hf-generate(static 16) = {r_gen:.2f}x   (target >= 2x: "
        f"{'met' if r_gen >= 2 else 'MISSED'})"
    )
    if "hf-continuous" in med:
        r_cont = med["ours-continuous"] / med["hf-continuous"]
        print(
            f"ours-continuous / hf-continuous          = {r_cont:.2f}x   (target >= 1.5x: "
            f"{'met' if r_cont >= 1.5 else 'MISSED'})"
        )
    if "vllm" in med:
        r_v = med["ours-continuous"] / med["vllm"]
        print(
            f"ours-continuous / vllm                   = {r_v:.2f}x   (target >= 1.0x: "
            f"{'met' if r_v >= 1.0 else 'MISSED'})"
        )
    print(
        f"ours-static16 / hf-generate (same batches, engine only) = "
        f"{med['ours-static16'] / med['hf-generate']:.2f}x"
    )
    print(
        f"ours paged / ours padded (the KV layout alone)            = "
        f"{med['ours-continuous'] / med['ours-padded']:.2f}x"
    )
    hf = [k for k in ("ours-padded", "hf-generate", "hf-continuous") if k in outputs]
    same = all(all(outputs["ours"][i] == outputs[k][i] for k in hf) for i in range(n))
    print(f"greedy tokens identical across ours and {', '.join(hf)}: {'yes' if same else 'NO'}")
    if "vllm" in outputs:
        agree = sum(outputs["ours"][i] == outputs["vllm"][i] for i in range(n))
        print(
            f"greedy tokens identical to vLLM's: {agree} of {n} requests (other kernels: near-ties "
            f"may break otherwise)"
        )
    return same


def _write_figures(
    args, argv, lm, wl, useful: int, tps: dict, med: dict, same: bool, last: dict, host: tuple
) -> None:
    """The run's figures as JSON at ``args.json``: what lesson 5 quotes
    (``course/data/engine-kv.json``)."""
    kv_keys = (
        "kv_layout",
        "kv_block_size",
        "kv_pool_blocks",
        "kv_pool_bytes",
        "kv_peak_blocks",
        "kv_peak_bytes_used",
        "kv_pool_regrown",
    )
    host_s, load_before = host
    figures = {
        "command": "python bench/engine_efficiency.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": lm.describe(),
        "workload": wl.description,
        "useful_tokens": useful,
        "rounds": args.rounds,
        "tokens_per_s": tps,
        "median_tokens_per_s": med,
        "greedy_identical": same,
        "paged": {k: last["ours-continuous"].meta.get(k) for k in kv_keys},
        "padded_peak_bytes": last["ours-padded"].meta.get("kv_peak_bytes_measured"),
        "host": {
            "cores": os.cpu_count(),
            "yardstick_s": round(host_s, 3),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    with open(args.json, "w") as f:
        json.dump(figures, f, indent=2)
        f.write("\n")
    print(f"wrote {args.json}")


def _kv_bytes(paged: dict, padded: dict) -> None:
    """The padding lesson: the same run's KV memory as blocks from one pool, against left-padded
    rows."""
    mib = 2**20
    if paged.get("kv_layout") != "paged":
        print("KV bytes: ours did not run paged here; no comparison")
        return
    print(
        f"KV bytes, paged: pool of {paged['kv_pool_blocks']} blocks x {paged['kv_block_size']} "
        f"tokens = {paged['kv_pool_bytes'] / mib:.1f} MiB reserved once; at most "
        f"{paged['kv_peak_blocks']} blocks held = {paged['kv_peak_bytes_used'] / mib:.1f} MiB; "
        f"grown mid-run {paged['kv_pool_regrown']} times"
    )
    print(
        f"KV bytes, padded rectangle: buffers peak {padded['kv_peak_bytes_measured'] / mib:.1f} "
        f"MiB ({padded['kv_peak_bytes_measured'] / max(1, paged['kv_peak_bytes_used']):.2f}x the "
        f"blocks held)"
    )


def _vllm(lm):
    """vLLM serving ``lm`` (saved to disk) with the continuous run's knobs, or None without vLLM."""
    from realrun.reference.vllm import has_vllm

    if not has_vllm():
        print("vllm: not installed here (run this with .venv-vllm/bin/python); left out")
        return None
    from realrun.reference.vllm import VLLMServer, knobs_for, save_model

    knobs = knobs_for(
        Continuous(max_seqs=64, max_batched_tokens=4096, block_size=32),
        save_model(lm.name),
        lm.n_positions,
    )
    server = VLLMServer(knobs, lm.kv_bytes_per_token)
    print(f"vllm: {server.describe()}")
    return server


if __name__ == "__main__":
    sys.exit(main())
