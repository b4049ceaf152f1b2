"""Prefill prices between the grid's points: equal-chunk prefills timed now, against one or more
calibrations.

A calibration prices a prefill of ``rows`` chunks of ``length`` tokens from its table (the timed
grid, or the surface fitted to it: ``realrun.timing.smooth``). This bench times such prefills on the
same engine, every shape once per round, the rounds interleaved and the shapes in a new order each
round, and prints per shape the median measured time and each calibration's measured / priced. The
machine's level has moved since the profile, so each calibration's ratios are also given with their
median divided out ("level out"): what is left is the table's error between shapes, which is what a
compare's passes meet.

    python bench/prefill_grid.py --calibration cal.json [--refit] [--rows 1,8,12]
        [--lengths 256,320,384,448,512,640,768,899] [--rounds 4]

``--refit`` adds, for each calibration, the surface fitted to its own timed points (so one profile
shows its grid and its surface side by side, on the very same timings).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from host import yardstick  # noqa: E402  (bench/host.py)

from batchsim.core.errors import ConfigError  # noqa: E402
from batchsim.core.step import Chunk, Step  # noqa: E402
from batchsim.core.workload import Request, Workload  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402
from realrun.timing.profile import load_calibration, load_profilepoints_of  # noqa: E402
from realrun.timing.smooth import fit_surface, with_surface  # noqa: E402


def _ints(text: str) -> list[int] | None:
    """Whole numbers >= 1 separated by commas; None where the text is not that."""
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        return None
    return out if out and min(out) >= 1 else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", required=True, help="calibration file(s), comma-separated")
    ap.add_argument("--model", default="gpt2-6l", help="the model the calibrations were made on")
    ap.add_argument("--rows", default="1,8,12", help="rows of the timed prefills (default 1,8,12)")
    ap.add_argument(
        "--lengths",
        default="256,320,384,448,512,640,768,899",
        help="prompt lengths (default 256..899, between the usual grid's 256 and 512 and above)",
    )
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    ap.add_argument("--refit", action="store_true", help="also the surface of each file's points")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    rows, lengths = _ints(a.rows), _ints(a.lengths)
    for name, got, text in (("rows", rows, a.rows), ("lengths", lengths, a.lengths)):
        if got is None:  # argparse's error: one line naming the option, exit code 2
            ap.error(f"--{name} must be whole numbers >= 1 separated by commas, got {text!r}")
    if a.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {a.rounds}")
    priced = {}
    for path in a.calibration.split(","):
        try:
            m = load_calibration(path)
        except (ConfigError, OSError, ValueError) as e:
            ap.error(f"--calibration {path}: {e}")
        priced[Path(path).name] = m
        if a.refit:
            coef = fit_surface(load_profilepoints_of(path))
            if coef is None:
                raise SystemExit(
                    f"prefill_grid: {path} holds too few timed prefill points to refit"
                )
            priced[f"{Path(path).name} surface"] = with_surface(m, coef)
    lm = load_model(a.model, device="cpu", threads=1)
    eng = Engine(lm)
    print(f"model: {lm.describe()}")
    print(
        f"host yardstick (10M additions): {yardstick():.3f} s; load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    ids = list(range(max(rows)))
    eng.start(Workload(tuple(Request(i, 0.0, max(lengths), 1 << 30) for i in ids), "prefill pool"))

    def once(b: int, n: int) -> float:
        eng.pass_log.clear()
        eng.execute(Step(prefill=tuple(Chunk(i, 0, n, True) for i in ids[:b])))
        eng.release(ids[:b])
        return eng.pass_log[0][1]

    once(1, min(lengths))  # the process's first pass runs cold
    shapes = [(b, n) for b in rows for n in lengths]
    rng = np.random.default_rng(a.seed)
    secs: dict[tuple[int, int], list[float]] = {s: [] for s in shapes}
    for r in range(a.rounds):
        for i in rng.permutation(len(shapes)):
            secs[shapes[i]].append(once(*shapes[i]))
        print(f"round {r + 1} of {a.rounds} timed", file=sys.stderr)
    meas = np.array([np.median(secs[s]) for s in shapes])
    ratio = {
        k: meas / np.array([float(m.prefill(b, n)[0]) for b, n in shapes])
        for k, m in priced.items()
    }
    names = list(priced)
    print(
        f"\n{'rows':>4} {'length':>6} {'measured ms':>11}  " + "  ".join(f"{k:>22}" for k in names)
    )
    for i, (b, n) in enumerate(shapes):
        cells = "  ".join(f"{ratio[k][i]:22.3f}" for k in names)
        print(f"{b:>4} {n:>6} {meas[i] * 1e3:11.1f}  {cells}")
    print("\nmeasured / priced, level out (each column over its median): |error| median, worst")
    for k in names:
        e = np.abs(ratio[k] / np.median(ratio[k]) - 1) * 100
        print(f"  {k:<30} level {np.median(ratio[k]):.3f}; {np.median(e):5.1f} %, {e.max():5.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
