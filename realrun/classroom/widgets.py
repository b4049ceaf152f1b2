"""Notebook 7's panel: policy and load for ``realrun.classroom.lesson.predicted_vs_measured``.

A real model runs, so the panel waits for its Run button instead of following the sliders.
The controls and the panel are batchsim's (``batchsim.teach.widgets``); only the lesson is
realrun's.
"""

from __future__ import annotations

from typing import Any

from batchsim.core.policies import POLICY_NAMES
from batchsim.teach.widgets import LessonPanel, dropdown, float_slider, int_slider, panel

from .lesson import predicted_vs_measured

__all__ = ["measured_ui"]


def measured_ui(**values: Any) -> LessonPanel:
    controls = {
        "policy": dropdown("policy", "continuous", POLICY_NAMES),
        "rate": float_slider("arrival rate (requests/s)", 4.0, 0.5, 20.0, 0.5),
        "max_batch": int_slider("batch size / max running", 8, 1, 32),
    }
    return panel(predicted_vs_measured, controls, {}, values, "Predicted vs measured", button=True)
