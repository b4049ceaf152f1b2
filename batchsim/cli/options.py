"""Command-line knobs shared by every batchsim command that runs a workload through a policy.

The flags themselves (spelling, help, type) are defined once, beside the frozen
configuration dataclasses that validate them (``batchsim.core.config`` and
``batchsim.machine.serverconfig``); realrun puts the same definitions on its own
parser without importing this module. Here: batchsim's groups of flags, and the
``*_from_args`` resolvers that turn a parsed namespace plus a scenario's defaults
into the objects a run needs. Bad values raise ``ConfigError`` naming the flag,
which the CLI prints as one line.
"""

from __future__ import annotations

import argparse

from ..core.config import (
    POLICY_DEFAULTS, POLICY_FLAGS, SLO_FLAGS, WORKLOAD_DEFAULTS, WORKLOAD_FLAGS, PolicyConfig, WorkloadConfig,
    add_flags, given, policy_names, slo_config,
)
from ..core.metrics import SLO
from ..core.policies import Policy
from ..core.sizing import OVERRIDE_FLAG
from ..core.workload import Workload
from ..machine.serverconfig import DEFAULT_STEP_TIME, SERVER_FLAGS, ServerConfig, ServerSetup, parse_bytes
from ..sim.steptime import StepTimeModel

__all__ = [
    "add_workload_args", "add_policy_args", "add_server_args", "add_slo_args", "add_output_args",
    "workload_from_args", "workload_config_from_args", "policy_from_args", "step_time_from_args", "slo_from_args",
    "policies_from_args", "kv_budget_from_args", "server_from_args", "server_setup_from_args", "price_from_args",
    "parse_bytes", "DEFAULT_STEP_TIME", "WORKLOAD_DEFAULTS", "POLICY_DEFAULTS",
]


def add_workload_args(p: argparse.ArgumentParser) -> None:
    add_flags(p.add_argument_group("workload (who arrives when, with how many tokens)"), WORKLOAD_FLAGS)


def add_policy_args(p: argparse.ArgumentParser) -> None:
    add_flags(p.add_argument_group("batching policy"), POLICY_FLAGS)


def add_server_args(p: argparse.ArgumentParser) -> None:
    add_flags(p.add_argument_group("server (how long a step takes, how much KV memory, what it costs)"), SERVER_FLAGS)


def add_slo_args(p: argparse.ArgumentParser) -> None:
    add_flags(p.add_argument_group("service-level objectives (for goodput)"), SLO_FLAGS)


def add_output_args(p: argparse.ArgumentParser, out_help: str, json_help: str = "print one JSON object {config, runs, notes} instead of a table") -> None:
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help=json_help)
    g.add_argument("--out", default=None, help=out_help)
    g.add_argument("--no-plots", action="store_true", help="skip the figures")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar on stderr (default: on long runs at a terminal)")
    g.add_argument(OVERRIDE_FLAG, dest="no_size_check", action="store_true",
                   help="run even when the run's estimated memory or time is far beyond this machine")


def _get(args: argparse.Namespace, key: str, defaults: dict, overrides: dict | None):
    """Flag given on the command line > scenario default > package default."""
    v = getattr(args, key, None)
    if v is not None:
        return v
    if overrides and overrides.get(key) is not None:
        return overrides[key]
    return defaults[key]


def workload_config_from_args(args: argparse.Namespace, overrides: dict | None = None) -> WorkloadConfig:
    return WorkloadConfig.from_flags(given(args), overrides or {})


def workload_from_args(args: argparse.Namespace, overrides: dict | None = None) -> Workload:
    return workload_config_from_args(args, overrides).build()


def policies_from_args(args: argparse.Namespace, overrides: dict | None = None) -> list[str]:
    return policy_names(_get(args, "policy", POLICY_DEFAULTS, overrides))


def policy_from_args(args: argparse.Namespace, name: str, overrides: dict | None = None) -> Policy:
    return PolicyConfig.from_flags(name, given(args), overrides or {}).build()


def server_setup_from_args(args: argparse.Namespace, overrides: dict | None = None) -> ServerSetup:
    """Step time, KV budget, server and price, resolved together once."""
    return ServerConfig.from_flags(given(args), overrides or {}).build()


def server_from_args(args: argparse.Namespace, overrides: dict | None = None):
    """The GPU-and-model server the flags (or the scenario's defaults) name, or None if none is named."""
    return ServerConfig.from_flags(given(args), overrides or {}).server()


def price_from_args(args: argparse.Namespace, overrides: dict | None = None, server=None) -> float | None:
    """$/hour: --gpu-price, else the scenario's, else the server's GPU's catalog price, else None."""
    return server_setup_from_args(args, overrides).price


def step_time_from_args(args: argparse.Namespace, overrides: dict | None = None) -> StepTimeModel:
    """--calibration, then --step-time, then --gpu/--model, then the scenario's model, then its
    GPU and model, then the illustrative default."""
    return server_setup_from_args(args, overrides).step_time


def kv_budget_from_args(args: argparse.Namespace, overrides: dict | None = None) -> int | None:
    """--kv-budget-tokens, then --kv-budget-bytes, then the scenario's, then the server's memory, else unlimited."""
    return server_setup_from_args(args, overrides).kv_budget_tokens


def slo_from_args(args: argparse.Namespace, overrides: dict | None = None) -> SLO:
    return slo_config(given(args), overrides or {})
