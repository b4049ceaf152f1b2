"""From parsed flags and a scenario's defaults to the objects a run needs.

Each function takes a namespace of flags (argparse's, or any object with the same
attributes; None means "not given") and a scenario's defaults, and resolves one part
of a run through the frozen configurations of ``batchsim.core.config`` and
``batchsim.machine.serverconfig``: flag given > scenario default > package default.
The scenarios use them; so does batchsim's command line, which re-exports them.
"""

from __future__ import annotations

import argparse

from ...core.config import (
    POLICY_DEFAULTS,
    WORKLOAD_DEFAULTS,
    PolicyConfig,
    WorkloadConfig,
    policy_names,
    slo_config,
)
from ...core.flags import given, resolve_arg
from ...core.metrics import SLO
from ...core.policies import Policy
from ...core.workload import Workload
from ...machine.serverconfig import ServerConfig, ServerSetup
from ...sim.steptime import StepTimeModel

__all__ = [
    "WORKLOAD_DEFAULTS",
    "POLICY_DEFAULTS",
    "workload_from_args",
    "workload_config_from_args",
    "policy_from_args",
    "policies_from_args",
    "step_time_from_args",
    "slo_from_args",
    "kv_budget_from_args",
    "server_from_args",
    "server_setup_from_args",
    "price_from_args",
]


def workload_config_from_args(
    args: argparse.Namespace, overrides: dict | None = None
) -> WorkloadConfig:
    return WorkloadConfig.from_flags(given(args), overrides or {})


def workload_from_args(args: argparse.Namespace, overrides: dict | None = None) -> Workload:
    return workload_config_from_args(args, overrides).build()


def policies_from_args(args: argparse.Namespace, overrides: dict | None = None) -> list[str]:
    return policy_names(resolve_arg(args, "policy", overrides or {}, POLICY_DEFAULTS))


def policy_from_args(args: argparse.Namespace, name: str, overrides: dict | None = None) -> Policy:
    return PolicyConfig.from_flags(name, given(args), overrides or {}).build()


def server_setup_from_args(args: argparse.Namespace, overrides: dict | None = None) -> ServerSetup:
    """Step time, KV budget, server and price, resolved together once."""
    return ServerConfig.from_flags(given(args), overrides or {}).build()


def server_from_args(args: argparse.Namespace, overrides: dict | None = None):
    """The GPU-and-model server the flags (or the scenario's defaults) name, or None if none is
    named."""
    return ServerConfig.from_flags(given(args), overrides or {}).server()


def price_from_args(
    args: argparse.Namespace, overrides: dict | None = None, server=None
) -> float | None:
    """$/hour: --gpu-price, else the scenario's, else the server's GPU's catalog price, else
    None."""
    return server_setup_from_args(args, overrides).price


def step_time_from_args(args: argparse.Namespace, overrides: dict | None = None) -> StepTimeModel:
    """--calibration, then --step-time, then --gpu/--model, then the scenario's model, then its
    GPU and model, then the illustrative default."""
    return server_setup_from_args(args, overrides).step_time


def kv_budget_from_args(args: argparse.Namespace, overrides: dict | None = None) -> int | None:
    """--kv-budget-tokens, then --kv-budget-bytes, then the scenario's, then the server's memory,
    else unlimited."""
    return server_setup_from_args(args, overrides).kv_budget_tokens


def slo_from_args(args: argparse.Namespace, overrides: dict | None = None) -> SLO:
    return slo_config(given(args), overrides or {})
