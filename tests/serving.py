"""A ``realrun serve`` process for a test: on 127.0.0.1, a free port, stopped by the test.

``with served("--policy", "static") as srv:`` starts the server, waits until ``/health``
answers, and hands back ``srv.url``; leaving the block sends SIGTERM (the server's drain) and
waits for the exit, killing it only if it hangs. ``srv.stop()`` does that early and returns
the exit code and what the server printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    proc: subprocess.Popen
    url: str
    log: Path
    code: int | None = field(default=None)
    signalled: bool = False

    def terminate(self) -> None:
        """SIGTERM, once: the server's drain (a test may send it while requests run)."""
        if not self.signalled:
            self.signalled = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 60.0) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.code = self.proc.returncode
        return self.code, self.log.read_text()

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path: str, body, timeout: float = 60.0) -> tuple[int, dict, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read()), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}"), dict(e.headers)

    def metric(self, name: str) -> float:
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)


@contextlib.contextmanager
# a watchdog: it starts in seconds
def served(*flags: str, tmp: Path, start_timeout: float = 600.0, cwd: Path | None = None):
    port = free_port()
    log = tmp / f"serve-{port}.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "realrun", "serve", "--port", str(port), *flags],
            cwd=cwd or ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=dict(env, PYTHONPATH=str(ROOT)) if cwd else env,
        )
    srv = Served(proc, f"http://127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"realrun serve exited with {proc.returncode} before "
                    f"listening:\n{log.read_text()}"
                )
            try:
                if srv.get("/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"realrun serve did not answer /health within {start_timeout:.0f} "
                    f"s:\n{log.read_text()}"
                )
            time.sleep(0.2)
        yield srv
    finally:
        srv.stop()
