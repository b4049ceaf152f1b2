"""Checks for lab 7 (the class is the traffic). Run: pytest course/labs -k lab7"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).resolve().parent / "data"
# What the lab's steps give on the shipped records (batchsim's own numbers, recomputed by the
# course's CI).
EXPECTED = json.loads((DATA / "class-predicted.json").read_text())
CAUSES = (
    "network",
    "http",
    "tokeni",
    "stream",
    "queue",
    "client",
    "overhead",
    "python",
    "other process",
    "noise",
    "profile",
    "warm",
    "cold",
    "idle",
    "core",
    "cpu",
    "contention",
    "scheduler",
    "drain",
    "connect",
)


@pytest.fixture(scope="module")
def lab(load_lab):
    return load_lab("lab7_class_traffic")


def _columns(path: Path) -> dict[str, np.ndarray]:
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if not r["rejected"] and r["finish_s"]]
    return {
        k: np.array([float(r[k]) for r in rows]) for k in ("arrival_s", "first_token_s", "finish_s")
    }


def _p90(path: Path) -> float:
    c = _columns(path)
    return float(np.percentile(c["first_token_s"] - c["arrival_s"], 90))


def test_lab7_a_measured_ttft(lab):
    for path in (lab.STATIC_RECORD, lab.CONTINUOUS_RECORD):
        c = _columns(path)
        got = np.asarray(lab.measured_ttft(path), dtype=float)
        assert got.shape == c["arrival_s"].shape, (
            f"{path.name}: {len(c['arrival_s'])} requests finished, measured_ttft gave {got.size}"
        )
        assert np.allclose(got, c["first_token_s"] - c["arrival_s"], rtol=0, atol=1e-9), (
            f"{path.name}: TTFT is first_token_s - arrival_s, row by row, in seconds"
        )


def _replay(path: Path, policy: str, knobs: dict, limits: bool = True) -> dict:
    """batchsim's replay of a record's arrivals, as the lab asks for it (``limits``: the sidecar's
    context_len and KV budget), for naming a student's mistake, never for printing."""
    from batchsim import (
        load_step_time,
        make_policy,
        read_trace,
        simulate,
        summarize,
        trace_workload,
    )
    from batchsim.core.limits import ServerLimits

    meta = json.loads(Path(str(path) + ".json").read_text())
    lim = (
        ServerLimits(
            kv_budget_tokens=meta.get("kv_budget_tokens"), context_len=meta.get("context_len")
        )
        if limits
        else None
    )
    return summarize(
        simulate(
            trace_workload(read_trace(path)),
            make_policy(policy, **knobs),
            load_step_time(DATA / "class-calibration-tiny-gpt2-cpu.json"),
            limits=lim,
        )
    )


def _mistake(
    got: float, path: Path, policy: str, knobs: dict, other: str, other_knobs: dict
) -> str:
    """What a wrong p50 TTFT matches among the common mistakes, in words, or a list of what to
    check: a failing check says what went wrong, never the right figure."""
    right = _replay(path, policy, knobs)
    same = lambda x: x is not None and x == pytest.approx(got, rel=1e-6)  # noqa: E731
    if same(right["p50_ttft"] * 1e3):
        return "that is the right figure in milliseconds: return seconds"
    if same(right["mean_ttft"]) or same(right["p90_ttft"]):
        return (
            "that is another statistic of the right run: the median TTFT is "
            "summarize(...)['p50_ttft']"
        )
    if knobs and same(_replay(path, policy, {})["p50_ttft"]):
        return (
            f"that is {policy} with its default knobs: pass the knobs ({', '.join(knobs)}) to "
            f"make_policy"
        )
    if same(_replay(path, other, other_knobs)["p50_ttft"]):
        return f"that is the {other} policy's replay: this one is {policy}"
    if same(_replay(path, policy, knobs, limits=False)["p50_ttft"]):
        return (
            "that is the run without the server's limits: pass ServerLimits(context_len=...) from "
            "the sidecar"
        )
    return (
        "not batchsim's replay of these arrivals: check the workload (read_trace, then "
        "trace_workload), the policy and its knobs, the calibration's steps (load_step_time) and "
        "the limits, and that you return seconds"
    )


@pytest.mark.parametrize("which", ["static", "continuous"])
def test_lab7_b_prediction_is_batchsims(lab, which):
    path = lab.STATIC_RECORD if which == "static" else lab.CONTINUOUS_RECORD
    got = lab.predict_p50_ttft(path, lab.CALIBRATION)
    want = EXPECTED[which]["predicted_p50_ttft"]
    other = "continuous" if which == "static" else "static"
    if got != pytest.approx(want, rel=1e-6):
        pytest.fail(
            f"Part B, {path.name}: you gave {got!r}: "
            + _mistake(
                got,
                path,
                EXPECTED[which]["policy"],
                EXPECTED[which]["policy_knobs"],
                other,
                EXPECTED[other]["policy_knobs"],
            ),
            pytrace=False,
        )


def test_lab7_c_what_if(lab):
    for src, other in (("static", "continuous"), ("continuous", "static")):
        path = lab.STATIC_RECORD if src == "static" else lab.CONTINUOUS_RECORD
        knobs = EXPECTED[other]["policy_knobs"]
        got = lab.what_if(path, lab.CALIBRATION, other, knobs)
        want = EXPECTED[src]["what_if"][other]
        if got != pytest.approx(want, rel=1e-6):
            pytest.fail(
                f"Part C, the arrivals of {path.name} under {other} {knobs}: you gave {got!r}: "
                + _mistake(got, path, other, knobs, src, EXPECTED[src]["policy_knobs"]),
                pytrace=False,
            )


def test_lab7_c_which_policy_served_the_room_better(lab):
    measured = {
        w: _p90(lab.STATIC_RECORD if w == "static" else lab.CONTINUOUS_RECORD)
        for w in ("static", "continuous")
    }
    best = min(measured, key=measured.get)
    assert lab.LOWER_P90_TTFT in measured, (
        f"LOWER_P90_TTFT must be 'static' or 'continuous', got {lab.LOWER_P90_TTFT!r}"
    )
    assert lab.LOWER_P90_TTFT == best, (
        "Part C: LOWER_P90_TTFT names the record whose *measured* p90 TTFT is the lower: take the "
        "90th percentile of Part A's TTFTs for each record"
    )
    predicted = {w: EXPECTED[w]["predicted_p90_ttft"] for w in measured}
    same = min(predicted, key=predicted.get) == best
    assert lab.PREDICTED_THE_SAME is same, (
        "Part C: PREDICTED_THE_SAME must be True or False, and say whether batchsim's p90 TTFTs of "
        "the two records (Part B's replay, summarize's p90_ttft) put the two policies in the "
        "measured order"
    )


def test_lab7_d_gap_is_written(lab):
    # What the explanation says is graded by a person. The check only refuses a gap, a list of
    # keywords, or an answer that does not say what it explains.
    text = " ".join(str(lab.GAP).split()).lower()
    assert "your code here" not in text
    sentences = [
        s for s in text.replace("?", ".").replace("!", ".").split(".") if len(s.split()) >= 6
    ]
    assert len(sentences) >= 3, "at least three sentences of your own (six words or more each)"
    assert "ttft" in text or "first token" in text, (
        "say how far the p50 TTFT prediction is, and in which direction"
    )
    assert any(
        w in text for w in ("higher", "lower", "above", "below", "faster", "slower", "more", "less")
    ), "say in which direction the prediction misses"
    assert sum(c in text for c in CAUSES) >= 2, (
        f"name at least two causes, such as {', '.join(CAUSES[:8])}"
    )
