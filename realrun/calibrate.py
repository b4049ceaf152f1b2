"""The step-time model behind ``realrun compare``: a calibration file, or our engine profiled now.

A calibration predicts well only where it was measured, so a file is checked against the
model and the workload it is used on, and a profile taken now is fitted to the workload's
own shapes (``grid_for_policies``). The vLLM engine has its own (``realrun.vllm.commands``).
"""

from __future__ import annotations

from batchsim.core.errors import ConfigError, show
from batchsim.core.files import Staging, read_json

from .run_setup import RunSetup

__all__ = ["calibration", "grid_for_policies"]


def calibration(args, lm, engine, setup: RunSetup, pairs, progress: bool = False):
    """The step-time model for the prediction: from --calibration FILE, else profiled now on a grid
    fitted to the workload (saved whole under the output folder). Returns (model, calibration info).
    A profiled model knows each policy's own gap between steps; ``simulate`` picks it."""
    from .profile import GRIDS, load_calibration, profile as run_profile

    notes, workload = setup.notes, setup.workload
    policies = [p for _, p, _ in pairs]
    if args.calibration:
        model = load_calibration(args.calibration)
        info = read_json(args.calibration, "calibration")
        for key, have in (("model_name", lm.name), ("device", lm.device), ("dtype", lm.dtype), ("threads", lm.threads)):
            if key in info and info[key] != have:
                notes.append(f"warning: calibration {args.calibration} was measured with {key}={info[key]}, this run uses {have}")
        runs = getattr(engine, "plan", None)
        if runs is not None and getattr(model, "plan", runs) != runs:
            notes.append(f"warning: calibration {args.calibration} prices steps as the {model.plan!r} pass plan, but this "
                         f"engine runs them as {runs!r} (its KV {engine.kv_layout}): profile again (omit --calibration), "
                         f"or run with --kv {'padded' if model.plan == 'grouped' else 'auto'}")
        cal_info = {"file": args.calibration, **{k: info.get(k) for k in ("model", "version", "source", "heldout", "linear")}}
        notes.extend(_coverage_notes(info, workload))
        return model, cal_info
    if args.grid == "auto":
        grid = grid_for_policies(workload, policies)
    elif args.grid in GRIDS:
        grid = GRIDS[args.grid]
    else:
        raise ConfigError(f"grid must be auto, {', '.join(GRIDS)}, got {show(args.grid)}")
    prof = run_profile(engine, grid, policies={p.name: p for p in policies}, progress=progress)
    with Staging(setup.out) as staging:
        prof.write(staging.path("calibration.json"))
        path = staging.commit()[0]
    notes.append(f"calibration (profiled now, {len(prof.points)} shapes, {prof.seconds:.1f} s): {path}")
    notes.append(prof.text())
    cal_info = {k: v for k, v in prof.as_dict().items() if k != "points"}
    cal_info["file"] = str(path)
    return prof.model, cal_info


def grid_for_policies(workload, policies):
    """The profile grid this workload needs under these policies: their rows, prefill sizes and chunks."""
    from .profile import grid_for_workload

    rows = max(p.max_rows for p in policies)
    cont = [p for p in policies if hasattr(p, "max_batched_tokens")]
    chunk = min((p.max_batched_tokens for p in cont if p.chunked_prefill), default=None)
    padded = [p for p in policies if not hasattr(p, "max_batched_tokens")]
    p_max = int(workload.prompt_tokens.max()) if len(workload) else 1
    max_prefill = max([p.max_batched_tokens for p in cont] + [p.max_rows * p_max for p in padded] + [p_max])
    return grid_for_workload(workload, rows, max_prefill, chunk, policies=tuple(p.name for p in policies))


def _coverage_notes(info: dict, workload) -> list[str]:
    """A calibration predicts well only where it was measured: say when the workload goes beyond."""
    if not len(workload) or not isinstance(info, dict) or info.get("model") != "profiled":
        return []
    try:
        width = max(info["decode"]["columns"])
        prompt = max(info["prefill"]["columns"])
    except (KeyError, TypeError, ValueError):
        return ["warning: the calibration's grids are unreadable: its coverage of this workload is unknown"]
    need_ctx = int((workload.prompt_tokens + workload.output_tokens).max())
    need_prompt = int(workload.prompt_tokens.max())
    if need_ctx > 1.25 * width or need_prompt > 1.25 * prompt:
        return [f"warning: the calibration was measured up to contexts of ~{width:.0f} tokens and prompts of {prompt:.0f}; "
                f"this workload reaches contexts of {need_ctx} and prompts of {need_prompt}: predictions extrapolate "
                "(omit --calibration to profile for this workload)"]
    return []
