"""The simulated clock: step-time models price each step, and time jumps.

``simulate`` is the shared driver loop (``batchsim.core``) on a clock that
jumps from event to event; ``theory`` holds the closed-form queueing results that
check it.
"""
