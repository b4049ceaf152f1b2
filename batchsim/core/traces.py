"""Reading real traffic from a file.

Two formats, told apart by the header line:

- the Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``,
  timestamps such as ``2023-11-16 18:15:46.6805900``), as published in Azure's
  public dataset (Patel et al., "Splitwise", ISCA 2024);
- a plain CSV ``arrival_s,prompt_tokens,output_tokens`` with arrivals in seconds.

Arrival times are made relative to the first row. A malformed row raises a
``ConfigError`` naming the file and the line, because a silently skipped row
would change the workload a student thinks they are replaying.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from .errors import ConfigError

__all__ = ["Trace", "read_trace"]

AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
PLAIN_HEADER = ["arrival_s", "prompt_tokens", "output_tokens"]


@dataclass(frozen=True)
class Trace:
    path: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    def __repr__(self) -> str:
        return f"Trace({Path(self.path).name!r}, {len(self)} requests over {self.duration:.0f} s)"


_EPOCH = datetime(1970, 1, 1)


def _azure_time(text: str) -> float:
    # The trace carries 7 fractional digits, one more than datetime parses on Python 3.10.
    base, _, frac = text.strip().partition(".")
    # Naive arithmetic, not .timestamp(): local time zones and daylight saving must not move arrivals.
    t = (datetime.fromisoformat(base) - _EPOCH).total_seconds()
    return t + (float("0." + frac) if frac else 0.0)


def read_trace(path: str | Path) -> Trace:
    p = Path(path)
    try:
        fh = p.open(newline="")
    except OSError as e:
        raise ConfigError(f"trace {str(p)!r} cannot be read: {e.strerror or e}") from None
    with fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        if header == AZURE_HEADER:
            parse_t = _azure_time
        elif header == PLAIN_HEADER:
            parse_t = float
        else:
            raise ConfigError(
                f"trace {str(p)!r} line 1: header must be {','.join(AZURE_HEADER)} or {','.join(PLAIN_HEADER)}, got {','.join(header)!r}"
            )
        ts: list[float] = []
        ps: list[int] = []
        os_: list[int] = []
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            try:
                if len(row) != 3:
                    raise ValueError(f"expected 3 fields, got {len(row)}")
                t, pr, out = parse_t(row[0]), int(row[1]), int(row[2])
                if pr < 1 or out < 1:
                    raise ValueError("token counts must be >= 1")
                if ts and t < ts[-1]:
                    raise ValueError("arrival times must not go backwards")
            except ValueError as e:
                raise ConfigError(f"trace {str(p)!r} line {lineno}: {e} in {','.join(row)!r}") from None
            ts.append(t)
            ps.append(pr)
            os_.append(out)
    if not ts:
        raise ConfigError(f"trace {str(p)!r} has no rows")
    arr = np.asarray(ts, dtype=np.float64)
    return Trace(str(p), arr - arr[0], np.asarray(ps, dtype=np.int64), np.asarray(os_, dtype=np.int64))
