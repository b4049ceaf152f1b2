"""``vllm serve`` in a subprocess: the reference HTTP server, for a test or a benchmark to load.

``VLLMServer`` (``server.py``) runs vLLM's engine inside our process; this runs vLLM's own
OpenAI-compatible server (``vllm.entrypoints.openai.api_server``, what ``vllm serve`` starts),
so that a load generator meets vLLM over HTTP exactly as it meets ``realrun serve``. The model
is a saved folder with its tokenizer (``tokenizer.save_served_model``), so the server reads
text and token ids alike. It listens on 127.0.0.1 on a free port; the engine is set as
NOTES-vllm.md says for these machines: fp32, eager (no compilation), no prefix caching (it
would reuse one run's cache in the next), a KV cache of ``kv_gib`` GiB. Start-up takes about a
minute on 2 cores, most of it imports, in the server and again in the engine's processes.

``with vllm_served(folder) as srv:`` waits until ``/health`` answers and gives ``srv.url``;
leaving sends SIGTERM (vLLM stops its engine processes) and waits, killing the server's
process group only if it hangs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VLLMHTTP", "vllm_served", "serve_command", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def serve_command(
    model: str | Path,
    port: int,
    *,
    host: str = "127.0.0.1",
    served_name: str = "tiny-gpt2",
    max_model_len: int = 1024,
    max_num_seqs: int = 32,
    python: str = sys.executable,
) -> list[str]:
    """The command line: ``vllm serve`` spelled as the module it runs (the console script fails
    here)."""
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        served_name,
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(max_num_seqs),
        "--no-enable-prefix-caching",
        "--host",
        host,
        "--port",
        str(port),
        "--uvicorn-log-level",
        "warning",
        "--disable-log-stats",
    ]


@dataclass
class VLLMHTTP:
    """A running ``vllm serve``: its process, base URL, log file and start-up time in seconds."""

    proc: subprocess.Popen
    url: str
    log: Path
    startup_s: float = 0.0

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=timeout) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the process group's SIGKILL after ``timeout`` s; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    # its own group: the engine's processes too
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def vllm_served(
    model: str | Path,
    *,
    port: int | None = None,
    log: str | Path | None = None,
    kv_gib: int = 1,
    start_timeout: float = 600.0,
    **options,
):
    """Start ``vllm serve`` on ``model`` (a saved folder), wait for ``/health``, yield a
    ``VLLMHTTP``, stop it."""
    port = port or free_port()
    log = (
        Path(log)
        if log is not None
        else Path(tempfile.mkstemp(prefix="vllm-serve-", suffix=".log")[1])
    )
    env = dict(
        os.environ,
        VLLM_CPU_KVCACHE_SPACE=str(kv_gib),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.Popen(
            serve_command(model, port, **options),
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    srv = VLLMHTTP(proc, f"http://127.0.0.1:{port}", log)
    try:
        deadline = t0 + start_timeout
        while not srv.healthy():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"vllm serve exited with {proc.returncode} before listening:\n{srv.tail()}"
                )
            if time.perf_counter() > deadline:
                raise TimeoutError(
                    f"vllm serve did not answer /health within {start_timeout:.0f} s:\n{srv.tail()}"
                )
            time.sleep(0.5)
        srv.startup_s = time.perf_counter() - t0
        yield srv
    finally:
        srv.stop()
