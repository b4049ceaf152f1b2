"""Did the machine move under vLLM? A few of the profile's decode shapes timed again after the run.

On a shared CPU another process can take a core between the profile and the run; the same
shapes timed again the profile's way (``realrun.reference.vllm.probe``) say by how much, so a
step-time error of that size reads as the machine's, not the model's. Our engine's counterpart is
``realrun.timing.drift.recheck``, which returns a ``Drift``; this one returns the report's line.
"""

from __future__ import annotations

import numpy as np

from batchsim.sim.profiled import ProfiledStepTime

from .probe import SETTLE, Prober, decode_times

__all__ = ["recheck_note"]


async def _recheck(
    pr: Prober, points: list[tuple[int, int]], r: int
) -> list[tuple[int, int, float]]:
    out = []
    for b, w in points:
        steps = await pr.batch(
            [w] * b, r + 3 + SETTLE + -(-b * w // pr.server.knobs.max_num_batched_tokens)
        )
        d = decode_times(steps, b)
        if d[SETTLE:]:
            out.append((b, w, float(np.mean(d[SETTLE : SETTLE + r]))))
    return out


def recheck_note(server, model: ProfiledStepTime, vocab_size: int, repeats: int = 6) -> str:
    """Time a few decode shapes again (after the measured run) and say how far the machine moved: a
    line for the report (our engine's ``realrun.timing.drift.recheck`` returns a ``Drift``; this
    one, words).

    On a shared CPU another process can take a core between the profile and the run: a step-time
    error that the recheck also shows is the machine's drift, not the model's."""
    rows, widths = model.decode.x, model.decode.y
    points = sorted(
        {
            (int(rows[0]), int(widths[0])),
            (int(rows[len(rows) // 2]), int(widths[len(widths) // 2])),
            (int(rows[-1]), int(widths[0])),
        }
    )
    got = server.call(_recheck, Prober(server, vocab_size), points, repeats)
    if not got:
        return "drift: the recheck saw no clean decode step"
    ratios = [t / float(model.decode(b, w + SETTLE + (repeats - 1) / 2)[0]) for b, w, t in got]
    mean = (float(np.mean(ratios)) - 1) * 100
    return (
        f"drift: {len(got)} decode shapes timed again after the run take {mean:+.0f} % of the "
        f"profile's time "
        f"({', '.join(f'{b}x{w}: {(q - 1) * 100:+.0f} %' for (b, w, _), q in zip(got, ratios))}); "
        "a step-time error (a) of the same size is the machine's drift, not the model's"
    )
