"""``python -m realrun serve``: an OpenAI-compatible server with the chosen batching policy.

The teacher starts it once; the class sends it requests (``python -m realrun load``, the
``openai`` client, ``curl``, ``vllm bench serve``); the policy decides what each of them waits
for, and ``/dashboard`` shows the batch filling and emptying. SIGTERM or Ctrl-C stops
admitting, lets what runs finish (``--drain-timeout``), writes ``--record`` and exits 0.
"""

from __future__ import annotations

import argparse
import sys

from batchsim.core.config import PolicyConfig
from batchsim.core.errors import ConfigError, check_int_at_least, check_kv_tokens, check_positive, show
from batchsim.core.files import check_out_file
from batchsim.core.flags import POLICY_FLAGS, add_flags, given, resolve

from ..parser import add_model_args
from ..run_setup import REALRUN_DEFAULTS

__all__ = ["add_parser", "run", "SERVE_DEFAULTS"]

#: A class on a laptop's CPU: continuous batching, with realrun's own knobs (32 rows, 1024 prompt tokens a step).
SERVE_DEFAULTS = {"policy": "continuous", **{k: REALRUN_DEFAULTS[k] for k in ("max_batch", "max_wait", "max_seqs",
                                                                               "max_batched_tokens")}}


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="an OpenAI-compatible HTTP server with the chosen batching policy",
                       description="Serve the real model behind OpenAI's API, with one batching policy deciding. "
                                   "The class is the traffic: every request anyone sends joins the same batch.",
                       epilog="Then: python -m realrun load --url http://HOST:PORT --rate 4 ; the live view is at "
                              "http://HOST:PORT/dashboard ; metrics at /metrics.")
    add_model_args(p, engine=False)
    add_flags(p.add_argument_group("batching policy (default continuous)"), POLICY_FLAGS)
    g = p.add_argument_group("server")
    g.add_argument("--kv-budget-tokens", type=int, default=None, help="KV-cache budget in tokens, enforced by the policy (default: unlimited)")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 for a class on the network)")
    g.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    g.add_argument("--max-queue", type=int, default=None, help="requests allowed to wait; beyond them a request gets 503 with Retry-After (default: no bound)")
    g.add_argument("--record", default=None, help="write every request's arrival, lengths and measured times to this CSV when the server stops: a trace `batchsim run --trace` replays")
    g.add_argument("--drain-timeout", type=float, default=30.0, help="seconds to let running requests finish after SIGTERM or Ctrl-C (default 30)")
    g.add_argument("--served-model-name", default=None, help="the model's name in the API (default: --model)")
    g.add_argument("--log-level", default="warning", help="uvicorn's log level (default warning)")


def _policy(args):
    flags = given(args)
    name = resolve("policy", flags, SERVE_DEFAULTS)
    if "," in str(name):
        raise ConfigError(f"policy: a server runs one policy, got {show(name)}")
    return PolicyConfig.from_flags(str(name), flags, SERVE_DEFAULTS).build()


def _check(args) -> None:
    from ..run_setup import check_model_flags

    check_model_flags(args)
    check_int_at_least("port", args.port, 0)
    if args.port > 65535:
        raise ConfigError(f"port must be between 0 and 65535, got {show(args.port)}")
    if args.max_queue is not None:
        check_int_at_least("max-queue", args.max_queue, 0)
    if args.kv_budget_tokens is not None:
        check_kv_tokens("kv-budget-tokens", args.kv_budget_tokens)
    check_positive("drain-timeout", args.drain_timeout)
    if args.record is not None:
        check_out_file(args.record, "record")
    if args.log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
        raise ConfigError(f"log-level must be critical, error, warning, info, debug or trace, got {show(args.log_level)}")


def run(args: argparse.Namespace) -> int:
    """Check every flag, load the model, serve until SIGTERM or Ctrl-C; 0 when it stopped cleanly."""
    try:
        import uvicorn  # noqa: F401 - the extra is checked before the model loads
        import starlette  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"serve needs the serve extra ({e.name} is missing): pip install 'batchsim[serve]'") from None
    _check(args)
    policy = _policy(args)
    from ..commands import load
    from ..engine import Engine
    from ..runner import explain_oom, oom_error_types, limits_for
    from .server import serve

    notes: list[str] = []
    lm = load(args, notes)
    for n in notes:
        print(f"realrun serve: {n}", file=sys.stderr)
    engine = Engine(lm, prompt_seed=0)
    name = args.served_model_name or args.model
    return serve(engine, policy, limits_for(lm, args.kv_budget_tokens), name, host=args.host, port=args.port,
                 max_queue=args.max_queue, record=args.record, drain_timeout=args.drain_timeout,
                 log_level=args.log_level, stop_errors=oom_error_types(), explain=explain_oom)
