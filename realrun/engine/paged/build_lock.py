"""Building the attention kernel once per machine, with a lock that a killed build cannot leave
stuck.

torch's ``cpp_extension`` guards a build folder with an empty file named ``lock`` and waits,
silently and without end, while that file exists. A build killed halfway (Ctrl-C during the first
run) leaves the file behind, and every later run then waits forever without a word. The file holds
no process id, so nothing can tell a live build from a dead one.

So every build takes a lock of its own first, ``realrun-build.pid`` beside torch's, holding its
process id and host: a holder whose process is gone is taken over (with a note), and torch's
``lock`` found while ours is held is a dead build's leftover (every build of this folder takes ours
first), so it is removed. A live holder is waited on, with a line that says so, for at most
``wait_s`` seconds; past that the caller is told to do without the kernel (the slower reference
attention serves), never left hanging.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["OURS", "TORCHS", "KernelBusy", "build_once"]

OURS = "realrun-build.pid"
TORCHS = "lock"  # torch.utils.cpp_extension's FileBaton in the build folder

#: A lock file still empty this long after it was made: its maker died between creating and writing
#: it.
_EMPTY_STALE_S = 10.0


class KernelBusy(RuntimeError):
    """Another process held the build lock past the time allowed."""


def build_once(
    folder: Path,
    build: Callable[[], object],
    say: Callable[[str], None],
    wait_s: float,
    compiled: bool,
    poll_s: float = 0.2,
) -> object:
    """``build()`` under the lock in ``folder``; says so first unless ``compiled`` (a build is
    there)."""
    folder.mkdir(parents=True, exist_ok=True)
    if not _acquire(folder / OURS, say, wait_s, poll_s):
        raise KernelBusy(f"another process held {folder / OURS} for more than {wait_s:g} s")
    try:
        leftover = folder / TORCHS
        if leftover.exists():
            say(f"removing {leftover}, left by a build that was killed")
            _remove(leftover)
        if not compiled:
            say("compiling the attention kernel (once per machine, ~40 s)")
        return build()
    finally:
        if _holder(folder / OURS) == (os.getpid(), socket.gethostname()):
            _remove(folder / OURS)


def _acquire(path: Path, say: Callable[[str], None], wait_s: float, poll_s: float) -> bool:
    started: float | None = None
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(f"{os.getpid()} {socket.gethostname()}\n")
            return True
        holder = _holder(path)
        if _is_stale(path, holder):
            who = f"process {holder[0]}" if holder else "a process that never wrote its id"
            say(f"taking over the attention kernel's build lock {path}: {who} that held it is gone")
            _remove(path)
            continue
        if started is None:
            started = time.monotonic()
            who = f"process {holder[0]} on {holder[1]}" if holder else "another process"
            say(
                f"waiting for {who} to finish building the attention kernel (lock {path}; at most "
                f"{wait_s:g} s, then the slower reference attention serves)"
            )
        if time.monotonic() - started >= wait_s:
            return False
        time.sleep(poll_s)  # polling a file another process holds: there is no event to wait on


def _holder(path: Path) -> tuple[int, str] | None:
    try:
        pid, host = path.read_text().split()
        return int(pid), host
    except (OSError, ValueError):
        return None


def _is_stale(path: Path, holder: tuple[int, str] | None) -> bool:
    if holder is None:
        try:
            return time.time() - path.stat().st_mtime > _EMPTY_STALE_S
        except OSError:
            return False  # gone meanwhile: the next try takes it
    pid, host = holder
    if host != socket.gethostname():
        # a folder shared between machines: another host's process cannot be seen, so wait
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
