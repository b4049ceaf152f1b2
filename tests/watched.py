"""A subprocess watched through what it prints: tests wait for what happened, never for a guessed
time.

A test that sends Ctrl-C sends it once the program has printed the line that says it reached the
point under test (``wait_for``), or once its progress bar counts enough finished requests
(``wait_for_count``). The time limits here are watchdogs against a hang only: far above the
slowest run seen on a loaded 2-core machine, and a failure says so.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Watchdog, not a limit on speed: the slowest wait seen on a loaded 2-core machine was under 60 s.
WATCHDOG_S = 600.0


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Watched:
    """A subprocess whose stderr is collected in the background, to wait for a phrase in it."""

    def __init__(self, argv: list[str], cwd: Path, module: bool = True) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
        cmd = [sys.executable, "-m", *argv] if module else [sys.executable, *argv]
        # Ctrl-C's default action in the child, whatever this process inherited: a shell that runs
        # the tests as a background job (``make test &``, ``nohup``, some CI runners) ignores
        # SIGINT, an ignored signal stays ignored across exec, and Python then installs no
        # KeyboardInterrupt: the child would run to its end and exit 0 with the signal lost.
        self.p = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_default_sigint,
        )
        self.err = b""
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        while chunk := os.read(self.p.stderr.fileno(), 4096):
            self.err += chunk

    def _until(self, done, what: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not done():
            if self.p.poll() is not None or time.monotonic() > end:
                why = (
                    "it exited first"
                    if self.p.poll() is not None
                    else f"watchdog: nothing in {timeout:.0f} s (a hang?)"
                )
                self.p.kill()
                self.p.wait()
                self._close()
                pytest.fail(
                    f"never saw {what} ({why}); stderr: {self.err.decode(errors='replace')[-2000:]}"
                )
            time.sleep(0.02)

    def wait_for(self, phrase: str, timeout: float = WATCHDOG_S) -> None:
        self._until(lambda: phrase.encode() in self.err, repr(phrase), timeout)

    def wait_for_count(self, total: int, at_least: int, timeout: float = WATCHDOG_S) -> None:
        """Wait until a progress bar on stderr shows ``at_least`` of ``total`` done ("N/total")."""
        pat = re.compile(rb"(\d+)/%d\b" % total)

        def done() -> bool:
            return any(int(m) >= at_least for m in pat.findall(self.err))

        self._until(done, f"{at_least}/{total} on a progress bar", timeout)

    def interrupt(self, timeout: float = WATCHDOG_S) -> tuple[int, str, str]:
        self.p.send_signal(signal.SIGINT)
        out = self.p.stdout.read()
        code = self.p.wait(timeout)
        self._t.join(5)
        self._close()
        return code, out.decode(), self.err.decode(errors="replace")

    def _close(self) -> None:
        self._t.join(5)
        self.p.stdout.close()
        self.p.stderr.close()
