"""Why requests were turned away, in a line a person reads under the table.

A table that says ``rej 195`` and nothing else makes a comparison silently unfair:
one policy served the long prompts, another refused them. Each rejected request
carries its reason in the records; ``group`` counts them by the *kind* of reason,
so "prompt of 2,049 tokens exceeds ..." and "prompt of 7,437 tokens exceeds ..."
are one group, shown once with the range of the numbers that differ:

    continuous: 195 of 2000 rejected: 195 prompt of 2049-7437 tokens exceeds max_batched_tokens=2048
    (...)

It reads only the reasons, so it works for any reason either clock writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["group", "lines", "counts", "all_rejected"]

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:e[+-]?\d+)?")


def _value(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def _tally(reasons: Iterable[str | None] | Mapping[str, int]):
    """(reason, how many) pairs: from one reason per request, or from a summary-only run's
    counts."""
    if isinstance(reasons, Mapping):
        return reasons.items()
    return ((r, 1) for r in reasons if r is not None)


def group(reasons: Iterable[str | None] | Mapping[str, int]) -> list[tuple[int, str]]:
    """(count, reason with its varying numbers shown as ranges), largest group first."""
    groups: dict[str, list] = {}
    for r, k in _tally(reasons):
        key = _NUMBER.sub("#", r)
        nums = _NUMBER.findall(r)
        g = groups.setdefault(key, [0, [[] for _ in nums]])
        g[0] += k
        for slot, n in zip(g[1], nums):
            slot.append(n)
    out = []
    for key, (count, slots) in groups.items():
        parts = key.split("#")
        text = parts[0]
        for slot, rest in zip(slots, parts[1:]):
            vals = sorted(set(slot), key=_value)
            text += vals[0] if len(vals) == 1 else f"{vals[0]}-{vals[-1]}"
            text += rest
        out.append((count, text))
    out.sort(key=lambda cr: -cr[0])
    return out


def counts(reasons: Iterable[str | None]) -> dict[str, int]:
    """Grouped reason -> count, for JSON."""
    return {text: n for n, text in group(reasons)}


def lines(results: dict) -> list[str]:
    """One line per run that rejected anything: how many of how many, and why, grouped."""
    out = []
    for label, res in results.items():
        reasons = res.records.rejected
        grouped = group(reasons)
        if not grouped:
            continue
        total = sum(n for n, _ in grouped)
        why = "; ".join(f"{n} {text}" for n, text in grouped)
        out.append(f"{label}: {total} of {len(res.records)} rejected: {why}")
    return out


def all_rejected(results: dict) -> bool:
    """True when no run served a single request (a misconfiguration, not a result)."""
    return bool(results) and all(
        len(r.records) and not r.records.completed for r in results.values()
    )
