"""How far is the roofline from a real engine? batchsim against published measurements.

``published.json`` holds measurements others published (NVIDIA's TensorRT-LLM performance
tables, vLLM's benchmark pages, vLLM's memory logs), each with its source, hardware, engine
and version, precision, lengths and concurrency. ``predict`` runs batchsim on the same
setup (the same GPU, model, precision and split, the same requests arriving the same way,
continuous batching with the engine's limits, the engine's preset from ``engines.json``)
and ``table`` sets each prediction beside the figure. ``python -m batchsim.machine.validation``
prints it; ``tests/test_validation_published.py`` holds every point within its tolerance.
The points a preset was not fitted to (its ``held_out`` in engines.json) are summed up apart:
how far its fit (``presetfit``) carries beyond its own points.

Runs of more than ``MAX_REQUESTS`` requests all arriving at once are simulated with that many:
a queue that long already runs the server full for all but its last batch. A point whose run
sampled its lengths (ShareGPT) and whose source lists them request by request names a
``workload`` in the file's ``workloads``: batchsim then runs those very requests, since a few
hundred requests at once end on their longest answer, which a mean length cannot show.

Time to first token (TTFT, the ``mean_ttft`` points) is held where the arrivals are known exactly:
one request alone (a batch-1 first-token table: one prefill of the prompt), and a run's requests
all sent at once (each request's TTFT is then its place in the queue of prefills). A source's
mean that counts requests which streamed no token as a TTFT of 0 is converted to the mean over
the requests that did (``source_value`` keeps the printed figure; the point's notes say how).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from .catalog import DEFAULT_CATALOG
from .engines import engine_profile
from .memory import kv_budget
from .server import Server

__all__ = [
    "Point",
    "points",
    "kv_points",
    "workload_lengths",
    "predict",
    "table",
    "summary",
    "held_out_summary",
    "MAX_REQUESTS",
]

_FILE = Path(__file__).with_name("published.json")
MAX_REQUESTS = 3000
#: Which target each metric counts toward. The E2E of a fixed batch of short prompts (vLLM's latency
#: tests: 32 tokens in, 128 out) is 128 decode steps after a prefill of a few milliseconds: a TPOT
#: measurement.
_METRICS = {
    "output_throughput": "throughput",
    "mean_e2e": "TPOT",
    "mean_tpot": "TPOT",
    "mean_ttft": "TTFT",
}


@dataclass(frozen=True)
class Point:
    id: str
    source: str
    engine: str
    engine_version: str
    hardware: str
    gpu: str
    tp: int
    model: str
    checkpoint: str
    dtype: str
    weights: str
    kv_dtype: str
    prompt: int
    output: int
    concurrency: object  # a number of requests at once, or "all at once"
    requests: int
    max_seqs: int
    max_batched_tokens: int
    mem_util: float
    metric: str
    value: float
    unit: str
    tolerance: float
    workload: str = ""  # a published.json "workloads" entry: the run's lengths, request by request
    notes: str = ""  # what reproducing the setup needed beyond the source: assumptions, and why
    # The figure as the source prints it, where ``value`` had to be derived from it (``notes`` say
    # how); 0: ``value`` is the source's own figure.
    source_value: float = 0.0

    def __post_init__(self) -> None:
        if self.metric not in _METRICS:
            raise ConfigError(
                f"published point {self.id}: metric must be one of {', '.join(_METRICS)}, got "
                f"{self.metric!r}"
            )
        if not self.source.strip() or not self.engine_version.strip():
            raise ConfigError(
                f"published point {self.id}: a source and an engine version are required"
            )
        if not (self.value > 0 and 0 < self.tolerance < 1):
            raise ConfigError(
                f"published point {self.id}: value must be > 0 and tolerance in (0, 1)"
            )
        if not self.source_value >= 0:
            raise ConfigError(
                f"published point {self.id}: source_value must be >= 0, got {self.source_value!r}"
            )

    @property
    def family(self) -> str:
        """Which target the point counts toward: throughput, TPOT or TTFT."""
        return _METRICS[self.metric]


@lru_cache(maxsize=1)
def _data() -> dict:
    return json.loads(_FILE.read_text(encoding="utf-8"))


def points() -> list[Point]:
    pts = [Point(**p) for p in _data()["points"]]
    for p in pts:
        if p.workload and len(workload_lengths(p.workload)[0]) != p.requests:
            raise ConfigError(
                f"published point {p.id}: requests must equal its workload's length, got "
                f"{p.requests}"
            )
    return pts


def workload_lengths(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) of each request of a published run, as its source lists."""
    table = _data().get("workloads", {})
    if name not in table:
        raise ConfigError(f"workload must name one of published.json's workloads, got {name!r}")
    w = table[name]
    prompts = np.asarray(w["prompt_lens"], dtype=np.int64)
    outputs = np.asarray(w["output_lens"], dtype=np.int64)
    if len(prompts) != len(outputs) or len(prompts) == 0 or prompts.min() < 1 or outputs.min() < 0:
        raise ConfigError(
            f"workload {name}: prompt_lens and output_lens must be as long, "
            "prompts >= 1, outputs >= 0"
        )
    return prompts, outputs


def kv_points() -> list[dict]:
    return list(_data()["kv_budgets"])


def server_for(p: Point, engine: str | None = None, knobs: dict | None = None) -> Server:
    """The point's machine with ``engine``'s preset (default: the point's engine), or ``knobs``."""
    knobs = knobs if knobs is not None else engine_profile(engine or p.engine).knobs
    return Server.named(
        p.gpu,
        p.model,
        DEFAULT_CATALOG,
        p.dtype,
        weights=p.weights,
        kv_dtype=p.kv_dtype,
        tp=p.tp,
        mem_util=p.mem_util,
        max_batched_tokens=p.max_batched_tokens,
        **knobs,
    )


def predict(p: Point, engine: str | None = None, knobs: dict | None = None) -> float:
    """batchsim's figure for the point's metric, with ``engine``'s preset (default: the point's
    engine) or with ``knobs`` (compute_eff, memory_eff, overhead: what a preset fit tries)."""
    from ..core.metrics import summarize
    from ..core.policies import make_policy
    from ..core.workload import Workload
    from ..sim.simulator import simulate

    srv = server_for(p, engine, knobs)
    if p.workload:
        prompts, outputs = workload_lengths(p.workload)
        # A request the model ended at once (EOS first) streamed no token: the benchmark counts 0
        # tokens for it and timed no first token. It adds nothing to the figure: it is left out.
        keep = outputs > 0
        prompts, outputs = prompts[keep], outputs[keep]
        wl = Workload.from_arrays(np.zeros(len(prompts)), prompts, outputs, f"point {p.id}")
    else:
        n = min(p.requests, MAX_REQUESTS)
        wl = Workload.from_arrays(
            np.zeros(n), np.full(n, p.prompt), np.full(n, p.output), f"published point {p.id}"
        )
    rows = p.max_seqs
    if p.engine == "trt-llm":
        # TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT) admits a request only when
        # its whole length fits the cache, so it never preempts; for fixed lengths that is a cap on
        # the rows. batchsim's continuous policy admits as vLLM does and preempts by recompute
        # instead.
        rows = max(1, min(rows, srv.kv.tokens // (p.prompt + p.output)))
    policy = make_policy("continuous", max_seqs=rows, max_batched_tokens=p.max_batched_tokens)
    s = summarize(
        simulate(wl, policy, srv.step_time, kv_budget_tokens=srv.kv.tokens, records="summary")
    )
    return float(s[p.metric])


def kv_predict(k: dict) -> int:
    g, m = DEFAULT_CATALOG.gpu(k["gpu"]), DEFAULT_CATALOG.model(k["model"])
    return kv_budget(
        g, m, k["dtype"], k["mem_util"], tp=k["tp"], max_batched_tokens=k["max_batched_tokens"]
    ).tokens


def table(engine_of=None) -> list[dict]:
    """One row per point: measured, predicted, signed error (predicted / measured - 1)."""
    rows = []
    for p in points():
        got = predict(p, engine_of(p) if engine_of else None)
        rows.append(
            {
                "id": p.id,
                "engine": p.engine,
                "family": p.family,
                "hardware": p.hardware,
                "model": p.checkpoint,
                "precision": f"{p.weights}/{p.kv_dtype} KV",
                # "~": the mean of the run's own lengths, which it simulates request by request
                "lengths": f"{'~' if p.workload else ''}{p.prompt}/{p.output}",
                "concurrency": p.concurrency,
                "metric": p.metric,
                "measured": p.value,
                "predicted": got,
                "error": got / p.value - 1,
                "tolerance": p.tolerance,
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """Median and worst |error| per engine and family (throughput, TPOT, TTFT), engine by engine."""
    out: dict = {}
    for r in rows:
        out.setdefault((r["engine"], r["family"]), []).append(abs(r["error"]))
    order = list(dict.fromkeys(_METRICS.values()))  # throughput, TPOT, TTFT
    keys = sorted(out, key=lambda k: (k[0], order.index(k[1])))
    return {
        k: {"points": len(out[k]), "median": statistics.median(out[k]), "worst": max(out[k])}
        for k in keys
    }


def held_out_summary(rows: list[dict]) -> dict:
    """Per engine, the median and worst |error| of the points its preset was not fitted to
    (``held_out`` in engines.json): how far the fit carries beyond its own points; ``families``
    splits them by metric family as ``summary`` does."""
    from .engines import engine_profiles

    out = {}
    for name, prof in engine_profiles().items():
        held = [r for r in rows if r["engine"] == name and r["id"] in prof.held_out_ids]
        if held:
            errs = [abs(r["error"]) for r in held]
            # Each family apart too: a held-out TTFT is judged by the TTFT target, not throughput's.
            out[name] = {
                "points": len(errs),
                "median": statistics.median(errs),
                "worst": max(errs),
                "families": summary(held),
            }
    return out


def _fmt(r: dict) -> str:
    v = r["measured"]
    # A time under 100 ms keeps a decimal: a batch-1 first token of 5.7 ms is not "6 ms".
    show = (
        (lambda x: f"{x:,.0f}")
        if r["metric"] == "output_throughput"
        else (lambda x: f"{x * 1e3:.1f} ms" if x < 0.1 else f"{x * 1e3:,.0f} ms")
    )
    name = r["model"].split("/")[-1]
    return (
        f"{r['engine']:<8} {r['hardware']:<18} {name:<28} {r['lengths']:>10} "
        f"{str(r['concurrency']):>12} {r['metric']:<17} {show(v):>10} {show(r['predicted']):>10} "
        f"{r['error']:>+7.1%}"
    )


def main() -> int:
    rows = table()
    print(
        f"{'engine':<8} {'hardware':<18} {'checkpoint':<28} {'in/out':>10} {'concurrency':>12} "
        f"{'metric':<17} {'published':>10} {'batchsim':>10} {'error':>7}"
    )
    for r in rows:
        print(_fmt(r))
    for (engine, family), s in summary(rows).items():
        print(
            f"{engine} {family}: {s['points']} points, median |error| {s['median']:.1%}, worst "
            f"{s['worst']:.1%}"
        )
    for engine, s in held_out_summary(rows).items():
        print(
            f"{engine} held out of its fit: {s['points']} points, median |error| "
            f"{s['median']:.1%}, worst {s['worst']:.1%}"
        )
        for (_, family), f in s["families"].items():
            n = f["points"]
            print(
                f"  of which {family}: {n} point{'s' if n != 1 else ''}, median |error| "
                f"{f['median']:.1%}, worst {f['worst']:.1%}"
            )
    for k in kv_points():
        got = kv_predict(k)
        print(
            f"KV budget {k['hardware']} {k['model']} x {k['mem_util']}: batchsim {got:,} tokens, "
            f"vLLM logged {k['kv_tokens']:,} ({k['logged']}): {got / k['kv_tokens'] - 1:+.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
