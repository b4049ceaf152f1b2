"""Which real model runs, where, in what precision: loading it without a download.

The hub is out of reach in many classrooms, so the defaults need nothing from it:

- ``tiny-gpt2``: a GPT-2 architecture (4 layers x 256 hidden, 4 heads, 1024 positions) with
  seeded random weights and a byte-level vocabulary (256 bytes + 3 specials). A whole lab
  runs on 2 CPU cores in seconds.
- ``gpt2-random``: the 124M GPT-2 shape (12 x 768, vocabulary 50257), random weights: the
  timing of the real GPT-2 without its download.
- ``tiny-gpt2-50k``: tiny-gpt2's 4 x 256 body under GPT-2's 50,257-token vocabulary, where the
  output layer is most of a step: the shape engines are compared on
  (``bench/engine_efficiency.py``).
- ``gpt2-6l``: 6 layers x 512 hidden, 8 heads, tiny-gpt2's byte vocabulary: a pass long enough
  (several ms on one CPU thread) that the clock and the Python around it are small beside it,
  the fidelity bench's model (``bench/fidelity.py``).
- ``gpt2-8l-32k``: 8 layers x 768 hidden, 12 heads, a 32,000-token vocabulary (Llama's size):
  a shape no part of the engine was tuned on, held beside vLLM to see that the engine's speed
  is not a fit to the other three (``bench/engine_efficiency.py``).

Their weights are random: **the timing is real, the text is not.** Every command that
uses them says so. Anything else (``gpt2``, ``distilgpt2``, a local folder, a Llama) goes
through ``AutoModelForCausalLM`` when it is a local path, is in the Hugging Face cache, or
the hub answers within a couple of seconds; otherwise one ``ConfigError`` line names the
offline default. Nothing here waits on the network for long.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from batchsim.core.errors import ConfigError, check_int_at_least

__all__ = [
    "OFFLINE_MODELS",
    "ByteTokenizer",
    "LoadedModel",
    "load_model",
    "resolve_device",
    "resolve_dtype",
    "set_threads",
    "default_threads",
    "available_cores",
    "RANDOM_WEIGHTS_NOTE",
    "special_ids",
    "build_offline",
]

OFFLINE_MODELS = ("tiny-gpt2", "gpt2-random", "tiny-gpt2-50k", "gpt2-6l", "gpt2-8l-32k")
RANDOM_WEIGHTS_NOTE = "weights are random (seeded): the timing is real, the text is not"

# How long we give huggingface.co to answer before saying it is unreachable: long enough for a
# working connection, short enough that an offline classroom never notices a hang.
HUB_PROBE_TIMEOUT_S = 2.0


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255, plus BOS/EOS/PAD: needs no download and never fails."""

    def __init__(self, vocab_size: int = 259) -> None:
        self.vocab_size = vocab_size
        self.bos_token_id, self.eos_token_id, self.pad_token_id = 256, 257, 258

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        # Ids past the bytes (specials, or a big vocabulary's other rows) have no text: show a dot.
        return bytes(i if i < 256 else 46 for i in ids).decode("utf-8", errors="replace")


@dataclass
class LoadedModel:
    """A model ready to run, and what a report needs to say about it."""

    model: object  # transformers PreTrainedModel, in eval mode, on its device
    tokenizer: object  # .encode(text) -> ids, .decode(ids) -> text
    name: str
    source: (
        str  # "offline, random weights" | "local path ..." | "Hugging Face cache" | "downloaded"
    )
    device: str
    dtype: str
    threads: int
    n_positions: int
    random_weights: bool
    pad_token_id: int
    eos_token_id: int | None
    vocab_size: int
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Every id the engine feeds the model (padding included) must be a row of its embedding.
        for k in ("pad_token_id", "eos_token_id"):
            v = getattr(self, k)
            if v is not None and not 0 <= v < self.vocab_size:
                raise ConfigError(
                    f"model {self.name}: {k} must be inside its vocabulary of {self.vocab_size:,} "
                    f"ids, got {v}"
                )

    @property
    def kv_bytes_per_token(self) -> int:
        """2 (K and V) x layers x KV heads x head dim x bytes per value."""
        c = self.model.config
        layers = getattr(c, "num_hidden_layers", None) or c.n_layer
        heads = getattr(c, "num_attention_heads", None) or c.n_head
        kv_heads = getattr(c, "num_key_value_heads", None) or heads
        hidden = getattr(c, "hidden_size", None) or c.n_embd
        head_dim = getattr(c, "head_dim", None) or hidden // heads
        return 2 * layers * kv_heads * head_dim * _DTYPE_BYTES[self.dtype]

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def describe(self) -> str:
        s = (
            f"{self.name} ({self.source}; {self.n_params / 1e6:.1f}M params) on {self.device}, "
            f"{self.dtype}, {self.threads} torch threads"
        )
        if self.random_weights:
            s += f"; {RANDOM_WEIGHTS_NOTE}"
        return s

    def synchronize(self) -> None:
        """Wait for queued GPU work, so a clock read after it measures the work (no-op on CPU)."""
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()


_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def steady_attention_on_cuda() -> None:
    """Keep torch's cuDNN attention out of the engine's passes.

    Measured on an H200 (torch 2.11, course/data/gpu/2026-12-04-h200/host.txt): torch picked
    cuDNN for GPT-2's attention, and cuDNN builds a new plan on the host whenever the key length
    changes, which a decode step does every time: 5.5 ms of CPU per layer against 9 us on the
    GPU, so a 12-layer pass took 45 ms with one thread (and 6-40 ms, bimodal, with eight), while
    the same pass on flash or memory-efficient attention took 5.2-5.4 ms with either. Those
    kernels take any length without a plan, so the engine's time is its model's, not a cache miss.
    """
    import torch

    torch.backends.cuda.enable_cudnn_sdp(False)


def resolve_device(device: str) -> str:
    """auto -> cuda when a GPU is visible, else cpu; cuda without a GPU is an error."""
    import torch

    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise ConfigError(f"device must be auto, cpu or cuda, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r} asked for, but torch sees no CUDA GPU (torch {torch.__version__}); "
            f"use --device cpu"
        )
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """auto -> fp16 on CUDA, fp32 on CPU (CPU half precision is slow and not what a server runs)."""
    if dtype == "auto":
        return "fp16" if device.startswith("cuda") else "fp32"
    if dtype not in _DTYPE_BYTES:
        raise ConfigError(f"dtype must be auto, fp32, fp16 or bf16, got {dtype!r}")
    if dtype == "fp16" and device == "cpu":
        raise ConfigError(
            "dtype fp16 is for CUDA; on cpu use fp32 (or bf16), got fp16 with device cpu"
        )
    return dtype


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """Half the cores this process may use, at least one.

    Not all of them: torch's parallel regions wait for every thread at a barrier, so when any
    other process (a notebook, a browser, a second student's run) holds a core, every operation
    waits a scheduler slice. Measured on a 2-core machine with one other busy process: a
    tiny-gpt2 decode step of 4 rows took 280 ms with 2 threads and 4 ms with 1. Pass --threads
    to use every core on a quiet machine (a model this small gains little from it anyway).
    """
    return max(1, available_cores() // 2)


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads explicitly (None: ``default_threads()``) and return it."""
    import torch

    if threads is None:
        threads = default_threads()
    check_int_at_least("threads", threads, 1)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def _gpt2_config(name: str):
    from transformers import GPT2Config

    if name == "tiny-gpt2":
        # A byte-level vocabulary to match the byte tokenizer: a 50257-row output layer would spend
        # most of each step predicting ids the tokenizer cannot print. initializer_range=0.2 (ten
        # times GPT-2's) makes greedy decoding wander over many tokens instead of repeating one,
        # which makes the batched-equals-unbatched tests stronger.
        return GPT2Config(
            n_layer=4,
            n_embd=256,
            n_head=4,
            n_positions=1024,
            vocab_size=259,
            initializer_range=0.2,
            bos_token_id=256,
            eos_token_id=257,
            pad_token_id=258,
        )
    if name == "gpt2-6l":
        return GPT2Config(
            n_layer=6,
            n_embd=512,
            n_head=8,
            n_positions=1024,
            vocab_size=259,
            initializer_range=0.2,
            bos_token_id=256,
            eos_token_id=257,
            pad_token_id=258,
        )
    if name == "tiny-gpt2-50k":
        return GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=1024, pad_token_id=50256)
    if name == "gpt2-8l-32k":
        # Specials inside the 32,000 rows (GPT-2's default 50256 would be past the last one).
        return GPT2Config(
            n_layer=8,
            n_embd=768,
            n_head=12,
            n_positions=1024,
            vocab_size=32000,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        )
    # GPT-2 small's shape (124M). Default initialisation: larger weights overflow in fp16 on a GPU.
    return GPT2Config(pad_token_id=50256)


def _torch_dtype(dtype: str):
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]


def build_offline(name: str, seed: int, device: str, dtype: str):
    """One of OFFLINE_MODELS: a GPT-2-shaped model with seeded random weights, built here (no
    download)."""
    import torch
    from transformers import GPT2LMHeadModel

    cfg = _gpt2_config(name)
    cfg._attn_implementation = "sdpa"
    # Seed torch inside a forked RNG so loading a model never moves anyone else's random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(cfg)
    return model.to(device=device, dtype=_torch_dtype(dtype)).eval(), cfg


def _hub_reachable() -> bool:
    if (
        os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
        or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    ):
        return False
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=HUB_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def _load_pretrained(name: str, device: str, dtype: str):
    """A local path, the HF cache, or (when the hub answers quickly) a download; else
    ConfigError."""
    from transformers import AutoModelForCausalLM

    kw = {"dtype": _torch_dtype(dtype)}
    offline_hint = (
        f"use --model {OFFLINE_MODELS[0]} (offline, random weights) or --model {OFFLINE_MODELS[1]}"
    )
    if Path(name).exists():
        try:
            model = AutoModelForCausalLM.from_pretrained(name, local_files_only=True, **kw)
        except Exception as e:  # a folder without a model in it, a broken config, ...
            raise ConfigError(
                f"model: {name!r} is a path but holds no loadable causal LM ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:160]})"
            ) from None
        return model, f"local path {name}", name
    try:
        model = AutoModelForCausalLM.from_pretrained(name, local_files_only=True, **kw)
        return model, "Hugging Face cache", name
    except Exception:
        pass
    if not _hub_reachable():
        raise ConfigError(
            f"model {name!r} is not in the local Hugging Face cache and huggingface.co is "
            f"unreachable; {offline_hint}"
        )
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    try:
        model = AutoModelForCausalLM.from_pretrained(name, **kw)
    except Exception as e:
        raise ConfigError(
            f"model {name!r} could not be loaded from the hub ({type(e).__name__}); {offline_hint}"
        ) from None
    return model, "downloaded from the Hugging Face hub", name


def load_tokenizer(name: str):
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception:
        return None


def load_model(
    name: str = "tiny-gpt2",
    device: str = "auto",
    dtype: str = "auto",
    threads: int | None = None,
    seed: int = 0,
) -> LoadedModel:
    """Load ``name`` on ``device`` in ``dtype`` with ``threads`` torch threads set explicitly."""
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    threads = set_threads(threads)
    if device.startswith("cuda"):
        steady_attention_on_cuda()
    if name in OFFLINE_MODELS:
        model, cfg = build_offline(name, seed, device, dtype)
        tok = ByteTokenizer(cfg.vocab_size)
        return LoadedModel(
            model,
            tok,
            name,
            "offline, built from a config",
            device,
            dtype,
            threads,
            cfg.n_positions,
            True,
            pad_token_id=cfg.pad_token_id,
            eos_token_id=cfg.eos_token_id,
            vocab_size=cfg.vocab_size,
        )
    model, source, name = _load_pretrained(name, device, dtype)
    model = model.to(device).eval()
    cfg = model.config
    tok = load_tokenizer(name) or ByteTokenizer(cfg.vocab_size)
    n_pos = (
        getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None) or 2048
    )
    # the rows the model can look up, whatever the config says
    vocab = int(model.get_input_embeddings().num_embeddings)
    pad, eos, notes = special_ids(cfg, vocab)
    return LoadedModel(
        model,
        tok,
        name,
        source,
        device,
        dtype,
        threads,
        int(n_pos),
        False,
        pad_token_id=pad,
        eos_token_id=eos,
        vocab_size=vocab,
        extra={"notes": notes} if notes else {},
    )


def special_ids(cfg, vocab: int) -> tuple[int, int | None, list[str]]:
    """(pad id, EOS id or None, notes): every id the engine feeds the model inside its vocabulary.

    A config saved with ``GPT2Config``'s defaults under a smaller vocabulary keeps GPT-2's
    ``eos_token_id`` 50256 and no pad id; padding with that id is an ``IndexError`` in the first
    padded prefill. An EOS past the vocabulary can never be produced, so it is dropped (with a
    note: ``--stop-on-eos`` then never stops early); the pad id is the config's if it is inside,
    else the EOS if that is, else 0 (padded positions are masked, so which id pads is moot).
    """
    inside = lambda i: isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab  # noqa: E731
    notes = []
    eos = (
        cfg.eos_token_id
        if isinstance(cfg.eos_token_id, int)
        else (list(cfg.eos_token_id or []) or [None])[0]
    )
    if eos is not None and not inside(eos):
        notes.append(
            f"note: the model's eos_token_id {eos} is outside its vocabulary of {vocab:,} ids: it "
            f"can never "
            "be generated, so no request ends at an EOS (--stop-on-eos has no effect)"
        )
        eos = None
    pad = cfg.pad_token_id
    if not inside(pad):
        if pad is not None:
            notes.append(
                f"note: the model's pad_token_id {pad} is outside its vocabulary of {vocab:,} ids: "
                "padding uses id " + (f"{eos} (its EOS)" if eos is not None else "0")
            )
        pad = eos if eos is not None else 0
    return int(pad), eos, notes
