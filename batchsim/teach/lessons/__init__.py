"""The lessons' experiments, one function per notebook, each returning numbers and a picture.

Every notebook of the course is a thin driver over a function here. A function
takes plain arguments (a rate, a batch size, a GPU's name), runs the simulator or
the formulas, and returns ``(summary, figure)``: a dict of the figures the lesson
talks about (with a printable ``table``) and a matplotlib ``Figure``. The sliders
in ``batchsim.teach.widgets`` call these functions and nothing else (notebook 7, which runs
a real model, has its lesson in ``realrun.classroom.lesson``: batchsim never imports realrun); the
tests call them directly and check that the numbers move the way the lesson says they do.

The simulated server is a GPU running a model from ``batchsim.machine.catalog``, timed by
the roofline model, with the KV budget its memory leaves (``batchsim.machine.server``):
by default Llama-3-8B in fp16 on an A100-80GB, the scenarios' server. Figures are
``matplotlib.figure.Figure`` objects built without pyplot, so redrawing a panel a
hundred times leaves no figure behind.
"""

from ._common import CLAIM, LESSON_GPU, LESSON_MODEL, POLICY_COLORS
from .batching import batching_policies, why_batch
from .cost import cost
from .fleet import FLIP_MAX_RATE, fleet, fleet_flip
from .layouts import kv_layouts
from .memory import memory_wall
from .prefill import prefill_knee, prefill_stall
from .published import published_record
from .real_day import AZURE_TRACE, find_trace, real_day
from .roofline import roofline
from .theory import theory_vs_simulation

__all__ = [
    "why_batch",
    "batching_policies",
    "memory_wall",
    "kv_layouts",
    "cost",
    "fleet",
    "fleet_flip",
    "FLIP_MAX_RATE",
    "roofline",
    "theory_vs_simulation",
    "real_day",
    "prefill_stall",
    "prefill_knee",
    "published_record",
    "find_trace",
    "AZURE_TRACE",
    "LESSON_GPU",
    "LESSON_MODEL",
    "POLICY_COLORS",
    "CLAIM",
]
