"""The attention kernel's build lock: a killed build never leaves later runs waiting forever.

No test here compiles anything: the build is a function handed in, and the folder a temporary one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from realrun.engine.paged.build_lock import OURS, TORCHS, KernelBusy, build_once


def _dead_pid() -> int:
    """The id of a process that has finished (and been reaped), so no process holds it now."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def _build():
    return "the module"


def test_a_first_build_says_it_compiles_and_leaves_no_lock(tmp_path):
    lines: list[str] = []
    assert build_once(tmp_path, _build, lines.append, wait_s=5, compiled=False) == "the module"
    assert lines == ["compiling the attention kernel (once per machine, ~40 s)"]
    assert not (tmp_path / OURS).exists()


def test_a_build_already_there_loads_without_a_word(tmp_path):
    lines: list[str] = []
    assert build_once(tmp_path, _build, lines.append, wait_s=5, compiled=True) == "the module"
    assert lines == []


def test_a_killed_builds_locks_are_taken_over_with_a_note(tmp_path):
    dead = _dead_pid()
    (tmp_path / OURS).write_text(f"{dead} {socket.gethostname()}\n")
    (tmp_path / TORCHS).write_text("")  # torch's empty baton, which it would wait on forever
    lines: list[str] = []
    assert build_once(tmp_path, _build, lines.append, wait_s=5, compiled=False) == "the module"
    assert f"process {dead}" in lines[0] and "gone" in lines[0], lines
    assert any("removing" in line and TORCHS in line for line in lines), lines
    assert not (tmp_path / OURS).exists() and not (tmp_path / TORCHS).exists()


def test_torchs_lock_alone_from_an_older_killed_build_is_removed(tmp_path):
    (tmp_path / TORCHS).write_text("")
    lines: list[str] = []
    build_once(tmp_path, _build, lines.append, wait_s=5, compiled=True)
    assert not (tmp_path / TORCHS).exists()
    assert len(lines) == 1 and "killed" in lines[0]


def test_a_live_build_elsewhere_is_waited_on_with_a_line_then_given_up(tmp_path):
    # This process is alive: a lock naming it is a build in progress.
    (tmp_path / OURS).write_text(f"{os.getpid()} {socket.gethostname()}\n")
    lines: list[str] = []
    built = []
    with pytest.raises(KernelBusy, match="more than 0.3 s"):
        build_once(
            tmp_path, lambda: built.append(1), lines.append, wait_s=0.3, compiled=False, poll_s=0.05
        )
    assert built == []
    assert (
        len(lines) == 1
        and f"waiting for process {os.getpid()}" in lines[0]
        and "at most 0.3 s" in lines[0]
    )
    assert (tmp_path / OURS).exists()  # the live holder's lock is left alone


def test_the_waiter_builds_once_the_holder_lets_go(tmp_path):
    (tmp_path / OURS).write_text(f"{os.getpid()} {socket.gethostname()}\n")
    said_waiting = threading.Event()

    def say(line: str) -> None:
        lines.append(line)
        if line.startswith("waiting"):
            said_waiting.set()

    lines: list[str] = []
    release = threading.Thread(target=lambda: said_waiting.wait(60) and (tmp_path / OURS).unlink())
    release.start()
    # 60 s is a watchdog against a hang, not a measure: the holder lets go as soon as the line is
    # said.
    assert build_once(tmp_path, _build, say, wait_s=60, compiled=True, poll_s=0.05) == "the module"
    release.join()
    assert said_waiting.is_set() and len(lines) == 1


def test_the_engine_falls_back_to_the_reference_when_the_build_stays_busy(
    tmp_path, monkeypatch, capsys
):
    torch = pytest.importorskip("torch")
    import torch.utils.cpp_extension as cpp

    from realrun.engine.paged import attention

    monkeypatch.setattr(cpp, "_get_build_directory", lambda name, verbose: str(tmp_path))
    monkeypatch.setattr(
        cpp,
        "load_inline",
        lambda *a, **k: pytest.fail("must not build while another holds the lock"),
    )
    monkeypatch.setenv("REALRUN_KERNEL_WAIT_S", "0.2")
    (tmp_path / OURS).write_text(f"{os.getpid()} {socket.gethostname()}\n")
    attention._kernel.cache_clear()
    try:
        assert not attention.kernel_available()
        assert "KernelBusy" in attention.kernel_problem()
        err = capsys.readouterr().err
        assert "waiting for process" in err and "reference attention serves" in err, err
        q = torch.randn(3, 2, 4)
        pool = torch.randn(2, 2, 4, 4)
        args = (q, pool, pool, torch.tensor([[1]]), torch.tensor([3]), torch.tensor([0, 3]), 0.5)
        assert torch.allclose(
            attention.paged_attention(*args), attention.attention_reference(*args)
        )
    finally:
        attention._kernel.cache_clear()  # the next caller loads the real build afresh
