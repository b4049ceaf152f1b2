"""``realrun serve`` refuses flags that cannot work in one line naming the flag, exit 2, before the
model loads (issue 37): a queue of 0 (every request turned away), a static bus larger than the queue
(it would wait forever), a port already taken, a host that is not this machine's."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def _refused(argv, capsys, monkeypatch) -> str:
    from realrun import cli
    from realrun.cli import run as commands

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the flags were checked")

    monkeypatch.setattr(commands, "load", no_model)
    assert cli.main(["serve", *argv]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--max-queue", "0"], "max-queue"),
        (["--policy", "static", "--max-batch", "8", "--max-queue", "4"], "max-queue"),
        # TEST-NET-1 (RFC 5737): never this machine's address
        (
            ["--host", "192.0.2.1", "--port", "0"],
            "host",
        ),
    ],
)
def test_impossible_flags_are_one_line_naming_the_flag(argv, flag, capsys, monkeypatch):
    line = _refused(argv, capsys, monkeypatch)
    assert flag in line and "Traceback" not in line, line


def test_a_busy_port_is_one_line_naming_the_port(capsys, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _refused(["--host", "127.0.0.1", "--port", str(port)], capsys, monkeypatch)
    assert "--port" in line and str(port) in line and "in use" in line, line


def test_a_static_bus_the_queue_can_hold_is_accepted(capsys, monkeypatch):
    # The same check lets through what can work: a queue as large as the bus; the model's load is
    # the first thing after the checks (refused here by the stand-in, with exit 1's own line).
    from realrun import cli
    from realrun.cli import run as commands

    def loaded(*a, **k):
        raise RuntimeError("reached the model")

    monkeypatch.setattr(commands, "load", loaded)
    with pytest.raises(RuntimeError, match="reached the model"):
        cli.main(
            ["serve", "--policy", "static", "--max-batch", "4", "--max-queue", "4", "--port", "0"]
        )
