"""What realrun's commands share: the model, the engine, one measured run, and the lines a report
ends with.

``run`` and ``profile`` (``realrun.cli.run``), ``compare`` (``realrun.cli.compare`` and
``realrun.cli.compare_report``) and ``fleet`` (``realrun.cli.fleet``) all import from here, and
``realrun.cli.run`` dispatches to the others: kept apart, no module imports one that imports it.
"""

from __future__ import annotations

import argparse
import os
import sys

from batchsim.core.errors import ConfigError

from .run_setup import RunSetup, nothing_served, rejection_lines

__all__ = [
    "load",
    "wants_progress",
    "make_engine",
    "measure_fn",
    "memory_line",
    "kv_line",
    "load_line",
    "stopped_code",
    "all_rejected",
    "printable",
    "vllm_server",
]


def load(args: argparse.Namespace, notes: list[str] | None = None):
    """The model; what loading it had to decide (an EOS past the vocabulary, say) goes to
    ``notes``."""
    from ..engine.model import load_model

    lm = load_model(args.model, device=args.device, dtype=args.dtype, threads=args.threads)
    if notes is not None:
        notes.extend(n for n in lm.extra.get("notes", ()) if n not in notes)
    return lm


def wants_progress(args) -> bool:
    """--progress, or by default whether stderr is a terminal."""
    p = getattr(args, "progress", None)
    return sys.stderr.isatty() if p is None else bool(p)


def make_engine(name: str, lm, args, seed: int):
    """The step-by-step engine a measured run drives: ours or hf-generate."""
    from ..engine.engine import Engine
    from ..reference.baselines import HFGenerateEngine

    if name == "hf-generate":
        return HFGenerateEngine(lm, stop_on_eos=args.stop_on_eos, prompt_seed=seed)
    # vllm and hf-continuous run their own schedulers: never stand in for them quietly
    if name != "ours":
        raise ConfigError(
            f"engine {name} has no step-by-step engine to build here (only ours and hf-generate do)"
        )
    try:
        return Engine(
            lm, stop_on_eos=args.stop_on_eos, prompt_seed=seed, kv=getattr(args, "kv", "auto")
        )
    except ValueError as e:  # --kv paged where the model cannot run paged
        raise ConfigError(f"--kv: {e}") from None


def measure_fn(setup: RunSetup, engine, lm, args, server=None, workloads: dict | None = None):
    """``measure(label, policy)``: one measured run of a policy on the plan's engine."""
    from ..clock.runner import limits_for, run_real
    from ..reference.baselines import run_hf_continuous

    def measure(label, policy):
        workload = workloads[label] if workloads else setup.workload
        if setup.engine == "vllm":
            from ..reference.vllm.serve import run_vllm

            return run_vllm(
                workload,
                server,
                limits_for(lm, setup.kv),
                lm.vocab_size,
                lm.tokenizer,
                setup.seed,
                args.stop_on_eos,
                wants_progress(args),
                f": {lm.name} on {lm.device} ({lm.dtype})",
            )
        if setup.engine == "hf-continuous":
            p = policy
            return run_hf_continuous(
                workload,
                lm,
                max_seqs=p.max_seqs,
                max_batched_tokens=p.max_batched_tokens,
                block_size=p.block_size,
                kv_budget_tokens=setup.kv,
                stop_on_eos=args.stop_on_eos,
                prompt_seed=setup.seed,
                progress=wants_progress(args),
            )[0]
        # The trace and the engine's pass log let compare decompose the error (a run keeps them too:
        # a few records per step, small beside the model).
        return run_real(
            workload,
            policy,
            engine,
            kv_budget_tokens=setup.kv,
            progress=wants_progress(args),
            trace=True,
        )

    return measure


def memory_line(meta: dict) -> str:
    """The memory a run took, as one line."""
    if "peak_rss_bytes" in meta:
        parts = [f"peak RSS {meta['peak_rss_bytes'] / 2**20:.0f} MiB"]
    else:  # vLLM's engine core keeps its memory in a process of its own: not measured is not 0 MiB
        parts = [
            f"peak RSS not measured (engine {meta.get('engine', 'unknown')} runs its model outside "
            f"this process's count)"
        ]
    if "cuda_max_memory_allocated_bytes" in meta:
        parts.append(
            f"CUDA max allocated {meta['cuda_max_memory_allocated_bytes'] / 2**20:.0f} MiB"
        )
    if meta.get("kv_peak_bytes_measured"):
        parts.append(f"KV buffers peak {meta['kv_peak_bytes_measured'] / 2**20:.1f} MiB")
    return "memory: " + ", ".join(parts)


def kv_line(meta: dict, policy_peak_tokens: int) -> str | None:
    """The engine's KV blocks beside the policy's count of them, as one line (None: not paged)."""
    if meta.get("kv_layout") != "paged":
        return None
    bs, held = meta["kv_block_size"], meta["kv_peak_blocks"]
    agree = (
        "agree"
        if held * bs == policy_peak_tokens
        else (
            f"differ: the policy counts "
            f"{'padded rectangles' if held * bs < policy_peak_tokens else 'fewer'}"
        )
    )
    grown = (
        f"; grown {meta['kv_pool_regrown']} times mid-run" if meta.get("kv_pool_regrown") else ""
    )
    return (
        f"KV: a pool of {meta['kv_pool_blocks']} blocks x {bs} tokens "
        f"({meta['kv_pool_bytes'] / 2**20:.1f} MiB, reserved at the start{grown}); at most {held} "
        f"blocks held = {held * bs} tokens ({meta['kv_peak_bytes_used'] / 2**20:.1f} MiB); the "
        f"policy counted {policy_peak_tokens} tokens: {agree}"
    )


def load_line() -> str:
    """The machine's load average, as one line: a busy machine stretches what is measured."""
    from ..engine.model import available_cores

    try:
        la = os.getloadavg()
    except OSError:
        return "machine load: unknown"
    return (
        f"machine load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f} on {available_cores()} cores "
        "(other busy processes stretch the measured times, not the predicted ones)"
    )


def stopped_code(stopped: list[str]) -> int:
    """130 when a run was interrupted (Ctrl-C), else 0."""
    return 130 if any(s.startswith("interrupted") for s in stopped) else 0


def all_rejected(results: dict) -> int:
    """2, with one line on stderr, when every request of every run was rejected; else 0."""
    if nothing_served(results):
        print(
            f"realrun: error: every request was rejected, so nothing was measured "
            f"({rejection_lines(results)[0]})",
            file=sys.stderr,
        )
        return 2
    return 0


def printable(meta: dict) -> dict:
    """The meta a JSON report prints: without the per-step and per-token logs a run keeps for
    compare."""
    return {
        k: v
        for k, v in meta.items()
        if k not in ("trace", "passes", "pass_idle", "pass_rep", "outputs", "step_shapes")
    }


def vllm_server(args, setup: RunSetup, lm):
    """vLLM's server for a setup whose engine is vllm (None otherwise)."""
    if setup.engine != "vllm":
        return None
    from ..reference.vllm.commands import start_server

    return start_server(args, setup, lm, wants_progress(args))
