"""How close a GPU's matrix products and attention come to the roofline batchsim prices with.

batchsim's ``RooflineStepTime`` says a pass takes max(FLOPs / (peak x compute_eff), bytes /
(bandwidth x memory_eff)) + overhead, with compute_eff 0.6 and memory_eff 0.8 by default. This
script measures what those two efficiencies are on the GPU at hand, for the parts of a decoder
layer that carry nearly all of its time, in Llama-3-8B's shapes (32 layers, 4096 wide, 8 KV heads
of 128, 14,336 in the MLP):

- ``copy``: one large device-to-device copy, bytes read + written over its time (the bandwidth
  a streaming kernel reaches);
- ``gemm-peak``: one 8192^3 product (the compute a well-fed product reaches);
- ``linear``: every weight matrix of 32 layers (distinct tensors, about 14 GB in bf16, so no
  layer is served from the 50-60 MB L2) multiplied by M tokens, for M from 1 to 8192: what
  the weights of one pass cost at that many tokens, against the roofline's own max(compute,
  memory) at efficiency 1;
- ``linear-fp8``: the same in FP8 (e4m3, per-tensor scales, ``torch._scaled_mm``) where the GPU
  has FP8 tensor cores;
- ``decode-attention``: 32 layers of one decode token per row attending to ``ctx`` cached tokens
  (torch's SDPA, each KV head read once), the KV bytes read over the time.

Each timing is the median of repeated runs, timed with CUDA events after a warm-up; the
spread (p10-p90) is printed beside it. Nothing here needs simpy or batchsim: it runs on a
bare PyTorch install (the device machine's).

    python bench/gpu_roofline.py [--device cuda] [--json out/roofline.json]
    python bench/gpu_roofline.py --device cpu --small     # a dry run of every section, in seconds
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

# Llama-3-8B (its config.json on the model card): hidden 4096, 32 layers, 32 query heads and 8 KV
# heads of 128, MLP 14,336, vocabulary 128,256.
LLAMA8B = {
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "head_dim": 128,
    "mlp": 14336,
    "vocab": 128256,
}
# A shape small enough for a CPU dry run of every section.
SMALL = {
    "layers": 2,
    "hidden": 256,
    "heads": 4,
    "kv_heads": 2,
    "head_dim": 64,
    "mlp": 512,
    "vocab": 1000,
}


class Timer:
    """Times a callable on the device: CUDA events where there is CUDA, perf_counter otherwise."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def seconds(self, fn, repeats: int, warmup: int = 2) -> list[float]:
        for _ in range(warmup):
            fn()
        self.sync()
        out = []
        for _ in range(repeats):
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                out.append(a.elapsed_time(b) / 1e3)
            else:
                t = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t)
        return out


def spread(xs: list[float]) -> dict:
    q = statistics.quantiles(xs, n=10) if len(xs) >= 2 else [xs[0]] * 9
    return {"median_s": statistics.median(xs), "p10_s": q[0], "p90_s": q[-1], "n": len(xs)}


def layer_weights(shape: dict) -> list[tuple[int, int]]:
    """(in, out) of each weight matrix of one layer: fused QKV, output, fused gate+up, down."""
    h, d, kv = shape["hidden"], shape["head_dim"], shape["kv_heads"]
    return [
        (h, shape["heads"] * d + 2 * kv * d),
        (shape["heads"] * d, h),
        (h, 2 * shape["mlp"]),
        (shape["mlp"], h),
    ]


def copy_bandwidth(t: Timer, device: str, nbytes: int, repeats: int) -> dict:
    a = torch.empty(nbytes // 2, dtype=torch.float16, device=device)
    b = torch.empty_like(a)
    r = spread(t.seconds(lambda: b.copy_(a), repeats))
    r["bytes_moved"] = 2 * nbytes  # read and written
    r["bytes_per_s"] = r["bytes_moved"] / r["median_s"]
    return r


def gemm_peak(t: Timer, device: str, n: int, dtype: torch.dtype, repeats: int) -> dict:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    r = spread(t.seconds(lambda: a @ b, repeats))
    r["flops_per_s"] = 2.0 * n**3 / r["median_s"]
    r["n"] = n
    return r


def linear_sweep(
    t: Timer,
    device: str,
    shape: dict,
    dtype: torch.dtype,
    tokens: list[int],
    repeats: int,
    fp8: bool = False,
) -> list[dict]:
    """Every weight of every layer times M tokens, for each M; bytes and FLOPs counted as batchsim
    does."""
    mats = []
    for _ in range(shape["layers"]):
        for k, n in layer_weights(shape):
            w = torch.randn(n, k, device=device, dtype=dtype) * 0.02
            mats.append(w.to(torch.float8_e4m3fn) if fp8 else w)
    params = sum(w.numel() for w in mats)
    wbytes = sum(w.numel() * w.element_size() for w in mats)
    one = torch.ones((), device=device, dtype=torch.float32)
    rows = []
    for m in tokens:
        x = torch.randn(m, shape["hidden"], device=device, dtype=dtype) * 0.1
        wide = {
            k: torch.randn(m, k, device=device, dtype=dtype) * 0.1 for k, _ in layer_weights(shape)
        }
        xs = [x if w.shape[1] == shape["hidden"] else wide[w.shape[1]] for w in mats]
        if fp8:  # one FP8 copy per distinct input width, shared by the layers as in bf16
            wide8 = {k: v.to(torch.float8_e4m3fn) for k, v in wide.items()}
            x8 = x.to(torch.float8_e4m3fn)
            xs = [x8 if w.shape[1] == shape["hidden"] else wide8[w.shape[1]] for w in mats]

            def run(xs=xs, mats=mats):
                for a, w in zip(xs, mats):
                    torch._scaled_mm(a, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:

            def run(xs=xs, mats=mats):
                for a, w in zip(xs, mats):
                    a @ w.t()

        r = spread(t.seconds(run, repeats))
        # Activations read in and written out (out_dtype bf16 for FP8): small beside the weights
        # until M is large.
        act_bytes = sum(
            a.numel() * a.element_size() + a.shape[0] * w.shape[0] * 2 for a, w in zip(xs, mats)
        )
        r.update(tokens=m, flops=2.0 * params * m, weight_bytes=wbytes, bytes=wbytes + act_bytes)
        r["flops_per_s"] = r["flops"] / r["median_s"]
        r["bytes_per_s"] = r["bytes"] / r["median_s"]
        rows.append(r)
        del xs, wide, x
    del mats
    return rows


def decode_attention(
    t: Timer,
    device: str,
    shape: dict,
    dtype: torch.dtype,
    cases: list[tuple[int, int]],
    repeats: int,
) -> list[dict]:
    """One decode token per row against ``ctx`` cached tokens, every layer: KV bytes read over time.

    Grouped-query attention is written as flash-decoding does: the query heads that share a KV
    head stand as that head's queries (q is batch x kv_heads x group x head_dim), so each KV head
    is read once and no backend has to expand it.
    """
    rows = []
    d, hq, hk, layers = shape["head_dim"], shape["heads"], shape["kv_heads"], shape["layers"]
    for batch, ctx in cases:
        ks = [torch.randn(batch, hk, ctx, d, device=device, dtype=dtype) for _ in range(layers)]
        vs = [torch.randn_like(k) for k in ks]
        q = torch.randn(batch, hk, hq // hk, d, device=device, dtype=dtype)

        def run(ks=ks, vs=vs, q=q):
            for k, v in zip(ks, vs):
                torch.nn.functional.scaled_dot_product_attention(q, k, v)

        r = spread(t.seconds(run, repeats))
        kv_bytes = 2 * layers * batch * ctx * hk * d * torch.finfo(dtype).bits // 8
        r.update(batch=batch, ctx=ctx, kv_bytes=kv_bytes, bytes_per_s=kv_bytes / r["median_s"])
        rows.append(r)
        del ks, vs
    return rows


def has_fp8(device: str) -> bool:
    if not device.startswith("cuda") or not hasattr(torch, "_scaled_mm"):
        return False
    return torch.cuda.get_device_capability() >= (8, 9)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--device", default="cuda", help="cuda (default) or cpu (a dry run; use --small)"
    )
    ap.add_argument(
        "--small",
        action="store_true",
        help="a small shape and few repeats: checks every section runs",
    )
    ap.add_argument(
        "--repeats", type=int, default=9, help="timed runs per point (median and p10-p90 kept)"
    )
    ap.add_argument("--json", default=None, help="write every figure here as JSON")
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "gpu_roofline: --device cuda, but torch sees no GPU; use --device cpu --small for a "
            "dry run",
            file=sys.stderr,
        )
        return 2
    if a.repeats < 3:
        print(f"gpu_roofline: --repeats must be at least 3, got {a.repeats}", file=sys.stderr)
        return 2
    small = a.small or not a.device.startswith("cuda")
    shape = SMALL if small else LLAMA8B
    dtype = torch.bfloat16 if a.device.startswith("cuda") else torch.float32
    t = Timer(a.device)
    out: dict = {
        "device": torch.cuda.get_device_name() if t.cuda else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "shape": shape,
        "date": time.strftime("%Y-%m-%d"),
    }

    def section(name, fn):
        t0 = time.perf_counter()
        try:
            out[name] = fn()
        except Exception as e:  # a section that fails is reported and the others still run
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{name}: FAILED: {out[name]['error']}", flush=True)
        if t.cuda:
            torch.cuda.empty_cache()
        print(f"[{name}: {time.perf_counter() - t0:.1f} s]", flush=True)

    section(
        "copy", lambda: copy_bandwidth(t, a.device, (1 << 24) if small else (4 << 30), a.repeats)
    )
    if "error" not in out["copy"]:
        print(f"copy: {out['copy']['bytes_per_s'] / 1e12:.2f} TB/s (read+written)", flush=True)
    section("gemm_peak", lambda: gemm_peak(t, a.device, 256 if small else 8192, dtype, a.repeats))
    if "error" not in out["gemm_peak"]:
        print(
            f"gemm {out['gemm_peak']['n']}^3: {out['gemm_peak']['flops_per_s'] / 1e12:.0f} TFLOP/s",
            flush=True,
        )
    tokens = [1, 16, 64] if small else [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    section("linear", lambda: linear_sweep(t, a.device, shape, dtype, tokens, a.repeats))
    if has_fp8(a.device):
        section(
            "linear_fp8",
            lambda: linear_sweep(
                t, a.device, shape, dtype, [m for m in tokens if m >= 16], a.repeats, fp8=True
            ),
        )
    cases = (
        [(1, 64), (4, 64)]
        if small
        else [(1, 4096), (16, 2048), (64, 1024), (256, 1024), (128, 2048), (32, 8192)]
    )
    section(
        "decode_attention", lambda: decode_attention(t, a.device, shape, dtype, cases, a.repeats)
    )

    for name in ("linear", "linear_fp8"):
        rows = out.get(name)
        if not isinstance(rows, list):
            continue
        print(f"\n{name}: every weight of {shape['layers']} layers x M tokens")
        print(f"{'M':>6} {'median ms':>10} {'p10-p90 ms':>15} {'TFLOP/s':>8} {'TB/s':>6}")
        for r in rows:
            print(
                f"{r['tokens']:>6} {r['median_s'] * 1e3:>10.3f} "
                f"{r['p10_s'] * 1e3:>7.3f}-{r['p90_s'] * 1e3:<7.3f} "
                f"{r['flops_per_s'] / 1e12:>8.1f} {r['bytes_per_s'] / 1e12:>6.2f}"
            )
    if isinstance(out.get("decode_attention"), list):
        print("\ndecode attention (SDPA, KV heads read once), every layer")
        for r in out["decode_attention"]:
            print(
                f"batch {r['batch']:>4} ctx {r['ctx']:>5}: {r['median_s'] * 1e3:8.3f} ms, KV "
                f"{r['kv_bytes'] / 1e9:6.2f} GB, {r['bytes_per_s'] / 1e12:5.2f} TB/s"
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
