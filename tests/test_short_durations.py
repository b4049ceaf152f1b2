"""The simulator's short path prices a step in Python floats: the very floats ``durations`` gives.

A run's every step time comes from one or the other (a repeat of up to 16 passes takes the short
path), so a difference in the last bit would move every record; this holds them equal, bit for bit,
on random steps of every shape, for the linear model and for the roofline of real GPUs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from batchsim import LinearStepTime
from batchsim.core.step import Chunk, Step
from batchsim.machine.catalog import DEFAULT_CATALOG
from batchsim.machine.roofline import RooflineStepTime
from batchsim.sim.steptime import SHORT_REPEAT


def random_steps(rng: np.random.Generator, n: int = 300):
    for _ in range(n):
        rows = int(rng.integers(0, 200))
        decode = tuple(range(1000, 1000 + rows))
        width = int(rng.integers(1, 8192))
        kv = int(rng.integers(0, width * max(rows, 1) + 1))
        if rng.random() < 0.5 and rows:  # decode only: repeated
            m = int(rng.integers(1, SHORT_REPEAT + 1))
            yield Step(decode=decode, kv_read=kv, decode_width=width, repeat=m), m
        else:
            chunks = tuple(
                Chunk(i, int(rng.integers(0, 2000)), int(rng.integers(1, 4000)))
                for i in range(int(rng.integers(1, 5)))
            )
            yield (
                Step(
                    prefill=chunks,
                    decode=decode,
                    kv_read=kv + sum(c.start for c in chunks),
                    decode_width=width,
                ),
                1,
            )


MODELS = [
    LinearStepTime(0.01, 2e-5, 5e-5, 1e-8),
    LinearStepTime(3e-3, 7.1e-6, 1.3e-4, 3.3e-9, plan="grouped"),
]
for gpu, model, dtype in (
    ("A100-80GB", "llama-3-8b", "fp16"),
    ("H100-SXM", "llama-3-8b", "fp16"),
    ("L4", "llama-3-8b", "fp16"),
):
    try:
        MODELS.append(
            RooflineStepTime(DEFAULT_CATALOG.gpu(gpu), DEFAULT_CATALOG.model(model), dtype)
        )
    except Exception:  # noqa: BLE001 - a catalog without that entry: the others still test the path
        pass


@pytest.mark.parametrize("model", MODELS, ids=repr)
def test_short_path_gives_the_floats_durations_gives(model):
    rng = np.random.default_rng(7)
    checked = 0
    for step, m in random_steps(rng):
        short = model.short_durations(step, m)
        if short is None:
            continue  # a step the model prices pass by pass (a grouped plan's prefill)
        assert short == model.durations(step, m).tolist(), (step, m)
        checked += 1
    assert checked > 100


def test_roofline_takes_the_short_path_and_a_subclass_that_prices_its_own_way_does_not():
    roof = next(m for m in MODELS if isinstance(m, RooflineStepTime))
    step = Step(decode=(1, 2, 3), kv_read=300, decode_width=100, repeat=4)
    assert roof.short_durations(step, 4) is not None
    assert roof.short_durations(replace(step, repeat=SHORT_REPEAT + 1), SHORT_REPEAT + 1) is None

    class Slower(RooflineStepTime):
        def times(self, p, d, kv):
            return 2 * super().times(p, d, kv)

    slow = Slower(roof.gpu, roof.model, roof.dtype)
    # its own times: durations prices it, not the short path
    assert slow.short_durations(step, 4) is None
