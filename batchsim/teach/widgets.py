"""Sliders for the notebooks: each lesson function behind a small control panel.

A notebook cell says ``widgets.why_batch_ui()`` and gets a panel: sliders and
dropdowns in a column on the left, the lesson's figure beside them at its natural
size (one PNG pixel per screen pixel, so it is sharp and a 1366x768 laptop shows
the controls and the whole figure at once), the table below. Moving a control calls
the lesson function in ``batchsim.teach.lessons`` with the controls' values as its
arguments and nothing else, then redraws. The figure is shown as a PNG in an
``ipywidgets.Image`` and the table as HTML, rather than through an ``Output``
capture, so the same panel works in JupyterLab, in Voila, and in a test with no
kernel at all: a test builds the panel, sets a slider's value and reads
``panel.result`` (what the lesson function returned) and ``panel.image.value``.

Sliders that start a simulation use ``continuous_update=False``: the panel
recomputes when the student lets go of the handle, not on every pixel.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable
from typing import Any

import ipywidgets as W
from matplotlib.figure import Figure

from ..core.errors import ConfigError
from ..core.policies import POLICY_NAMES
from ..machine.catalog import DEFAULT_CATALOG
from . import lessons

__all__ = [
    "LessonPanel",
    "figure_png",
    "png_size",
    "CONTROLS_WIDTH",
    "why_batch_ui",
    "policies_ui",
    "memory_ui",
    "cost_ui",
    "fleet_ui",
    "roofline_ui",
    "prefill_stall_ui",
    "theory_ui",
    "real_day_ui",
    "PANELS",
    "panel",
    "float_slider",
    "int_slider",
    "log_slider",
    "dropdown",
]

_STYLE = {"description_width": "initial"}
#: The controls' column. With it, the widest lesson figure (11 inches at 80 dpi = 880 px) fits
#: beside it at its natural size in Voila on a 1366 px laptop screen (a page about 1,330 px wide);
#: in JupyterLab, whose prompts and side bar leave the notebook some 1,150-1,250 px, the figure
#: shrinks in proportion (down to ``FIGURE_MIN_WIDTH``) instead of falling under the sliders.
CONTROLS_WIDTH = 380
#: The narrowest the figure is drawn beside the controls; below it the row wraps (a phone, a split
#: screen).
FIGURE_MIN_WIDTH = 480
_LAYOUT = W.Layout(width=f"{CONTROLS_WIDTH - 10}px")


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels, read from a PNG's header."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes, at a resolution that redraws quickly."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _table_html(summary: Any) -> str:
    text = summary.get("table", "") if isinstance(summary, dict) else str(summary)
    notes = summary.get("notes", []) if isinstance(summary, dict) else []
    # A table wider than the page scrolls inside its own box instead of being cut at the notebook's
    # edge.
    parts = (
        [
            f"<pre "
            f"style='font-family:monospace;white-space:pre;font-size:12px;line-height:1.25;overflow-x:auto;max-width:100%'>{html.escape(text)}</pre>"
        ]
        if text
        else []
    )
    parts += [f"<div>{html.escape(n)}</div>" for n in notes]
    # The fine print (a profile's every figure) folded under one line: a student opens it when
    # curious.
    details = summary.get("details", []) if isinstance(summary, dict) else []
    if details:
        parts.append(
            "<details><summary>details</summary><pre "
            "style='font-family:monospace;white-space:pre-wrap;"
            f"font-size:12px'>{html.escape(chr(10).join(details))}</pre></details>"
        )
    return "".join(parts)


class LessonPanel(W.VBox):
    """Controls + figure + table, wired to one lesson function.

    ``controls`` maps the lesson function's argument names to widgets; ``fixed``
    holds the arguments the panel does not expose (the notebook's parameters cell
    sets them, e.g. how many requests to simulate). Bad combinations of values
    (a ``ConfigError``) show as one line instead of a traceback.
    """

    #: Resolution of the drawn figure; tests lower it to save time.
    dpi = 80

    def __init__(
        self,
        fn: Callable[..., tuple[Any, Figure]],
        controls: dict[str, W.ValueWidget],
        fixed: dict[str, Any] | None = None,
        title: str = "",
        button: bool = False,
    ) -> None:
        self.fn = fn
        self.controls = controls
        self.fixed = dict(fixed or {})
        self.result: tuple[Any, Figure] | None = None
        self.calls = 0
        self.error = ""
        self._holding = False
        # Hidden until it has a picture: an empty image widget shows as a broken-image icon (a panel
        # that waits for its Run button showed one to every student).
        self.image = W.Image(format="png", layout=W.Layout(display="none"))
        self.table = W.HTML()
        self.status = W.HTML()
        left = [W.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        left += list(controls.values())
        if button:
            # Slow lessons (a real model) run on a click, not on every change.
            self.run_button = W.Button(description="Run", button_style="primary")
            self.run_button.on_click(lambda _b: self.refresh())
            left.append(self.run_button)
        else:
            for w in controls.values():
                w.observe(self._changed, names="value")
        left.append(self.status)
        # Sliders beside the figure, not above it: a student moves one and sees the whole picture
        # change without scrolling. The row wraps (flex) on a screen too narrow for both.
        column = W.VBox(
            left, layout=W.Layout(width=f"{CONTROLS_WIDTH}px", min_width=f"{CONTROLS_WIDTH}px")
        )
        self.row = W.HBox(
            [column, self.image], layout=W.Layout(flex_flow="row wrap", align_items="flex-start")
        )
        super().__init__([self.row, self.table])
        if button:
            self.status.value = "<i>press Run</i>"
        else:
            self.refresh()

    def values(self) -> dict[str, Any]:
        return {name: w.value for name, w in self.controls.items()}

    def _changed(self, _change: dict) -> None:
        if not self._holding:
            self.refresh()

    def set_values(self, **values: Any) -> None:
        """Set several controls at once and recompute once (tests and linked controls use it)."""
        self._holding = True
        try:
            for name, v in values.items():
                self.controls[name].value = v
        finally:
            self._holding = False
        self.refresh()

    def refresh(self) -> None:
        """Call the lesson function with the controls' values; show its figure and table."""
        self.status.value = "<i>running...</i>"
        try:
            summary, fig = self.fn(**self.fixed, **self.values())
        except ConfigError as e:
            self.error = str(e)
            self.status.value = f"<span style='color:#b00'>{html.escape(self.error)}</span>"
            return
        self.calls += 1
        self.error = ""
        self.result = (summary, fig)
        png = figure_png(fig, self.dpi)
        w, h = png_size(png)
        # The natural size, never stretched (stretching made it blurry and taller than a laptop's
        # screen): max_width caps it there. As a flex item of basis 0 it takes the row's room left
        # of the controls, shrinking in proportion where that is less than its width, and wraps only
        # below FIGURE_MIN_WIDTH.
        self.image.layout = W.Layout(
            flex="1 1 0px",
            width="auto",
            height="auto",
            max_width=f"min({w}px, 100%)",
            min_width=f"{min(w, FIGURE_MIN_WIDTH)}px",
        )
        self.image.value = png
        self.table.value = _table_html(summary)
        self.status.value = ""


# -- controls -------------------------------------------------------------------------------


def float_slider(
    desc: str, value: float, lo: float, hi: float, step: float, fmt: str = ".2f"
) -> W.FloatSlider:
    return W.FloatSlider(
        value=value,
        min=lo,
        max=hi,
        step=step,
        description=desc,
        readout_format=fmt,
        continuous_update=False,
        style=_STYLE,
        layout=_LAYOUT,
    )


def log_slider(desc: str, value: float, lo: float, hi: float, fmt: str = ".3g") -> W.FloatLogSlider:
    import math

    return W.FloatLogSlider(
        value=value,
        base=10,
        min=math.log10(lo),
        max=math.log10(hi),
        step=0.05,
        description=desc,
        readout_format=fmt,
        continuous_update=False,
        style=_STYLE,
        layout=_LAYOUT,
    )


def int_slider(desc: str, value: int, lo: int, hi: int, step: int = 1) -> W.IntSlider:
    return W.IntSlider(
        value=value,
        min=lo,
        max=hi,
        step=step,
        description=desc,
        continuous_update=False,
        style=_STYLE,
        layout=_LAYOUT,
    )


def dropdown(desc: str, value: str, options: list[str] | tuple[str, ...]) -> W.Dropdown:
    return W.Dropdown(
        value=value, options=list(options), description=desc, style=_STYLE, layout=_LAYOUT
    )


def panel(
    fn, controls: dict, fixed: dict, overrides: dict, title: str, button: bool = False
) -> LessonPanel:
    """Apply the caller's starting values to the controls, then build the panel."""
    for name, v in overrides.items():
        if name in controls:
            controls[name].value = v
        else:
            fixed[name] = v
    return LessonPanel(fn, controls, fixed, title, button)


# -- one builder per notebook ---------------------------------------------------------------
# Each takes the lesson function's arguments as keywords: those naming a control set its
# starting value, the others (requests, seed: the notebook's parameters) are passed unchanged.

_GPUS = list(DEFAULT_CATALOG.gpus)
_MODELS = list(DEFAULT_CATALOG.models)


def why_batch_ui(**values: Any) -> LessonPanel:
    """Notebook 1: arrival rate, seats on the bus, the timetable and the price of the GPU."""
    controls = {
        "rate": log_slider("arrival rate (requests/s)", 8.0, 0.5, 80.0),
        "max_batch": int_slider("seats on the bus (batch size)", 16, 1, 64),
        "max_wait": float_slider("timetable: max wait (s)", 0.2, 0.0, 2.0, 0.05),
        "price_per_hour": float_slider(
            "GPU price ($/hour)",
            DEFAULT_CATALOG.gpu(lessons.LESSON_GPU).price_per_hour,
            0.25,
            10.0,
            0.25,
        ),
    }
    return panel(lessons.why_batch, controls, {}, values, "Why batch? The taxi and the bus")


def policies_ui(**values: Any) -> LessonPanel:
    """Notebook 2: which policy, how much traffic, and the knobs of each policy."""
    controls = {
        "policy": dropdown("policy", "dynamic", POLICY_NAMES),
        "rate": log_slider("arrival rate (requests/s)", 4.0, 0.25, 40.0),
        "max_batch": int_slider("static/dynamic: batch size", 16, 1, 64),
        "max_wait": float_slider("dynamic: max wait (s)", 0.5, 0.0, 3.0, 0.05),
        "max_seqs": int_slider("continuous: max running requests", 64, 1, 256),
    }
    return panel(lessons.batching_policies, controls, {}, values, "Static, dynamic, continuous")


def memory_ui(**values: Any) -> LessonPanel:
    """Notebook 3: KV budget, context length and batch size."""
    controls = {
        "kv_budget_gb": log_slider("KV cache budget (GB)", 8.0, 1.0, 64.0),
        "prompt_tokens": int_slider("prompt tokens", 1024, 64, 4096, 64),
        "output_tokens": int_slider("output tokens", 512, 16, 2048, 16),
        "max_batch": int_slider("batch size you ask for", 32, 1, 128),
        "model": dropdown("model", "llama-2-7b", _MODELS),
    }
    return panel(lessons.memory_wall, controls, {}, values, "Memory: the KV cache and the wall")


def cost_ui(**values: Any) -> LessonPanel:
    """Notebook 4: GPU, its price and the batch size. Picking a GPU resets the price to its catalog
    price."""
    gpu = values.get("gpu", lessons.LESSON_GPU)
    controls = {
        "gpu": dropdown("GPU", gpu, [g for g in _GPUS if g != "cpu"]),
        "price_per_hour": float_slider(
            "price ($/GPU-hour)", DEFAULT_CATALOG.gpu(gpu).price_per_hour, 0.1, 12.0, 0.05
        ),
        "max_batch": int_slider("batch size", 32, 1, 128),
    }
    built = panel(
        lessons.cost, controls, {}, values, "Cost: dollars per request and per million tokens"
    )

    def gpu_changed(change: dict) -> None:
        # Runs after the panel's own observer has already recomputed for the new GPU at the old
        # price; then the price follows the catalog and the panel recomputes once more.
        built.set_values(price_per_hour=DEFAULT_CATALOG.gpu(change["new"]).price_per_hour)

    controls["gpu"].observe(gpu_changed, names="value")
    return built


def fleet_ui(**values: Any) -> LessonPanel:
    """Notebook 4, second panel: how many GPUs, which router, how big a batch each, how much
    traffic."""
    from ..core.router import ROUTER_NAMES

    controls = {
        "replicas": int_slider("GPUs in the fleet (replicas)", 4, 1, 8),
        "router": dropdown("router", "least-loaded", list(ROUTER_NAMES)),
        "max_batch": int_slider("batch per GPU (max_seqs)", 8, 1, 64),
        # Whole requests/s up to past where the one big bus falls behind (lessons.fleet_flip tries
        # exactly these rates), so the answer's rate can be set and its p99s read off.
        "rate": int_slider("arrival rate (requests/s)", 2, 1, lessons.FLIP_MAX_RATE),
    }
    return panel(
        lessons.fleet, controls, {}, values, "More buses or bigger buses: a fleet behind a router"
    )


def roofline_ui(**values: Any) -> LessonPanel:
    """Notebook 5: GPU, model, batch size and context per row."""
    controls = {
        "gpu": dropdown("GPU", lessons.LESSON_GPU, _GPUS),
        "model": dropdown("model", lessons.LESSON_MODEL, _MODELS),
        "batch": int_slider("decode batch size", 32, 1, 1024),
        "context": int_slider("cached tokens per row", 512, 0, 8192, 128),
        "prompt": int_slider("prefill: prompt tokens", 512, 16, 8192, 16),
    }
    return panel(lessons.roofline, controls, {}, values, "The roofline: why batching works")


def prefill_stall_ui(**values: Any) -> LessonPanel:
    """Notebook 2, second panel: a long prompt arrives among running chats, whole or in chunks."""
    controls = {
        "prompt_tokens": int_slider("the long prompt (tokens)", 8192, 512, 32768, 512),
        "running": int_slider("requests already decoding", 32, 1, 128),
        "chunk_tokens": int_slider("chunked prefill: tokens per step", 512, 64, 4096, 64),
    }
    return panel(lessons.prefill_stall, controls, {}, values, "Prefill vs decode: the long prompt")


def theory_ui(**values: Any) -> LessonPanel:
    """Notebook 6: load, replications and seats on the bus."""
    controls = {
        "load": float_slider("load (utilisation)", 0.7, 0.05, 0.95, 0.05),
        "replications": int_slider("replications", 10, 1, 50),
        "seats": int_slider("seats on the bus", 8, 1, 32),
    }
    return panel(lessons.theory_vs_simulation, controls, {}, values, "Theory meets simulation")


def real_day_ui(**values: Any) -> LessonPanel:
    """Notebook 8: policy, batch size, SLO and the window of the trace."""
    controls = {
        "policy": dropdown("policy", "continuous", POLICY_NAMES),
        "max_batch": int_slider("batch size / max running", 64, 1, 256),
        "slo_ttft": log_slider("SLO: time to first token (s)", 2.0, 0.1, 30.0),
        "slo_tpot_ms": float_slider("SLO: ms per output token", 100.0, 10.0, 500.0, 10.0, ".0f"),
        "start_minute": float_slider("trace window starts at minute", 0.0, 0.0, 55.0, 1.0, ".0f"),
        "gpu": dropdown("GPU", lessons.LESSON_GPU, [g for g in _GPUS if g != "cpu"]),
    }
    return panel(lessons.real_day, controls, {}, values, "A real day of traffic")


PANELS: dict[str, Callable[..., LessonPanel]] = {
    "why_batch": why_batch_ui,
    "batching_policies": policies_ui,
    "memory_wall": memory_ui,
    "cost": cost_ui,
    "roofline": roofline_ui,
    "theory_vs_simulation": theory_ui,
    "real_day": real_day_ui,
    "prefill_stall": prefill_stall_ui,
    "fleet": fleet_ui,
}
