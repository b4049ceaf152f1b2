"""One kind of error for bad input: it names the field and the value.

Every dataclass in the package checks itself in ``__post_init__`` and raises
``ConfigError`` with a message such as ``max_wait must be >= 0, got -1``. The
command line turns that into one line on stderr and exit code 2, so a student
who mistypes a flag sees what was wrong instead of a traceback.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["ConfigError", "check_positive", "check_nonneg", "check_int_at_least", "check_choice"]


class ConfigError(ValueError):
    """Bad input: the message names the field and the value."""


def check_positive(field: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{field} must be > 0, got {value!r}")


def check_nonneg(field: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{field} must be >= 0, got {value!r}")


def check_int_at_least(field: str, value: Any, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ConfigError(f"{field} must be an integer >= {least}, got {value!r}")


def check_choice(field: str, value: Any, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{field} must be one of {', '.join(choices)}, got {value!r}")
