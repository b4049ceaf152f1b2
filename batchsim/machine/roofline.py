"""Why batching works, in one formula: the roofline step time of a GPU running a model.

A forward pass must do two things: *compute* (multiply every token's activations by
the weights: about 2 FLOPs per parameter per token, plus attention) and *move
memory* (read every weight once, read the KV cache of every row, write the new
keys and values). The GPU does both at once, so the step takes as long as the
slower of the two, plus a fixed overhead (kernel launches, sampling, scheduling):

    compute = FLOPs / (peak FLOP/s x compute_eff)
    memory  = (weight bytes + KV bytes read + KV bytes written) / (bandwidth x memory_eff)
    step    = max(compute, memory) + overhead

Decoding one token for one request reads all the weights to do 2 FLOPs per
parameter: the GPU idles, waiting on memory. Decoding for B requests reads the
weights *once* and does B times the work, so the step barely lengthens until the
compute side catches up: the *knee*, near B = peak / bandwidth (about 150 on an
A100 before efficiencies). Past it, more rows cost proportionally more time. The
KV cache spoils the idyll a little: every row reads its own context, so long
contexts add memory traffic that grows with B and push the knee out.

Defaults (assumptions, stated so they can be argued with):

- ``compute_eff`` 0.6: a well-fed GEMM on A100/H100 reaches 60-80 % of the
  datasheet peak; whole models in serving reach less (training MFU reported by
  PaLM was 46 %, Chowdhery et al. 2022). 0.6 sits between.
- ``memory_eff`` 0.8: streaming kernels reach about 80-90 % of the datasheet
  bandwidth on HBM GPUs; decode attention kernels somewhat less.
- ``overhead`` 0.5 ms per step: launch and scheduling cost of an engine using CUDA
  graphs (vLLM-like). An eager PyTorch loop costs several ms per step for a small
  model; realrun's profiler measures it, and a calibration file replaces this model.

Precision and splits (``weights``, ``kv_dtype``, ``tp``): FP8 or 4-bit weights shrink the
bytes every pass reads; FP8 weights also raise the compute roof where the card has FP8
tensor cores (H100, H200, L40S, L4, MI300X); an FP8 cache halves what each row reads. Split
over ``tp`` GPUs, each GPU reads and computes 1/tp of it, and the pass waits for two
all-reduces per layer (``allreduce_s``, priced from the catalogue's link; ``parallel``).

The in-prompt attention of a prefill (each prompt token attends to those before
it: n(n+1)/2 pairs for a chunk of n) needs to know the chunks, so ``durations``
computes it per step; ``times`` on bare arrays counts only attention over cached
context (``kv_read``). 2 x params x tokens counts embedding tables as if they were
multiplied too (an overestimate of ~2 % for a 7B model, none for GPT-2's tied head).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError, check_at_most, check_nonneg, is_number, show
from ..core.plan import Pass, plan_step
from ..core.step import Step
from ..sim.steptime import SHORT_REPEAT, StepTimeModel
from .catalog import GPU, Model, dtype_bytes
from .memory import kv_bytes_per_token
from .parallel import LINK_EFF, check_tp
from .specs import check_kv_dtype, check_weights

__all__ = [
    "RooflineStepTime",
    "DEFAULT_COMPUTE_EFF",
    "DEFAULT_MEMORY_EFF",
    "DEFAULT_OVERHEAD",
    "decode_table",
    "knee_batch",
]

DEFAULT_COMPUTE_EFF = 0.6
DEFAULT_MEMORY_EFF = 0.8
DEFAULT_OVERHEAD = 0.0005


#: The smallest efficiency taken: 0.1 % of peak is already a broken machine, and 1e-308 overflows.
MIN_EFF = 0.001


def _check_fraction(field: str, v: float) -> None:
    if not is_number(v) or not (MIN_EFF <= v <= 1):
        raise ConfigError(f"{field} must be in [{MIN_EFF:g}, 1], got {show(v)}")


@dataclass(frozen=True)
class RooflineStepTime(StepTimeModel):
    gpu: GPU
    model: Model
    dtype: str = "fp16"
    compute_eff: float = DEFAULT_COMPUTE_EFF
    memory_eff: float = DEFAULT_MEMORY_EFF
    overhead: float = DEFAULT_OVERHEAD
    weights: str | None = None  # how weights are stored (fp16, bf16, fp8, int4); None: ``dtype``
    kv_dtype: str | None = None  # how the KV cache is stored (fp16, bf16, fp8); None: ``dtype``
    tp: int = 1  # GPUs the model is split over (tensor parallelism)

    def __post_init__(self) -> None:
        self.gpu.check_dtype(self.dtype)
        check_weights(self.w_dtype)
        check_kv_dtype(self.kv_store)
        check_tp(self.gpu, self.tp, self.model)
        _check_fraction("compute_eff", self.compute_eff)
        _check_fraction("memory_eff", self.memory_eff)
        check_nonneg("step overhead", self.overhead)
        check_at_most("step overhead", self.overhead, 86_400.0, "seconds: a day per pass")

    def __repr__(self) -> str:
        prec = self.dtype if self.w_dtype == self.dtype else f"{self.w_dtype} weights"
        prec += f", {self.kv_store} KV" if self.kv_store != self.dtype else ""
        on = f"{self.tp} x {self.gpu.name}" if self.tp > 1 else self.gpu.name
        return (
            f"Roofline({self.model.name} {prec} on {on}, compute_eff={self.compute_eff:g}, "
            f"memory_eff={self.memory_eff:g}, overhead={self.overhead * 1e3:g} ms)"
        )

    @property
    def w_dtype(self) -> str:
        return self.weights or self.dtype

    @property
    def kv_store(self) -> str:
        return self.kv_dtype or self.dtype

    # -- the two sides of the roof -----------------------------------------------------
    @property
    def flops_per_s(self) -> float:
        """The linear layers' roof on one GPU: FP8 tensor cores for FP8 weights where the card has
        them (W8A8, as vLLM runs FP8 checkpoints on H100); 16-bit otherwise (int4 and FP8 on an
        A100 are weight-only: the bytes shrink, the products stay 16-bit)."""
        roof = "fp8" if self.w_dtype == "fp8" and self.gpu.tflops_fp8 > 0 else self.dtype
        return self.gpu.peak_flops(roof) * self.compute_eff

    @property
    def attention_ratio(self) -> float:
        """Attention runs in the activations' dtype: its FLOPs count this many times a linear FLOP
        (exactly 1.0 when both share a roof, so the sums are those of one roof)."""
        return self.flops_per_s / (self.gpu.peak_flops(self.dtype) * self.compute_eff)

    @property
    def bytes_per_s(self) -> float:
        return self.gpu.bandwidth * self.memory_eff

    @property
    def weight_bytes(self) -> float:
        """Weight bytes one GPU reads per pass (1/tp of them)."""
        w = self.model.weight_bytes(self.w_dtype)
        return w if self.tp == 1 else w / self.tp

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes per token that one GPU reads (its share of the KV heads)."""
        b = kv_bytes_per_token(self.model, self.kv_store, self.tp)
        return b if self.tp == 1 else b / self.tp

    def allreduce_s(self, tokens):
        """Seconds one pass spends in all-reduces over ``tokens`` tokens: two per layer (after
        attention and after the MLP), each of tokens x hidden 16-bit numbers. A ring moves
        2 (tp-1)/tp of the data through each GPU's link, one direction at a time (half the
        datasheet's two-way figure), at ``LINK_EFF`` of it; each all-reduce also pays the
        link's fixed latency. Not overlapped with compute: vLLM and TensorRT-LLM wait for it."""
        if self.tp == 1:
            return 0.0
        g = self.gpu
        data = (
            np.asarray(tokens, dtype=np.float64)
            * self.model.hidden
            * 2
            * 2
            * (self.tp - 1)
            / self.tp
        )
        each = g.link_latency_us * 1e-6 + data / (g.link_gbs * 1e9 / 2 * LINK_EFF)
        return 2 * self.model.layers * each

    def components(
        self, prefill_tokens, decode_rows, kv_read, attn_pairs=None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(compute seconds, memory seconds) for each step; no overhead.

        attn_pairs: query-key pairs the step's attention computes. ``durations`` knows them
        from the chunks; without them each decode row attends to its cached context and
        itself (kv_read + decode_rows) and a prefill's attention within its own chunk is left out.
        """
        p = np.asarray(prefill_tokens, dtype=np.float64)
        d = np.asarray(decode_rows, dtype=np.float64)
        kv = np.asarray(kv_read, dtype=np.float64)
        tokens = p + d
        m = self.model
        pairs = kv + d if attn_pairs is None else np.asarray(attn_pairs, dtype=np.float64)
        flops = (
            2.0 * m.params * tokens + m.attention_flops_per_pair() * self.attention_ratio * pairs
        )
        if self.tp > 1:
            flops = flops / self.tp
        kvb = self.kv_bytes_per_token
        moved = self.weight_bytes + kvb * (kv + tokens)
        return flops / self.flops_per_s, moved / self.bytes_per_s

    def times(self, prefill_tokens, decode_rows, kv_read):
        c, mem = self.components(prefill_tokens, decode_rows, kv_read)
        t = np.maximum(c, mem) + self.overhead
        if self.tp > 1:
            t = t + self.allreduce_s(
                np.asarray(prefill_tokens, dtype=np.float64)
                + np.asarray(decode_rows, dtype=np.float64)
            )
        return t

    def pass_time(self, p: Pass) -> float:
        # The chunks say how many query-key pairs the prompt's attention computes; the bare
        # three numbers of ``times`` cannot.
        c, mem = self.components(
            [float(p.prefill_tokens)], [float(p.decode_rows)], [float(p.attn_read)], [p.attn_pairs]
        )
        t = float(max(c[0], mem[0]) + self.overhead)
        return (
            t
            if self.tp == 1
            else t + float(self.allreduce_s(float(p.prefill_tokens + p.decode_rows)))
        )

    def short_durations(self, step: Step, m: int) -> list[float] | None:
        # The simulator's hot path on the default server: a step of a pass or a few priced in Python
        # floats, each operation the one ``components`` makes on its arrays, in the same order (an
        # int meets a float as numpy converts it), so each float is the very one ``durations``
        # gives.
        if (
            m > SHORT_REPEAT
            or type(self).durations is not StepTimeModel.durations
            or type(self).times is not RooflineStepTime.times
            or type(self).pass_time is not RooflineStepTime.pass_time
        ):
            return None
        passes = plan_step(step, self.plan)
        if m == 1:
            t = 0.0
            for p in passes:
                t += self._seconds(
                    float(p.prefill_tokens),
                    float(p.decode_rows),
                    float(p.attn_read),
                    float(p.attn_pairs),
                )
            return [t]
        (d,) = passes  # a repeat is one decode pass, every row a token longer each time
        rows = float(d.decode_rows)
        return [self._seconds(0.0, rows, float(d.attn_read + j * d.decode_rows)) for j in range(m)]

    def _seconds(self, prefill: float, rows: float, kv: float, pairs: float | None = None) -> float:
        """``components`` and ``times`` of one pass, in Python floats (``pairs`` None: as
        ``times``)."""
        m = self.model
        tokens = prefill + rows
        flops = 2.0 * m.params * tokens + m.attention_flops_per_pair() * self.attention_ratio * (
            kv + rows if pairs is None else pairs
        )
        if self.tp > 1:
            flops = flops / self.tp
        moved = self.weight_bytes + self.kv_bytes_per_token * (kv + tokens)
        t = max(flops / self.flops_per_s, moved / self.bytes_per_s) + self.overhead
        return t if self.tp == 1 else t + float(self.allreduce_s(tokens))

    # -- what the course prints ----------------------------------------------------------
    def decode(self, batch, context: float = 0.0) -> dict[str, np.ndarray]:
        """Decode step of ``batch`` rows, each with ``context`` cached tokens: the roofline
        table."""
        b = np.asarray(batch, dtype=np.float64)
        c, mem = self.components(np.zeros_like(b), b, b * context)
        step = np.maximum(c, mem) + self.overhead + self.allreduce_s(b)
        return {
            "batch": b,
            "compute_s": c,
            "memory_s": mem,
            "step_s": step,
            "tokens_per_s": b / step,
            "compute_bound": c >= mem,
        }

    def prefill(self, tokens: int, context: int = 0) -> dict[str, float]:
        """One prompt of ``tokens`` tokens prefilled alone (after ``context`` cached tokens)."""
        pairs = np.array([tokens * context + tokens * (tokens + 1) / 2])
        c, mem = self.components(
            np.array([float(tokens)]), np.zeros(1), np.array([float(context)]), pairs
        )
        step = float(max(c[0], mem[0]) + self.overhead) + float(self.allreduce_s(float(tokens)))
        return {
            "compute_s": float(c[0]),
            "memory_s": float(mem[0]),
            "step_s": step,
            "compute_bound": bool(c[0] >= mem[0]),
        }


def knee_batch(model: RooflineStepTime, context: float = 0.0, limit: int = 1 << 16) -> int | None:
    """The smallest decode batch whose step is compute-bound, or None if none up to ``limit``.

    None is a lesson too: when every row drags in a long KV cache, memory traffic grows
    as fast as compute and the step never turns compute-bound.
    """
    b = np.arange(1, limit + 1)
    bound = model.decode(b, context)["compute_bound"]
    hit = np.flatnonzero(bound)
    return int(b[hit[0]]) if len(hit) else None


def decode_table(model: RooflineStepTime, batches, context: float = 0.0) -> list[dict]:
    """Rows for printing: batch, step ms, compute ms, memory ms, bound side, tokens/s."""
    t = model.decode(np.asarray(batches), context)
    return [
        {
            "batch": int(b),
            "step_ms": s * 1e3,
            "compute_ms": c * 1e3,
            "memory_ms": mm * 1e3,
            "bound": "compute" if cb else "memory",
            "tokens_per_s": tps,
        }
        for b, s, c, mm, cb, tps in zip(
            t["batch"],
            t["step_s"],
            t["compute_s"],
            t["memory_s"],
            t["compute_bound"],
            t["tokens_per_s"],
        )
    ]


def calibrated_gpu(
    cal,
    model: Model,
    dtype: str = "fp32",
    name: str = "cpu-calibrated",
    price_per_hour: float = 0.0,
    memory_gb: float = 16.0,
) -> GPU:
    """A catalog entry read off a measured linear step-time model (``python -m realrun profile``).

    The calibration's fixed cost c0 is a step that reads every weight once, so the effective
    bandwidth is weight bytes / c0 (overhead folded in: conservative); its cost per prompt
    token c1 is 2 x params FLOPs, so the effective peak is 2 x params / c1. Use it with
    efficiencies of 1 and no overhead: the measurement already contains them. This is how the
    ``cpu`` entry is meant to be filled in for your own machine.
    """
    from ..core.errors import check_positive

    check_positive("calibration c0", cal.c0)
    check_positive("calibration c1", cal.c1)
    bw = model.weight_bytes(dtype) / cal.c0
    flops = 2.0 * model.params / cal.c1
    return GPU(
        name,
        flops / 1e12,
        bw / 1e9,
        memory_gb,
        price_per_hour,
        tflops_fp32=flops / 1e12,
        default_dtype=dtype,
        source=f"calibrated from {getattr(cal, 'source', '') or 'a linear step-time model'}",
    )


def bytes_label(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


__all__ += ["bytes_label", "dtype_bytes", "calibrated_gpu"]
