"""Kinds of pass and their sums over a measured run: what ``step_fidelity.py`` tabulates.

Each function reads a measured run (``meta['passes']``: (Pass, seconds) in the order they ran, and
``meta['pass_rep']``: each pass's place in its step) priced pass by pass as the simulator prices it
(``realrun.timing.pass_level.priced_passes``), and returns sums, so the tables can take ratios of
totals.
"""

from __future__ import annotations

from realrun.timing.pass_level import priced_passes

__all__ = [
    "KINDS",
    "LONG",
    "kind_of",
    "PLACES",
    "run_sums",
    "place_ratios",
    "profiles_apart",
]

KINDS = (
    "decode short",
    "decode long",
    "prefill short",
    "prefill long",
    "chunk + past",
    "chunk + decode",
    "padded batch",
)
LONG = 256


def kind_of(p) -> str:
    """The kind of pass of a planned ``Pass`` (the list in ``step_fidelity.py``'s docstring)."""
    if p.prefill_rows and p.decode_rows:
        return "chunk + decode"
    if not p.prefill_rows:
        width = (p.attn_read or p.kv_read) / max(1, p.decode_rows)
        return "decode long" if width >= LONG else "decode short"
    if p.ragged:
        if any(c.start for c in p.chunks):
            return "chunk + past"
        return "prefill long" if p.prefill_tokens >= LONG else "prefill short"
    if p.past:
        return "chunk + past"
    if p.prefill_rows >= 2:
        return "padded batch"
    return "prefill long" if p.query >= LONG else "prefill short"


PLACES = ("first", "second", "later")


def run_sums(run, model, policy: str) -> tuple[dict, dict]:
    """A measured run's passes, priced once as the simulator prices ``policy`` (a step after an idle
    with its cold start, a step's first decode passes with their extra), summed two ways, each
    name -> (measured seconds, priced seconds):

    - by kind of pass (``kind_of``), and "all";
    - decode-only passes by their place in their step (``meta['pass_rep']``: the first, the second,
      the third on); empty where the run did not tag its passes."""
    got = priced_passes(run, model.for_policy(policy))
    rep = run.meta.get("pass_rep")
    if rep is None or len(rep) != len(got):
        rep = None
    kinds: dict[str, list[float]] = {}
    places: dict[str, list[float]] = {}
    for i, (p, priced, secs) in enumerate(got):
        keys = [(kinds, kind_of(p)), (kinds, "all")]
        if rep is not None and not p.prefill_rows:
            keys.append((places, PLACES[min(rep[i], 2)]))
        for into, key in keys:
            acc = into.setdefault(key, [0.0, 0.0])
            acc[0] += secs
            acc[1] += priced
    return (
        {k: (v[0], v[1]) for k, v in kinds.items()},
        {k: (v[0], v[1]) for k, v in places.items()},
    )


def place_ratios(places: list) -> dict[str, list[float]]:
    """Per run that had both, a step's first (second) decode passes against its later ones: each
    one's measured/priced over the later passes' measured/priced. The level cancels (the same run,
    the same moments), so 1.0 says the model prices a first pass's extra as the run paid it."""
    out: dict[str, list[float]] = {"first": [], "second": []}
    for _, _, v in places:
        if "later" not in v or v["later"][1] <= 0:
            continue
        later = v["later"][0] / v["later"][1]
        for k in out:
            if k in v and v[k][1] > 0:
                out[k].append(v[k][0] / v[k][1] / later)
    return out


def profiles_apart(rows: list[list]) -> list[dict[str, float]]:
    """Per calibration after the first: kind -> its price of the very same passes over the first's,
    divided by the same ratio over every pass (the two profiles' common level out), and "all" ->
    that common level itself. ``rows``: per calibration, (round, family, {kind: (measured, priced)})
    as ``main`` gathers them."""

    def totals(got) -> dict[str, float]:
        out: dict[str, float] = {}
        for _, _, v in got:
            for k, (_, priced) in v.items():
                out[k] = out.get(k, 0.0) + priced
        return out

    base = totals(rows[0])
    apart = []
    for got in rows[1:]:
        mine = totals(got)
        level = mine["all"] / base["all"]
        apart.append(
            {k: mine[k] / base[k] / (1.0 if k == "all" else level) for k in base if k in mine}
        )
    return apart
