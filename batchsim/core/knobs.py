"""Each policy's knobs, their defaults and what they mean: written once, read by everything else.

A policy is a machine with a few dials. The taxi has none; the bus has one (how many
seats it waits to fill); the bus with a timetable has two (seats, and how long the
first passenger may wait); the bus that never stops has its own (how many riders at
once, how many prompt tokens per step, the KV block size, whether a long prompt may
board in pieces, and which scheduler orders the boarding).

Each dial is one field of a frozen dataclass below, with its default, its help text and
its check in ``dataclasses.field(metadata=...)``. From these fields come ``make_policy``'s
defaults, ``POLICY_DEFAULTS`` and ``PolicyConfig`` (``batchsim.core.config``), and the
command line's flags with their help (``batchsim.core.flags``). Adding a knob is one
field here (and the constructor's parameter that receives it); a knob shared by two
policies (``max_batch``) has one default, which both classes must agree on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from .errors import ConfigError, check_choice, check_knob, show

__all__ = [
    "SCHEDULERS",
    "knob",
    "PolicyKnobs",
    "TaxiKnobs",
    "StaticKnobs",
    "DynamicKnobs",
    "ContinuousKnobs",
    "KNOBS",
    "POLICY_NAMES",
    "READS",
    "DEFAULTS",
    "FLAG_KNOBS",
    "flag_knobs",
    "knob_defaults",
    "knob_users",
    "knob_help",
    "check_knob_value",
]


def knob(
    default: Any, help: str, check: Callable[[str, Any], None] = check_knob, flag: bool = True
) -> Any:
    """One knob: its default, its help (said for this policy; the flag's help names the policy and
    the default), the check its value must pass (``check(field, value)`` raising ``ConfigError``),
    and whether the command line has a flag for it."""
    return field(default=default, metadata={"help": help, "check": check, "flag": flag})


#: The flavours of continuous batching: batchsim's own, and vLLM V1's (``policies.vllm_v1``).
SCHEDULERS = ("batchsim", "vllm-v1")


def _check_scheduler(name: str, value: Any) -> None:
    check_choice(name, value, SCHEDULERS)


@dataclass(frozen=True)
class PolicyKnobs:
    """A policy's knobs; each checks itself, naming the field and the value
    (``max_wait must be >= 0, got -1``)."""

    policy: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            f.metadata["check"](f.name, getattr(self, f.name))


@dataclass(frozen=True)
class TaxiKnobs(PolicyKnobs):
    """No batching: each request rides alone, so there is nothing to set."""

    policy: ClassVar[str] = "taxi"


@dataclass(frozen=True)
class StaticKnobs(PolicyKnobs):
    """The bus: it leaves when every seat is taken."""

    policy: ClassVar[str] = "static"
    max_batch: int = knob(8, "seats on the bus (wait for this many)")


@dataclass(frozen=True)
class DynamicKnobs(PolicyKnobs):
    """The bus with a timetable: it leaves when full or when its first passenger has waited long
    enough."""

    policy: ClassVar[str] = "dynamic"
    max_batch: int = knob(8, "the most per batch")
    max_wait: float = knob(0.05, "seconds the oldest request may wait before the batch leaves")


@dataclass(frozen=True)
class ContinuousKnobs(PolicyKnobs):
    """The bus that never stops: riders board and leave at every step (Orca, vLLM)."""

    policy: ClassVar[str] = "continuous"
    max_seqs: int = knob(64, "the most requests running at once")
    max_batched_tokens: int = knob(2048, "prompt tokens per step")
    block_size: int = knob(16, "KV block size in tokens")
    chunked_prefill: bool = knob(
        True,
        "split long prompts across steps (--no-chunked-prefill: admit a prompt whole or not at "
        "all)",
    )
    # No flag: the command line picks the flavour by engine (realrun --engine vllm), and
    # batchsim's --scheduler is the one that runs simulations in parallel.
    scheduler: str = knob(
        "batchsim",
        "batchsim, the textbook scheduler, or vllm-v1, the order vLLM's V1 scheduler works in",
        check=_check_scheduler,
        flag=False,
    )


#: Each policy's knobs, by the policy's name.
KNOBS: dict[str, type[PolicyKnobs]] = {
    k.policy: k for k in (TaxiKnobs, StaticKnobs, DynamicKnobs, ContinuousKnobs)
}
POLICY_NAMES = tuple(KNOBS)


def _reads(knobs: dict[str, type[PolicyKnobs]]) -> dict[str, tuple[str, ...]]:
    return {name: tuple(f.name for f in fields(cls)) for name, cls in knobs.items()}


def knob_defaults(knobs: dict[str, type[PolicyKnobs]] | None = None) -> dict[str, Any]:
    """Every knob's one default: a knob two policies read is one setting, so one default."""
    out: dict[str, Any] = {}
    for cls in (knobs or KNOBS).values():
        for f in fields(cls):
            if f.default is MISSING:
                raise TypeError(f"{cls.__name__}.{f.name} needs a default")
            if f.name in out and out[f.name] != f.default:
                raise TypeError(
                    f"{cls.__name__}.{f.name} defaults to {show(f.default)}, another policy's "
                    f"{f.name} to {show(out[f.name])}: one knob, one default"
                )
            out.setdefault(f.name, f.default)
    return out


#: The knobs each policy reads (make_policy takes them all, so that one set can build every policy).
READS = _reads(KNOBS)
#: Every knob's default.
DEFAULTS = knob_defaults(KNOBS)


def flag_knobs(knobs: dict[str, type[PolicyKnobs]] | None = None) -> tuple[str, ...]:
    """The knobs the command line has a flag for, in the order the policies list them."""
    out: list[str] = []
    for cls in (knobs or KNOBS).values():
        out += [f.name for f in fields(cls) if f.metadata["flag"] and f.name not in out]
    return tuple(out)


FLAG_KNOBS = flag_knobs()


def knob_users(name: str, knobs: dict[str, type[PolicyKnobs]] | None = None) -> tuple[str, ...]:
    """The policies that read a knob (empty: no policy does)."""
    return tuple(p for p, reads in _reads(knobs or KNOBS).items() if name in reads)


def knob_help(name: str, knobs: dict[str, type[PolicyKnobs]] | None = None) -> str:
    """A knob's help on the command line: what it means to each policy that reads it, and its
    default
    (``static: seats on the bus (wait for this many); dynamic: the most per batch (default 8)``).
    realrun's command line rewrites the ``(default X)`` to its own defaults, so it is always
    there."""
    knobs = knobs or KNOBS
    parts = [
        f"{p}: {f.metadata['help']}"
        for p, cls in knobs.items()
        for f in fields(cls)
        if f.name == name
    ]
    default = knob_defaults(knobs)[name]
    shown = ("on" if default else "off") if isinstance(default, bool) else show(default)
    return f"{'; '.join(parts)} (default {shown})"


def check_knob_value(name: str, value: Any) -> None:
    """Check one knob's value by its own rule (the first policy's that reads it)."""
    for cls in KNOBS.values():
        for f in fields(cls):
            if f.name == name:
                f.metadata["check"](name, value)
                return
    raise ConfigError(f"{name} is not a policy knob (the knobs are {', '.join(DEFAULTS)})")
