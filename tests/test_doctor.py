"""``python -m batchsim doctor`` tells a class what is missing, and the documented setup gives
`jupyter lab`."""

from __future__ import annotations

import shutil
import subprocess

from batchsim.cli import doctor, main


def test_jupyter_lab_runs_after_the_documented_setup():
    # The syllabus's first command. `make test` installs ".[all]", which includes the notebooks
    # extra.
    exe = shutil.which("jupyter")
    assert exe, "no `jupyter` on PATH: the notebooks extra must bring jupyterlab"
    # a watchdog against a hang, not a speed limit
    out = subprocess.run([exe, "lab", "--version"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.strip().split(".")[0].isdigit() and int(out.stdout.split(".")[0]) >= 4, (
        out.stdout
    )


def test_doctor_passes_on_a_machine_set_up_as_documented(capsys):
    assert main(["doctor", "--no-widgets"]) == 0
    out = capsys.readouterr().out
    for label in ("simulator", "plotting", "jupyter lab", "kernel", "voila", "trace"):
        assert label in out
    assert "FIX" not in out and "ready for class" in out


def test_doctor_builds_the_slider_panel(capsys):
    ok, text = doctor._check_widgets()
    assert ok, text
    assert "x" in text and "figure" in text


def test_doctor_names_what_is_missing_and_how_to_install_it(monkeypatch, capsys):
    real = doctor._version
    monkeypatch.setattr(
        doctor, "_version", lambda d: "" if d in ("jupyterlab", "voila") else real(d)
    )
    assert main(["doctor", "--no-widgets"]) == 1
    out = capsys.readouterr().out
    fix = [line for line in out.splitlines() if "FIX" in line]
    assert len(fix) == 2, out
    assert all('pip install -e ".[notebooks]"' in line for line in fix), fix
    assert "jupyter lab" in fix[0] and "voila" in fix[1]


def test_a_missing_trace_is_a_note_not_a_failure(monkeypatch, capsys):
    monkeypatch.setattr("batchsim.teach.lessons.find_trace", lambda *a, **k: None)
    assert main(["doctor", "--no-widgets"]) == 0
    out = capsys.readouterr().out
    assert "note trace" in out.replace("  ", " ") and "synthetic fit" in out


def test_a_trace_that_does_not_exist_is_bad_input(tmp_path, capsys):
    assert main(["doctor", "--trace", str(tmp_path / "nope.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trace" in err and "nope.csv" in err


def test_doctor_reads_a_given_trace(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,100,10\n2023-11-16 "
        "18:15:47.5,200,20\n"
    )
    assert main(["doctor", "--no-widgets", "--trace", str(p)]) == 0
    assert "2 requests" in capsys.readouterr().out


def test_doctor_help_says_what_it_checks(capsys):
    assert main(["doctor", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "jupyter lab" in out and "realrun doctor" in out


def test_voila_without_its_templates_is_named_with_the_fix(monkeypatch, tmp_path):
    # A venv made with --system-site-packages: voila imports, but Jupyter's data path is the venv's
    # own.
    monkeypatch.setattr(
        "jupyter_core.paths.jupyter_path",
        lambda *parts: [str(tmp_path / "share" / "jupyter" / "voila" / "templates")],
    )
    ok, text = doctor._check_voila()
    assert ok is False
    assert "page templates are not on Jupyter's data path" in text
    assert "JUPYTER_PATH=" in text or 'pip install -e ".[notebooks]"' in text
    (tmp_path / "share" / "jupyter" / "voila" / "templates" / "lab").mkdir(parents=True)
    assert doctor._check_voila()[0] is True
