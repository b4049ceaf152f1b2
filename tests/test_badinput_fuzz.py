"""A fuzz of flag values: whatever a flag is given, the answer is exit 0 with finite JSON, or exit 2
with one line.

Hypothesis draws a flag of ``python -m batchsim run`` (or ``theory``/``roofline``) and a
value: NaN, infinities, huge and tiny numbers, zero, negatives, integers near the type
limits, numbers written oddly (``1e3``, ``0x10``, `` 5 ``) and random text. Each case
runs in this process on a 20-request workload, so 250 examples take seconds.
Derandomised, so CI sees the same examples on every run; a failure prints its input.
"""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchsim.cli import main

RUN_FLAGS = [
    "--rate",
    "--requests",
    "--duration",
    "--prompt-len",
    "--output-len",
    "--seed",
    "--arrival",
    "--max-batch",
    "--max-wait",
    "--max-seqs",
    "--max-batched-tokens",
    "--block-size",
    "--step-time",
    "--gpu-price",
    "--mem-util",
    "--compute-eff",
    "--memory-eff",
    "--step-overhead",
    "--kv-budget-tokens",
    "--kv-budget-bytes",
    "--slo-ttft",
    "--slo-tpot",
    "--slo-e2e",
    "--policy",
    "--gpu",
    "--model",
    "--dtype",
    "--speedup",
]

_special = st.sampled_from(
    [
        "nan",
        "NaN",
        "inf",
        "-inf",
        "+inf",
        "Infinity",
        "1e308",
        "-1e308",
        "1e-308",
        "5e-324",
        "1e400",
        "0",
        "-0",
        "-1",
        "1",
        "2",
        "0.5",
        "1e3",
        "1e9",
        "1e12",
        "0x10",
        " 5 ",
        "",
        "9" * 30,
        "-" + "9" * 30,
        "1_000",
        "uniform:1,1e20",
        "lognormal:1e308,1",
        "gamma:1e308",
        "uniform:5,1",
        "trace:",
        "rush-hour:0@1",
        "20GB",
        "1e400GB",
        "taxi,",
        "A100-80GB",
    ]
)
_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(min_value=1e-12, max_value=1e12).map(lambda v: f"{v:g}"),
)
_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
)
VALUES = st.one_of(_special, _numbers, _text)


def _strict(text: str):
    def no(c):
        raise AssertionError(f"non-finite {c} in the JSON")

    return json.loads(text, parse_constant=no)


def _call(argv: list[str]) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # must not happen: main returns its code
            code = ("SystemExit", e.code)
    return code, out.getvalue(), err.getvalue()


def _check(argv: list[str]) -> None:
    code, out, err = _call(argv)
    assert "Traceback" not in err, err
    if code == 0:
        obj = _strict(out)
        assert {"config", "runs", "notes"} <= set(obj)
        for r in obj["runs"]:
            s = r.get("summary")
            if s is not None:  # conservation after whatever the flag did
                assert s["completed"] + s["rejected"] == s["arrived"], (argv, s)
                assert all(not isinstance(v, float) or math.isfinite(v) for v in s.values())
        return
    assert code == 2, (argv, code, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, (argv, err)


@settings(
    max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    flag=st.sampled_from(RUN_FLAGS),
    value=VALUES,
    second=st.sampled_from([None, *RUN_FLAGS]),
    value2=VALUES,
)
def test_run_flags(flag, value, second, value2, tmp_path_factory):
    argv = ["run", "--policy", "taxi,continuous", "--no-plots", "--json", f"{flag}={value}"]
    if second is not None and second != flag:
        argv.append(f"{second}={value2}")
    if "--requests" not in (flag, second) and "--duration" not in (flag, second):
        argv += ["--requests", "20"]
    _check(argv)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(flag=st.sampled_from(["--requests", "--seed"]), value=VALUES)
def test_theory_flags(flag, value):
    _check(
        [
            "theory",
            "--json",
            f"{flag}={value}",
            *([] if flag == "--requests" else ["--requests", "100"]),
        ]
    )


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    flag=st.sampled_from(
        [
            "--context",
            "--max-batch",
            "--prompt",
            "--compute-eff",
            "--memory-eff",
            "--step-overhead",
            "--mem-util",
            "--gpu-price",
            "--gpu",
            "--model",
            "--dtype",
        ]
    ),
    value=VALUES,
)
def test_roofline_flags(flag, value):
    _check(["roofline", "--json", "--no-plots", f"{flag}={value}"])


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e308", "1e-308", "0", "-1", "abc", ""])
def test_every_numeric_run_flag_at_the_edges(value):
    """The same contract, exhaustively over the flags for the nastiest values."""
    for flag in RUN_FLAGS:
        argv = ["run", "--policy", "taxi", "--no-plots", "--json", f"{flag}={value}"]
        if flag not in ("--requests", "--duration"):
            argv += ["--requests", "20"]
        _check(argv)
