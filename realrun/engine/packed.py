"""The model's matrix products with their weights packed once for oneDNN: most of a CPU step's time.

A decode step of a small model is a chain of matrix products (in GPT-2: four per layer,
then the output layer over the vocabulary: 64 rows x 256 x 50,257 multiply-adds for the
50,257-token vocabulary, more than all the layers). PyTorch's plain ``addmm``/``linear``
read each weight in the layout it was trained in; oneDNN can lay a weight out once for
its own kernels (``torch.ops.mkldnn._reorder_linear_weight``) and then runs the same
product two to three times faster from a few rows up, which is what vLLM's CPU build
does for its linear layers. Measured here (one thread; ms per product, plain -> packed):

    256 x 50,257 (output layer) 1 row 1.6 -> 1.1      16 rows 6.7 -> 2.8      64 rows 21.4 -> 7.1
    256 x 768 (attention in)    1 row 0.009 -> 0.021  16 rows 0.078 -> 0.039  64 rows 0.24 -> 0.11

so a product of fewer than ``PACKED_FROM_ROWS`` rows keeps PyTorch's own kernel, and a larger one is
padded to one of a few row counts (``bucket``) whose kernels are built before any clock runs.

``packed_model(model)`` returns (body, head) for the engine: a copy of the model's body
(``base_model``) whose linear layers run packed, and the output layer as a ``PackedLinear``;
or None where this does not apply (not a CPU, not fp32, no oneDNN, an output layer that
does more than a product: soft-capped or scaled logits). The model itself is not
touched: the baselines and the tests' one-at-a-time reference run it as it is. The
products agree with PyTorch's to float rounding (about 1e-6 relative); the engine's
tests check that greedy tokens still equal a plain one-at-a-time run.
"""

from __future__ import annotations

import copy

import torch

__all__ = ["PackedLinear", "packed_model", "bucket", "warm", "PACKED_FROM_ROWS"]

#: Products of fewer rows run on PyTorch's kernel: oneDNN's call costs ~10 us more, measured here.
PACKED_FROM_ROWS = 4


def _available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(
        torch.ops.mkldnn, "_reorder_linear_weight"
    )


class PackedLinear(torch.nn.Module):
    """y = x @ W.T + b with W ([out, in]) packed for oneDNN; a plain product below
    ``PACKED_FROM_ROWS`` rows."""

    def __init__(self, weight_out_in: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        w = weight_out_in.detach().contiguous()
        self.weight_t = w.t()  # [in, out], a view: for the plain product of few rows
        self.bias = None if bias is None else bias.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(w, 64)
        self.n_in, self.n_out = w.shape[1], w.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, self.n_in)
        m = x2.shape[0]
        if m >= PACKED_FROM_ROWS:
            b = bucket(m)
            if b != m:  # padded to a size whose kernel is built already (see ``bucket``)
                x2 = torch.cat([x2, x2.new_zeros(b - m, self.n_in)])
            y = torch.ops.mkldnn._linear_pointwise(
                x2.contiguous(), self.packed, self.bias, "none", [], ""
            )[:m]
        elif self.bias is None:
            y = x2 @ self.weight_t
        else:
            y = torch.addmm(self.bias, x2, self.weight_t)
        return y.view(*shape[:-1], self.n_out)


def bucket(m: int) -> int:
    """The row count a product of ``m`` rows runs at: itself up to 64 (a decode's rows), then a
    multiple of 16 up to 1,024, then of 64 (a prefill's tokens).

    oneDNN builds a kernel for each new shape the first time it meets it (1 to 5 ms here), and a
    server meets new row counts all the time: the decode sizes are built at start-up (``warm``),
    and a prefill is padded (by fewer than 16 tokens, or 64 past 1,024) to sizes it meets again."""
    if m <= 64:
        return m
    return -(-m // 16) * 16 if m <= 1024 else -(-m // 64) * 64


def warm(modules, up_to: int = 64) -> None:
    """Build the kernels of every decode-sized bucket (``PACKED_FROM_ROWS`` .. ``up_to`` rows)
    now."""
    sizes = sorted({bucket(m) for m in range(PACKED_FROM_ROWS, up_to + 1)})
    seen: set[tuple[int, int]] = set()
    with torch.inference_mode():
        for mod in modules:
            if isinstance(mod, PackedLinear) and (mod.n_in, mod.n_out) not in seen:
                seen.add((mod.n_in, mod.n_out))
                for m in sizes:
                    mod(torch.zeros(m, mod.n_in))


def _packable(module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(weight [out, in], bias) of a plain linear layer: torch's Linear or GPT-2's Conv1D ([in,
    out])."""
    if type(module) is torch.nn.Linear:
        return module.weight, module.bias
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):
        return module.weight.t(), module.bias
    return None


def packed_model(model):
    """(body, head) with packed products, or None where the model's own forward must run."""
    if not _available():
        return None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    base = getattr(model, "base_model", None)
    cfg = getattr(model, "config", None)
    if head is None or base is None or base is model or type(head) is not torch.nn.Linear:
        return None
    if head.weight.device.type != "cpu" or head.weight.dtype != torch.float32:
        return None
    # Heads that do more than a product (soft-capping, scaling) keep the model's own forward.
    for extra in (
        "final_logit_softcapping",
        "logit_scale",
        "logits_scaling",
        "output_multiplier_scale",
    ):
        if getattr(cfg, extra, None) not in (None, 1, 1.0):
            return None
    try:
        # New modules over the same parameters: the model is left as it was, and no weight is copied
        # (the packed copies are the only new memory).
        shared = {id(t): t for t in (*base.parameters(), *base.buffers())}
        body = copy.deepcopy(base, memo=shared)
        for name, module in list(body.named_modules()):
            wb = _packable(module)
            if wb is None or not name:
                continue
            parent_name, _, child = name.rpartition(".")
            parent = body.get_submodule(parent_name) if parent_name else body
            setattr(parent, child, PackedLinear(*wb))
        out = PackedLinear(head.weight, head.bias)
        probe = torch.randn(8, head.weight.shape[1])
        if not torch.allclose(
            out(probe),
            torch.nn.functional.linear(probe, head.weight, head.bias),
            rtol=1e-4,
            atol=1e-4,
        ):
            return None
    except (RuntimeError, TypeError):
        return None
    return body.eval(), out
