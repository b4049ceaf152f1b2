"""Trace replay: what the file says is what the simulator replays, and a bad row is named.

The Azure trace is read twice, once by ``read_trace`` and once here by plain ``csv``
and ``datetime`` arithmetic, and the two must agree; the replayed simulation must carry
the file's arrivals and lengths into its records. Malformed files, written to a temporary
folder, must raise ``ConfigError`` naming the file and the line.
"""

from __future__ import annotations

import csv
from datetime import datetime

import numpy as np
import pytest

from batchsim import (
    ConfigError,
    Continuous,
    LinearStepTime,
    read_trace,
    simulate,
    summarize,
    trace_workload,
)
from batchsim.traces import AZURE_TRACE, SHIPPED

STEP = LinearStepTime(0.01, 2e-5, 5e-5, 1e-8)


def parse_independently(path):
    """Arrival seconds after the first row (naive datetime differences), prompts, outputs."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    stamps = []
    for ts, _, _ in rows:
        base, frac = ts.split(".")
        # strptime takes at most 6 fractional digits; the trace has 7.
        stamps.append((datetime.strptime(base, "%Y-%m-%d %H:%M:%S"), float("0." + frac)))
    t0, f0 = stamps[0]
    arrivals = np.array([(t - t0).total_seconds() + (f - f0) for t, f in stamps])
    return arrivals, np.array([int(r[1]) for r in rows]), np.array([int(r[2]) for r in rows])


def test_azure_trace_matches_the_file():
    azure_trace = SHIPPED / AZURE_TRACE
    arrivals, prompts, outputs = parse_independently(azure_trace)
    tr = read_trace(azure_trace)
    assert len(tr) == len(arrivals) > 10_000
    np.testing.assert_allclose(tr.arrival_s, arrivals, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(tr.prompt_tokens, prompts)
    np.testing.assert_array_equal(tr.output_tokens, outputs)
    assert tr.arrival_s[0] == 0.0 and tr.duration == pytest.approx(arrivals[-1], abs=1e-6)

    wl = trace_workload(tr)
    np.testing.assert_allclose(wl.arrivals, arrivals, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(wl.prompt_tokens, prompts)
    np.testing.assert_array_equal(wl.output_tokens, outputs)


def test_azure_trace_cut_and_speedup():
    azure_trace = SHIPPED / AZURE_TRACE
    arrivals, prompts, outputs = parse_independently(azure_trace)
    tr = read_trace(azure_trace)
    first = trace_workload(tr, n=100)
    assert len(first) == 100
    np.testing.assert_allclose(first.arrivals, arrivals[:100], atol=1e-6)
    minute = trace_workload(tr, duration=60.0)
    assert len(minute) == np.count_nonzero(arrivals < 60.0)
    fast = trace_workload(tr, n=100, speedup=4.0)
    np.testing.assert_allclose(fast.arrivals, arrivals[:100] / 4.0, atol=1e-6)
    np.testing.assert_array_equal(fast.output_tokens, outputs[:100])
    with pytest.raises(ConfigError, match="speedup"):
        trace_workload(tr, speedup=0.0)


def test_azure_trace_replayed_through_the_simulator():
    azure_trace = SHIPPED / AZURE_TRACE
    arrivals, prompts, outputs = parse_independently(azure_trace)
    wl = trace_workload(read_trace(azure_trace), n=1500)
    res = simulate(
        wl, Continuous(max_seqs=32, max_batched_tokens=8192), STEP, kv_budget_tokens=200_000
    )
    r = res.records
    np.testing.assert_allclose(r.arrival, arrivals[:1500], atol=1e-6)
    np.testing.assert_array_equal(r.prompt_tokens, prompts[:1500])
    s = summarize(res)
    assert s["completed"] + s["rejected"] == 1500
    assert s["completed"] > 1400
    done = r.completed_mask
    np.testing.assert_array_equal(r.tokens[done], outputs[:1500][done])
    assert (r.start[done] >= r.arrival[done]).all()


def test_plain_csv(tmp_path):
    p = tmp_path / "plain.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n10.5,100,20\n11.0,50,5\n\n13.25,7,1\n")
    tr = read_trace(p)
    np.testing.assert_allclose(tr.arrival_s, [0.0, 0.5, 2.75])  # relative to the first row
    np.testing.assert_array_equal(tr.prompt_tokens, [100, 50, 7])
    np.testing.assert_array_equal(tr.output_tokens, [20, 5, 1])


AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
PLAIN = "arrival_s,prompt_tokens,output_tokens\n"


@pytest.mark.parametrize(
    "text, line",
    [
        (PLAIN + "0,10,5\n1,10\n", 3),  # too few fields
        (PLAIN + "0,10,5\n1,10,5,9\n", 3),  # too many
        (PLAIN + "0,ten,5\n", 2),  # not an integer
        (PLAIN + "0,10,5\n1,10,0\n", 3),  # zero output tokens
        (PLAIN + "0,10,5\n1,-4,5\n", 3),  # negative prompt
        (PLAIN + "5,10,5\n1,10,5\n", 3),  # time goes backwards
        (PLAIN + "0,10,5\n\nlater,10,5\n", 4),  # a blank line still counts as a line
        (AZ + "2023-11-16 18:15:46.6805900,374,44\n16/11/2023 18:15,1,1\n", 3),  # bad timestamp
        (AZ + "2023-11-16 18:15:46.6805900,374,44.5\n", 2),  # fractional tokens
        ("time,prompt,output\n0,1,1\n", 1),  # unknown header
        ("", 1),  # empty file: no header
    ],
)
def test_malformed_trace_names_file_and_line(tmp_path, text, line):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        read_trace(p)
    msg = str(e.value)
    assert str(p) in msg and f"line {line}" in msg, msg
    assert "\n" not in msg


def test_unreadable_or_empty_trace(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        read_trace(tmp_path / "missing.csv")
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        read_trace(tmp_path)  # a folder
    p = tmp_path / "header_only.csv"
    p.write_text(PLAIN)
    with pytest.raises(ConfigError, match="no rows"):
        read_trace(p)


def test_reading_stops_once_enough_rows_are_in(tmp_path):
    """--requests 30 on a long trace reads 30 rows: what lies after them is never parsed."""
    p = tmp_path / "long.csv"
    rows = "".join(f"{i * 0.1:.1f},{10 + i % 50},{5 + i % 9}\n" for i in range(100_000))
    p.write_text(
        PLAIN + rows[: rows.index("\n", 2000) + 1] + "garbage that would be refused\n" + rows
    )
    tr = read_trace(p, max_rows=30)
    assert len(tr) == 30 and tr.truncated
    np.testing.assert_allclose(tr.arrival_s, np.arange(30) * 0.1)
    # by time: rows up to (not including) the first at 2.0 s after the first row
    tr = read_trace(p, max_seconds=2.0)
    assert len(tr) == 20 and tr.arrival_s[-1] == pytest.approx(1.9)
    with pytest.raises(ConfigError, match="garbage"):
        read_trace(p)  # read to the end, the bad row is found and named


def test_the_cli_reads_only_the_rows_it_replays(tmp_path):
    from batchsim.core.config import WorkloadConfig

    p = tmp_path / "t.csv"
    p.write_text(PLAIN + "0,10,5\n1,10,5\n2,10,5\nnot,a,row\n")
    wl = WorkloadConfig(trace=str(p), requests=3).build()
    assert len(wl) == 3
    wl = WorkloadConfig(trace=str(p), requests=None, duration=2.0, speedup=1.0).build()
    assert list(wl.arrivals) == [0.0, 1.0]


@pytest.mark.parametrize(
    "text, line, words",
    [
        (PLAIN + "0,10,5\nnan,10,5\n", 3, "finite"),
        (PLAIN + "0,10,5\ninf,10,5\n", 3, "finite"),
        (PLAIN + "0,100000000000000000000000,5\n", 2, "10,000,000"),
        (PLAIN + "0," + "1" * 200_000 + ",5\n", 2, "field"),
        (PLAIN + "0,10,5\n1,10,5\n# caf\xe9\n", 4, "UTF-8"),
    ],
)
def test_values_that_used_to_crash_are_named(tmp_path, text, line, words):
    p = tmp_path / "bad.csv"
    p.write_bytes(text.encode("latin-1"))
    with pytest.raises(ConfigError) as e:
        read_trace(p)
    assert f"line {line}" in str(e.value) and words in str(e.value)


def test_bom_crlf_and_whole_number_floats_are_read(tmp_path):
    p = tmp_path / "excel.csv"
    p.write_bytes(("\ufeff" + PLAIN + "0,12.0,5\r\n1.5,7,3.0\r\n").encode("utf-8"))
    tr = read_trace(p)
    assert (
        list(tr.prompt_tokens) == [12, 7]
        and list(tr.output_tokens) == [5, 3]
        and list(tr.arrival_s) == [0.0, 1.5]
    )
    p.write_bytes((PLAIN + "0,12,5\n").encode("utf-16"))
    with pytest.raises(ConfigError, match="UTF-16"):
        read_trace(p)


# --- the trace that ships, and the fetch command (offline: file:// mirrors and a closed port) -----


def _isolated(monkeypatch, tmp_path):
    """No $BATCHSIM_TRACES, an empty cache, a working folder with nothing beside it: a fresh
    clone."""
    monkeypatch.delenv("BATCHSIM_TRACES", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")


def test_the_shipped_trace_is_the_published_file_with_its_attribution():
    import hashlib

    from batchsim.traces import PUBLIC_TRACES

    entry = next(t for t in PUBLIC_TRACES if t.file == AZURE_TRACE)
    data = (SHIPPED / AZURE_TRACE).read_bytes()
    assert len(data) == entry.size == 719_188
    assert hashlib.sha256(data).hexdigest() == entry.sha256
    assert len(read_trace(SHIPPED / AZURE_TRACE)) == entry.rows == 19_366
    readme = (SHIPPED / "README.md").read_text()
    assert (
        "CC-BY-4.0" in readme
        and "Splitwise" in readme
        and "ISCA 2024" in readme
        and entry.sha256 in readme
    )


def test_a_fresh_clone_replays_the_shipped_trace_and_gets_lesson_8s_numbers(monkeypatch, tmp_path):
    from batchsim.teach import lessons
    from batchsim.traces import find_trace

    _isolated(monkeypatch, tmp_path)
    assert find_trace() == SHIPPED / AZURE_TRACE
    s, _ = lessons.real_day(policy="continuous", max_batch=64)
    assert s["source"].startswith("Azure LLM trace 2023 (conversation)") and s["requests"] == 1445
    # what lesson 8 and notebook 8's answers quote
    assert f"{s['slo_attainment']['continuous']:.1%}" == "99.9%"


def test_a_missing_trace_says_where_traces_come_from(monkeypatch, tmp_path, capsys):
    from batchsim.cli import main

    _isolated(monkeypatch, tmp_path)
    assert (
        main(["run", "--arrival", "trace:../shared/traces/azure_llm_2023_conv.csv", "--no-plots"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--trace {SHIPPED / AZURE_TRACE}" in err
    assert main(["run", "--trace", "data/AzureLLMInferenceTrace_code.csv", "--no-plots"]) == 2
    assert "python -m batchsim.traces fetch azure-2023-code" in capsys.readouterr().err
    assert main(["run", "--trace", "mine.csv", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert (
        "not found" in err
        and "batchsim.traces fetch" in err
        and "arrival_s,prompt_tokens,output_tokens" in err
    )


def _tiny_trace(tmp_path, rows: int = 3):
    """A published trace of our own: a small Azure-format file and its catalog entry."""
    import hashlib

    from batchsim.traces import PublicTrace

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:4{i}.0000000,{100 + i},{10 + i}\n" for i in range(rows)
    )
    (mirror / "Tiny.csv").write_text(text)
    entry = PublicTrace(
        "tiny",
        "tiny.csv",
        "https://example.org/data/Tiny.csv",
        hashlib.sha256(text.encode()).hexdigest(),
        len(text.encode()),
        rows,
        "a test trace",
    )
    return entry, mirror


def test_fetch_keeps_a_file_only_when_its_checksum_is_the_published_one(tmp_path):
    from batchsim.traces.fetch import fetch_one

    entry, mirror = _tiny_trace(tmp_path)
    cache = tmp_path / "cache"
    # a file:// mirror: nothing leaves the machine
    path, what = fetch_one(entry, cache, mirror.as_uri())
    assert path == cache / "tiny.csv" and "sha256 checked" in what and len(read_trace(path)) == 3
    # no second download
    assert fetch_one(entry, cache, "http://127.0.0.1:9/nowhere")[1] == "already here"
    (mirror / "Tiny.csv").write_text((mirror / "Tiny.csv").read_text().replace(",100,", ",999,"))
    with pytest.raises(ConfigError, match="not the published file"):
        fetch_one(entry, tmp_path / "other", str(mirror))  # a plain folder works as a mirror too
    # neither the file nor its part is left behind
    assert list((tmp_path / "other").iterdir()) == []


def test_fetch_offline_is_one_line_and_exit_code_2(monkeypatch, tmp_path, capsys):
    import socket

    from batchsim.traces.fetch import main

    _isolated(monkeypatch, tmp_path)
    with socket.socket() as s:  # a port nobody listens on: refused at once, no network involved
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["fetch", "azure-2023-code", "--from", f"http://127.0.0.1:{port}/"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(
        "batchsim.traces: error: cannot fetch azure-2023-code"
    )
    assert not (tmp_path / "cache" / "batchsim" / "traces" / "azure_llm_2023_code.csv").exists()
    # a mirror without the file
    assert main(["fetch", "azure-2023-code", "--from", str(tmp_path / "empty")]) == 2
    assert "cannot fetch" in capsys.readouterr().err
    assert main(["fetch", "nope"]) == 2
    assert (
        "trace must be one of azure-2023-conv, azure-2023-code, got 'nope'"
        in capsys.readouterr().err
    )
    assert (
        main(["fetch", "--bogus"]) == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
    )
    # The conversation trace ships: fetching it needs no network, and list says where each one is.
    assert main(["fetch", "azure-2023-conv", "--from", f"http://127.0.0.1:{port}/"]) == 0
    assert "already here" in capsys.readouterr().out
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert (
        "azure-2023-conv" in out
        and "shipped with batchsim" in out
        and "fetch azure-2023-code" in out
    )


def test_the_catalog_refuses_an_entry_it_could_not_check():
    from batchsim.traces import PublicTrace

    good = dict(
        name="x",
        file="x.csv",
        url="https://example.org/x.csv",
        sha256="0" * 64,
        size=1,
        rows=1,
        about="",
    )
    PublicTrace(**good)
    for field, bad in (
        ("sha256", "abc"),
        ("url", "http://example.org/x.csv"),
        ("file", "../x.csv"),
        ("size", 0),
    ):
        with pytest.raises(ConfigError, match=f"^{field} must"):
            PublicTrace(**{**good, field: bad})
