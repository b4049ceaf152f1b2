"""The bare ``python -m realrun``: what it runs, on what load, and how long it takes.

It is lesson 7's compare, made to be trusted on a laptop: the four policies on realrun's small
load (``REALRUN_DEFAULTS``), predicted from the course's reference calibration at the level it was
profiled at (``realrun.reference.course``), so the prediction is the same on every run, each policy
measured twice so the errors can be held up to the machine's own run-to-run spread, on one thread
of the CPU as the reference was. On a laptop far from the course machine's speed the verdict judges
the prediction again at the speed the run's own passes read (``realrun.judge.compare._machine``).
Its time is the reference's: the wall times of the very same run on the course machine, recorded
with it.

The README, ``--help`` and ``course/gpu-lab.md`` quote ``workload_text`` and ``time_text``
(a test holds them to these functions), so the three say one thing.
"""

from __future__ import annotations

from .run_setup import REALRUN_DEFAULTS

__all__ = ["BARE_ARGV", "BARE_COMMAND", "workload_text", "time_text", "bare_line"]

#: What the bare run is: compare, with the reference calibration at its own level
#: (``realrun.reference.course`` says why), two runs per policy, the CPU, one thread.
BARE_ARGV = (
    "compare",
    "--calibration",
    "reference",
    "--no-speed-check",
    "--repeats",
    "2",
    "--device",
    "cpu",
    "--threads",
    "1",
)
BARE_COMMAND = "python -m realrun " + " ".join(BARE_ARGV)


def _range(spec: str) -> str:
    """'uniform:16,128' as prose: 'uniform 16..128'."""
    kind, _, args = spec.partition(":")
    return f"{kind} {args.replace(',', '..')}" if args else spec


def workload_text() -> str:
    """The default load, as every document states it."""
    d = REALRUN_DEFAULTS
    return (
        f"{d['requests']} requests at {d['rate']:g} per second (Poisson), prompts "
        f"{_range(d['prompt_len'])} tokens, outputs {_range(d['output_len'])}"
    )


def _wall(key: str) -> list[float]:
    from ..reference.course import MEASURED, measured

    if not MEASURED.is_file():
        return []
    return [float(s) for s in measured().get(key) or []]


def time_text(key: str = "wall_s") -> str:
    """'93-95 s (the course machine, 2 cores, 2 runs)': the recorded wall times of the bare run
    (``wall_s``) or of ``compare`` with no flags (``compare_wall_s``); 'not timed' without the
    reference."""
    s = _wall(key)
    if not s:
        return "not timed (the reference measurement is missing)"
    lo, hi = round(min(s)), round(max(s))
    span = f"{lo} s" if lo == hi else f"{lo}-{hi} s"
    return f"{span} (the course machine, 2 cores, {len(s)} run{'s' if len(s) > 1 else ''})"


def bare_line() -> str:
    """The progress line the bare run starts with: what it is and how long it takes."""
    return (
        f"python -m realrun is: {BARE_COMMAND}; {workload_text()}; each of the four policies "
        f"measured twice and predicted from the course's reference calibration, the same "
        f"prediction every run; {time_text()}"
    )
