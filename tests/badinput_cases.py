"""The bad-input suite's cases: what a new user and a careless script type, and what must come of
it.

Three lists, one per front door: ``BATCHSIM`` (``python -m batchsim``), ``REALRUN``
(``python -m realrun``, every case refused before a model loads, or run on tiny-gpt2
in well under a second) and ``API`` (the Python functions a notebook calls).
"""

from __future__ import annotations

import numpy as np
from badinput import Case

# A small run: 20 requests (unless the case sets the extent), no figures, on the default GPU server.
R = ("run", "--policy", "taxi,continuous", "--no-plots")
J = (*R, "--json")
_COMMANDS = ("run", "compare", "theory", "roofline", "sweep", "scenarios", "plan")


def _extent(argv: tuple, tail) -> tuple:
    return argv if "--requests" in tail or "--duration" in tail else (*argv, "--requests", "20")


def refuse(id_: str, tail, *words, base=R) -> Case:
    argv = tuple(tail) if tail and tail[0] in _COMMANDS else _extent((*base, *tail), tail)
    return Case(id_, argv, tuple(words))


def accept(id_: str, tail, requests: int | None = 20, base=J) -> Case:
    argv = (*base, *tail) if base[0] != "run" else _extent((*base, *tail), tail)
    return Case(id_, argv, accept=True, requests=requests)


def _shown(v: str) -> str:
    """How a message shows a value typed as ``v`` (1e308 as 1e+308, 1e400 as inf)."""
    try:
        int(v)
        return v
    except ValueError:
        pass
    try:
        f = float(v)
    except ValueError:
        return v
    if v.strip().lower() in ("nan", "inf", "-inf"):
        return v
    text = repr(f)  # as batchsim.core.errors.show writes a float
    return text if len(text) <= 12 else f"{f:.6g}"


def _numbers(flag: str, field: str, values) -> list[Case]:
    out = []
    for v in values:
        tail = (f"{flag}={v}",) if v.startswith("-") and not v[1:2].isdigit() else (flag, v)
        shown = _shown(v)
        out.append(
            refuse(
                f"{flag} {v}", tail, field, (v if shown == v else f"{v}|{shown}") if v else field
            )
        )
    return out


BATCHSIM: list[Case] = [
    # -- workload numbers ------------------------------------------------------------------
    *_numbers(
        "--rate", "rate", ["nan", "inf", "-inf", "-1", "0", "1e308", "1e-308", "abc", "1e400", ""]
    ),
    *_numbers("--requests", "requests", ["0", "-1", "1.5", "abc", "1e9", "100000000000", ""]),
    *_numbers("--duration", "duration", ["nan", "inf", "-1", "0", "1e308", "abc"]),
    refuse("--duration 1e-9 (no arrivals)", ("--duration", "1e-9"), "duration", "1e-09"),
    refuse(
        "--duration 1e7 (too big)",
        ("--duration", "1e7"),
        "run too large",
        "--duration",
        "--no-size-check",
    ),
    refuse("--output-len 1e9", ("--output-len", "1000000000"), "output-len", "1000000000"),
    refuse(
        "--output-len 1e7 x 5000 (too big)",
        ("--output-len", "10000000", "--requests", "5000"),
        "run too large",
        "--output-len",
    ),
    *_numbers("--seed", "seed", ["-1", "abc", "1.5"]),
    refuse(
        "--requests with --duration",
        ("--requests", "50", "--duration", "3"),
        "--requests",
        "--duration",
        "50",
        "3",
    ),
    # -- lengths ---------------------------------------------------------------------------
    *[
        refuse(f"--prompt-len {v}", ("--prompt-len", v), "prompt-len", w)
        for v, w in [
            ("0", "0"),
            ("-5", "-5"),
            ("uniform:5", "uniform:5"),
            ("uniform:10,5", "5"),
            ("uniform:1,1e20", "1e20"),
            ("uniform:1,100000000000000000000", "100000000000000000000"),
            ("lognormal:1e308,1", "1e+308"),
            ("lognormal:10,20", "20"),
            ("lognormal:nan,1", "nan"),
            ("lognormal:inf,2", "inf"),
            ("lognormal:5,0.5", "0.5"),
            ("weibull:3", "weibull:3"),
            ("", "prompt-len"),
            ("1e3", "1e3"),
            ("99999999999", "99999999999"),
            ("uniform:a,b", "uniform:a,b"),
            ("lognormal:", "lognormal:"),
            ("12abc", "12abc"),
        ]
    ],
    *[
        refuse(f"--output-len {v}", ("--output-len", v), "output-len", w)
        for v, w in [
            ("0", "0"),
            ("lognormal:1,1", "1"),
            ("uniform:0,5", "0"),
            ("abc", "abc"),
            ("-1", "-1"),
            ("nan", "nan"),
        ]
    ],
    # -- arrivals --------------------------------------------------------------------------
    *[
        refuse(f"--arrival {v}", ("--arrival", v), w1, w2)
        for v, w1, w2 in [
            ("weibull", "arrival", "weibull"),
            ("gamma:0", "cv", "0"),
            ("gamma:-1", "cv", "-1"),
            ("gamma:nan", "cv", "nan"),
            ("gamma:inf", "cv", "inf"),
            ("gamma:1e308", "cv", "1e+308"),
            ("gamma:1e-308", "cv", "1e-308"),
            ("gamma:abc", "arrival", "gamma:abc"),
            ("rush-hour:abc", "arrival", "rush-hour:abc"),
            ("rush-hour:10@-1", "rate", "-1"),
            ("rush-hour:0@5", "duration", "0"),
            ("rush-hour:10@nan", "rate", "nan"),
            ("rush-hour:1e308@1", "duration", "1e+308"),
            ("rush-hour:10", "arrival", "rush-hour:10"),
            ("poisson:3", "poisson", "poisson:3"),
            ("constant:x", "constant", "constant:x"),
            ("", "arrival", "''"),
            ("trace:", "trace", "trace"),
            ("trace:{tmp}/missing.csv", "trace", "missing.csv"),
        ]
    ],
    refuse("--speedup without a trace", ("--speedup", "2"), "--speedup", "2"),
    # -- traces ----------------------------------------------------------------------------
    *[
        refuse(f"trace {name}", ("--trace", "{f:" + name + "}"), *words)
        for name, words in [
            ("nan_time", ("line 3", "finite", "nan")),
            ("nan_first", ("line 2", "nan")),
            ("inf_time", ("line 3", "inf")),
            ("neg_inf_time", ("line 2", "-inf")),
            ("backwards", ("line 3", "backwards")),
            ("tokens_1e23", ("line 2", "prompt_tokens", "10,000,000")),
            ("tokens_frac", ("line 2", "10.5")),
            ("tokens_zero", ("line 2", "output_tokens")),
            ("tokens_neg", ("line 2", "-4")),
            ("tokens_nan", ("line 2", "nan")),
            ("tokens_word", ("line 2", "ten")),
            ("few_fields", ("line 2", "3 fields")),
            ("many_fields", ("line 2", "3 fields")),
            ("huge_field", ("line 2",)),
            ("nul", ("line 2", "NUL")),
            ("binary", ("trace", "binary")),
            ("png", ("trace", "png")),
            ("utf16", ("trace", "UTF-16")),
            ("latin1", ("line 3", "UTF-8", "0xe9")),
            ("empty", ("trace", "line 1")),
            ("header_only", ("trace", "no rows")),
            ("bad_header", ("line 1", "header")),
            ("azure_bad_time", ("line 3", "timestamp", "16/11/2023")),
            ("azure_nan_time", ("line 2", "nan")),
            ("folder", ("trace", "folder")),
            ("a_file", ("line 1", "header")),
        ]
    ],
    refuse("trace missing", ("--trace", "{tmp}/missing.csv"), "trace", "missing.csv", "not found"),
    refuse("--trace with --rate", ("--trace", "{f:good}", "--rate", "3"), "--rate", "trace", "3"),
    refuse(
        "--trace with --arrival",
        ("--trace", "{f:good}", "--arrival", "gamma:2"),
        "--trace",
        "--arrival",
    ),
    refuse(
        "--trace with --prompt-len",
        ("--trace", "{f:good}", "--prompt-len", "100"),
        "--prompt-len",
        "trace",
    ),
    refuse(
        "--trace with --output-len",
        ("--trace", "{f:good}", "--output-len", "100"),
        "--output-len",
        "trace",
    ),
    refuse(
        "--trace with --arrival trace:",
        ("--trace", "{f:good}", "--arrival", "trace:{f:good}"),
        "--trace",
        "--arrival",
    ),
    refuse(
        "trace --speedup 1e-308",
        ("--trace", "{f:good}", "--speedup", "1e-308"),
        "speedup",
        "1e-308",
    ),
    refuse("trace --speedup nan", ("--trace", "{f:good}", "--speedup", "nan"), "speedup", "nan"),
    refuse("trace --speedup 0", ("--trace", "{f:good}", "--speedup", "0"), "speedup", "0"),
    refuse("trace --speedup -2", ("--trace", "{f:good}", "--speedup", "-2"), "speedup", "-2"),
    refuse(
        "trace read past a bad row",
        ("--trace", "{f:bad_after_5}", "--requests", "10"),
        "line 7",
        "oops",
    ),
    # -- policies --------------------------------------------------------------------------
    *_numbers("--max-batch", "max_batch", ["0", "-1", "1.5", "abc", "10000000"]),
    *_numbers("--max-wait", "max_wait", ["nan", "inf", "-1", "1e308", "abc"]),
    *_numbers("--max-seqs", "max_seqs", ["0", "10000000", "x"]),
    *_numbers("--max-batched-tokens", "max_batched_tokens", ["0", "10000000000", "-5"]),
    *_numbers("--block-size", "block_size", ["0", "-16", "2.5"]),
    *[
        refuse(f"--policy {v!r}", ("--policy", v), "policy", w)
        for v, w in [
            ("bogus", "bogus"),
            ("", "policy"),
            (",", "','"),
            ("taxi,limo", "limo"),
            ("TAXI", "TAXI"),
            ("taxi;static", "taxi;static"),
        ]
    ],
    refuse("--chunked-prefill=no", ("--chunked-prefill=no",), "chunked-prefill"),
    # -- server ----------------------------------------------------------------------------
    *_numbers("--step-time", "step-time", ["nan", "inf", "0", "-1", "1e308", "abc"]),
    refuse(
        "--step-time with --calibration",
        ("--step-time", "0.1", "--calibration", "{f:cal_good}"),
        "--step-time",
        "--calibration",
    ),
    *[
        refuse(f"calibration {name}", ("--calibration", "{f:" + name + "}"), "calibration", *words)
        for name, words in [
            ("cal_true", ("c0", "True")),
            ("cal_string", ("c0", "0.01")),
            ("cal_nan", ("NaN",)),
            ("cal_inf", ("Infinity",)),
            ("cal_huge", ("c0", "1e+308")),
            ("cal_1e400", ("c0", "inf")),
            ("cal_neg", ("c0", "-1")),
            ("cal_zero", ("c0", "0")),
            ("cal_null", ("c0", "None")),
            ("cal_missing", ("c0",)),
            ("cal_quadratic", ("quadratic",)),
            ("cal_list", ("linear",)),
            ("cal_notjson", ("JSON",)),
            ("cal_deep", ("JSON",)),
            ("cal_utf16", ("UTF-16",)),
            ("binary", ("binary",)),
            ("folder", ("folder",)),
            ("cal_17mb", ("MiB",)),
        ]
    ],
    refuse(
        "calibration missing",
        ("--calibration", "{tmp}/nope.json"),
        "calibration",
        "nope.json",
        "not found",
    ),
    *[
        refuse(f"--gpu {v}", ("--gpu", v), "gpu", v or "''")
        for v in ["V100", "", "a100"[:0] + "H100"]
    ],
    refuse("--model gpt5", ("--model", "gpt5"), "model", "gpt5"),
    refuse(
        "--gpu T4 --model llama-3-8b",
        ("--gpu", "T4", "--model", "llama-3-8b"),
        "does not fit",
        "T4",
    ),
    refuse("--dtype fp8", ("--dtype", "fp8"), "dtype", "fp8"),
    refuse(
        "--dtype bf16 on T4", ("--gpu", "T4", "--model", "gpt2", "--dtype", "bf16"), "bf16", "T4"
    ),
    *_numbers("--gpu-price", "gpu-price", ["-1", "nan", "inf", "1e308", "abc"]),
    *_numbers("--mem-util", "mem-util", ["0", "1.5", "nan", "-0.5"]),
    *_numbers("--compute-eff", "compute", ["0", "2", "nan"]),
    *_numbers("--memory-eff", "memory", ["-1", "inf"]),
    *_numbers("--step-overhead", "overhead", ["-1", "nan", "1e308"]),
    *_numbers(
        "--kv-budget-tokens", "kv-budget-tokens", ["0", "-5", "2.5", "1000000000000000", "abc"]
    ),
    *[
        refuse(f"--kv-budget-bytes {v}", ("--kv-budget-bytes", v), "kv-budget-bytes", w)
        for v, w in [
            ("1", "1"),
            ("abc", "abc"),
            ("-1", "-1"),
            ("1e400", "inf"),
            ("nan", "nan"),
            ("20XB", "20XB"),
            ("0GB", "0"),
        ]
    ],
    refuse(
        "--kv-budget-bytes with --kv-budget-tokens",
        ("--kv-budget-bytes", "20GB", "--kv-budget-tokens", "1000"),
        "--kv-budget-tokens",
        "--kv-budget-bytes",
    ),
    refuse(
        "--kv-budget-bytes without a server",
        ("--kv-budget-bytes", "20GB", "--step-time", "0.01"),
        "kv-budget-bytes",
        "server",
    ),
    refuse(
        "--mem-util with --step-time",
        ("--mem-util", "0.5", "--step-time", "0.01"),
        "--mem-util",
        "GPU",
        "0.5",
    ),
    refuse(
        "--dtype with --step-time", ("--dtype", "fp32", "--step-time", "0.01"), "--dtype", "fp32"
    ),
    refuse(
        "--catalog with --calibration",
        ("--catalog", "{f:cat_good}", "--calibration", "{f:cal_good}"),
        "--catalog",
        "GPU",
    ),
    refuse(
        "--compute-eff with --step-time",
        ("--compute-eff", "0.5", "--step-time", "0.01"),
        "--compute-eff",
        "--step-time",
    ),
    refuse(
        "--step-overhead with --calibration",
        ("--step-overhead", "0.001", "--calibration", "{f:cal_good}"),
        "--step-overhead",
        "--calibration",
    ),
    *[
        refuse(f"catalog {name}", ("--catalog", "{f:" + name + "}"), "catalog", *words)
        for name, words in [
            ("cat_bf16_no", ("bf16", "'no'")),
            ("cat_bf16_one", ("bf16", "1")),
            ("cat_dtype_num", ("default_dtype", "16")),
            ("cat_dtype_bad", ("dtype", "fp8")),
            ("cat_tflops_word", ("tflops", "fast")),
            ("cat_tflops_true", ("tflops", "True")),
            ("cat_tflops_huge", ("tflops", "1e+308")),
            ("cat_tflops_1e400", ("tflops", "inf")),
            ("cat_tflops_neg", ("tflops", "-1")),
            ("cat_tflops_nan", ("NaN",)),
            ("cat_unknown_field", ("colour",)),
            ("cat_layers_frac", ("layers", "2.5")),
            ("cat_layers_true", ("layers", "True")),
            ("cat_layers_huge", ("layers",)),
            ("cat_layers_zero", ("layers", "0")),
            ("cat_gpus_list", ("gpus",)),
            ("cat_toplevel_list", ("gpus",)),
            ("cat_other_table", ("gpus",)),
            ("cat_entry_not_table", ("gpus.g",)),
            ("cat_notjson", ("JSON",)),
            ("cat_binary", ("binary",)),
            ("cat_toml_bad.toml", ("TOML",)),
            ("cat_toml_nan.toml", ("tflops", "nan")),
            ("folder", ("folder",)),
        ]
    ],
    refuse("catalog missing", ("--catalog", "{tmp}/nope.json"), "catalog", "nope.json"),
    # -- SLOs ------------------------------------------------------------------------------
    *_numbers("--slo-ttft", "slo_ttft", ["nan", "-1", "inf", "0", "abc"]),
    *_numbers("--slo-tpot", "slo_tpot", ["-0.1", "nan"]),
    *_numbers("--slo-e2e", "slo_e2e", ["0", "-inf"]),
    # -- output paths ------------------------------------------------------------------------
    refuse("--out at a file", ("--out", "{f:a_file}"), "out", "a_file"),
    refuse("--out under a file", ("--out", "{f:a_file}/sub"), "out", "a_file"),
    refuse("--out under /proc", ("--out", "/proc/batchsim-test"), "out", "/proc"),
    refuse(
        "--out under /proc, plots on",
        ("run", "--policy", "taxi", "--requests", "20", "--out", "/proc/x"),
        "out",
        "/proc",
    ),
    # -- everything rejected ------------------------------------------------------------------
    refuse(
        "KV budget below every request",
        ("--kv-budget-tokens", "5"),
        "every request was rejected",
        "KV",
    ),
    refuse(
        "KV budget below every request, JSON",
        ("--kv-budget-tokens", "5", "--json"),
        "every request was rejected",
    ),
    # -- commands and scenarios ----------------------------------------------------------------
    refuse("unknown flag", ("--bogus",), "--bogus"),
    refuse(
        "unknown scenario",
        ("run", "no-such-scenario", "--no-plots"),
        "scenario",
        "no-such-scenario",
    ),
    refuse(
        "scenario with a bad flag",
        ("run", "taxi-vs-bus", "--rate", "-3", "--no-plots"),
        "rate",
        "-3",
    ),
    refuse("unknown command", ("frobnicate",), "frobnicate"),
    refuse(
        "compare with a bad policy",
        ("compare", "--policy", "taxi,limo", "--no-plots"),
        "policy",
        "limo",
    ),
    # -- theory, roofline, sweep ---------------------------------------------------------------
    *[
        refuse(f"theory {' '.join(t)}", ("theory", *t), *w)
        for t, w in [
            (("--requests", "5"), ("requests", "5")),
            (("--requests", "1000000000"), ("requests",)),
            (("--requests", "50000000"), ("too large",)),
            (("--seed", "-1"), ("seed", "-1")),
            (("--requests", "abc"), ("--requests", "abc")),
        ]
    ],
    *[
        refuse(f"roofline {' '.join(t)}", ("roofline", *t, "--no-plots"), *w)
        for t, w in [
            (("--gpu", "V100"), ("gpu", "V100")),
            (("--model", "x"), ("model", "'x'")),
            (("--context", "-1"), ("context", "-1")),
            (("--model", "gpt2", "--context", "5000"), ("context", "5000")),
            (("--max-batch", "0"), ("max-batch", "0")),
            (("--max-batch", "1000000000"), ("max-batch", "1000000000")),
            (("--prompt", "0"), ("prompt", "0")),
            (("--prompt", "1000000000"), ("prompt", "1000000000")),
            (("--compute-eff", "0"), ("compute_eff", "0")),
            (("--compute-eff", "nan"), ("compute_eff", "nan")),
            (("--memory-eff", "2"), ("memory_eff", "2")),
            (("--step-overhead", "-1"), ("overhead", "-1")),
            (("--mem-util", "2"), ("mem-util", "2")),
            (("--gpu-price", "nan"), ("gpu-price", "nan")),
            (("--dtype", "fp8"), ("dtype", "fp8")),
            (("--catalog", "{tmp}/nope.json"), ("catalog", "nope.json")),
        ]
    ],
    refuse("roofline --out at a file", ("roofline", "--out", "{f:a_file}"), "out", "a_file"),
    *[
        refuse(
            f"sweep {' '.join(t)}",
            ("sweep", *t, "--requests", "10", "--no-plots", "--jobs", "1"),
            *w,
        )
        for t, w in [
            (("max_batch",), ("KNOB=v1,v2",)),
            (("colour=1,2",), ("knob", "colour")),
            (("max_batch=1,two",), ("max_batch", "two")),
            (("max_batch=0,4",), ("max_batch", "0")),
            (("rate=nan",), ("rate", "nan")),
            (("requests=1,100000000",), ("too large",)),
            (("max_wait=inf",), ("max_wait", "inf")),
            (("prompt_len=uniform:5",), ("prompt-len", "uniform:5")),
            (("duration=1,2",), ("--requests", "--duration")),
            (("max_batch=" + ",".join(["1"] * 1001),), ("1000",)),
            (("gpu=V100",), ("gpu", "V100")),
            (("step_time=-1",), ("step-time", "-1")),
        ]
    ],
    refuse(
        "sweep --jobs 0",
        ("sweep", "max_batch=1,2", "--jobs", "0", "--requests", "10", "--no-plots"),
        "jobs",
        "0",
    ),
    refuse(
        "sweep --jobs 100000",
        ("sweep", "max_batch=1,2", "--jobs", "100000", "--requests", "10", "--no-plots"),
        "jobs",
        "100000",
    ),
    refuse(
        "sweep --out at a file",
        ("sweep", "max_batch=1,2", "--out", "{f:a_file}", "--requests", "10"),
        "out",
        "a_file",
    ),
    # -- fleets, summary-only runs, schedulers, capacity plans -----------------------------------
    *_numbers("--replicas", "replicas", ["0", "-1", "1.5", "abc", "100000"]),
    refuse("--router unknown", ("--replicas", "2", "--router", "fastest"), "router", "fastest"),
    refuse(
        "--summary-only with --out",
        ("--summary-only", "--out", "{tmp}/o"),
        "--summary-only",
        "--out",
    ),
    refuse(
        "sweep --scheduler nonsense",
        ("sweep", "max_batch=1,2", "--scheduler", "udp://x:1", "--requests", "10", "--no-plots"),
        "scheduler",
        "udp://x:1",
    ),
    refuse(
        "sweep replicas=0",
        ("sweep", "replicas=0,2", "--requests", "10", "--no-plots", "--jobs", "1"),
        "replicas",
        "0",
    ),
    refuse(
        "plan without an objective",
        ("plan", "--rate", "5", "--requests", "20"),
        "plan needs an objective",
    ),
    refuse(
        "plan with an unknown GPU",
        ("plan", "--rate", "5", "--requests", "20", "--slo-p99-e2e", "5", "--gpus", "V100"),
        "gpus",
        "V100",
    ),
    refuse(
        "plan with an SLO nothing meets",
        (
            "plan",
            "--rate",
            "5",
            "--requests",
            "40",
            "--slo-p99-e2e",
            "0.001",
            "--gpus",
            "L4",
            "--policies",
            "taxi",
            "--max-replicas",
            "2",
            "--scheduler",
            "none",
        ),
        "no configuration meets",
        "closest",
    ),
    # -- accepted: odd but meaningful input, run and checked ---------------------------------------
    accept("a fleet of 3, least-kv", ("--replicas", "3", "--router", "least-kv")),
    accept("summary only", ("--summary-only",)),
    accept("trace with a BOM", ("--trace", "{f:bom}")),
    accept("trace with CRLF lines", ("--trace", "{f:crlf}")),
    accept("trace token counts written 12.0", ("--trace", "{f:float_tokens}"), requests=2),
    accept(
        "trace cut before its bad row",
        ("--trace", "{f:bad_after_5}", "--requests", "5"),
        requests=5,
    ),
    accept("Azure trace", ("--trace", "{f:azure_good}")),
    accept("trace with --duration", ("--trace", "{f:good}", "--duration", "2.0"), requests=None),
    accept("trace with --speedup 4", ("--trace", "{f:good}", "--speedup", "4")),
    accept(
        "trace with --seed (kept for realrun's prompts)", ("--trace", "{f:good}", "--seed", "3")
    ),
    accept("calibration with a BOM", ("--calibration", "{f:cal_bom}")),
    accept("catalog with a BOM", ("--catalog", "{f:cat_bom}", "--gpu", "g", "--model", "gpt2")),
    accept(
        "TOML catalog", ("--catalog", "{f:cat_toml_good.toml}", "--gpu", "g", "--model", "gpt2")
    ),
    accept("--rate 1e9", ("--rate", "1e9")),
    accept("--rate 1e-9", ("--rate", "1e-9")),
    accept("--step-time 1e-308", ("--step-time", "1e-308")),
    accept("--max-wait 86400", ("--policy", "dynamic", "--max-wait", "86400")),
    accept("--arrival gamma:100", ("--arrival", "gamma:100")),
    accept("--arrival gamma:0.01", ("--arrival", "gamma:0.01")),
    accept(
        "--prompt-len lognormal:1e7,1 (capped)",
        ("--prompt-len", "lognormal:10000000,1", "--step-time", "0.01"),
    ),
    accept(
        "--kv-budget-tokens 1e12", ("--kv-budget-tokens", "1000000000000", "--step-time", "0.01")
    ),
    accept(
        "--kv-budget-tokens 600: some rejected, each with a reason",
        ("--kv-budget-tokens", "600", "--step-time", "0.01"),
    ),
    accept(
        "--max-batched-tokens 100: long prompts rejected under continuous",
        ("--max-batched-tokens", "100", "--no-chunked-prefill"),
    ),
    accept(
        "--max-wait on taxi only: ignored, with a note", ("--policy", "taxi", "--max-wait", "1")
    ),
    accept("--duration 2 at --rate 5", ("--duration", "2"), requests=None),
    accept("--seed 2**70", ("--seed", str(2**70))),
    accept("--slo-ttft 1e308", ("--slo-ttft", "1e308")),
    accept("--gpu-price 0", ("--gpu-price", "0")),
    accept("--requests 1", ("--requests", "1"), requests=1),
    accept("theory small", (), requests=None, base=("theory", "--requests", "100", "--json")),
    accept(
        "roofline huge prompt within context",
        (),
        requests=None,
        base=(
            "roofline",
            "--model",
            "mistral-7b",
            "--prompt",
            "32768",
            "--max-batch",
            "1048576",
            "--json",
            "--no-plots",
        ),
    ),
    accept(
        "sweep with a BOM trace",
        (),
        requests=None,
        base=("sweep", "speedup=1,2", "--trace", "{f:bom}", "--json", "--no-plots", "--jobs", "1"),
    ),
]


def _api(id_, fn, *words, ok=False) -> Case:
    return Case(id_, words=tuple(words), accept=ok, call=fn)


def _wl(**kw):
    from batchsim import Fixed, Poisson, make_workload

    args = {"n": 5, **kw}
    return make_workload(Poisson(5.0), Fixed(10), Fixed(5), **args)


def _run_policy(name, kv=None, **knobs):
    from batchsim import ConstantStepTime, make_policy, simulate, summarize

    s = summarize(
        simulate(_wl(n=10), make_policy(name, **knobs), ConstantStepTime(0.01), kv_budget_tokens=kv)
    )
    assert s["completed"] + s["rejected"] == s["arrived"] == 10


def _cfg(**kw):
    from batchsim.core.config import WorkloadConfig

    WorkloadConfig(**kw).build()


def _pcfg(name, **kw):
    from batchsim.core.config import PolicyConfig

    PolicyConfig(name, **kw).build()


def _scfg(**kw):
    from batchsim.machine.serverconfig import ServerConfig

    ServerConfig(**kw).build()


#: Where the names the cases call live, beside batchsim's public face.
ARRIVALS, LENGTHS = "batchsim.core.arrivals", "batchsim.core.lengths"
CATALOG = "batchsim.machine.catalog"


def _b(name, module="batchsim"):
    """A name of batchsim's public face, or of the module named (imported when the case runs)."""
    import importlib

    return getattr(importlib.import_module(module), name)


API: list[Case] = [
    _api("Poisson(np.int64(5))", lambda t: _b("Poisson")(np.int64(5)), ok=True),
    _api("Poisson(np.float32(2.5))", lambda t: _b("Poisson")(np.float32(2.5)), ok=True),
    _api("Constant(np.int32(3))", lambda t: _b("Constant", ARRIVALS)(np.int32(3)), ok=True),
    *[
        _api(f"Poisson({v!r})", lambda t, v=v: _b("Poisson")(v), "rate", w)
        for v, w in [
            (True, "True"),
            ("5", "'5'"),
            (float("nan"), "nan"),
            (float("inf"), "inf"),
            (1e308, "1e+308"),
            (-1, "-1"),
            (0, "0"),
            (1e-308, "1e-308"),
            (np.float64("nan"), "nan"),
            (None, "None"),
        ]
    ],
    *[
        _api(f"Gamma(1, {v!r})", lambda t, v=v: _b("Gamma")(1.0, v), "cv", w)
        for v, w in [
            (1e308, "1e+308"),
            (float("nan"), "nan"),
            (0, "0"),
            (1e-9, "1e-09"),
            (np.bool_(True), "True"),
        ]
    ],
    _api("RushHour(())", lambda t: _b("RushHour", ARRIVALS)(()), "phases"),
    _api(
        "RushHour(((10, -1),))", lambda t: _b("RushHour", ARRIVALS)(((10.0, -1.0),)), "rate", "-1"
    ),
    _api(
        "RushHour(((nan, 1),))",
        lambda t: _b("RushHour", ARRIVALS)(((float("nan"), 1.0),)),
        "duration",
        "nan",
    ),
    *[
        _api(f"Fixed({v!r})", lambda t, v=v: _b("Fixed")(v), "length", w)
        for v, w in [(0, "0"), (1.5, "1.5"), (True, "True"), (10**8, "100000000"), ("7", "'7'")]
    ],
    _api("Fixed(np.int64(5))", lambda t: _b("Fixed")(np.int64(5)), ok=True),
    _api("Uniform(5, 1)", lambda t: _b("Uniform")(5, 1), "hi", "1"),
    _api("Uniform(1, 10**20)", lambda t: _b("Uniform")(1, 10**20), "hi", "100000000000000000000"),
    _api("LogNormal(1e308, 1)", lambda t: _b("LogNormal")(1e308, 1), "mean", "1e+308"),
    _api("LogNormal(nan, 1)", lambda t: _b("LogNormal")(float("nan"), 1), "mean", "nan"),
    _api("LogNormal(10, 20)", lambda t: _b("LogNormal")(10, 20), "mean", "median"),
    _api("LogNormal('a', 1)", lambda t: _b("LogNormal")("a", 1), "mean", "'a'"),
    _api("LogNormal(1e7, 1) samples stay in range", lambda t: _lognormal_in_range(), ok=True),
    _api("Empirical(())", lambda t: _b("Empirical", LENGTHS)(()), "empirical"),
    _api("Empirical((0,))", lambda t: _b("Empirical", LENGTHS)((0,)), "empirical", "0"),
    _api("parse_length(inf)", lambda t: _b("parse_length", LENGTHS)(float("inf")), "length", "inf"),
    _api("parse_length(np.int64(7))", lambda t: _b("parse_length", LENGTHS)(np.int64(7)), ok=True),
    _api("make_workload(seed=-1)", lambda t: _wl(seed=-1), "seed", "-1"),
    _api("make_workload(seed=1.5)", lambda t: _wl(seed=1.5), "seed", "1.5"),
    _api("make_workload(seed='a')", lambda t: _wl(seed="a"), "seed", "'a'"),
    _api("make_workload(seed=np.int64(3))", lambda t: _wl(seed=np.int64(3)), ok=True),
    _api("make_workload(n=0)", lambda t: _wl(n=0), "requests", "0"),
    _api("make_workload(n=1.5)", lambda t: _wl(n=1.5), "requests", "1.5"),
    _api("make_workload(n=np.int64(5))", lambda t: _wl(n=np.int64(5)), ok=True),
    _api("make_workload(n=10**9)", lambda t: _wl(n=10**9), "requests", "1000000000"),
    _api("make_workload(n and duration)", lambda t: _wl(n=5, duration=2.0), "exactly one"),
    _api(
        "make_workload(duration=nan)",
        lambda t: _wl(n=None, duration=float("nan")),
        "duration",
        "nan",
    ),
    _api("make_workload(duration=1e12)", lambda t: _wl(n=None, duration=1e12), "duration", "1e+12"),
    _api(
        "Workload with a nan arrival",
        lambda t: _b("Workload").from_arrays([0.0, float("nan")], [5, 5], [5, 5]),
        "finite",
        "nan",
    ),
    _api(
        "Workload with an inf arrival",
        lambda t: _b("Workload").from_arrays([0.0, float("inf")], [5, 5], [5, 5]),
        "finite",
        "inf",
    ),
    _api(
        "Workload unsorted",
        lambda t: _b("Workload").from_arrays([1.0, 0.0], [5, 5], [5, 5]),
        "sorted",
    ),
    _api(
        "trace_workload speedup 1e-308",
        lambda t: _b("trace_workload")(_b("read_trace")(t / "good"), speedup=1e-308),
        "speedup",
    ),
    _api(
        "trace_workload speedup nan",
        lambda t: _b("trace_workload")(_b("read_trace")(t / "good"), speedup=float("nan")),
        "speedup",
        "nan",
    ),
    _api(
        "trace_workload n=0",
        lambda t: _b("trace_workload")(_b("read_trace")(t / "good"), n=0),
        "requests",
        "0",
    ),
    _api("read_trace(binary)", lambda t: _b("read_trace")(t / "binary"), "binary"),
    _api("read_trace(utf16)", lambda t: _b("read_trace")(t / "utf16"), "UTF-16"),
    _api("read_trace(folder)", lambda t: _b("read_trace")(t / "folder"), "folder"),
    _api("read_trace(bom)", lambda t: _b("read_trace")(t / "bom"), ok=True),
    _api(
        "read_trace stops after max_rows",
        lambda t: len(_b("read_trace")(t / "bad_after_5", max_rows=5)) == 5,
        ok=True,
    ),
    _api(
        "load_catalog bf16 'no'",
        lambda t: _b("load_catalog", CATALOG)(t / "cat_bf16_no"),
        "bf16",
        "'no'",
    ),
    _api("load_step_time c0 true", lambda t: _b("load_step_time")(t / "cal_true"), "c0", "True"),
    _api(
        "kv_budget(..., override_tokens=2.5)",
        lambda t: _kv(override_tokens=2.5),
        "kv-budget-tokens",
        "2.5",
    ),
    _api(
        "kv_budget(..., override_bytes=1)",
        lambda t: _kv(override_bytes=1.0),
        "kv-budget-bytes",
        "1",
    ),
    _api(
        "kv_budget(..., mem_util=np.float64(0.5))", lambda t: _kv(mem_util=np.float64(0.5)), ok=True
    ),
    _api("SLO(ttft=nan)", lambda t: _b("SLO")(ttft=float("nan")), "slo_ttft", "nan"),
    _api("SLO(e2e=np.float64(2))", lambda t: _b("SLO")(e2e=np.float64(2.0)), ok=True),
    _api(
        "LinearStepTime(c0=np.float64(0.01))",
        lambda t: _b("LinearStepTime")(c0=np.float64(0.01)),
        ok=True,
    ),
    _api("LinearStepTime(c0=True)", lambda t: _b("LinearStepTime")(c0=True), "c0", "True"),
    _api(
        "ConstantStepTime(nan)", lambda t: _b("ConstantStepTime")(float("nan")), "step_time", "nan"
    ),
    _api(
        "GPU(bf16='no')",
        lambda t: _b("GPU", CATALOG)("g", 100, 900, 48, 1.0, bf16="no"),
        "bf16",
        "'no'",
    ),
    _api(
        "Model(layers=True)",
        lambda t: _b("Model", CATALOG)("m", True, 8, 1, 1, 8, 10, 100, 10),
        "layers",
        "True",
    ),
    _api(
        "make_policy('static', max_batch=0)",
        lambda t: _run_policy("static", max_batch=0),
        "max_batch",
        "0",
    ),
    _api(
        "make_policy('static', max_batch=1.5)",
        lambda t: _run_policy("static", max_batch=1.5),
        "max_batch",
        "1.5",
    ),
    _api(
        "make_policy('static', max_batch=np.int64(4))",
        lambda t: _run_policy("static", max_batch=np.int64(4)),
        ok=True,
    ),
    _api(
        "make_policy('dynamic', max_wait=nan)",
        lambda t: _run_policy("dynamic", max_wait=float("nan")),
        "max_wait",
        "nan",
    ),
    _api("make_policy('bus')", lambda t: _run_policy("bus"), "policy", "bus"),
    _api(
        "simulate(kv_budget_tokens=600) conserves",
        lambda t: _run_policy("continuous", kv=600),
        ok=True,
    ),
    # The configurations: the one place the CLIs and Python share every rule.
    _api(
        "PolicyConfig chunked_prefill='no'",
        lambda t: _pcfg("continuous", chunked_prefill="no"),
        "chunked_prefill",
        "'no'",
    ),
    _api(
        "PolicyConfig max_wait=1e308",
        lambda t: _pcfg("dynamic", max_wait=1e308),
        "max_wait",
        "1e+308",
    ),
    _api(
        "PolicyConfig max_batch=True",
        lambda t: _pcfg("static", max_batch=True),
        "max_batch",
        "True",
    ),
    _api("PolicyConfig name 'bus'", lambda t: _pcfg("bus"), "policy", "bus"),
    _api(
        "PolicyConfig max_batch=np.int64(4)",
        lambda t: _pcfg("static", max_batch=np.int64(4)),
        ok=True,
    ),
    _api("WorkloadConfig seed=-1", lambda t: _cfg(seed=-1), "seed", "-1"),
    _api(
        "WorkloadConfig requests and duration",
        lambda t: _cfg(requests=5, duration=1.0),
        "requests",
        "duration",
    ),
    _api("WorkloadConfig rate=nan", lambda t: _cfg(rate=float("nan")), "rate", "nan"),
    _api(
        "WorkloadConfig trace with speedup 0",
        lambda t: _cfg(trace=str(t / "good"), speedup=0.0),
        "speedup",
        "0",
    ),
    _api(
        "WorkloadConfig duration 1e-9",
        lambda t: _cfg(requests=None, duration=1e-9),
        "duration",
        "1e-09",
    ),
    _api(
        "WorkloadConfig numpy rate",
        lambda t: _cfg(rate=np.float64(3.0), requests=np.int64(7)),
        ok=True,
    ),
    _api("ServerConfig step_time=1e308", lambda t: _scfg(step_time=1e308), "step-time", "1e+308"),
    _api(
        "ServerConfig kv_budget_tokens=2.5",
        lambda t: _scfg(kv_budget_tokens=2.5),
        "kv-budget-tokens",
        "2.5",
    ),
    _api(
        "ServerConfig kv_budget_bytes='1' on a GPU",
        lambda t: _scfg(gpu="A100-80GB", kv_budget_bytes="1"),
        "kv-budget-bytes",
        "1",
    ),
    _api("ServerConfig gpu_price=inf", lambda t: _scfg(gpu_price=float("inf")), "gpu-price", "inf"),
    _api(
        "ServerConfig mem_util=0", lambda t: _scfg(gpu="A100-80GB", mem_util=0.0), "mem-util", "0"
    ),
]


def _kv(**kw):
    from batchsim.machine.catalog import DEFAULT_CATALOG
    from batchsim.machine.memory import kv_budget

    return kv_budget(DEFAULT_CATALOG.gpu("A100-80GB"), DEFAULT_CATALOG.model("llama-3-8b"), **kw)


def _lognormal_in_range():
    from batchsim import LogNormal
    from batchsim.core.lengths import MAX_TOKENS

    s = LogNormal(1e7, 1).sample(np.random.default_rng(0), 10_000)
    assert s.min() >= 1 and s.max() <= MAX_TOKENS


#: Cases the lead engineer's core changes resolve (policies, simulator): they fail today and must
#: pass after the merge; strict xfail makes a pass visible, so the marker is removed then.
API_AFTER_MERGE: list[Case] = [
    _api(
        "make_policy('continuous', chunked_prefill='no')",
        lambda t: _run_policy("continuous", chunked_prefill="no"),
        "chunked_prefill",
        "'no'",
    ),
    _api(
        "make_policy('dynamic', max_wait=1e308)",
        lambda t: _run_policy("dynamic", max_wait=1e308),
        "max_wait",
        "1e+308",
    ),
    _api("simulate(kv_budget_tokens=0)", lambda t: _run_policy("taxi", kv=0), "kv", "0"),
    _api("simulate(kv_budget_tokens=-5)", lambda t: _run_policy("taxi", kv=-5), "kv", "-5"),
    _api("simulate(kv_budget_tokens=2.5)", lambda t: _run_policy("taxi", kv=2.5), "kv", "2.5"),
]

# realrun: the same flags on the real side, refused before any model loads.
RR = ("run", "--requests", "3", "--threads", "1", "--no-plots")


def rr(id_, tail, *words, base=RR) -> Case:
    argv = (
        tuple(tail)
        if tail and tail[0] in ("run", "compare", "profile", "doctor", "bogus")
        else (*base, *tail)
    )
    return Case(id_, argv, tuple(words), main="realrun")


REALRUN: list[Case] = [
    *[
        rr(f"realrun --rate {v}", ("--rate", v), "rate", v)
        for v in ["nan", "-1", "abc", "1e-308", "inf"]
    ],
    *[
        rr(f"realrun --requests {v}", ("run", "--requests", v, "--threads", "1"), "requests", v)
        for v in ["0", "-2", "x"]
    ],
    *[
        rr(f"realrun --threads {v}", ("run", "--requests", "3", "--threads", v), "threads", v)
        for v in ["0", "-1", "100000", "abc"]
    ],
    rr("realrun doctor --threads 100000", ("doctor", "--threads", "100000"), "threads", "100000"),
    rr("realrun profile --threads 100000", ("profile", "--threads", "100000"), "threads", "100000"),
    rr("realrun --engine warp", ("--engine", "warp"), "engine", "warp"),
    rr("realrun run two policies", ("--policy", "taxi,static"), "policy", "taxi,static"),
    rr("realrun --policy bus", ("--policy", "bus"), "policy", "bus"),
    rr(
        "realrun continuous on hf-generate",
        ("--policy", "continuous", "--engine", "hf-generate"),
        "hf-generate",
    ),
    rr("realrun --max-batch 0", ("--policy", "static", "--max-batch", "0"), "max_batch", "0"),
    rr("realrun --max-wait nan", ("--policy", "dynamic", "--max-wait", "nan"), "max_wait", "nan"),
    *[
        rr(f"realrun --kv-budget-tokens {v}", ("--kv-budget-tokens", v), "kv-budget-tokens", v)
        for v in ["0", "-1", "2.5", "1000000000000000"]
    ],
    *[
        rr(f"realrun trace {n}", ("--trace", "{f:" + n + "}"), *w)
        for n, w in [
            ("nan_time", ("line 3", "nan")),
            ("binary", ("binary",)),
            ("folder", ("folder",)),
            ("tokens_1e23", ("line 2",)),
            ("utf16", ("UTF-16",)),
            ("huge_field", ("line 2",)),
        ]
    ],
    rr("realrun --trace with --rate", ("--trace", "{f:good}", "--rate", "2"), "--rate", "trace"),
    rr("realrun --speedup without a trace", ("--speedup", "3"), "--speedup"),
    rr("realrun --requests with --duration", ("--duration", "5"), "--requests", "--duration"),
    rr("realrun --out at a file", ("--out", "{f:a_file}"), "out", "a_file"),
    rr("realrun --out under /proc", ("--out", "/proc/realrun-test"), "out", "/proc"),
    rr(
        "realrun arrivals span more than a day",
        ("run", "--requests", "30", "--rate", "0.0001", "--threads", "1", "--no-plots"),
        "more than a day",
        "--rate",
    ),
    rr("realrun --prompt-len huge", ("--prompt-len", "lognormal:1e308,1"), "prompt-len", "1e+308"),
    rr(
        "realrun compare --grid huge",
        ("compare", "--grid", "huge", "--threads", "1"),
        "grid",
        "huge",
    ),
    *[
        rr(
            f"realrun compare calibration {n}",
            ("compare", "--calibration", "{f:" + n + "}", "--threads", "1"),
            "calibration",
            *w,
        )
        for n, w in [
            ("cal_true", ("c0", "True")),
            ("cal_nan", ("NaN",)),
            ("cal_profiled_true", ("join_cost", "True")),
            ("cal_profiled_v1", ("version", "1")),
            ("binary", ("binary",)),
            ("folder", ("folder",)),
            ("cal_notjson", ("JSON",)),
        ]
    ],
    rr(
        "realrun compare calibration missing",
        ("compare", "--calibration", "{tmp}/nope.json", "--threads", "1"),
        "nope.json",
    ),
    rr(
        "realrun compare --out under /proc",
        ("compare", "--out", "/proc/x", "--threads", "1"),
        "out",
        "/proc",
    ),
    rr(
        "realrun profile --grid huge",
        ("profile", "--grid", "huge", "--threads", "1"),
        "grid",
        "huge",
    ),
    rr(
        "realrun profile --repeats 0",
        ("profile", "--repeats", "0", "--threads", "1"),
        "repeats",
        "0",
    ),
    rr(
        "realrun profile --repeats 1e9",
        ("profile", "--repeats", "1000000000", "--threads", "1"),
        "repeats",
        "1000000000",
    ),
    rr(
        "realrun profile --out under /proc",
        ("profile", "--out", "/proc/x/cal.json", "--threads", "1"),
        "out",
        "/proc",
    ),
    rr(
        "realrun profile --out at a file",
        ("profile", "--out", "{f:a_file}", "--threads", "1"),
        "out",
        "a_file",
    ),
    rr("realrun --bogus-flag", ("--bogus-flag",), "--bogus-flag"),
    rr("realrun unknown command", ("bogus",), "bogus"),
    rr(
        "realrun unknown scenario",
        ("run", "no-such-scenario", "--threads", "1"),
        "scenario",
        "no-such-scenario",
    ),
    rr("realrun --device tpu", ("--device", "tpu"), "device", "tpu"),
    rr("realrun --dtype fp8", ("--dtype", "fp8"), "dtype", "fp8"),
    rr(
        "realrun KV budget below every request",
        ("--kv-budget-tokens", "5", "--json"),
        "every request was rejected",
    ),
    Case("realrun run --help", ("run", "--help"), accept=True, main="realrun"),
    Case(
        "realrun run, JSON",
        (
            "run",
            "--requests",
            "3",
            "--threads",
            "1",
            "--no-plots",
            "--json",
            "--rate",
            "50",
            "--prompt-len",
            "8",
            "--output-len",
            "3",
        ),
        accept=True,
        requests=3,
        main="realrun",
    ),
]


# -- calibrations' step times and spreads, step noise, compare's repeats and load (issue 18 / 23)
# ----------- Kept apart from the lists above (another engineer adds cases there): these cases'
# files join FILES here, before any fixture writes them.
import json as _json  # noqa: E402

from badinput import FILES as _FILES  # noqa: E402

_GRID = {"rows": [1, 2], "columns": [8, 16], "seconds": [[0.001, 0.002], [0.002, 0.003]]}


def _prof(**change) -> bytes:
    """A profiled (version 2) calibration with ``change`` applied; its spread 3 ratios per grid
    point."""
    q = [[[0.8, 1.0, 1.2]] * 2] * 2
    base = {
        "model": "profiled",
        "version": 2,
        "plan": "grouped",
        "decode": _GRID,
        "prefill": _GRID,
        "spread": {"levels": 3, "decode": q, "prefill": q, "lag1": 0.1},
    }
    return _json.dumps({**base, **change}).encode()


_FILES.update(
    {
        "cal_prof_spread": _prof(),
        "cal_prof_huge": _prof(decode={**_GRID, "seconds": [[1e300, 1e300], [1e300, 1e300]]}),
        "cal_prof_cell_str": _prof(decode={**_GRID, "seconds": [[0.001, "fast"], [0.002, 0.003]]}),
        "cal_prof_axis": _prof(decode={**_GRID, "columns": [32, 16]}),
        "cal_prof_wake": _prof(wake_idle=[0.001, 0.01], wake_extra=[0.001]),
        "cal_prof_gap_huge": _prof(step_gap=1e300),
        "cal_prof_spread_down": _prof(
            spread={"decode": [[[1.2, 1.0, 0.8]] * 2] * 2, "prefill": [[[1.0, 1.0]] * 2] * 2}
        ),
        "cal_prof_spread_shape": _prof(
            spread={"decode": [[[1.0, 1.0]] * 2], "prefill": [[[1.0, 1.0]] * 2] * 2}
        ),
    }
)

NOISE_BATCHSIM: list[Case] = [
    *[
        refuse(f"calibration {name}", ("--calibration", "{f:" + name + "}"), *words)
        for name, words in [
            ("cal_prof_huge", ("seconds[0][0]", "3600", "1e+300")),
            ("cal_prof_cell_str", ("seconds[0][1]", "'fast'")),
            ("cal_prof_axis", ("columns", "[32, 16]")),
            ("cal_prof_wake", ("cal_prof_wake", "wake_extra")),
            ("cal_prof_gap_huge", ("step_gap", "1e+300")),
            ("cal_prof_spread_down", ("spread decode", "must not decrease")),
            ("cal_prof_spread_shape", ("spread decode", "2 x 2")),
        ]
    ],
    refuse("--step-noise loud", ("--step-noise", "loud"), "step-noise", "loud"),
    refuse(
        "--step-noise profiled on a linear calibration",
        ("--calibration", "{f:cal_good}", "--step-noise", "profiled"),
        "step-noise",
        "spread",
    ),
    refuse(
        "--step-noise profiled on the default server",
        ("--step-noise", "profiled"),
        "step-noise",
        "spread",
    ),
    accept(
        "calibration with a spread, --step-noise profiled",
        ("--calibration", "{f:cal_prof_spread}", "--step-noise", "profiled"),
    ),
    accept(
        "calibration with a spread, --step-noise none",
        ("--calibration", "{f:cal_prof_spread}", "--step-noise", "none"),
    ),
]


def _noise_linear(t):
    from batchsim.sim.sampled import with_noise
    from batchsim.sim.steptime import LinearStepTime

    with_noise(LinearStepTime(0.01), seed=1)


def _busy(busy):
    from batchsim import ConstantStepTime, make_policy
    from batchsim.sim.busy import rate_factor_for_busy

    rate_factor_for_busy(_wl(n=10), lambda: make_policy("taxi"), ConstantStepTime(0.01), busy)


NOISE_API: list[Case] = [
    _api("with_noise(LinearStepTime)", _noise_linear, "step-noise", "spread"),
    *[
        _api(f"rate_factor_for_busy(busy={b!r})", lambda t, b=b: _busy(b), "busy", w)
        for b, w in [
            (1.0, "1.0"),
            (0.0, "0.0"),
            (float("nan"), "nan"),
            (True, "True"),
            ("0.7", "'0.7'"),
        ]
    ],
    _api("rate_factor_for_busy(busy=0.5)", lambda t: _busy(0.5), ok=True),
]

NOISE_REALRUN: list[Case] = [
    *[
        rr(
            f"realrun compare calibration {n}",
            ("compare", "--calibration", "{f:" + n + "}", "--threads", "1"),
            *w,
        )
        for n, w in [
            ("cal_prof_huge", ("seconds[0][0]", "1e+300")),
            ("cal_prof_cell_str", ("seconds[0][1]", "'fast'")),
            ("cal_prof_wake", ("cal_prof_wake", "wake_extra")),
        ]
    ],
    *[
        rr(f"realrun compare {' '.join(f)}", ("compare", "--threads", "1", *f), *w)
        for f, w in [
            (("--step-noise", "loud"), ("step-noise", "loud")),
            (("--seeds", "0"), ("seeds", "0")),
            (("--seeds", "1000"), ("seeds", "1000")),
            (("--repeats", "0"), ("repeats", "0")),
            (("--repeats", "-2"), ("repeats", "-2")),
            (("--busy", "1.5"), ("busy", "1.5")),
            (("--busy", "0"), ("busy", "0")),
            (("--busy", "nan"), ("busy", "nan")),
            (("--busy", "abc"), ("--busy", "abc")),
            (("--seeds", "3", "--step-noise", "none"), ("--seeds", "--step-noise")),
            (
                ("--calibration", "{f:cal_good}", "--step-noise", "profiled"),
                ("step-noise", "spread"),
            ),
        ]
    ],
]
