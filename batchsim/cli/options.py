"""Command-line knobs shared by every batchsim command that runs a workload through a policy.

The flags themselves (spelling, help, type) are defined once, beside the frozen
configuration dataclasses that validate them (``batchsim.core.config`` and
``batchsim.machine.serverconfig``); realrun puts the same definitions on its own
parser without importing this module. Here: batchsim's groups of flags; the
``*_from_args`` resolvers (``batchsim.teach.scenarios.knobs``) are re-exported.
Bad values raise ``ConfigError`` naming the flag, which the CLI prints as one line.
"""

from __future__ import annotations

import argparse

from ..core.flags import (
    FLEET_FLAGS,
    POLICY_FLAGS,
    RECORDS_FLAGS,
    SLO_FLAGS,
    WORKLOAD_FLAGS,
    add_flags,
)
from ..core.sizing import OVERRIDE_FLAG
from ..machine.serverconfig import DEFAULT_STEP_TIME, SERVER_FLAGS, parse_bytes
from ..teach.scenarios.knobs import (  # noqa: F401 - the resolvers, re-exported for scripts and tests
    POLICY_DEFAULTS,
    WORKLOAD_DEFAULTS,
    kv_budget_from_args,
    policies_from_args,
    policy_from_args,
    price_from_args,
    server_from_args,
    server_setup_from_args,
    slo_from_args,
    step_time_from_args,
    workload_config_from_args,
    workload_from_args,
)

__all__ = [
    "add_workload_args",
    "add_policy_args",
    "add_server_args",
    "add_slo_args",
    "add_output_args",
    "add_fleet_args",
    "workload_from_args",
    "workload_config_from_args",
    "policy_from_args",
    "step_time_from_args",
    "slo_from_args",
    "policies_from_args",
    "kv_budget_from_args",
    "server_from_args",
    "server_setup_from_args",
    "price_from_args",
    "parse_bytes",
    "DEFAULT_STEP_TIME",
    "WORKLOAD_DEFAULTS",
    "POLICY_DEFAULTS",
]


def add_workload_args(p: argparse.ArgumentParser) -> None:
    add_flags(
        p.add_argument_group("workload (who arrives when, with how many tokens)"), WORKLOAD_FLAGS
    )


def add_policy_args(p: argparse.ArgumentParser) -> None:
    add_flags(p.add_argument_group("batching policy"), POLICY_FLAGS)


def add_server_args(p: argparse.ArgumentParser) -> None:
    add_flags(
        p.add_argument_group("server (how long a step takes, how much KV memory, what it costs)"),
        SERVER_FLAGS,
    )


def add_fleet_args(p: argparse.ArgumentParser) -> None:
    add_flags(p.add_argument_group("fleet (several servers behind a router)"), FLEET_FLAGS)


def add_slo_args(p: argparse.ArgumentParser) -> None:
    add_flags(p.add_argument_group("service-level objectives (for goodput)"), SLO_FLAGS)


def add_output_args(
    p: argparse.ArgumentParser,
    out_help: str,
    json_help: str = "print one JSON object {config, runs, notes} instead of a table",
) -> None:
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help=json_help)
    g.add_argument("--out", default=None, help=out_help)
    g.add_argument("--no-plots", action="store_true", help="skip the figures")
    g.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr (default: on long runs at a terminal)",
    )
    add_flags(g, RECORDS_FLAGS)
    g.add_argument(
        OVERRIDE_FLAG,
        dest="no_size_check",
        action="store_true",
        help="run even when the run's estimated memory or time is far beyond this machine",
    )
