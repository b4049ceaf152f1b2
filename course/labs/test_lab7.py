"""Checks for lab 7 (the class is the traffic). Run: pytest course/labs -k lab7"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parent / "data"
# What the lab's steps give on the shipped records (batchsim's own numbers, recomputed by the course's CI).
EXPECTED = json.loads((DATA / "class-predicted.json").read_text())
CAUSES = ("network", "http", "tokeni", "stream", "queue", "client", "overhead", "python", "other process", "noise",
          "profile", "warm", "cold", "idle", "core", "cpu", "contention", "scheduler", "drain", "connect")


@pytest.fixture(scope="module")
def lab(load_lab):
    return load_lab("lab7_class_traffic")


def _columns(path: Path) -> dict[str, np.ndarray]:
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if not r["rejected"] and r["finish_s"]]
    return {k: np.array([float(r[k]) for r in rows]) for k in ("arrival_s", "first_token_s", "finish_s")}


def _p90(path: Path) -> float:
    c = _columns(path)
    return float(np.percentile(c["first_token_s"] - c["arrival_s"], 90))


def test_lab7_a_measured_ttft(lab):
    for path in (lab.STATIC_RECORD, lab.CONTINUOUS_RECORD):
        c = _columns(path)
        got = np.asarray(lab.measured_ttft(path), dtype=float)
        assert got.shape == c["arrival_s"].shape, (
            f"{path.name}: {len(c['arrival_s'])} requests finished, measured_ttft gave {got.size}")
        assert np.allclose(got, c["first_token_s"] - c["arrival_s"], rtol=0, atol=1e-9), (
            f"{path.name}: TTFT is first_token_s - arrival_s, row by row, in seconds")


@pytest.mark.parametrize("which", ["static", "continuous"])
def test_lab7_b_prediction_is_batchsims(lab, which):
    path = lab.STATIC_RECORD if which == "static" else lab.CONTINUOUS_RECORD
    got = lab.predict_p50_ttft(path, lab.CALIBRATION)
    want = EXPECTED[which]["predicted_p50_ttft"]
    assert got == pytest.approx(want, rel=1e-6), (
        f"{path.name}: replaying its arrivals under the sidecar's {EXPECTED[which]['policy']} policy and knobs, on "
        f"the calibration's steps, batchsim gives a p50 TTFT of {want * 1e3:.1f} ms; you gave {got * 1e3:.1f} ms")


def test_lab7_c_what_if(lab):
    for src, other in (("static", "continuous"), ("continuous", "static")):
        path = lab.STATIC_RECORD if src == "static" else lab.CONTINUOUS_RECORD
        knobs = EXPECTED[other]["policy_knobs"]
        got = lab.what_if(path, lab.CALIBRATION, other, knobs)
        want = EXPECTED[src]["what_if"][other]
        assert got == pytest.approx(want, rel=1e-6), (
            f"the arrivals of {path.name} under {other} {knobs}: batchsim gives a p50 TTFT of {want * 1e3:.1f} ms, "
            f"you gave {got * 1e3:.1f} ms")


def test_lab7_c_which_policy_served_the_room_better(lab):
    measured = {w: _p90(lab.STATIC_RECORD if w == "static" else lab.CONTINUOUS_RECORD) for w in ("static", "continuous")}
    best = min(measured, key=measured.get)
    assert lab.LOWER_P90_TTFT == best, (f"measured p90 TTFT: static {measured['static'] * 1e3:.0f} ms, "
                                        f"continuous {measured['continuous'] * 1e3:.0f} ms")
    predicted = {w: EXPECTED[w]["predicted_p90_ttft"] for w in measured}
    same = min(predicted, key=predicted.get) == best
    assert lab.PREDICTED_THE_SAME is same, (
        f"PREDICTED_THE_SAME must be True or False: batchsim's p90 TTFT: static {predicted['static'] * 1e3:.0f} ms, "
        f"continuous {predicted['continuous'] * 1e3:.0f} ms")


def test_lab7_d_gap_is_written(lab):
    # What the explanation says is graded by a person. The check only refuses a gap, a list of
    # keywords, or an answer that does not say what it explains.
    text = " ".join(str(lab.GAP).split()).lower()
    assert "your code here" not in text
    sentences = [s for s in text.replace("?", ".").replace("!", ".").split(".") if len(s.split()) >= 6]
    assert len(sentences) >= 3, "at least three sentences of your own (six words or more each)"
    assert "ttft" in text or "first token" in text, "say how far the p50 TTFT prediction is, and in which direction"
    assert any(w in text for w in ("higher", "lower", "above", "below", "faster", "slower", "more", "less")), (
        "say in which direction the prediction misses")
    assert sum(c in text for c in CAUSES) >= 2, f"name at least two causes, such as {', '.join(CAUSES[:8])}"
