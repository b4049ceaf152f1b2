"""The course's reference for lesson 7: a calibration and a measurement of the default compare.

Lab 5 ships vLLM's profile and measurement so that a laptop without vLLM can do it; this is the
same for ``python -m realrun``. ``realrun/reference/data/`` holds, made on the course machine by
``python -m realrun.cli.make_reference``:

- ``reference-calibration-tiny-gpt2-cpu.json``: the profile of tiny-gpt2 (CPU, fp32, one
  thread) on the shapes the default workload needs, with each shape's spread and the canary's
  own reading at its end. ``--calibration reference`` names it.
- ``reference-measured-tiny-gpt2-cpu.json``: what the bare ``python -m realrun`` printed there,
  run after run: each policy's repeats, the median prediction and its band, the verdict line,
  and each run's wall time, which the README, ``--help`` and ``course/gpu-lab.md`` quote.

Why the bare run predicts from a shipped calibration instead of profiling first: a profile
taken a minute earlier moves with the machine's moment, so two runs in a row predicted the
taxi's mean TTFT at 2,570 and 1,045 ms while the measurement moved far less; a calibration that
stays put makes the prediction a prediction, the same each time, and only the measurement moves.

Why at the calibration's own level (``--no-speed-check``), not moved to the canaries': the
canary's reference is its reading at the end of the profile, in the profiling process, right
after half a minute of hot passes; read from a later process on the same quiet machine, it came
out 1.21x-1.70x for decode passes in eight sessions here, while the runs' own decode passes ran
at 0.8x-1.0x of their profiled price (the decomposition). Moving the prediction there made every
latency worse. The canaries still run and are printed: they say how this machine compares.
``python -m realrun compare`` profiles this machine first, and its canaries share the profile's
process.
"""

from __future__ import annotations

from pathlib import Path

from batchsim.core.errors import ConfigError
from batchsim.core.files import read_json

__all__ = ["REFERENCE", "CALIBRATION", "MEASURED", "calibration_path", "measured"]

#: ``--calibration reference``: the shipped calibration.
REFERENCE = "reference"
DATA = Path(__file__).resolve().parent / "data"
CALIBRATION = DATA / "reference-calibration-tiny-gpt2-cpu.json"
MEASURED = DATA / "reference-measured-tiny-gpt2-cpu.json"


def calibration_path(name: str | None) -> str | None:
    """The file a ``--calibration`` value names: ``reference`` is the shipped one, anything else
    itself."""
    if name != REFERENCE:
        return name
    if not CALIBRATION.is_file():
        raise ConfigError(
            f"calibration reference: {CALIBRATION} is missing from this installation "
            "(make it with python -m realrun.cli.make_reference, or give a calibration file)"
        )
    return str(CALIBRATION)


def measured() -> dict:
    """The reference measurement (see the module's docstring for what it holds)."""
    return read_json(MEASURED, "reference measurement")
