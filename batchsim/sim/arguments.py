"""``simulate``'s three positional arguments, checked before the run touches them.

A notebook is where a wrong argument is most likely: the policy's name where the
policy belongs (``simulate(wl, "continuous", st)``), a number where a step-time model
belongs (``simulate(wl, policy, 0.01)``), a list of lengths where a workload belongs.
Unchecked, each is an ``AttributeError`` deep in the driver (``'str' object has no
attribute 'name'``); checked here, each is a ``ConfigError`` that names the argument,
shows the value, and says how to make the right thing, like every other check of the
package. ``simulate`` calls ``check_simulate_args`` first.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ConfigError, is_number, show
from ..core.policies import POLICY_NAMES, Policy
from ..core.workload import Workload
from .steptime import StepTimeModel

__all__ = ["check_simulate_args"]


def _what(value: Any) -> str:
    """A value as the message shows it: a list by its length (its repr may be a thousand policies
    long)."""
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}: {show(value)}"
    return show(value)


def _check_policy(policy: Any) -> None:
    if isinstance(policy, Policy):
        return
    if isinstance(policy, str):
        hint = (
            f"make_policy({policy!r}, ...)"
            if policy in POLICY_NAMES
            else f"make_policy(NAME, ...), NAME one of {', '.join(POLICY_NAMES)}"
        )
        raise ConfigError(f"policy must be a Policy ({hint}), got {show(policy)}")
    if isinstance(policy, (list, tuple)):
        # A fleet is one policy copied per server: simulate(wl, p, st, replicas=N).
        raise ConfigError(
            f"policy must be one Policy, copied for each server by replicas=N, got {_what(policy)}"
        )
    raise ConfigError(
        f"policy must be a Policy (make_policy('continuous', ...)), got {_what(policy)}"
    )


def _check_step_time(step_time: Any) -> None:
    if isinstance(step_time, StepTimeModel):
        return
    if is_number(step_time):
        raise ConfigError(
            f"step_time must be a StepTimeModel (ConstantStepTime({show(step_time)}) for "
            f"{show(step_time)} s a step), got {show(step_time)}"
        )
    raise ConfigError(
        f"step_time must be a StepTimeModel (ConstantStepTime(s), LinearStepTime(...), "
        f"Server.named(...).step_time or load_step_time(path)), got {_what(step_time)}"
    )


def check_simulate_args(workload: Any, policy: Any, step_time: Any) -> None:
    """Raise ``ConfigError`` naming the first of ``simulate``'s arguments that is not what it must
    be."""
    if not isinstance(workload, Workload):
        raise ConfigError(
            f"workload must be a Workload (make_workload(...), trace_workload(...) or "
            f"Workload.from_arrays(arrivals, prompts, outputs)), got {_what(workload)}"
        )
    _check_policy(policy)
    _check_step_time(step_time)
