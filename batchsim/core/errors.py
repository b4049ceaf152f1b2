"""One kind of error for bad input: it names the field and the value.

Every dataclass in the package checks itself in ``__post_init__`` and raises
``ConfigError`` with a message such as ``max_wait must be >= 0, got -1``. The
command line turns that into one line on stderr and exit code 2, so a student
who mistypes a flag sees what was wrong instead of a traceback.

The checks take any real number a caller is likely to hold: Python ints and
floats and numpy scalars (``np.int64(5)`` is a perfectly good rate), never a
bool (``True`` is not a rate) nor a string. ``inf`` and ``nan`` are refused with
"must be finite", because a check such as ``x > 0`` lets ``nan`` through and
``inf`` passes every lower bound, then overflows somewhere far from the flag.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = [
    "ConfigError",
    "check_positive",
    "check_nonneg",
    "check_int_at_least",
    "check_choice",
    "check_at_most",
    "check_bool",
    "check_kv_tokens",
    "check_fraction",
    "check_knob",
    "is_number",
    "is_integer",
    "show",
    "MAX_KV_TOKENS",
    "MAX_SECONDS",
    "KNOB_MAX",
]

#: A KV budget beyond this many tokens is no budget (a 1,000-GPU cluster of 80 GB holds ~5e8 tokens
#: of a 7B model); it only makes block counts overflow.
MAX_KV_TOKENS = 10**12


#: The longest any knob measured in seconds may be (a day): a batcher that waits longer, or a pass
#: that lasts longer, is no server, and 1e308 seconds overflow the first sum they enter.
MAX_SECONDS = 86_400.0

#: Upper bounds for the policies' integer knobs: far past any server, inside what the arrays hold.
KNOB_MAX = {
    "max_batch": 1_000_000,
    "max_seqs": 1_000_000,
    "max_batched_tokens": 10**9,
    "block_size": 1_000_000,
}


class ConfigError(ValueError):
    """Bad input: the message names the field and the value."""


def is_number(value: Any) -> bool:
    """A real number that is not a bool (numpy scalars included)."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and type(value).__name__ != "bool_"
    )


def is_integer(value: Any) -> bool:
    """An integer that is not a bool (numpy integers included)."""
    return isinstance(value, numbers.Integral) and is_number(value)


def show(value: Any) -> str:
    """A value as a message shows it: numbers short (1e+308, not 309 digits), text quoted."""
    if is_number(value):
        if is_integer(value):
            v = int(value)
            if abs(v) < 10**30:
                return str(v)
            digits = str(abs(v))
            return f"{'-' if v < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"
        text = repr(float(value))
        return text if len(text) <= 12 else f"{float(value):.6g}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _finite(field: str, value: Any, bound: str) -> float:
    if not is_number(value):
        raise ConfigError(f"{field} must be a number {bound}, got {show(value)}")
    v = float(value)
    if not math.isfinite(v):
        raise ConfigError(f"{field} must be {bound} and finite, got {show(value)}")
    return v


def check_positive(field: str, value: Any) -> None:
    if _finite(field, value, "> 0") <= 0:
        raise ConfigError(f"{field} must be > 0, got {show(value)}")


def check_nonneg(field: str, value: Any) -> None:
    if _finite(field, value, ">= 0") < 0:
        raise ConfigError(f"{field} must be >= 0, got {show(value)}")


def check_at_most(field: str, value: Any, most: float, why: str = "") -> None:
    """An upper bound: huge finite numbers pass every lower bound and overflow later."""
    if _finite(field, value, f"<= {most:g}") > most:
        raise ConfigError(
            f"{field} must be <= {most:g}{' (' + why + ')' if why else ''}, got {show(value)}"
        )


def check_int_at_least(field: str, value: Any, least: int) -> None:
    if not is_integer(value) or value < least:
        raise ConfigError(f"{field} must be an integer >= {least}, got {show(value)}")


def check_bool(field: str, value: Any) -> None:
    """True or False only: the string "no" is truthy, and so would silently mean yes."""
    # numpy's bool is ``numpy.bool_`` before numpy 2 and ``numpy.bool`` since: both are true or
    # false.
    if not isinstance(value, bool) and type(value).__name__ not in ("bool_", "bool"):
        raise ConfigError(f"{field} must be true or false, got {show(value)}")


def check_choice(field: str, value: Any, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{field} must be one of {', '.join(choices)}, got {show(value)}")


def check_fraction(field: str, value: Any) -> float:
    """A share of something, in [0, 1) (a share of 1 keeps all of it back): returned as a float."""
    if not is_number(value) or not 0 <= value < 1:
        raise ConfigError(f"{field} must be in [0, 1), got {show(value)}")
    return float(value)


def check_kv_tokens(field: str, tokens: Any) -> None:
    """A KV budget in tokens: a whole number from 1 up (0 tokens serve nobody; 2.5 is no count)."""
    check_int_at_least(field, tokens, 1)
    check_at_most(field, tokens, MAX_KV_TOKENS, "tokens")


def check_knob(field: str, value: Any) -> None:
    """A policy's knob, checked the same way by the policy itself and by the command line's
    config."""
    if field == "max_wait":
        check_nonneg(field, value)
        check_at_most(field, value, MAX_SECONDS, "seconds: a day")
    elif field == "chunked_prefill":
        check_bool(field, value)
    else:
        check_int_at_least(field, value, 1)
        check_at_most(field, value, KNOB_MAX[field])
