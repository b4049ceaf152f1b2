"""How long a real run will take, known before it starts: at least as long as its arrivals span.

A measured run serves its requests as they arrive on the wall clock, so a run whose arrivals span
a day takes a day. ``check_real_span`` refuses more than a day in all (``--no-size-check`` runs it
anyway) and says how long anything over a minute will take. It runs where the rate is final:
``RunSetup`` for --rate, and compare once --busy has set each policy's rate from the step times.
"""

from __future__ import annotations

import sys

from batchsim.core import sizing
from batchsim.core.errors import ConfigError

__all__ = ["LONG_REAL_RUN_S", "MAX_REAL_RUN_S", "check_real_span"]

#: A real run whose arrivals alone span longer than this says how long it will take, before it
#: starts.
LONG_REAL_RUN_S = 60.0
#: ... and one longer than a day is refused (``--no-size-check`` runs it anyway).
MAX_REAL_RUN_S = 86_400.0


def check_real_span(
    spans: list[float], allowed: bool, cause: str = "", fix: str = "raise --rate"
) -> None:
    """Refuse a real run whose arrivals span more than a day in all (``spans``: each measured
    run's), unless ``allowed`` (--no-size-check); say how long one over a minute will take.
    ``cause`` says which flag set the rate where that was not --rate (compare's --busy sets it only
    once the step times are known)."""
    total, runs = sum(spans), len(spans)
    span = max(spans, default=0.0)
    if total > MAX_REAL_RUN_S and not allowed:
        raise ConfigError(
            f"{cause}the arrivals span up to {_hours(span)} per run ({runs} to measure): more than "
            f"a day of real time; {fix}, lower --requests or --duration, or pass "
            f"{sizing.OVERRIDE_FLAG}"
        )
    if total > LONG_REAL_RUN_S:
        print(
            f"realrun: note: this will take at least {_hours(total)}: the arrivals span up to "
            f"{_hours(span)} per run ({runs} to measure); Ctrl-C stops it and keeps what was "
            f"measured",
            file=sys.stderr,
        )


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"
