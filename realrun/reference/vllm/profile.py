"""vLLM's step times on a grid of shapes, made into batchsim's profiled step-time model.

vLLM's scheduler decides its own steps, so the profile shapes them from outside: it
submits controlled batches whose steps vLLM cannot schedule any other way, and reads
each step's shape and duration from vLLM's step log (``steplog``):

- **decode** (rows x context): ``rows`` requests with prompts of ``width`` tokens, all at
  once, each asking for ``repeats + 1`` tokens: after their prefill, vLLM runs
  ``repeats`` steps that decode exactly those rows, one token wider each time;
- **prefill** (rows x query): ``rows`` prompts of ``query`` tokens, one token each, whose
  prefill fits one step;
- **continued chunks**: a prompt longer than the step's token budget, which vLLM splits
  into chunks that attend to the ones cached before them;
- **mixed steps**: a prompt arriving while rows decode, so one step runs both: the time
  it saves against its two halves timed apart is what they share (``fused_shared``);
- **waking**: a short request after the engine sat idle (1 ms to 100 ms), against the
  same request at once again: how late its step starts and how much slower its first step runs
  (the pass the simulator lengthens after an idle);
- **delivery**: how long after a step's end its output reaches the client;
- **the spread**: each point's timings kept as quantiles of time / mean, consecutive decode
  steps' correlation, and a few seconds of one-row decode steps for the machine's slow drift
  (``realrun.timing.profile.spread_from``, as for our engine), so ``--step-noise profiled`` samples
  vLLM's steps as it samples ours;
- **the canary's reference**: ``realrun.reference.vllm.canary`` read at the profile's end, which the
  canaries around each measured run are held up to.

The batches are submitted and read back by ``realrun.reference.vllm.probe``.

Every shape runs once, unmeasured, before it is timed: vLLM's CPU kernels are built the
first time a step of a new size runs, and a served workload meets its sizes again and
again (without this, the profile read 35-45 % slow against a recheck after the run).

The model's plan is ``"fused"`` (one ragged pass per step), and the time between steps
is in the step (vLLM's own work, its process hops, its async scheduling all happen
inside a step's cycle), so no gap is added. A few shapes between the grid points are
timed too and held out, to report the interpolation's error honestly.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np

from batchsim.core.errors import ConfigError
from batchsim.sim.profiled import Grid2D, ProfiledStepTime

from ...timing.grid import Grid, doubling
from ...timing.probe import probe_passes
from ...timing.profile import Profile, ProfilePoint, fit_linear, spread_from
from .probe import SETTLE, Prober, decode_times, prefill_times
from .probe import durations as _durations
from .probe import is_decode as _is_decode

__all__ = ["profile_vllm", "vllm_grid", "PROFILE_TOKENS"]

#: The most tokens one decode point may hold (rows x width): a point prefills them all first.
PROFILE_TOKENS = 12_288


def vllm_grid(workload, knobs, capacity_tokens: int, quick: bool = False) -> Grid:
    """The shapes this workload will make vLLM run, within the server's rows, budget and cache."""
    rows_max = min(
        knobs.max_num_seqs, max(1, len(workload)) if len(workload) else knobs.max_num_seqs
    )
    ctx = int(np.max(workload.prompt_tokens + workload.output_tokens)) if len(workload) else 256
    p_max = int(workload.prompt_tokens.max()) if len(workload) else 128
    p_min = int(max(1, workload.prompt_tokens.min())) if len(workload) else 8
    budget = knobs.max_num_batched_tokens
    longest_chunk = min(p_max, budget)
    ctx = min(ctx, knobs.max_model_len - 16 - (rows_max * ctx) // budget)
    width_lo = max(8, min(p_min, 32))
    widths = doubling(width_lo, max(width_lo, ctx), factor=2.5 if not quick else 4.0)
    # Continued chunks, as vLLM cuts a prompt longer than the budget: q new tokens after p cached.
    past = tuple(
        (q, p)
        for q, p in ((budget // 2, budget), (budget, budget))
        if p < p_max and p + q < knobs.max_model_len
    )
    mean_prompt = int(
        max(1, min(np.mean(workload.prompt_tokens) if len(workload) else 64, longest_chunk))
    )
    join_rows = sorted({min(rows_max, 4), rows_max})
    return Grid(
        decode_rows=doubling(1, rows_max, 2.0 if not quick else 4.0),
        decode_widths=widths,
        prefill_rows=doubling(1, rows_max, 2.0 if not quick else 4.0),
        prefill_lengths=doubling(max(1, min(p_min, 16)), longest_chunk, 2.0 if not quick else 4.0),
        max_prefill_tokens=budget,
        past=past,
        join=tuple((b, max(width_lo, ctx // 2), mean_prompt) for b in join_rows),
        policies=("continuous",),
        repeats=6 if not quick else 4,
        rounds=2 if not quick else 1,
        validation=8 if not quick else 4,
        probe_s=3.0 if not quick else 1.5,
    )


async def _measure(pr: Prober, grid: Grid, val: dict, bar) -> dict:
    dec: dict[tuple[int, int], list[float]] = {}
    pre: dict[tuple[int, int], list[float]] = {}
    past, joins, wake = [], [], {"idle": list(grid.wake_idle), "extra": [], "late": []}
    runs: list[
        list[float]
    ] = []  # each decode point's consecutive steps, a stretch per round (the spread's lag1)
    r = grid.repeats
    decode_pts = [(b, w) for b in grid.decode_rows for w in grid.decode_widths] + val["decode"]
    prefill_pts = [
        (b, n)
        for b in grid.prefill_rows
        for n in grid.prefill_lengths
        if b * n <= grid.max_prefill_tokens
    ]
    prefill_pts += val["prefill"]
    await _warm(pr, grid, decode_pts, prefill_pts)
    for _ in range(grid.rounds):
        for b, w in decode_pts:
            # Enough tokens that every row is still decoding once the last row's prefill is done: a
            # prefill over the step's budget takes several steps, and the first rows decode
            # meanwhile.
            steps = await pr.batch([w] * b, r + 3 + SETTLE + -(-b * w // grid.max_prefill_tokens))
            d = decode_times(steps, b)
            dec.setdefault((b, w), []).extend(d[SETTLE : SETTLE + r])
            runs.append(d[SETTLE : SETTLE + r])
            _tick(bar)
        for b, n in prefill_pts:
            for _ in range(max(1, r // 2)):
                steps = await pr.batch([n] * b, 1)
                d = prefill_times(steps, b)
                pre.setdefault((b, n), []).extend(d[:1])
            _tick(bar)
        for q, p in grid.past:
            steps = await pr.batch([p + q], 1)
            for s, t in _durations(steps):
                (_, first, n, _) = s["rows"][0]
                if len(s["rows"]) == 1 and first == p and n == q:
                    past.append((q, p, t))
            _tick(bar)
        for b, w, n in grid.join:
            for _ in range(max(1, r // 2)):
                steps = await pr.join(b, w, n, 24)
                for s, t in _durations(steps):
                    kinds = [_is_decode(x) for x in s["rows"]]
                    new = [x for x in s["rows"] if not _is_decode(x)]
                    if sum(kinds) == b and len(new) == 1 and new[0][1] == 0:
                        # The newcomer's chunk as vLLM cut it (the budget less the decodes), not its
                        # prompt.
                        ctx = float(np.mean([x[1] for x in s["rows"] if _is_decode(x)]))
                        joins.append((b, ctx, int(new[0][2]), t))
            _tick(bar)
    probe = await _slow_probe(pr, grid, dec)
    _tick(bar)
    for idle in grid.wake_idle:
        lates, extras = [], []
        for _ in range(max(3, r // 2)):
            late, cold, warm = await pr.after_idle(idle, 32, 4)
            lates.append(late)
            extras.append(cold - warm)
        wake["late"].append(float(np.mean(lates)))
        wake["extra"].append(max(0.0, float(np.mean(extras))))
        _tick(bar)
    return {
        "decode": dec,
        "prefill": pre,
        "past": past,
        "joins": joins,
        "wake": wake,
        "decode_runs": runs,
        "slow_probe": probe,
    }


async def _warm(pr: Prober, grid: Grid, decode_pts: list, prefill_pts: list) -> None:
    """Each shape once, unmeasured: vLLM's CPU kernels (oneDNN) are built for each new number of
    tokens in a step the first time it runs, which costs milliseconds, and a served workload meets
    its shapes again and again. The first request after start-up pays one-off costs of its own."""
    await pr.batch([16], 2)
    for b in sorted({b for b, _ in decode_pts}):
        await pr.batch(
            [grid.decode_widths[0]] * b,
            3 + -(-b * grid.decode_widths[0] // grid.max_prefill_tokens),
        )
    for b, n in prefill_pts:
        await pr.batch([n] * b, 1)


async def _slow_probe(pr: Prober, grid: Grid, dec: dict) -> list[float]:
    """About ``grid.probe_s`` seconds of consecutive one-row decode steps at the grid's middle width
    (the machine's slow drift, as our engine's profile probes it), in requests that fit the model's
    context, each one's first steps let by."""
    w = grid.decode_widths[len(grid.decode_widths) // 2]
    one = (
        float(np.mean(dec[(grid.decode_rows[0], w)])) if dec.get((grid.decode_rows[0], w)) else 0.01
    )
    want = probe_passes(grid.probe_s, one)
    stretch = max(16, min(2048, pr.server.knobs.max_model_len - w - 8))
    out: list[float] = []
    while len(out) < want:
        steps = await pr.batch([w], min(stretch, want - len(out) + SETTLE + 1))
        got = decode_times(steps, 1)[SETTLE:]
        if not got:
            break  # vLLM ran this request otherwise: no probe rather than no end
        out.extend(got)
    return out


def _validation(grid: Grid, rng: np.random.Generator) -> dict:
    out: dict = {"decode": [], "prefill": []}
    for _ in range(grid.validation // 2):
        b = int(rng.integers(grid.decode_rows[0], grid.decode_rows[-1] + 1))
        w = int(rng.integers(grid.decode_widths[0], grid.decode_widths[-1] + 1))
        if not (b in grid.decode_rows and w in grid.decode_widths) and (b, w) not in out["decode"]:
            out["decode"].append((b, w))
        n = int(rng.integers(grid.prefill_lengths[0], grid.prefill_lengths[-1] + 1))
        b = int(
            rng.integers(1, max(1, min(grid.prefill_rows[-1], grid.max_prefill_tokens // n)) + 1)
        )
        if (
            not (b in grid.prefill_rows and n in grid.prefill_lengths)
            and (b, n) not in out["prefill"]
        ):
            out["prefill"].append((b, n))
    return out


def _build(
    meas: dict, grid: Grid, source: str, context_len: int
) -> tuple[ProfiledStepTime, list[ProfilePoint]]:
    mid = (grid.repeats - 1) / 2
    missing = [
        k
        for k in itertools.product(grid.decode_rows, grid.decode_widths)
        if not meas["decode"].get(k)
    ]
    if missing:
        raise ConfigError(
            f"vLLM profile: no decode step of exactly {missing[0][0]} rows at width "
            f"{missing[0][1]} was "
            "seen (vLLM scheduled the batch otherwise); profile again, or raise "
            "--max-batched-tokens"
        )
    dz = np.array(
        [[np.mean(meas["decode"][(b, w)]) for w in grid.decode_widths] for b in grid.decode_rows]
    )
    decode = Grid2D(
        np.array(grid.decode_rows, float), np.array(grid.decode_widths, float) + mid, dz, "decode"
    )
    pz = np.full((len(grid.prefill_rows), len(grid.prefill_lengths)), np.nan)
    for i, b in enumerate(grid.prefill_rows):
        for j, n in enumerate(grid.prefill_lengths):
            if meas["prefill"].get((b, n)):
                pz[i, j] = np.mean(meas["prefill"][(b, n)])
    # above the step's token budget: the largest measured rows, scaled by rows
    for j in range(pz.shape[1]):
        known = np.flatnonzero(np.isfinite(pz[:, j]))
        for i in range(known[-1] + 1, pz.shape[0]):
            pz[i, j] = pz[known[-1], j] * grid.prefill_rows[i] / grid.prefill_rows[known[-1]]
    prefill = Grid2D(
        np.array(grid.prefill_rows, float), np.array(grid.prefill_lengths, float), pz, "prefill"
    )
    past = [(t - float(prefill(1, q)[0])) / (q * p) for q, p, t in meas["past"]]
    shared = [
        float(decode(b, ctx)[0]) + float(prefill(1, n)[0]) - t for b, ctx, n, t in meas["joins"]
    ]
    wake = meas["wake"]
    model = ProfiledStepTime(
        decode,
        prefill,
        past_cost=max(0.0, float(np.mean(past))) if past else 0.0,
        fused_shared=max(0.0, float(np.median(shared))) if shared else 0.0,
        wake_late=max(0.0, float(np.mean(wake["late"]))) if wake["late"] else 0.0,
        wake_idle=tuple(wake["idle"]),
        wake_extra=tuple(wake["extra"]),
        plan="fused",
        source=source,
        context_len=context_len,
        spread=spread_from(
            grid,
            decode,
            prefill,
            lambda kind, b, n: meas[kind].get((b, n)),
            meas.get("decode_runs", []),
            meas.get("slow_probe") or [],
        ),
    )
    points = []
    val_d, val_p = set(map(tuple, meas["val"]["decode"])), set(map(tuple, meas["val"]["prefill"]))
    for (b, w), xs in meas["decode"].items():
        if xs:
            t = np.asarray(xs)
            kind = "validation-decode" if (b, w) in val_d else "decode"
            points.append(
                ProfilePoint(
                    kind,
                    0,
                    b,
                    b * (w + mid),
                    float(t.mean()),
                    float(np.ptp(t) / np.median(t)),
                    b,
                    1,
                    w + mid,
                    len(t),
                )
            )
    for (b, n), xs in meas["prefill"].items():
        if xs:
            t = np.asarray(xs)
            kind = "validation-prefill" if (b, n) in val_p else "prefill"
            points.append(
                ProfilePoint(
                    kind,
                    b * n,
                    0,
                    0.0,
                    float(t.mean()),
                    float(np.ptp(t) / np.median(t)),
                    b,
                    n,
                    0.0,
                    len(t),
                )
            )
    return model, points


def profile_vllm(
    server,
    workload,
    vocab_size: int,
    quick: bool = False,
    progress: bool = False,
    capacity_tokens: int | None = None,
    grid: Grid | None = None,
) -> Profile:
    """Time vLLM's steps on the shapes ``workload`` needs; a ``Profile`` whose model has plan
    "fused"."""
    knobs = server.knobs
    cap = capacity_tokens or knobs.kv_budget_tokens or 1 << 40
    grid = grid or vllm_grid(workload, knobs, cap, quick)
    # Keep within the cache: a decode point holds rows x (width + repeats) tokens at its end.
    # Keep within the cache, and within a profile of a minute or so: every decode point prefills its
    # rows first, so the widest of the most rows is the dearest point (beyond it, the last cell's
    # slope).
    cap = min(cap, PROFILE_TOKENS)
    grid = replace(
        grid,
        decode_widths=tuple(
            w for w in grid.decode_widths if grid.decode_rows[-1] * (w + grid.repeats + 2) <= cap
        )
        or grid.decode_widths[:1],
    )
    val = _validation(grid, np.random.default_rng(grid.seed))
    val["decode"] = [(b, w) for b, w in val["decode"] if b * (w + grid.repeats + 2) <= cap]
    pr = Prober(server, vocab_size)
    bar = None
    n_pts = (
        grid.rounds
        * (
            len(grid.decode_rows) * len(grid.decode_widths)
            + len(val["decode"])
            + len(grid.prefill_rows) * len(grid.prefill_lengths)
            + len(val["prefill"])
            + len(grid.past)
            + len(grid.join)
        )
        + len(grid.wake_idle)
        + 1
    )
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_pts, desc="profiling vllm", unit="point", leave=False)
    t0 = time.perf_counter()
    try:
        meas = server.call(_measure, pr, grid, val, bar)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t0
    meas["val"] = val
    delivery = max(0.0, float(np.median(pr.delivery))) if pr.delivery else 0.0
    source = f"vLLM {server.version} profile: {knobs.model}, {knobs.dtype}, {knobs.device}"
    model, points = _build(meas, grid, source, knobs.max_model_len)
    from .canary import VLLMCanary

    model = replace(
        model,
        extra={**model.extra, "canary": VLLMCanary(server, model, vocab_size).take_reference()},
    )
    linear = fit_linear(
        [q for q in points if not q.kind.startswith("validation-")],
        f"{source} (linear)",
        plan="fused",
    )
    info = {
        "engine": "vllm",
        "vllm": server.version,
        "delivery_s": delivery,
        "model_name": knobs.model,
        "device": knobs.device,
        "engine_args": knobs.engine_args(),
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "grid": {
            "decode_rows": list(grid.decode_rows),
            "decode_widths": list(grid.decode_widths),
            "prefill_rows": list(grid.prefill_rows),
            "prefill_lengths": list(grid.prefill_lengths),
        },
    }
    return Profile(model, linear, points, seconds, info)


def _tick(bar) -> None:
    if bar is not None:
        bar.update(1)
