"""Attention over KV blocks: each row reads only its own blocks, where they lie in the pool.

The pool of one layer holds keys as [blocks, heads, block_size, head_dim] (values alike): a
block of one head is block_size x head_dim contiguous floats, so a row's context is a list
of blocks (its block table) and nothing is padded to the longest row. A pass's queries are
ragged too: row r brings ``n_r`` queries (1 when it decodes, a chunk's length when it
prefills), the last ``n_r`` positions of its context, each attending causally to every
position up to its own.

Why a small kernel of our own (``paged_attention``, C++ compiled once by torch's
``cpp_extension``): what torch gives on a CPU could not read blocks in place. Measured
here for one layer of a 124M GPT-2 (12 heads x 64), 64 rows decoding, contexts 8..191
(6,508 tokens, 12,096 when padded to the longest: +86 %), one thread, medians of 7 rounds
(``bench/paged_attention.py`` prints them afresh):

    padded rectangle, scaled_dot_product_attention with a mask (the engine's layout)   8.6-10.3 ms
    the blocks gathered into a rectangle (index_select), then SDPA                    54-85 ms
    each row's blocks gathered, SDPA per row                                         14-16 ms
    flex_attention, eager (its reference path)                                        59-75 ms
    flex_attention compiled, on the padded layout (29 s to compile per shape)          7.3 ms
    this kernel, reading the blocks in place                                           4.7-5.1 ms

A gather copies the whole context every layer and every step, which costs more than the
attention itself; a compiled flex_attention recompiles for every new batch shape. Where no
compiler is at hand, ``attention_reference`` (each row's blocks gathered, then SDPA) gives the
same numbers slower, and is the tests' reference.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from .build_lock import KernelBusy, build_once
from .checks import checked_arguments

__all__ = ["paged_attention", "attention_reference", "kernel_available", "kernel_problem"]

_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>
#include <vector>

// q [Nq, H, D]; pool_k, pool_v [NB, H, BS, D]; table [R, maxb]; ctx [R] (context length after
// this pass); q_start [R + 1] (row r's queries are q[q_start[r] .. q_start[r + 1]]).
torch::Tensor paged_attention(torch::Tensor q, torch::Tensor pool_k, torch::Tensor pool_v, torch::Tensor table,
                              torch::Tensor ctx, torch::Tensor q_start, double scale) {
  const int64_t H = q.size(1), D = q.size(2), BS = pool_k.size(2), maxb = table.size(1), R = ctx.size(0);
  auto out = torch::empty_like(q);
  const float* Q = q.data_ptr<float>();
  const float* K = pool_k.data_ptr<float>();
  const float* V = pool_v.data_ptr<float>();
  const int64_t* T = table.data_ptr<int64_t>();
  const int64_t* C = ctx.data_ptr<int64_t>();
  const int64_t* S = q_start.data_ptr<int64_t>();
  float* O = out.data_ptr<float>();
  const int64_t head_stride = BS * D, block_stride = H * BS * D;
  const float sc = static_cast<float>(scale);
  std::vector<float> s;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t nq = S[r + 1] - S[r], n = C[r];
    const int64_t* row = T + r * maxb;
    s.resize(n);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t upto = n - nq + i + 1;  // causal: keys 0 .. own position
      for (int64_t h = 0; h < H; ++h) {
        const float* qv = Q + ((S[r] + i) * H + h) * D;
        float m = -INFINITY;
        for (int64_t t = 0; t < upto; ++t) {
          const float* kv = K + row[t / BS] * block_stride + h * head_stride + (t % BS) * D;
          float acc = 0.f;
          for (int64_t d = 0; d < D; ++d) acc += qv[d] * kv[d];
          acc *= sc;
          s[t] = acc;
          m = acc > m ? acc : m;
        }
        float l = 0.f;
        for (int64_t t = 0; t < upto; ++t) {
          s[t] = std::exp(s[t] - m);
          l += s[t];
        }
        const float inv = 1.f / l;
        float* o = O + ((S[r] + i) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) o[d] = 0.f;
        for (int64_t t = 0; t < upto; ++t) {
          const float* vv = V + row[t / BS] * block_stride + h * head_stride + (t % BS) * D;
          const float p = s[t] * inv;
          for (int64_t d = 0; d < D; ++d) o[d] += p * vv[d];
        }
      }
    }
  }
  return out;
}
"""

_problem: str | None = None


@functools.lru_cache(maxsize=1)
def _kernel():
    """The compiled kernel, or None (the reason in ``kernel_problem()``). Compiled once per machine
    (about 40 s here) into torch's extension folder; later runs load it in a moment."""
    global _problem
    _problem = None
    if os.environ.get("REALRUN_PAGED_KERNEL", "1") == "0":
        _problem = "REALRUN_PAGED_KERNEL=0"
        return None
    try:
        # torch's own folder for the name (private, but it is where torch builds and leaves its
        # lock); a torch without it fails here, and the reference path serves, as for any failed
        # build.
        from torch.utils.cpp_extension import _get_build_directory, load_inline

        _ninja_on_path()
        name = _build_name()
        folder = Path(_get_build_directory(name, verbose=False))

        def build():
            return load_inline(
                name,
                cpp_sources=_SOURCE,
                functions=["paged_attention"],
                build_directory=str(folder),
                extra_cflags=["-O3", "-march=native", "-ffast-math"],
                verbose=False,
            )

        compiled = any(folder.glob(f"{name}*.so"))
        return build_once(folder, build, _say, _wait_s(), compiled)
    except Exception as e:  # noqa: BLE001 - no compiler, no ninja, a failed build: the reference path serves
        _problem = (
            f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
        )
        if isinstance(e, KernelBusy):
            _say(
                f"not waiting longer for the attention kernel: {e}; the slower reference attention "
                f"serves"
            )
        return None


def _build_name() -> str:
    """-march=native builds for this CPU's instruction sets: the name hashes them (with the model,
    the machine and torch), so a folder of builds shared between machines never hands one CPU code
    built for another's instructions, even where two CPUs share a model name but not their flags."""
    who = f"{platform.machine()}-{_cpu_identity()}-{torch.__version__}"
    return "realrun_paged_" + hashlib.sha1((who + _SOURCE).encode()).hexdigest()[:12]


def _wait_s() -> float:
    """How long to wait on another process's build: the build takes ~40 s on an idle machine and a
    few times that on a busy one, so 300 s by default; REALRUN_KERNEL_WAIT_S sets it."""
    try:
        return max(0.0, float(os.environ.get("REALRUN_KERNEL_WAIT_S", "300")))
    except ValueError:
        return 300.0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _ninja_on_path() -> None:
    """torch runs ``ninja`` from PATH: where the pip package is installed but its script is not on
    PATH (a pyenv shim not yet rehashed, a venv not activated), put its folder there."""
    import shutil

    if shutil.which("ninja") is None:
        try:
            import ninja  # the PyPI package: its binary lives in ninja.BIN_DIR
        except ImportError:
            return
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def _cpu_identity() -> str:
    """The CPU's model name and instruction-set flags (x86's ``flags``, ARM's ``Features``), hashed.
    Only the first processor's lines: every core of one machine shares them."""
    wanted = ("model name", "flags", "features", "cpu part", "isa")
    found: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key = line.split(":", 1)[0].strip().lower()
                if key in wanted and key not in found:
                    found[key] = line.strip()
    except OSError:
        pass
    if not found:
        return platform.processor() or "cpu"
    return hashlib.sha1("\n".join(found[k] for k in sorted(found)).encode()).hexdigest()[:8]


def kernel_available() -> bool:
    return _kernel() is not None


def kernel_problem() -> str | None:
    """Why the kernel is not in use (None when it is)."""
    _kernel()
    return _problem


def paged_attention(
    q: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    table: torch.Tensor,
    ctx: torch.Tensor,
    q_start: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Ragged causal attention over blocks: q [Nq, heads, head_dim] -> [Nq, heads, head_dim].

    ``table`` [rows, most blocks] (int64; entries past a row's blocks are never read), ``ctx``
    [rows] each row's context after this pass, ``q_start`` [rows + 1] where each row's queries
    begin."""
    # Checked first, every call: the C++ reads raw pointers, so a bad index is a segfault, not an
    # error.
    q, pool_k, pool_v, table, ctx, q_start, scale = checked_arguments(
        q, pool_k, pool_v, table, ctx, q_start, scale
    )
    k = _kernel()
    if k is not None and q.dtype == torch.float32 and q.device.type == "cpu":
        return k.paged_attention(q, pool_k, pool_v, table, ctx, q_start, scale)
    return attention_reference(q, pool_k, pool_v, table, ctx, q_start, scale)


def attention_reference(
    q: torch.Tensor,
    pool_k: torch.Tensor,
    pool_v: torch.Tensor,
    table: torch.Tensor,
    ctx: torch.Tensor,
    q_start: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """The same, with each row's blocks gathered and torch's SDPA: any device and dtype, slower."""
    out = torch.empty_like(q)
    H, D, bs = q.shape[1], q.shape[2], pool_k.shape[2]
    starts, lengths = q_start.tolist(), ctx.tolist()
    for r, n in enumerate(lengths):
        a, b = starts[r], starts[r + 1]
        if a == b:
            continue
        blocks = table[r, : -(-n // bs)]
        k = pool_k.index_select(0, blocks).transpose(0, 1).reshape(H, -1, D)[:, :n]
        v = pool_v.index_select(0, blocks).transpose(0, 1).reshape(H, -1, D)[:, :n]
        nq = b - a
        # Query i sits at position n - nq + i and sees keys up to it.
        allowed = (
            torch.arange(n, device=q.device)[None, :]
            <= torch.arange(n - nq, n, device=q.device)[:, None]
        )
        o = F.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k, v, attn_mask=allowed, scale=scale
        )
        out[a:b] = o.transpose(0, 1)
    return out
