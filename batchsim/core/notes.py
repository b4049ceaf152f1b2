"""The package's notes to a Python caller: warnings of its own category, which a caller can filter.

A note is something the caller may want to know but that is not an error (a knob the policy does
not read). A library that prints or logs its notes leaves a notebook user no clean way to silence
or to insist on them; ``warnings.warn`` with a category of the package's own does both::

    warnings.simplefilter("ignore", batchsim.BatchsimNote)   # quiet
    warnings.simplefilter("error", batchsim.BatchsimNote)    # strict

The command lines never raise these: they say their notes themselves, on stderr.
"""

from __future__ import annotations

import warnings

__all__ = ["BatchsimNote", "note"]


class BatchsimNote(UserWarning):
    """A note from batchsim to its Python caller (never an error: the call did what it could)."""


def note(message: str, stacklevel: int = 3) -> None:
    """Warn ``message`` as a ``BatchsimNote``, pointing at the caller's caller (the user's line)."""
    warnings.warn(message, BatchsimNote, stacklevel=stacklevel)
