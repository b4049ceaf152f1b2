"""An output file's path checked before any work, with the flag and the real reason in one line.

``batchsim.core.files.check_out_file`` probes the folder with a temporary file; where the folder
exists but no file can be made in it (``/proc``, ``/sys``: the kernel's views, not places for files)
the system says "No such file or directory", which reads as if the folder were missing. Here the
same check names the flag as typed (``--record``, ``--json``) and says what is really wrong.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from batchsim.core.errors import ConfigError

__all__ = ["check_output"]


def check_output(path: str, flag: str) -> Path:
    """``path`` as a file this process can create or replace, or a ConfigError naming ``--flag``."""
    p = Path(path).expanduser()
    where = f"--{flag} {str(path)!r}"
    if p.is_dir():
        raise ConfigError(f"{where} is a folder: give a file name")
    folder = p.parent
    if not folder.is_dir():
        raise ConfigError(f"{where}: the folder {str(folder)!r} does not exist")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.EROFS, errno.EINVAL):
            why = (
                "it is read-only or a system folder (such as /proc or /sys) that holds no files of "
                "ours"
            )
        elif e.errno in (errno.EACCES, errno.EPERM):
            why = "this user may not write there"
        else:
            why = e.strerror or str(e)
        raise ConfigError(
            f"{where}: no file can be made in the folder {str(folder)!r}: {why}"
        ) from None
    return p
