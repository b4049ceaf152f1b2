"""The built-in catalog: GPUs people rent and the models they serve, each with its source.

Peak figures are the vendors' datasheet numbers for dense tensor-core math (the "with
sparsity" figures are twice these and do not apply to ordinary weights). Memory is in the
unit the card really has: an HBM card's "80 GB" is 80 GiB (an A100-80GB shows 81,920 MiB in
nvidia-smi; the H200 of this project's GPU session, 143,771 MiB = 140.4 GiB for its "141 GB",
course/data/gpu/2026-12-04-h200/README.md), a GDDR card's "24 GB" is decimal (an L4 shows
23,034 MiB = 24.2e9 bytes). Links: the datasheet's GPU-to-GPU bandwidth, both directions
together; latencies of one small all-reduce are ASSUMED (8 us on NVLink or Infinity Fabric,
25 us over PCIe, the order NCCL's and vLLM's small-message all-reduces take).
Prices: ASSUMED typical on-demand price for ONE GPU, early 2026, rounded; hyperscalers
charge up to ~2-3x these, smaller GPU clouds less. They are for teaching arithmetic,
not for budgeting: pass --gpu-price with your provider's figure.
"""

from __future__ import annotations

from .specs import GPU, Model

__all__ = ["GPUS", "MODELS"]

_NVLINK, _PCIE = 8.0, 25.0  # assumed all-reduce latencies, microseconds

GPUS = (
    # NVIDIA T4 datasheet: 65 TFLOPS fp16 (mixed precision), 8.1 TFLOPS fp32, 16 GB GDDR6, 320 GB/s,
    # PCIe Gen3 x16 (32 GB/s). Turing has no bf16. Price: assumed ~$0.50/h (AWS g4dn.xlarge
    # $0.526/h).
    GPU(
        "T4",
        65,
        320,
        16,
        0.50,
        tflops_fp32=8.1,
        bf16=False,
        link="PCIe Gen3",
        link_gbs=32,
        link_latency_us=_PCIE,
        max_tp=4,
        source="NVIDIA T4 datasheet; price assumed (2026)",
    ),
    # NVIDIA L4 datasheet: 242 TFLOPS fp16/bf16 *with sparsity* -> 121 dense; FP8 485 sparse ->
    # 242.5 dense; 30.3 fp32; 24 GB GDDR6, 300 GB/s; PCIe Gen4 x16 64 GB/s.
    GPU(
        "L4",
        121,
        300,
        24,
        0.80,
        tflops_fp32=30.3,
        tflops_fp8=242.5,
        link="PCIe Gen4",
        link_gbs=64,
        link_latency_us=_PCIE,
        max_tp=8,
        source="NVIDIA L4 datasheet; price assumed (2026)",
    ),
    # A10G (AWS G5 only; NVIDIA publishes no datasheet): 24 GB GDDR6 at 600 GB/s like the A10, but
    # ~70 TFLOPS bf16 tensor instead of the A10's 125 (Baseten, "NVIDIA A10 vs A10G for ML model
    # inference"). fp32 31.2 TFLOPS; PCIe Gen4. Price: assumed ~$1.00/h (AWS g5.xlarge $1.006/h).
    GPU(
        "A10G",
        70,
        600,
        24,
        1.00,
        tflops_fp32=31.2,
        link="PCIe Gen4",
        link_gbs=64,
        link_latency_us=_PCIE,
        max_tp=8,
        source="Baseten A10 vs A10G spec comparison; price assumed (2026)",
    ),
    # NVIDIA L40S datasheet: 362.05 TFLOPS fp16/bf16 dense (733 sparse), FP8 733 dense; 91.6 fp32;
    # 48 GB GDDR6 with ECC, 864 GB/s; PCIe Gen4 x16 64 GB/s, no NVLink. Price: assumed ~$1.00/h.
    GPU(
        "L40S",
        362,
        864,
        48,
        1.00,
        tflops_fp32=91.6,
        tflops_fp8=733,
        link="PCIe Gen4",
        link_gbs=64,
        link_latency_us=_PCIE,
        max_tp=8,
        source="NVIDIA L40S datasheet; price assumed (2026)",
    ),
    # NVIDIA A100 datasheet: 312 TFLOPS bf16/fp16 dense, 19.5 fp32 (non-tensor); no FP8.
    # A100 40GB SXM: 40 GB HBM2, 1,555 GB/s; 80GB SXM: 80 GB HBM2e, 2,039 GB/s; NVLink 600 GB/s.
    GPU(
        "A100-40GB",
        312,
        1555,
        40,
        1.80,
        tflops_fp32=19.5,
        memory_gib=True,
        link="NVLink 3",
        link_gbs=600,
        link_latency_us=_NVLINK,
        max_tp=8,
        source="NVIDIA A100 datasheet (SXM); price assumed (2026)",
    ),
    GPU(
        "A100-80GB",
        312,
        2039,
        80,
        2.50,
        tflops_fp32=19.5,
        memory_gib=True,
        link="NVLink 3",
        link_gbs=600,
        link_latency_us=_NVLINK,
        max_tp=8,
        source="NVIDIA A100 datasheet (SXM); price assumed (2026)",
    ),
    # NVIDIA H100 datasheet, SXM5: 1,979 TFLOPS bf16 with sparsity -> 989 dense; FP8 3,958 sparse ->
    # 1,979 dense; 67 fp32; 80 GB HBM3, 3.35 TB/s; NVLink 900 GB/s.
    GPU(
        "H100-SXM",
        989,
        3350,
        80,
        3.50,
        tflops_fp32=67,
        tflops_fp8=1979,
        memory_gib=True,
        link="NVLink 4",
        link_gbs=900,
        link_latency_us=_NVLINK,
        max_tp=8,
        source="NVIDIA H100 datasheet (SXM); price assumed (2026)",
    ),
    # NVIDIA H200 datasheet, SXM: the H100 SXM's compute; 141 GB HBM3e (GiB: see above), 4.8 TB/s;
    # NVLink 900 GB/s. Measured here: 3.55 TB/s reading Llama-3-8B's weights, 638-676 TFLOP/s bf16
    # and 1,152-1,215 FP8 on large products (course/data/gpu/2026-12-04-h200/README.md).
    GPU(
        "H200",
        989,
        4800,
        141,
        4.50,
        tflops_fp32=67,
        tflops_fp8=1979,
        memory_gib=True,
        link="NVLink 4",
        link_gbs=900,
        link_latency_us=_NVLINK,
        max_tp=8,
        source="NVIDIA H200 datasheet (SXM); price assumed (2026)",
    ),
    # AMD Instinct MI300X datasheet: 1,307.4 TFLOPS fp16/bf16 dense, FP8 2,614.9 dense, 163.4 fp32
    # matrix; 192 GB HBM3, 5.3 TB/s; Infinity Fabric 7 links x 128 GB/s = 896 GB/s. Price: assumed
    # ~$3.00/h.
    GPU(
        "MI300X",
        1307,
        5300,
        192,
        3.00,
        tflops_fp32=163.4,
        tflops_fp8=2615,
        memory_gib=True,
        link="Infinity Fabric",
        link_gbs=896,
        link_latency_us=_NVLINK,
        max_tp=8,
        source="AMD Instinct MI300X datasheet; price assumed (2026)",
    ),
    # A CPU is a placeholder meant to be *calibrated*: these are round figures for a small
    # cloud VM (2 AVX2 cores x 3 GHz x 32 fp32 FLOP/cycle ~ 0.2 TFLOP/s; ~20 GB/s DRAM).
    # Measure yours (python -m realrun profile), turn the fit into an entry with
    # batchsim.machine.roofline.calibrated_gpu, and put its figures in a --catalog file.
    GPU(
        "cpu",
        0.2,
        20,
        16,
        0.10,
        tflops_fp32=0.2,
        default_dtype="fp32",
        source="round figures for a 2-core VM, to be calibrated; price assumed",
    ),
)

# Shapes from each model's Hugging Face config.json; parameter counts as PyTorch counts them
# (tied embeddings once). GPT-2 family: OpenAI GPT-2 (Radford et al., 2019), 1,024 positions,
# MLP 4 x hidden, output head tied to the embedding.
MODELS = (
    Model(
        "distilgpt2",
        6,
        768,
        12,
        12,
        64,
        50257,
        81_912_576,
        1024,
        tied=True,
        source="huggingface.co/distilbert/distilgpt2 config.json",
    ),
    Model(
        "gpt2",
        12,
        768,
        12,
        12,
        64,
        50257,
        124_439_808,
        1024,
        tied=True,
        source="huggingface.co/openai-community/gpt2 config.json",
    ),
    Model(
        "gpt2-medium",
        24,
        1024,
        16,
        16,
        64,
        50257,
        354_823_168,
        1024,
        tied=True,
        source="huggingface.co/openai-community/gpt2-medium config.json",
    ),
    Model(
        "gpt2-large",
        36,
        1280,
        20,
        20,
        64,
        50257,
        774_030_080,
        1024,
        tied=True,
        source="huggingface.co/openai-community/gpt2-large config.json",
    ),
    Model(
        "gpt2-xl",
        48,
        1600,
        25,
        25,
        64,
        50257,
        1_557_611_200,
        1024,
        tied=True,
        source="huggingface.co/openai-community/gpt2-xl config.json",
    ),
    # Llama 2 (Touvron et al., 2023): multi-head attention, so 32 KV heads; 4,096 context; MLP
    # 11,008.
    Model(
        "llama-2-7b",
        32,
        4096,
        32,
        32,
        128,
        32000,
        6_738_415_616,
        4096,
        intermediate=11008,
        source="huggingface.co/meta-llama/Llama-2-7b-hf config.json",
    ),
    # Llama 3 8B (Meta, 2024): grouped-query attention with 8 KV heads, 128k vocabulary, 8,192
    # context.
    Model(
        "llama-3-8b",
        32,
        4096,
        32,
        8,
        128,
        128256,
        8_030_261_248,
        8192,
        intermediate=14336,
        source="huggingface.co/meta-llama/Meta-Llama-3-8B config.json",
    ),
    # Llama 3.1 8B: Llama 3 8B's shape with 131,072 positions.
    Model(
        "llama-3.1-8b",
        32,
        4096,
        32,
        8,
        128,
        128256,
        8_030_261_248,
        131072,
        intermediate=14336,
        source="huggingface.co/meta-llama/Llama-3.1-8B config.json",
    ),
    # Llama 3 70B: 80 layers x 8,192, 64 query heads, 8 KV heads, MLP 28,672; 70.6e9 parameters.
    Model(
        "llama-3-70b",
        80,
        8192,
        64,
        8,
        128,
        128256,
        70_553_706_496,
        8192,
        intermediate=28672,
        source="huggingface.co/meta-llama/Meta-Llama-3-70B config.json",
    ),
    Model(
        "llama-3.1-70b",
        80,
        8192,
        64,
        8,
        128,
        128256,
        70_553_706_496,
        131072,
        intermediate=28672,
        source="huggingface.co/meta-llama/Llama-3.1-70B config.json",
    ),
    # Mistral 7B v0.1 (Jiang et al., 2023): GQA with 8 KV heads; 32,768 positions (4,096 sliding
    # window, which this model ignores: it caches every token, as v0.2+ do); MLP 14,336.
    Model(
        "mistral-7b",
        32,
        4096,
        32,
        8,
        128,
        32000,
        7_241_732_096,
        32768,
        intermediate=14336,
        source="huggingface.co/mistralai/Mistral-7B-v0.1 config.json",
    ),
)
