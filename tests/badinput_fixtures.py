"""What some bad-input cases need beyond a file: a service on a port, or a model folder.

``serving(kind)`` runs, on 127.0.0.1 and a free port, one of the things a careless
``--scheduler tcp://HOST:PORT`` meets instead of a Dask scheduler:

    silent  accepts every connection and never says a word (a stuck process)
    http    an HTTP server, which waits for a request before it speaks
    ssh     speaks first, as sshd does, with a banner that is no Dask frame
    dask    a real Dask scheduler with one in-process worker: the probe must let it through

``prepare(name, tmp)`` writes a folder a case names, once per session (``gpt2_32k``: a
GPT-2 model with a 32,000-token vocabulary saved with ``GPT2Config``'s defaults, so its
``eos_token_id`` is GPT-2's 50256, past the vocabulary, and it has no pad id).
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["serving", "prepare", "SERVICES"]

SERVICES = ("silent", "http", "ssh", "dask")


@contextlib.contextmanager
def _raw(banner: bytes | None) -> Iterator[int]:
    """A TCP server that accepts, sends ``banner`` (if any), and holds the connection open until
    closed."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            if banner:
                conn.sendall(banner)
            held.append(conn)

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        t.join(2)
        for c in held:
            c.close()
        server.close()


@contextlib.contextmanager
def _http() -> Iterator[int]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a) -> None:  # not on the case's stderr
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


@contextlib.contextmanager
def _dask() -> Iterator[int]:
    import logging

    from dask.distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        dashboard_address=None,
        silence_logs=logging.CRITICAL,
    )
    try:
        yield int(cluster.scheduler_address.rsplit(":", 1)[1])
    finally:
        cluster.close()


def serving(kind: str | None):
    """A context manager yielding the port of the service ``kind`` (None: no service, port 0)."""
    if kind is None:
        return contextlib.nullcontext(0)
    if kind == "silent":
        return _raw(None)
    if kind == "ssh":
        return _raw(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n")
    if kind == "http":
        return _http()
    if kind == "dask":
        return _dask()
    raise ValueError(f"no such service {kind!r}; one of {SERVICES}")


def prepare(name: str | None, tmp: Path) -> None:
    """Write the folder ``name`` under ``tmp`` unless it is there already."""
    if name is None or (tmp / name / "config.json").exists():
        return
    if name != "gpt2_32k":
        raise ValueError(f"no such folder to prepare: {name!r}")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=32000, n_layer=2, n_embd=64, n_head=2, n_positions=256)
    # the case is this config's defaults
    assert cfg.eos_token_id == 50256 and cfg.pad_token_id is None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        GPT2LMHeadModel(cfg).save_pretrained(tmp / name)
