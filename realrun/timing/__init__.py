"""Timing the engine's passes: which shapes (``grid``), how they are timed (``measure``), the
profile that calibrates batchsim's cost model (``profile``, ``profile_size``), and the readings
that say whether the machine moved: the canary (``canary``), drift (``drift``), jitter
(``jitter``) and the machine's level read from a run's own passes (``pass_level``).

Above ``clock`` (a timing runs the wall clock); below ``judge``, which reads these numbers.
"""
