"""Lab 4, solution: calibrate the simulator, and explain its error."""

from __future__ import annotations

import numpy as np

from batchsim import LinearStepTime


def fit(prompt_tokens, decode_rows, kv_read, seconds) -> LinearStepTime:
    y = np.asarray(seconds, dtype=np.float64)
    X = np.column_stack([np.ones_like(y), prompt_tokens, decode_rows, kv_read]).astype(np.float64)
    A = X / y[:, None]  # relative error: every step counts the same
    b = np.ones(len(y))
    active = [0, 1, 2, 3]
    while True:
        coef, *_ = np.linalg.lstsq(A[:, active], b, rcond=None)
        negative = [c for c, v in zip(active, coef) if v < 0 and c != 0]
        if not negative:
            break
        active.remove(negative[0])  # drop a negative cost and refit the rest
    full = np.zeros(4)
    full[active] = coef
    full[0] = max(full[0], 1e-9)
    return LinearStepTime(*map(float, full), source="lab 4 fit")


def errors(predicted: dict, measured: dict) -> dict:
    return {
        k: (predicted[k] - measured[k]) / measured[k]
        for k in predicted
        if k in measured and isinstance(predicted[k], (int, float)) and measured[k]
    }


def worst(predicted: dict, measured: dict) -> str:
    e = errors(predicted, measured)
    return max(e, key=lambda k: abs(e[k]))


EXPLANATION = """
Throughput averages over thousands of steps, so per-step errors of the linear model cancel and noise
averages out: it is predicted within one percent. The time to first token is the shortest interval
measured, a single prefill step plus the wait to be scheduled, so every fixed cost the calibrated
model does not see weighs most on it: Python and scheduler overhead between steps, tokenisation, and
the warm-up of the first passes; that is why mean TTFT is off by more than half. The p99 latency is
decided by a handful of the slowest moments of the run, which come from run-to-run noise of a shared
CPU (other processes, frequency changes) and from shapes outside the profiled grid (the longest
prompts), where a linear fit extrapolates. To do better I would profile after a warm-up with more
repetitions, add a per-request overhead term measured from the scheduler, add the longest prompts
and largest batches to the grid, and measure the run twice to compare the error with that spread
before blaming the model.
"""
