"""Predicted against measured, for the class: what the room sent to ``realrun serve``, simulated.

``realrun serve --record FILE`` keeps, for every request the class sent, its arrival and
lengths (a trace) and what the server measured (start, first token, finish), and beside it
``FILE.json``, what served it (model, machine, policy and knobs, limits). Here the very
arrivals are simulated with batchsim under the very policy and limits, with a step-time
model calibrated by ``realrun profile``, and each metric the record can show is held up to
the prediction: the same policy code, the same driver, the same ``summarize``, so the gap is
the cost model's (or a server's habit the simulator does not know).

Both sides are read from the same columns, the ones the record has: TTFT is arrival to the
first token produced (a padded batch delivers it at the batch's end, on both sides), E2E is
arrival to finish, throughput is over the first arrival to the last finish, and the busy
share is the part of that time some request was between its start and its finish (the
record keeps no step log, so the simulated side is read the same way, not from its own).

Requests that never ran (withdrawn while queued, refused) are not simulated: they cost the
server nothing. A request the client left part-way is simulated for the tokens it was made
(the record's ``output_tokens``), so its work weighs on the others, and like every request
that did not finish it is left out of the figures on both sides, and counted.

With ``seeds`` > 1 the prediction is the median of that many simulations, each pass's time
drawn from the spread the profile measured (``batchsim.sim.sampled``), with a 90 % band; the
farthest seed from their median (in % of the measurement) is the run-to-run noise of a run
this long, and the verdict (``realrun.judge.verdict``) uses it as ``compare`` uses the spread of its
repeats: within noise is no further off than a second run of the same arrivals would be.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, fields, replace

import numpy as np

from batchsim.core.config import PolicyConfig
from batchsim.core.errors import ConfigError, show
from batchsim.core.files import open_text, read_json
from batchsim.core.limits import ServerLimits
from batchsim.core.metrics import summarize
from batchsim.core.records import Records
from batchsim.core.result import RunResult
from batchsim.core.steplog import STEP_DTYPES, STEP_FIELDS
from batchsim.core.traces import read_trace
from batchsim.core.workload import Workload
from batchsim.sim.sampled import with_noise
from batchsim.sim.simulator import simulate
from batchsim.sim.steptime import StepTimeModel

from ..judge.compare import counted_only, error_pct
from ..judge.verdict import TARGETS, band_of, median_summary, noise_pct, verdict
from .serve.record import RECORD_FIELDS, meta_path

__all__ = [
    "PREDICT_METRICS",
    "PREDICT_TARGETS",
    "ServedRecord",
    "Prediction",
    "read_record",
    "predict_record",
    "format_prediction",
]

#: (summary key, label, display scale, format): what a record can show.
PREDICT_METRICS = (
    ("p50_ttft", "p50 TTFT ms", 1e3, "{:.1f}"),
    ("p90_ttft", "p90 TTFT ms", 1e3, "{:.1f}"),
    ("p99_ttft", "p99 TTFT ms", 1e3, "{:.1f}"),
    ("mean_tpot", "mean TPOT ms", 1e3, "{:.2f}"),
    ("p50_e2e", "p50 E2E s", 1.0, "{:.3f}"),
    ("p99_e2e", "p99 E2E s", 1.0, "{:.3f}"),
    ("request_throughput", "req/s", 1.0, "{:.2f}"),
    ("output_throughput", "output tok/s", 1.0, "{:.0f}"),
    ("busy_share", "busy share", 100.0, "{:.0f}%"),
)
_KEYS = tuple(k for k, *_ in PREDICT_METRICS)
#: compare's targets; p90 TTFT as the other tails, the busy share as throughput (both are work per
#: second).
PREDICT_TARGETS = {**TARGETS, "p90_ttft": 20.0, "busy_share": 5.0}


@dataclass
class ServedRecord:
    """A record read back: the ``workload`` to simulate (the rows that ran, arrivals from the first
    of them), what the server ``measured`` for those rows, which of them ``finished`` (counted on
    both sides), and the sidecar's ``policy`` and ``limits``."""

    path: str
    meta: dict
    policy: PolicyConfig
    limits: ServerLimits
    workload: Workload
    measured: RunResult
    finished: np.ndarray
    never_ran: int  # rows withdrawn or refused before any step: not simulated
    left_out: dict = field(default_factory=dict)  # reason -> rows that ran but did not finish


def _sidecar(path: str) -> tuple[dict, PolicyConfig, ServerLimits]:
    side = meta_path(path)
    if not side.is_file():
        raise ConfigError(
            f"record {path!r}: its sidecar {str(side)!r} is missing (realrun serve --record writes "
            f"it "
            "beside the CSV: the policy, its knobs and the limits predict needs); "
            f"python -m batchsim run --trace {path} still replays the arrivals without it"
        )
    meta = read_json(side, "sidecar")
    where = f"sidecar {str(side)!r}"
    if not isinstance(meta, dict):
        raise ConfigError(f"{where} must be a JSON object, got {show(meta)}")
    knobs = meta.get("policy_knobs", {})
    if "policy" not in meta or not isinstance(knobs, dict):
        raise ConfigError(
            f"{where}: policy must name the policy and policy_knobs be an object, got "
            f"policy={show(meta.get('policy'))}, policy_knobs={show(knobs)}"
        )
    known = {f.name for f in fields(PolicyConfig)} - {"name"}
    for k in knobs:
        if k not in known:
            raise ConfigError(
                f"{where}: policy_knobs has {k!r}, which no policy reads (known: "
                f"{', '.join(sorted(known))})"
            )
    try:
        policy = PolicyConfig(str(meta["policy"]), **knobs)
        limits = ServerLimits(
            kv_budget_tokens=meta.get("kv_budget_tokens"), context_len=meta.get("context_len")
        )
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"{where}: {e}") from None
    return meta, policy, limits


def _time(text: str, name: str, line: int, path: str) -> float:
    if not text.strip():
        return math.nan
    try:
        t = float(text)
    except ValueError:
        t = math.nan
    if not math.isfinite(t):
        raise ConfigError(
            f"record {path!r} line {line}: {name} must be a number of seconds or empty, got "
            f"{text.strip()!r}"
        )
    return t


def read_record(path: str) -> ServedRecord:
    """The record and its sidecar, checked (one ``ConfigError`` naming the field and value)."""
    path = str(path)
    trace = read_trace(path)  # the first three columns, checked as batchsim checks any trace
    cols: dict[str, list] = {k: [] for k in RECORD_FIELDS}
    with open_text(path, "record") as lines:
        reader = csv.reader(lines)
        header = [h.strip() for h in next(reader, [])]
        if tuple(header[: len(RECORD_FIELDS)]) != RECORD_FIELDS:
            missing = [k for k in RECORD_FIELDS if k not in header]
            raise ConfigError(
                f"record {path!r} is a trace but not a record of realrun serve: it lacks the "
                f"measured column{'s' if len(missing) > 1 else ''} "
                f"{','.join(missing) or '(in order) ' + ','.join(RECORD_FIELDS)}; predict needs "
                f"`realrun serve --record FILE`'s CSV (python -m batchsim run --trace {path} "
                "replays this one)"
            )
        for row in reader:
            if not row or all(not c.strip() for c in row):
                continue
            for k, v in zip(RECORD_FIELDS, row):
                cols[k].append(v)
            line = reader.line_num
            for k in ("start_s", "first_token_s", "finish_s"):
                cols[k][-1] = _time(cols[k][-1], k, line, path)
            try:
                cols["tokens"][-1] = int(cols["tokens"][-1])
                if cols["tokens"][-1] < 0:
                    raise ValueError
            except ValueError:
                raise ConfigError(
                    f"record {path!r} line {line}: tokens must be a whole number >= 0, got "
                    f"{show(cols['tokens'][-1])}"
                ) from None
    meta, policy, limits = _sidecar(path)
    arrival = np.asarray([float(x) for x in cols["arrival_s"]])
    start, first, finish = (
        np.asarray(cols[k], dtype=float) for k in ("start_s", "first_token_s", "finish_s")
    )
    tokens = np.asarray(cols["tokens"], dtype=np.int64)
    reasons = [r.strip() or None for r in cols["rejected"]]
    ran = np.asarray([not (r is not None and t == 0) for r, t in zip(reasons, tokens)])
    if not ran.any():
        raise ConfigError(
            f"record {path!r}: none of its {len(arrival)} requests ran (all withdrawn or refused): "
            "nothing was measured to predict"
        )
    ids = np.flatnonzero(ran)
    t0 = float(arrival[ids[0]])
    done = np.isfinite(finish) & np.isfinite(first) & np.asarray([r is None for r in reasons])
    left: dict[str, int] = {}
    for i in ids[~done[ids]].tolist():
        reason = (reasons[i] or "no finish time").split(":")[0]
        left[reason] = left.get(reason, 0) + 1
    wl = Workload.from_arrays(
        arrival[ids] - t0, trace.prompt_tokens[ids], trace.output_tokens[ids], f"the record {path}"
    )
    n = len(ids)
    recs = Records(
        arrival=arrival[ids] - t0,
        prompt_tokens=wl.prompt_tokens,
        output_tokens=wl.output_tokens,
        start=start[ids] - t0,
        first_token=first[ids] - t0,
        finish=finish[ids] - t0,
        last_token=finish[ids] - t0,
        tokens=tokens[ids],
        preemptions=np.zeros(n, dtype=np.int64),
        itl_max=np.full(n, np.nan),
        rejected=[reasons[i] for i in ids.tolist()],
        steps=_no_steps(),
    )
    measured = RunResult(
        recs,
        policy=str(meta.get("policy_repr") or policy.name),
        step_time="measured (the record)",
        kv_budget_tokens=limits.kv_budget_tokens,
        kv_peak_tokens=0,
        preemptions=0,
        workload=wl.description,
        meta={"record": path},
    )
    return ServedRecord(
        path, meta, policy, limits, wl, measured, done[ids], int((~ran).sum()), left
    )


def _no_steps() -> dict[str, np.ndarray]:
    return {k: np.zeros(0, dtype=d) for k, d in zip(STEP_FIELDS, STEP_DTYPES)}


def _as_recorded(result: RunResult) -> RunResult:
    """The result as a record shows it: no step log, the last token at the finish."""
    r = result.records
    return replace(result, records=replace(r, steps=_no_steps(), last_token=r.finish.copy()))


def busy_share(result: RunResult) -> float:
    """The share of the run some request was between its start and its finish (from the columns)."""
    r = result.records
    ok = np.isfinite(r.start) & np.isfinite(r.finish)
    spans = sorted(zip(r.start[ok].tolist(), r.finish[ok].tolist()))
    busy, end = 0.0, -math.inf
    for a, b in spans:
        if b > end:
            busy += b - max(a, end)
            end = b
    span = result.makespan
    return busy / span if span > 0 else 0.0


def _summary(result: RunResult, keep: np.ndarray) -> dict:
    seen = _as_recorded(result)
    s = summarize(counted_only(seen, keep))
    s["busy_share"] = busy_share(seen)
    return s


@dataclass
class Prediction:
    """Per metric: the median prediction, its band (seeds > 1), the seeds' spread, the
    measurement."""

    record: ServedRecord
    predicted: dict
    measured: dict
    band: dict
    spread: dict
    sims: list
    compared: int  # requests counted on both sides
    notes: list = field(default_factory=list)

    @property
    def seeds(self) -> int:
        return len(self.sims)

    @property
    def errors(self) -> dict:
        return {k: error_pct(self.predicted.get(k), self.measured.get(k)) for k in _KEYS}

    @property
    def verdicts(self) -> dict:
        e = self.errors
        return {k: verdict(e[k], PREDICT_TARGETS[k], self.spread.get(k)) for k in _KEYS}

    @property
    def in_band(self) -> dict:
        out = {}
        for k in _KEYS:
            b, m = self.band.get(k), self.measured.get(k)
            out[k] = None if b is None or m is None else bool(b[0] <= m <= b[1])
        return out

    def as_dict(self) -> dict:
        keys = ("predicted", "band", "measured")
        pick = {name: {k: getattr(self, name).get(k) for k in _KEYS} for name in keys}
        return {
            **pick,
            "error_pct": self.errors,
            "seed_spread_pct": self.spread,
            "verdict": self.verdicts,
            "in_band": self.in_band,
            "targets_pct": {k: PREDICT_TARGETS[k] for k in _KEYS},
            "seeds": self.seeds,
            "compared": self.compared,
            "never_ran": self.record.never_ran,
            "left_out": self.record.left_out,
        }


def predict_record(
    rec: ServedRecord, step_time: StepTimeModel, seeds: int = 1, noise: str = "profiled"
) -> Prediction:
    """Simulate the record's arrivals ``seeds`` times (passes drawn from the model's spread when
    ``seeds`` > 1 and ``noise`` is profiled) and hold each metric up to the record's."""
    runs = [
        simulate(
            rec.workload,
            rec.policy.build(),
            with_noise(step_time, k, noise) if seeds > 1 else step_time,
            limits=rec.limits,
        )
        for k in range(seeds)
    ]
    both = rec.finished.copy()
    for r in runs:
        both &= r.records.completed_mask
    notes = []
    lost = int((rec.finished & ~both).sum())
    if lost:
        notes.append(
            f"note: the simulation did not finish {lost} request(s) the server finished "
            "(refused or preempted for good): left out of both sides"
        )
    if not both.any():
        raise ConfigError(
            f"record {rec.path!r}: no request finished on both sides: nothing to compare"
        )
    preds = [_summary(r, both) for r in runs]
    band = band_of(preds, _KEYS) if seeds > 1 else {}
    pred, meas = median_summary(preds), _summary(rec.measured, both)
    # The seeds' spread in % of the measurement, the unit of the error it is held against.
    spread = {
        k: None if v is None or not meas.get(k) else v * abs(pred[k] / meas[k])
        for k, v in noise_pct(preds, _KEYS).items()
    }
    return Prediction(rec, pred, meas, band, spread, runs, int(both.sum()), notes)


_SHORT = {"agrees": "agrees", "within noise": "within noise", "disagrees": "DISAGREES"}


def format_prediction(p: Prediction) -> str:
    rec = p.record
    banded = bool(p.band)
    head = (
        "metric",
        "predicted",
        *(("90% band", "seeds ±") if banded else ()),
        "measured",
        "error",
        "target",
        "verdict",
    )
    rows = []
    errs, verdicts, inside = p.errors, p.verdicts, p.in_band
    for key, label, scale, fmt in PREDICT_METRICS:
        pv, mv, b, e = p.predicted.get(key), p.measured.get(key), p.band.get(key), errs[key]
        v = _SHORT.get(verdicts[key] or "", "-")
        if inside[key] is not None:
            v += ", in band" if inside[key] else ", outside band"
        spread = p.spread.get(key)
        rows.append(
            (
                label,
                "-" if pv is None else fmt.format(pv * scale),
                *(
                    (
                        f"{fmt.format(b[0] * scale)}-{fmt.format(b[1] * scale)}" if b else "-",
                        "-" if spread is None else f"{spread:.1f}%",
                    )
                    if banded
                    else ()
                ),
                "-" if mv is None else fmt.format(mv * scale),
                "-" if e is None else f"{e:+.1f}%",
                f"{PREDICT_TARGETS[key]:g}%",
                v,
            )
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def line(cells):
        return "  ".join(
            c.ljust(w) if i in (0, len(cells) - 1) else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    out = [line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
    counts = {v: sum(x == v for x in verdicts.values()) for v in _SHORT}
    out.append("verdicts: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    n = len(rec.measured.records)
    aside = sum(rec.left_out.values())
    out.append(
        f"requests: {n + rec.never_ran} in the record, {p.compared} counted on both sides"
        + (
            f"; {rec.never_ran} never ran (withdrawn or refused before a step), not simulated"
            if rec.never_ran
            else ""
        )
        + (
            f"; {aside} ran but did not finish "
            f"({', '.join(f'{k}: {v}' for k, v in rec.left_out.items())}), "
            "simulated for the tokens made and left out of both sides"
            if aside
            else ""
        )
    )
    return "\n".join(out + p.notes)
