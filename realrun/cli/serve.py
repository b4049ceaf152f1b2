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
from batchsim.core.errors import (
    ConfigError,
    check_int_at_least,
    check_kv_tokens,
    check_positive,
    show,
)
from batchsim.core.flags import POLICY_FLAGS, add_flags, given, resolve

from ..classroom.load.outfile import check_output
from .flags import add_model_args
from .run_setup import REALRUN_DEFAULTS

__all__ = ["add_parser", "run", "SERVE_DEFAULTS"]

#: A class on a laptop's CPU: continuous batching, with realrun's own knobs (32 rows, 1024 prompt
#: tokens a step).
SERVE_DEFAULTS = {
    "policy": "continuous",
    **{k: REALRUN_DEFAULTS[k] for k in ("max_batch", "max_wait", "max_seqs", "max_batched_tokens")},
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="an OpenAI-compatible HTTP server with the chosen batching policy",
        description="Serve the real model behind OpenAI's API, with one batching policy deciding. "
        "The class is the traffic: every request anyone sends joins the same batch.",
        epilog="Then: python -m realrun load --url http://HOST:PORT --rate 4 ; the live view is at "
        "http://HOST:PORT/dashboard ; metrics at /metrics.",
    )
    add_model_args(p, engine=False)
    add_flags(p.add_argument_group("batching policy (default continuous)"), POLICY_FLAGS)
    g = p.add_argument_group("server")
    g.add_argument(
        "--kv-budget-tokens",
        type=int,
        default=None,
        help="KV-cache budget in tokens, enforced by the policy (default: unlimited)",
    )
    g.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 for a class on "
        "the network)",
    )
    g.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    g.add_argument(
        "--max-queue",
        type=int,
        default=None,
        help="requests allowed to wait; beyond them a request gets 503 with Retry-After (default: "
        "no bound)",
    )
    g.add_argument(
        "--record",
        default=None,
        help="write every request's arrival, lengths and measured times to this CSV when the "
        "server stops: a trace `batchsim run --trace` replays",
    )
    g.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="seconds to let running requests finish after SIGTERM or Ctrl-C (default 30)",
    )
    g.add_argument(
        "--served-model-name", default=None, help="the model's name in the API (default: --model)"
    )
    g.add_argument("--log-level", default="warning", help="uvicorn's log level (default warning)")
    g.add_argument(
        "--save-folder",
        default=None,
        metavar="DIR",
        help="write the served offline model (weights, config and its tokenizer) to DIR and exit, "
        "for a client that needs the tokenizer: vllm bench serve --model DIR --served-model-name "
        "tiny-gpt2",
    )
    r = p.add_argument_group(
        "a room of students (limits, each answered as an HTTP error naming it)"
    )
    r.add_argument(
        "--api-key",
        default=None,
        help="every /v1 route needs 'Authorization: Bearer KEY' with this key, as vllm serve "
        "--api-key (default: none; set one with --host 0.0.0.0)",
    )
    r.add_argument(
        "--max-queue-per-client",
        type=int,
        default=None,
        help="requests one client may have waiting (not yet started); beyond them 503, so one "
        "student's script cannot fill the queue (default: no bound)",
    )
    r.add_argument(
        "--client-by",
        choices=("address", "key"),
        default="address",
        help="who a client is: its address (default: a script cannot pose as another machine) or "
        "its API key (students sharing a machine)",
    )
    r.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        help="open connections at most; one more gets 503 at once (default 1000: a class of 100 "
        "with a few each, under a laptop's 1024 open files)",
    )
    r.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        help="seconds for a request's head to arrive, else 408 and closed (default 10: a real "
        "client sends it in milliseconds)",
    )
    r.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        help="seconds for a request's body to arrive whole, else 408 (default 30: the largest body "
        "in well under a second on a room's network)",
    )
    r.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest request body, else 413 (default: 64 bytes per token of the model's context, "
        "at least 1 MiB: room for any prompt the model takes)",
    )


def _policy(args):
    flags = given(args)
    name = resolve("policy", flags, SERVE_DEFAULTS)
    if "," in str(name):
        raise ConfigError(f"policy: a server runs one policy, got {show(name)}")
    return PolicyConfig.from_flags(str(name), flags, SERVE_DEFAULTS).build()


def _check(args) -> None:
    from .run_setup import check_model_flags

    check_model_flags(args)
    check_int_at_least("port", args.port, 0)
    if args.port > 65535:
        raise ConfigError(f"port must be between 0 and 65535, got {show(args.port)}")
    if args.max_queue is not None:
        # 0 would turn away every request of an idle server: no queue at all is the default (None).
        check_int_at_least("max-queue", args.max_queue, 1)
    if args.kv_budget_tokens is not None:
        check_kv_tokens("kv-budget-tokens", args.kv_budget_tokens)
    check_positive("drain-timeout", args.drain_timeout)
    for flag in ("max-queue-per-client", "max-connections", "max-body-bytes"):
        v = getattr(args, flag.replace("-", "_"))
        if v is not None:
            check_int_at_least(flag, v, 1)
    check_positive("header-timeout", args.header_timeout)
    check_positive("body-timeout", args.body_timeout)
    if args.api_key is not None and not args.api_key.strip():
        raise ConfigError("api-key must not be empty")
    if args.record is not None:
        check_output(args.record, "record")
    if args.log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
        raise ConfigError(
            f"log-level must be critical, error, warning, info, debug or trace, got "
            f"{show(args.log_level)}"
        )


def _check_queue(args, policy) -> None:
    """A bus that waits for N can never leave if fewer than N may wait: it would hold them
    forever."""
    if args.max_queue is not None and policy.name == "static" and policy.max_batch > args.max_queue:
        raise ConfigError(
            f"max-queue {args.max_queue} is below the static bus's --max-batch {policy.max_batch}: "
            "the bus would wait forever for passengers the queue turns away"
        )


def run(args: argparse.Namespace) -> int:
    """Check every flag, load the model, serve until SIGTERM or Ctrl-C; 0 when it stopped
    cleanly."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401 - the extra is checked before the model loads
    except ImportError as e:
        raise ConfigError(
            f"serve needs the serve extra ({e.name} is missing): pip install 'batchsim[serve]'"
        ) from None
    _check(args)
    if args.save_folder is not None:
        return _save_folder(args)
    policy = _policy(args)
    _check_queue(args, policy)
    from ..classroom.serve.listen import bind

    with bind(
        args.host, args.port
    ) as sock:  # before the model: a busy port or a bad host costs no load
        return _serve(args, policy, sock)


def _save_folder(args) -> int:
    """``--save-folder DIR``: the model folder a client's tokenizer is read from (seed 0, as
    served)."""
    from ..reference.vllm.tokenizer import save_served_model

    folder = save_served_model(args.model, args.save_folder)
    print(
        f"realrun serve: wrote {args.model} with its tokenizer to {folder} (then: python -m "
        f"realrun.reference.vllm.bench serve --base-url http://HOST:PORT --model {folder} "
        f"--served-model-name {args.served_model_name or args.model} ...)",
        file=sys.stderr,
    )
    return 0


def _serve(args, policy, sock) -> int:
    from ..classroom.serve.server import serve
    from ..clock.runner import explain_oom, limits_for, oom_error_types
    from ..engine.engine import Engine
    from .run import load

    notes: list[str] = []
    lm = load(args, notes)
    for n in notes:
        print(f"realrun serve: {n}", file=sys.stderr)
    engine = Engine(lm, prompt_seed=0)
    name = args.served_model_name or args.model
    return serve(
        engine,
        policy,
        limits_for(lm, args.kv_budget_tokens),
        name,
        host=args.host,
        port=args.port,
        max_queue=args.max_queue,
        record=args.record,
        drain_timeout=args.drain_timeout,
        log_level=args.log_level,
        stop_errors=oom_error_types(),
        explain=explain_oom,
        sock=sock,
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        body_timeout_s=args.body_timeout,
        max_body_bytes=args.max_body_bytes,
        api_key=args.api_key,
        max_queue_per_client=args.max_queue_per_client,
        client_by=args.client_by,
    )
