"""The bad-input suite's harness: run one input, say what happened.

A case is an input (command-line words, or a Python call) and what a well-made tool
must do with it: ``refuse`` (exit code 2 and exactly one line on stderr that holds the
given words, typically the field and the value, and no traceback) or ``accept``
(exit code 0; with ``--json`` the output parses with no NaN or Infinity, and every
run's requests are conserved: completed + rejected = arrived = the requests asked).

``outcome(case, tmp)`` runs it in this process (``main(argv)``, so hundreds of cases
take seconds) under a watchdog and returns one of:

    held       did what the case expects
    traceback  an exception escaped (or a traceback was printed)
    exit       SystemExit escaped main() instead of a return code
    silent     accepted what must be refused, or an accepted run broke conservation
    refused    refused what must be accepted
    unclear    refused, but not in one line naming the words, or not with exit code 2
    hang       still running after the watchdog's limit

Files a case needs are written under ``tmp`` from ``FILES``; ``{f:NAME}`` in an argument
is replaced by that file's path, ``{tmp}`` by the folder itself. A case may also name a
service to run while it runs (``serve``: ``{port}`` in an argument is its port) and a
folder to prepare (``prepare``), both from ``badinput_fixtures``; and an accepted case may
name the words its note must hold (``note``): where accepting is right, the user is told.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PLAIN = "arrival_s,prompt_tokens,output_tokens\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_ROWS = "".join(f"{i * 0.2:.1f},{20 + i},{5 + i % 7}\n" for i in range(30))
CAL = '{"model": "linear", "c0": %s, "c1": 2e-05, "c2": 5e-05, "c3": 1e-08}'
GPU = (
    '{"gpus": {"g": {"tflops": %s, "bandwidth_gbs": 900, "memory_gb": 48, "price_per_hour": '
    "1.2%s}}}"
)
MODEL = (
    '{"models": {"m": {"layers": %s, "hidden": 2048, "heads": 16, "kv_heads": 16, "head_dim": 128, '
    '"vocab": 32000, "params": 1.3e9, "max_context": 4096}}}'
)

#: name -> file content (bytes). Kept small: the whole suite writes under a megabyte (one file: 17
#: MB).
FILES: dict[str, bytes] = {
    "good": (PLAIN + GOOD_ROWS).encode(),
    "bom": ("\ufeff" + PLAIN + GOOD_ROWS).encode("utf-8"),
    "crlf": (PLAIN + GOOD_ROWS).replace("\n", "\r\n").encode(),
    "float_tokens": (PLAIN + "0,12.0,5\n1,30,7.0\n").encode(),
    "nan_time": (PLAIN + "0,10,5\nnan,10,5\n1,10,5\n").encode(),
    "nan_first": (PLAIN + "nan,10,5\n1,10,5\n").encode(),
    "inf_time": (PLAIN + "0,10,5\ninf,10,5\n").encode(),
    "neg_inf_time": (PLAIN + "-inf,10,5\n0,10,5\n").encode(),
    "huge_time": (PLAIN + "0,10,5\n1e308,10,5\n").encode(),
    "backwards": (PLAIN + "5,10,5\n1,10,5\n").encode(),
    "tokens_1e23": (PLAIN + "0,100000000000000000000000,5\n").encode(),
    "tokens_frac": (PLAIN + "0,10.5,5\n").encode(),
    "tokens_zero": (PLAIN + "0,10,0\n").encode(),
    "tokens_neg": (PLAIN + "0,-4,5\n").encode(),
    "tokens_nan": (PLAIN + "0,nan,5\n").encode(),
    "tokens_word": (PLAIN + "0,ten,5\n").encode(),
    "few_fields": (PLAIN + "0,10\n").encode(),
    "many_fields": (PLAIN + "0,10,5,9\n").encode(),
    "huge_field": (PLAIN + "0," + "1" * 200_000 + ",5\n").encode(),
    "nul": (PLAIN + "0,10\x00,5\n").encode(),
    "binary": bytes(range(256)) * 8,
    "png": b"\x89PNG\r\n\x1a\n" + bytes(200),
    "utf16": (PLAIN + GOOD_ROWS).encode("utf-16"),
    "latin1": (PLAIN + "0,10,5\n# caf\xe9\n").encode("latin-1"),
    "empty": b"",
    "header_only": PLAIN.encode(),
    "bad_header": b"time,prompt,output\n0,1,1\n",
    "azure_good": (
        AZURE
        + "".join(f"2023-11-16 18:15:{10 + i:02d}.6805900,{100 + i},{20 + i}\n" for i in range(20))
    ).encode(),
    "azure_bad_time": (
        AZURE + "2023-11-16 18:15:46.6805900,374,44\n16/11/2023 18:15,1,1\n"
    ).encode(),
    "azure_nan_time": (AZURE + "nan,374,44\n").encode(),
    "bad_after_5": (PLAIN + "".join(f"{i},10,5\n" for i in range(5)) + "6,oops,5\n").encode(),
    # calibrations
    "cal_good": (CAL % "0.01").encode(),
    "cal_bom": ("\ufeff" + CAL % "0.01").encode("utf-8"),
    "cal_true": (CAL % "true").encode(),
    "cal_string": (CAL % '"0.01"').encode(),
    "cal_nan": (CAL % "NaN").encode(),
    "cal_inf": (CAL % "Infinity").encode(),
    "cal_huge": (CAL % "1e308").encode(),
    "cal_1e400": (CAL % "1e400").encode(),
    "cal_neg": (CAL % "-1").encode(),
    "cal_zero": (CAL % "0").encode(),
    "cal_null": (CAL % "null").encode(),
    "cal_missing": b'{"model": "linear", "c1": 1e-5}',
    "cal_quadratic": b'{"model": "quadratic", "c0": 0.01}',
    "cal_list": b"[0.01, 0, 0, 0]",
    "cal_notjson": b"{c0: 0.01",
    "cal_deep": b"[" * 100_000,
    # The profiled format (realrun profile writes it): an old version, a boolean where seconds
    # belong.
    "cal_profiled_v1": b'{"model": "profiled", "version": 1}',
    "cal_profiled_true": (
        b'{"model": "profiled", "version": 2, "join_cost": true, "decode": {"rows": [1], '
        b'"columns": [8], "seconds": [[0.001]]}, "prefill": {"rows": [1], "columns": [8], '
        b'"seconds": [[0.001]]}}'
    ),
    "cal_utf16": (CAL % "0.01").encode("utf-16"),
    # catalogs
    "cat_good": (GPU % ("100", "")).encode(),
    "cat_bom": ("\ufeff" + GPU % ("100", "")).encode("utf-8"),
    "cat_bf16_no": (GPU % ("100", ', "bf16": "no"')).encode(),
    "cat_bf16_one": (GPU % ("100", ', "bf16": 1')).encode(),
    "cat_dtype_num": (GPU % ("100", ', "default_dtype": 16')).encode(),
    "cat_dtype_bad": (GPU % ("100", ', "default_dtype": "fp8"')).encode(),
    "cat_tflops_word": (GPU % ('"fast"', "")).encode(),
    "cat_tflops_true": (GPU % ("true", "")).encode(),
    "cat_tflops_huge": (GPU % ("1e308", "")).encode(),
    "cat_tflops_1e400": (GPU % ("1e400", "")).encode(),
    "cat_tflops_neg": (GPU % ("-1", "")).encode(),
    "cat_tflops_nan": (GPU % ("NaN", "")).encode(),
    "cat_unknown_field": (GPU % ("100", ', "colour": "red"')).encode(),
    "cat_layers_frac": (MODEL % "2.5").encode(),
    "cat_layers_true": (MODEL % "true").encode(),
    "cat_layers_huge": (MODEL % "1e30").encode(),
    "cat_layers_zero": (MODEL % "0").encode(),
    "cat_gpus_list": b'{"gpus": [1, 2]}',
    "cat_toplevel_list": b"[]",
    "cat_other_table": b'{"cpus": {}}',
    "cat_entry_not_table": b'{"gpus": {"g": 5}}',
    "cat_notjson": b"{gpus",
    "cat_binary": bytes(range(256)),
    "cat_toml_bad.toml": b"[gpus\n",
    "cat_toml_nan.toml": b"[gpus.g]\ntflops = nan\nbandwidth_gbs = 900\nmemory_gb = "
    b"48\nprice_per_hour = 1.0\n",
    "cat_toml_good.toml": b"[gpus.g]\ntflops = 100\nbandwidth_gbs = 900\nmemory_gb = "
    b"48\nprice_per_hour = 1.0\n",
    "a_file": b"not a folder\n",
}
BIG_FILE = "cal_17mb"  # written on demand: 17 MB of JSON spaces


def write_files(tmp: Path) -> None:
    for name, data in FILES.items():
        (tmp / name).write_bytes(data)
    (tmp / BIG_FILE).write_bytes(b" " * (17 * 2**20) + (CAL % "0.01").encode())
    (tmp / "folder").mkdir(exist_ok=True)


@dataclass(frozen=True)
class Case:
    """One input and what must come of it."""

    id: str
    argv: tuple[str, ...] = ()
    words: tuple[str, ...] = ()  # refuse: each must appear in the one stderr line
    accept: bool = False
    requests: int | None = None  # accept: the request count every run must conserve
    call: Callable | None = field(default=None, compare=False)  # an API case instead of argv
    main: str = "batchsim"
    note: tuple[
        str, ...
    ] = ()  # accept: each must appear in what was printed (the note that says why)
    serve: str | None = (
        None  # a service from badinput_fixtures to run meanwhile; {port} is its port
    )
    prepare: str | None = None  # a folder from badinput_fixtures to write under tmp first

    def args(self, tmp: Path) -> list[str]:
        out = []
        for a in self.argv:
            for name in (*FILES, BIG_FILE, "folder"):
                a = a.replace("{f:" + name + "}", str(tmp / name))
            out.append(a.replace("{tmp}", str(tmp)))
        return out


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _strict_json(text: str):
    def no(c):
        raise ValueError(f"non-finite number {c} in the JSON")

    return json.loads(text, parse_constant=no)


def _mains():
    from batchsim.cli import main as bmain

    mains = {"batchsim": bmain}
    try:
        from realrun.cli import main as rmain

        mains["realrun"] = rmain
    except ImportError:
        pass
    return mains


#: The watchdog against a hang, not a speed limit: the slowest case seen on a loaded 2-core machine
#: (a real run whose every request is rejected, after loading the model) took over 60 s; a hang runs
#: forever.
WATCHDOG_S = 600


def run_case(case: Case, tmp: Path, timeout: int = WATCHDOG_S) -> tuple[object, str, str]:
    """(exit code or exception, stdout, stderr) of one case, under a watchdog (and its service, if
    any)."""
    if case.serve is None and case.prepare is None:
        return _run_case(case, tmp, timeout, ())
    from badinput_fixtures import prepare, serving

    prepare(case.prepare, tmp)
    with serving(case.serve) as port:
        return _run_case(
            case, tmp, timeout, [a.replace("{port}", str(port)) for a in case.args(tmp)]
        )


def _run_case(case: Case, tmp: Path, timeout: int, argv) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if case.call is not None:
                    result: object = case.call(tmp)
                    code: object = (
                        ("exception", AssertionError("the call returned False"), "")
                        if result is False
                        else 0
                    )
                else:
                    code = _mains()[case.main](list(argv) or case.args(tmp))
            except SystemExit as e:
                code = ("exit", e.code)
            except _Hang:
                code = ("hang", None)
            except BaseException as e:  # noqa: BLE001 - the harness records whatever escapes
                code = ("exception", e, traceback.format_exc())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


def classify(case: Case, code, out: str, err: str) -> tuple[str, str]:
    """(category, detail) as the module docstring defines them."""
    if isinstance(code, tuple):
        kind = code[0]
        if kind == "hang":
            return "hang", "watchdog"
        if kind == "exit":
            return "exit", f"SystemExit({code[1]!r}) escaped main()"
        exc = code[1]
        from batchsim import ConfigError

        if isinstance(exc, ConfigError) and case.call is not None:
            msg = str(exc)
            if case.accept:
                return "refused", msg
            if "\n" in msg or not all(_has(msg, w) for w in case.words):
                return "unclear", msg
            return "held", msg
        return "traceback", f"{type(exc).__name__}: {str(exc)[:200]}"
    if "Traceback (most recent call last)" in err:
        return "traceback", err.strip().splitlines()[-1]
    if case.accept:
        if code != 0:
            return "refused" if code == 2 else "unclear", f"exit {code}: {err.strip()[:300]}"
        missing = [w for w in case.note if not _has(out, w)]
        if missing:  # accepted, but without the note that says what was ignored and why
            return "silent", f"exit 0 without a note holding {missing}: {out.strip()[-300:]}"
        return _check_accepted(case, out)
    if case.call is not None:  # an API call that should have raised ConfigError returned instead
        return "silent", f"accepted: returned {code!r}"
    if code == 0:
        return "silent", "exit 0: accepted what must be refused"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if code != 2:
        return "unclear", f"exit {code}: {err.strip()[:300]}"
    if len(lines) != 1:
        return "unclear", f"{len(lines)} lines on stderr: {err.strip()[:300]}"
    missing = [w for w in case.words if not _has(lines[0], w)]
    if missing:
        return "unclear", f"the line lacks {missing}: {lines[0]}"
    return "held", lines[0]


def _has(line: str, word: str) -> bool:
    """``max_batch`` is found in ``--max-batch`` and the other way round; ``a|b``: either."""
    norm = lambda t: t.lower().replace("_", "-")  # noqa: E731
    return any(norm(w) in norm(line) for w in word.split("|"))


def _check_accepted(case: Case, out: str) -> tuple[str, str]:
    if "--json" not in case.argv:
        return "held", "exit 0"
    try:
        obj = _strict_json(out)
    except ValueError as e:
        return "silent", f"not finite JSON: {e}"
    if not isinstance(obj, dict) or not {"config", "runs", "notes"} <= set(obj):
        return "unclear", f"JSON is not one object with config, runs, notes: {str(obj)[:200]}"
    for r in obj["runs"]:
        for s in [r[k] for k in ("summary", "predicted", "measured") if k in r]:
            if s["completed"] + s["rejected"] != s["arrived"]:
                return "silent", f"conservation broken in {r['label']}: {s}"
            if case.requests is not None and s["arrived"] != case.requests:
                return "silent", f"{r['label']}: {s['arrived']} arrived, {case.requests} asked"
            for k, v in s.items():
                if isinstance(v, float) and not math.isfinite(v):
                    return "silent", f"{k} = {v}"
    return "held", "exit 0, finite JSON, conserved"


def outcome(case: Case, tmp: Path, timeout: int = WATCHDOG_S) -> tuple[str, str]:
    return classify(case, *run_case(case, tmp, timeout))
