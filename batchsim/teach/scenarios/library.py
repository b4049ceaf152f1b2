"""The named scenarios of the course, each a story with defaults that flags override.

python -m batchsim scenarios           # list them
python -m batchsim run taxi-vs-bus     # run one, print the table, write figures
"""

from __future__ import annotations

import argparse

import numpy as np

from ...core.flags import resolve_arg
from ...core.lengths import parse_length
from ...core.step import Chunk, Step
from ...machine.cost import implied_price_per_hour, required_throughput
from ...machine.server import DEFAULT_SERVER
from .base import Run, Scenario, ScenarioReport, policy_label, register, run_policies, run_set
from .knobs import (
    WORKLOAD_DEFAULTS,
    policies_from_args,
    slo_from_args,
    step_time_from_args,
)

FLAGSHIP = "taxi-vs-bus"

#: The server every scenario runs on unless it says otherwise (flags override): the package's one
#: default server, ``batchsim.machine.server.DEFAULT_SERVER`` (llama-3-8b in fp16 on an A100-80GB).
SERVER = dict(DEFAULT_SERVER)


register(
    Scenario(
        name="taxi-vs-bus",
        summary="the same traffic served by a taxi, a bus, a bus with a timetable and a bus that "
        "never stops",
        story=(
            "A taxi takes one passenger at a time: no waiting for company, but every ride costs a "
            "whole car. A bus waits for its seats to fill, then carries everyone for the price of "
            "one trip. Here the same stream of requests meets four servers: no batching (taxi), "
            "static batches of N (the bus that leaves only when full), dynamic batches (leave when "
            "full or when the first passenger has waited max_wait) and continuous batching "
            "(passengers board and alight at every stop). The GPU reads all 16 GB of Llama-3-8B's "
            "weights for every step, whether one request rides or sixty, so the taxi, at under one "
            "request per second, drowns under two a second while every bus copes. Watch "
            "throughput, latency, dollars, and how big the batches really get."
        ),
        defaults={
            **SERVER,
            "rate": 2.0,
            "requests": 600,
            "max_batch": 16,
            "max_wait": 0.5,
            "max_seqs": 64,
        },
    )
)


# --- laundromat: wait for a full machine, or wash each load as it comes? --------------------


def _laundromat(args: argparse.Namespace, scenario: Scenario) -> ScenarioReport:
    d = scenario.defaults
    n = d["max_batch"]
    runs = []
    for part, scale in (("low", d["low_scale"]), ("high", 1.0)):
        runs += [
            Run(f"{part}: taxi", "taxi", {"rate_scale": scale}, part),
            Run(f"{part}: static-{n}", "static", {"rate_scale": scale}, part),
            Run(f"{part}: dynamic-{n}", "dynamic", {"rate_scale": scale}, part),
        ]
    report = run_set(
        args,
        scenario,
        runs,
        keys=[
            "completed",
            "request_throughput",
            "mean_queue_wait",
            "mean_e2e",
            "p99_e2e",
            "busy_fraction",
            "mean_batch_size",
        ],
    )
    rate = resolve_arg(args, "rate", d or {}, WORKLOAD_DEFAULTS)
    report.notes.insert(
        0,
        f"loads: low = {rate * d['low_scale']:g} req/s, high = {rate:g} req/s (--rate sets the "
        f"high one)",
    )
    s = report.summaries
    low_t, low_s = s["low: taxi"]["mean_e2e"], s[f"low: static-{n}"]["mean_e2e"]
    hi_t, hi_s = s["high: taxi"]["mean_e2e"], s[f"high: static-{n}"]["mean_e2e"]
    report.notes.insert(
        1,
        (
            f"at low load waiting for {n} loads costs time: taxi {low_t:.1f} s vs static "
            f"{low_s:.1f} s end to end; at high load the taxi cannot keep up: taxi {hi_t:.1f} s vs "
            f"static {hi_s:.1f} s"
        ),
    )
    report.config["figures"] = ["latency_cdf", "timeline", "cost"]
    return report


register(
    Scenario(
        name="laundromat",
        summary="wait for 8 loads or wash each as it comes: the answer flips between low and high "
        "load",
        story=(
            "A laundromat machine holds 8 loads and a wash takes the same time full or nearly "
            "empty. Washing each load as it arrives (taxi) wastes capacity but nobody waits; "
            "waiting for 8 loads (static) uses the machine fully but the first customer waits for "
            "seven more. At low load the taxi wins and the full-machine rule makes people wait for "
            "company; at high load the taxi falls behind and only the batch keeps up. A timer "
            "(dynamic: go when full or after max_wait) is the compromise that does well at both."
        ),
        defaults={
            **SERVER,
            "rate": 1.6,
            "low_scale": 0.125,
            "requests": 400,
            "max_batch": 8,
            "max_wait": 1.0,
            "prompt_len": "uniform:64,512",
            "output_len": "uniform:64,128",
        },
        runner=_laundromat,
    )
)


register(
    Scenario(
        name="rush-hour",
        summary="quiet, peak, quiet: a bus that waits for N strands the quiet hours; a timetable "
        "saves them",
        story=(
            "Traffic is not steady: a quiet spell, a rush hour at four times the quiet rate, quiet "
            "again. A bus that leaves only when its N seats are full is fine at the peak, but in "
            "the quiet hours the first passenger waits for N-1 others. A timetable (dynamic: leave "
            "after max_wait at the latest) caps that wait, and continuous batching never waits at "
            "all. The batch-size plot shows each policy breathing with the traffic. --rate sets "
            "the mean rate; the day is 20 s quiet at half of it, 20 s of rush at twice it, 20 s "
            "quiet."
        ),
        defaults={
            **SERVER,
            "arrival": "rush-hour",
            "rate": 1.5,
            "duration": 180.0,
            "policy": "static,dynamic,continuous",
            "max_batch": 16,
            "max_wait": 1.0,
            "max_seqs": 64,
        },
    )
)


register(
    Scenario(
        name="mixed-lengths",
        summary="answers from 5 to 500 tokens: padded batches wait for their longest row, "
        "continuous does not",
        story=(
            "On a bus that delivers everyone at the terminus, a passenger going one stop rides to "
            "the end of the line. A padded batch (static or dynamic, like Hugging Face generate()) "
            "runs until its longest answer is done: the 5-token answer waits for the 500-token one "
            "and its row computes padding all the while. Continuous batching lets each request "
            "leave the step it finishes and a new one board in its seat, so the spread of lengths "
            "that cripples padded batches costs it nothing. Compare throughput, the share of "
            "padded rows, and E2E latency."
        ),
        defaults={
            **SERVER,
            "rate": 5.0,
            "requests": 600,
            "output_len": "uniform:5,500",
            "prompt_len": "uniform:32,512",
            "policy": "static,dynamic,continuous",
            "max_batch": 32,
            "max_wait": 0.5,
            "max_seqs": 64,
            "table_keys": [
                "completed",
                "request_throughput",
                "output_throughput",
                "mean_ttft",
                "mean_ttft_delivered",
                "mean_tpot",
                "mean_e2e",
                "p99_e2e",
                "busy_fraction",
                "mean_batch_size",
                "padded_row_fraction",
            ],
        },
    )
)


# --- chat vs offline: one GPU, two jobs, two ideas of "good" --------------------------------


def _chat_vs_offline(args: argparse.Namespace, scenario: Scenario) -> ScenarioReport:
    d = scenario.defaults
    chat = {
        "arrival": "poisson",
        "prompt_len": d["chat_prompt"],
        "output_len": d["chat_output"],
        "requests": d["chat_requests"],
        "slo_ttft": d["chat_slo_ttft"],
        "slo_tpot": d["chat_slo_tpot"],
    }
    offline = {
        "arrival": "constant",
        "rate_scale": d["offline_rate_scale"],
        "prompt_len": d["offline_prompt"],
        "output_len": d["offline_output"],
        "requests": d["offline_requests"],
    }
    runs = []
    for part, base in (("chat", chat), ("offline", offline)):
        for policy, knobs in d["variants"]:
            kd = {**base, **knobs}
            runs.append(Run(f"{part}: {policy_label(policy, {**d, **kd})}", policy, kd, part))
    report = run_set(
        args,
        scenario,
        runs,
        keys=[
            "completed",
            "request_throughput",
            "output_throughput",
            "p99_ttft",
            "p99_ttft_delivered",
            "mean_tpot",
            "p99_tpot",
            "p99_e2e",
            "mean_batch_size",
            "goodput",
            "slo_attainment",
        ],
    )
    s = report.summaries
    chat_best = max((k for k in s if k.startswith("chat")), key=lambda k: s[k].get("goodput") or 0)
    off_best = max(
        (k for k in s if k.startswith("offline")), key=lambda k: s[k]["output_throughput"]
    )
    slo = report.results[chat_best].meta["slo"]
    lines = [
        f"chat SLO: TTFT <= {slo.ttft:g} s and TPOT <= {slo.tpot * 1e3:g} ms; best goodput: "
        f"{chat_best}; offline: best output throughput: {off_best}",
        f"price of latency: chat at its best costs "
        f"${s[chat_best].get('cost_per_1m_tokens') or 0:.2f} per 1M output tokens, the offline job "
        f"${s[off_best].get('cost_per_1m_tokens') or 0:.2f}",
        _busy_idle_note(s[chat_best], s[off_best], "the chat", "the offline job"),
    ]
    server = report.results[chat_best].meta["server"]
    if server is not None and slo.tpot is not None:
        chat_wl = report.results[chat_best].records
        ctx = float(np.mean(chat_wl.prompt_tokens + chat_wl.output_tokens / 2))
        b = np.arange(1, 4097)
        ok = np.flatnonzero(server.step_time.decode(b, ctx)["step_s"] <= slo.tpot)
        largest = int(b[ok[-1]]) if len(ok) else 0
        off = s[off_best]
        lines.append(
            f"roofline: at the chat's mean context of {ctx:.0f} tokens a pure decode step stays "
            f"within the {slo.tpot * 1e3:g} ms TPOT SLO up to a batch of {largest}; what breaks "
            f"TPOT first is prefill, every newcomer's prompt computed inside everyone's step "
            f"(offline: TPOT {off['mean_tpot'] * 1e3:.0f} ms at a mean batch of "
            f"{off['mean_batch_size']:.0f}, which a batch job does not mind)"
        )
    report.notes[0:0] = lines
    report.config["figures"] = ["latency_cdf", "batch_kv", "cost"]
    return report


register(
    Scenario(
        name="chat-vs-offline",
        summary="a chat service wants latency under an SLO; an offline document job wants tokens "
        "per dollar",
        story=(
            "The same GPU, two customers. A chat user watches the answer stream: the first token "
            "must come quickly (TTFT) and the rest at reading speed (TPOT), so a step must stay "
            "short, which means a modest batch. An offline job (summarise 400 documents, all "
            "queued at once) cares only about the bill: the bigger the batch, the more tokens each "
            "weight read buys. Each is run under three configurations; the best for one is not the "
            "best for the other. Goodput counts requests that met every SLO. --rate sets the chat "
            "traffic; the documents arrive all together."
        ),
        defaults={
            **SERVER,
            "rate": 4.0,
            "chat_requests": 600,
            "chat_prompt": "lognormal:600,400",
            "chat_output": "lognormal:200,150",
            "chat_slo_ttft": 0.5,
            "chat_slo_tpot": 0.025,
            "offline_rate_scale": 200.0,
            "offline_prompt": "uniform:1000,3000",
            "offline_output": "uniform:200,400",
            "offline_requests": 400,
            "max_wait": 0.05,
            "chunked_prefill": True,
            "variants": (
                ("static", {"max_batch": 32}),
                ("continuous", {"max_seqs": 16}),
                ("continuous", {"max_seqs": 256}),
            ),
        },
        runner=_chat_vs_offline,
    )
)


# --- memory wall: the KV cache caps the batch ---------------------------------------------


def _memory_wall(args: argparse.Namespace, scenario: Scenario) -> ScenarioReport:
    d = scenario.defaults
    runs = []
    for part, lens in (("short", d["short"]), ("long", d["long"])):
        for policy in ("dynamic", "continuous"):
            kd = {"prompt_len": lens[0], "output_len": lens[1]}
            runs.append(Run(f"{part}: {policy_label(policy, d)}", policy, kd, part))
    report = run_set(
        args,
        scenario,
        runs,
        keys=[
            "completed",
            "rejected",
            "request_throughput",
            "output_throughput",
            "mean_ttft",
            "mean_ttft_delivered",
            "mean_e2e",
            "p99_e2e",
            "mean_batch_size",
            "max_batch_size",
            "kv_peak_tokens",
            "kv_peak_gb",
            "preemptions",
        ],
    )
    seen = set()
    for _label, res in report.results.items():
        srv = res.meta["server"]
        if srv is None or res.meta["part"] in seen:
            continue
        seen.add(res.meta["part"])
        r = res.records
        ctx = float(np.mean(r.prompt_tokens + r.output_tokens))
        report.notes.insert(
            len(seen) - 1,
            f"{res.meta['part']} contexts: {ctx:.0f} tokens on average, so memory "
            f"({srv.kv.tokens:,} KV tokens) holds a batch of about {srv.kv.max_batch(ctx)}",
        )
    report.notes.extend(_preemption_notes(report))
    report.config["figures"] = ["batch_kv", "latency_cdf", "cost"]
    return report


def _preemption_notes(report: ScenarioReport) -> list[str]:
    """Why a continuous run preempted so often, and when its batch settled at the KV ceiling."""
    out = []
    for label, res in report.results.items():
        r, st, budget = res.records, res.records.steps, res.kv_budget_tokens
        if not res.preemptions or budget is None:
            continue
        hit = np.bincount(r.preemptions)
        once = int((r.preemptions > 0).sum())
        ctx = float(np.mean(r.prompt_tokens))
        again = len(hit) > 2  # someone was evicted more than once
        who = (
            f"{once} of them evicted at least once, the worst {len(hit) - 1} times"
            if again
            else f"{once} {'request' if once == 1 else 'requests'} evicted once "
            f"{'' if once == 1 else 'each'}".rstrip()
        )
        out.append(
            f"{label}: {res.preemptions:,} "
            f"{'preemption' if res.preemptions == 1 else 'preemptions'} for {len(r)} requests, "
            f"{who}. Admission counts only the blocks a request holds now, so it admits "
            "while blocks are free; as the answers grow the blocks run out and the newest request "
            "is evicted, its "
            f"cache thrown away (about {ctx:,.0f} prompt tokens to recompute), to be readmitted as "
            f"soon as a block frees{' and evicted again' if again else ''}. Each eviction is work "
            f"done twice."
        )
        full = st["kv_in_use"] >= 0.9 * budget
        if full.any():
            t0 = float(st["start"][np.argmax(full)])
            after = st["start"] >= t0
            share = float(
                (st["duration"] * full)[after].sum() / max(st["duration"][after].sum(), 1e-12)
            )
            waiting = (
                float(np.mean((r.start - r.arrival)[r.arrival >= t0] > 1.0))
                if (r.arrival >= t0).any()
                else 0.0
            )
            # The rows a full cache holds, at the contexts they had then (a row mid-answer holds its
            # prompt and the tokens so far): the same arithmetic as the contexts' note above, at
            # those steps' contexts.
            rows = st["batch_size"][full]
            held = float(np.median(st["kv_in_use"][full] / np.maximum(rows, 1)))
            out.append(
                f"{label}: from t = {t0:.0f} s the KV cache is at least 90 % full for {share:.0%} "
                f"of the busy time. Then it holds {int(np.median(rows))} rows of about {held:,.0f} "
                f"tokens each, all that fits in 90-100 % of memory's {budget:,} tokens; every "
                f"freed block is taken at once, and a queue builds ({waiting:.0%} of later "
                f"requests wait over a second): in those stretches memory, not the policy, "
                "sets the batch."
            )
    return out


def _busy_idle_note(a: dict, b: dict, name_a: str, name_b: str) -> str:
    """Two services' $/1M tokens split into busy (the work) and idle (waiting for traffic)."""

    def part(s: dict, name: str) -> str:
        return (
            f"{name} ${s.get('cost_per_1m_tokens_busy') or 0:.2f} busy + "
            f"${(s.get('cost_per_1m_tokens') or 0) - (s.get('cost_per_1m_tokens_busy') or 0):.2f} "
            f"idle (GPU busy {s['busy_fraction']:.0%}, mean batch {s['mean_batch_size']:.1f})"
        )

    gap_busy = (a.get("cost_per_1m_tokens_busy") or 0) - (b.get("cost_per_1m_tokens_busy") or 0)
    gap = (a.get("cost_per_1m_tokens") or 0) - (b.get("cost_per_1m_tokens") or 0)
    why = (
        "the difference is the work itself: fewer rows share each step"
        if gap and abs(gap_busy) >= 0.5 * abs(gap)
        else "most of the difference is idle time, i.e. traffic, not the policy"
    )
    return f"busy vs idle, per 1M output tokens: {part(a, name_a)}; {part(b, name_b)}: {why}"


register(
    Scenario(
        name="memory-wall",
        summary="the KV cache caps the batch: long contexts leave room for few riders and force "
        "preemption",
        story=(
            "Every token a request has seen stays in GPU memory as keys and values, in every "
            "layer: for Llama-2-7B, half a megabyte per token. On an A100-40GB the weights leave "
            "about 22 GB, some 43,000 tokens: a hundred short chats, but only a dozen long "
            "documents. A padded batch (dynamic) reserves the longest prompt plus the longest "
            "answer for every seat up front, so memory cuts its batches short; continuous batching "
            "allocates blocks as answers grow and, when they run out, preempts the newest request, "
            "which must recompute its prompt later. Compare the same load with short and long "
            "contexts."
        ),
        defaults={
            "gpu": "A100-40GB",
            "model": "llama-2-7b",
            "rate": 0.6,
            "requests": 300,
            "max_batch": 64,
            "max_wait": 2.0,
            "max_seqs": 128,
            "max_batched_tokens": 8192,
            "chunked_prefill": True,
            "short": ("uniform:100,400", "uniform:100,300"),
            "long": ("uniform:1500,3000", "uniform:300,800"),
        },
        runner=_memory_wall,
    )
)


# --- cost-10x: check the arithmetic of a claim ------------------------------------------------

CLAIM = {"taxi_rps": 10.0, "taxi_cost": 0.10, "batch_rps": 100.0, "batch_cost": 0.01, "batch": 32}


def _cost_10x(args: argparse.Namespace, scenario: Scenario) -> ScenarioReport:
    n = CLAIM["batch"]
    runs = [
        Run("taxi", "taxi"),
        Run(f"static-{n}", "static", {"max_batch": n}),
        Run(f"continuous-{n}", "continuous", {"max_seqs": n}),
    ]
    report = run_set(
        args,
        scenario,
        runs,
        keys=[
            "completed",
            "request_throughput",
            "output_throughput",
            "mean_e2e",
            "busy_fraction",
            "mean_batch_size",
            "cost_total",
            "cost_per_request",
            "cost_per_1m_tokens",
        ],
    )
    s = report.summaries
    taxi, bus, cont = s["taxi"], s[f"static-{n}"], s[f"continuous-{n}"]
    ratio = bus["request_throughput"] / taxi["request_throughput"]
    ratio_c = cont["request_throughput"] / taxi["request_throughput"]
    implied = implied_price_per_hour(CLAIM["taxi_rps"], CLAIM["taxi_cost"])
    implied_b = implied_price_per_hour(CLAIM["batch_rps"], CLAIM["batch_cost"])
    price = report.results["taxi"].meta["price"]
    server = report.results["taxi"].meta["server"]
    gpu = server.gpu.name if server is not None else "this server"
    report.notes[0:0] = [
        f"claim: without batching 1 GPU serves {CLAIM['taxi_rps']:g} req/s at "
        f"${CLAIM['taxi_cost']:.2f}/request; with batching (size {n}) {CLAIM['batch_rps']:g} req/s "
        f"at ${CLAIM['batch_cost']:.2f}/request: 10x cheaper",
        f"ratio, simulated: static-{n} serves {ratio:.1f}x the taxi's requests per second "
        f"({bus['request_throughput']:.2f} vs {taxi['request_throughput']:.2f} req/s), so costs "
        f"{ratio:.1f}x less per request; continuous-{n} {ratio_c:.1f}x. "
        + (
            "The claim's ratio of 10 is about right here."
            if 7 <= ratio <= 14
            else "Not the claim's 10: the ratio depends on lengths (padding), context (KV reads) "
            "and the GPU."
        ),
        f"absolute figures: {CLAIM['taxi_rps']:g} req/s x 3600 s x ${CLAIM['taxi_cost']:.2f} = "
        f"${implied:,.0f}/hour (and {CLAIM['batch_rps']:g} x 3600 x ${CLAIM['batch_cost']:.2f} = "
        f"${implied_b:,.0f}/hour) is the GPU price the claim implies; {gpu} rents for about "
        f"${price:.2f}/hour, {implied / price:,.0f}x less"
        if price
        else "absolute figures: give --gpu-price to compare the implied price with a real one",
    ]
    if price:
        report.notes.insert(
            3,
            (
                f"at ${price:.2f}/hour, $0.10/request needs only "
                f"{required_throughput(price, 0.10):.4f} req/s and $0.01/request "
                f"{required_throughput(price, 0.01):.3f} req/s; measured here: taxi "
                f"${taxi['cost_per_request']:.5f}, static-{n} ${bus['cost_per_request']:.5f} per "
                f"request"
            ),
        )
    report.config["cost10x"] = {
        "ratio": ratio,
        "ratio_continuous": ratio_c,
        "implied_price_per_hour": implied,
        "price_per_hour": price,
        "claim": dict(CLAIM),
    }
    report.config["figures"] = ["cost", "timeline", "batch_kv"]
    return report


register(
    Scenario(
        name="cost-10x",
        summary="'batching makes requests 10x cheaper': the ratio holds, the dollar figures do not",
        story=(
            "A claim going round: without batching one GPU serves 10 requests/s at $0.10 each; "
            "with batches of 32 it serves 100 requests/s at $0.01 each: ten times cheaper. Here "
            "one GPU works flat out on a queue of requests, once one at a time and once in batches "
            "of 32, and the bill for the whole run (idle time included) is divided by the requests "
            "served. The *ratio* comes out near 10, because a batch step reads the weights once "
            "for 32 rows. The *dollars* do not survive arithmetic: 10 requests/s at $0.10 each is "
            "$3,600 per GPU-hour, about a thousand times what a GPU rents for. Check the "
            "arithmetic of every cost claim."
        ),
        defaults={
            **SERVER,
            "arrival": "constant",
            "rate": 1000.0,
            "requests": 320,
            "prompt_len": "uniform:32,512",
            "output_len": "uniform:16,256",
        },
        runner=_cost_10x,
    )
)


# --- azure-conv: real traffic ----------------------------------------------------------------

#: Published statistics of the Azure LLM inference trace 2023, conversation part
#: (batchsim/traces/README.md; Patel et al., "Splitwise", ISCA 2024): 19,366 requests over
#: ~58 minutes, ~5.5 req/s, inter-arrival CV ~1.1; prompts mean ~1,155 (median 1,020) tokens;
#: outputs mean ~211 (median 129).
AZURE_CONV = {
    "arrival": "gamma:1.1",
    "rate": 5.5,
    "prompt_len": "lognormal:1155,1020",
    "output_len": "lognormal:211,129",
}


def _azure_conv(args: argparse.Namespace, scenario: Scenario) -> ScenarioReport:
    given = bool(getattr(args, "trace", None)) or str(
        getattr(args, "arrival", "") or ""
    ).startswith("trace:")
    chose_synthetic = not given and getattr(args, "arrival", None) is not None
    found = None
    if not given and not chose_synthetic:
        # "Real chat traffic" means the real file, which ships with batchsim; the fit only stands in
        # for it.
        from ...traces import find_trace

        found = find_trace()
        if found is not None:
            args = argparse.Namespace(**vars(args))
            args.trace = str(found)
    report = run_policies(args, scenario)
    wl = next(iter(report.results.values())).records if report.results else None
    span = (
        f"{len(wl)} requests, the first {float(wl.arrival[-1]):.0f} s"
        if wl is not None and len(wl)
        else "no requests"
    )
    if given or found is not None:
        path = getattr(args, "trace", None) or str(args.arrival)[len("trace:") :]
        report.notes.insert(
            0,
            f"traffic: the trace file {path}, replayed with its own arrival times and token counts "
            f"({span})"
            + ("; --arrival gamma:1.1 runs the synthetic fit instead" if found is not None else ""),
        )
        report.config["traffic"] = {"source": "trace", "path": str(path)}
    else:
        why = (
            "--arrival given"
            if chose_synthetic
            else "this installation has no trace file: python -m batchsim.traces fetch "
            "azure-2023-conv"
        )
        report.notes.insert(
            0,
            (
                f"traffic: a synthetic workload fitted to the trace's published statistics "
                f"({why}): gamma arrivals "
                "at 5.5 req/s with CV 1.1; lognormal prompts mean 1155 median 1020; outputs mean "
                "211 median 129. Without --arrival the scenario replays the real file, which ships "
                "with batchsim"
            ),
        )
        report.config["traffic"] = {"source": "synthetic fit", "path": None}
    report.config["figures"] = ["latency_cdf", "batch_kv", "cost"]
    return report


register(
    Scenario(
        name="azure-conv",
        summary="real chat traffic (Azure LLM trace 2023, conversations): bursty, long prompts, "
        "short answers",
        story=(
            "Textbook traffic is Poisson with tidy lengths; real traffic is not. Azure published "
            "an hour of arrivals and token counts from a production chat service (Patel et al., "
            "Splitwise, ISCA 2024): about 5.5 requests per second in bursts, prompts of a thousand "
            "tokens, answers from a handful to a thousand. The file ships with batchsim and the "
            "scenario replays it (or --trace PATH, or one in $BATCHSIM_TRACES); only with an "
            "--arrival of your own does a synthetic workload matching its published statistics "
            "stand in. The first line of notes says which one ran. One H100, three policies: does "
            "it keep up, and at what latency? (On an A100-80GB, --gpu A100-80GB, even continuous "
            "batching only just keeps up.)"
        ),
        defaults={
            "gpu": "H100-SXM",
            "model": "llama-3-8b",
            **AZURE_CONV,
            "duration": 120.0,
            "policy": "taxi,dynamic,continuous",
            "max_batch": 32,
            "max_wait": 0.2,
            "max_seqs": 128,
            "max_batched_tokens": 8192,
            "chunked_prefill": True,
        },
        runner=_azure_conv,
    )
)


# --- batch-size sweep: the throughput-latency trade-off -----------------------------------------


def batch_capacity(step_time, batch: int, prompt: float, output: float) -> float:
    """Requests per second a server sustains running padded batches of ``batch`` rows back to back.

    One batch: a prefill of batch x prompt tokens, then output - 1 decode steps whose rows' context
    grows by one token a step. Lengths are taken as fixed (the means of a distribution: a padded
    batch of varied lengths does worse, since it runs to its longest member).
    """
    p, o = max(1, int(round(prompt))), max(1, int(round(output)))
    t = float(
        step_time.durations(Step(prefill=tuple(Chunk(i, 0, p) for i in range(batch))), 1).sum()
    )
    if o > 1:
        dec = Step(decode=tuple(range(batch)), kv_read=batch * p, repeat=o - 1)
        t += float(step_time.durations(dec, o - 1).sum())
    return batch / t


def _batch_size_sweep(args: argparse.Namespace, scenario: Scenario) -> ScenarioReport:
    d = scenario.defaults
    names = policies_from_args(args, d)
    policy = names[0]
    batches = list(d["batches"])
    rate = resolve_arg(args, "rate", d or {}, WORKLOAD_DEFAULTS)
    step_time = step_time_from_args(args, d)
    prompt = parse_length(
        resolve_arg(args, "prompt_len", d or {}, WORKLOAD_DEFAULTS), "prompt-len"
    ).mean
    output = parse_length(
        resolve_arg(args, "output_len", d or {}, WORKLOAD_DEFAULTS), "output-len"
    ).mean
    # One workload for every batch size (same arrivals, same lengths, same count): only the bus
    # changes, so the table reads as the trade-off at this traffic and nothing else moves.
    runs = [
        Run(f"{policy} B={b}", policy, {"max_batch": b, "max_seqs": b}, f"B={b}") for b in batches
    ]
    capacity = {b: batch_capacity(step_time, b, prompt, output) for b in batches}
    report = run_set(
        args,
        scenario,
        runs,
        keys=[
            "completed",
            "request_throughput",
            "output_throughput",
            "mean_ttft_delivered",
            "mean_tpot",
            "p50_e2e",
            "p99_e2e",
            "mean_batch_size",
            "busy_fraction",
            "cost_per_request",
        ],
        workload_notes=False,
    )
    slo = slo_from_args(args, d)
    metric, limit = (
        ("p99_e2e", slo.e2e)
        if slo.e2e is not None
        else ("p99_ttft", slo.ttft)
        if slo.ttft is not None
        else ("p99_tpot", slo.tpot)
    )
    s = report.summaries
    meeting = [
        b
        for b, lab in zip(batches, s)
        if limit is not None and (s[lab].get(metric) or float("inf")) <= limit
    ]
    best = max(meeting) if meeting else None
    short = [b for b in batches if capacity[b] < rate]
    n = next(iter(report.results.values())).records.arrival.size if report.results else 0
    report.notes.insert(
        0,
        (
            f"traffic: one arrival rate for every batch size, {rate:g} req/s, {n} requests. What a "
            f"bus of B seats can carry, back to back (req/s): "
            + ", ".join(f"B={b}: {capacity[b]:.2f}" for b in batches)
        ),
    )
    report.notes.insert(
        1,
        (
            (
                f"too small a bus cannot keep up (B <= {max(short)}): the queue grows for the "
                f"whole run, and its p99 is set by how long the run is. "
                if short
                else ""
            )
            + f"Past that, a bigger bus only waits longer to fill, (B - 1) / (2 x {rate:g}/s) on "
            f"average, so p99 rises "
            "again while throughput stays at the arrival rate: the bus buys capacity, and costs "
            "waiting."
        ),
    )
    report.notes.insert(
        2,
        (
            f"SLO {metric} <= {limit:g} s: "
            + (
                f"met by B = {', '.join(str(b) for b in meeting)}; the largest, {best}, leaves the "
                f"GPU busy {s[f'{policy} B={best}']['busy_fraction']:.0%} of the time "
                f"({s[f'{policy} B={best}']['request_throughput']:.2f} req/s served)"
                if best is not None
                else "no batch size meets it at this traffic"
            )
        ),
    )
    wl = next(iter(report.results.values())).workload
    report.notes.append(f"workload of every run: {wl.split(', ', 1)[-1] if ', ' in wl else wl}")
    report.config["sweep"] = {
        "param": "max_batch",
        "values": batches,
        "labels": list(s),
        "slo_metric": metric,
        "slo": limit,
        "best": best,
        "policy": policy,
        "rate": rate,
        "capacity": [capacity[b] for b in batches],
    }
    report.config["figures"] = ["batch_sweep", "roofline", "cost"]
    return report


register(
    Scenario(
        name="batch-size-sweep",
        summary="batch size 1..128 at one arrival rate: too small cannot keep up, too big waits to "
        "fill; the SLO decides",
        story=(
            "'The optimal batch size depends on the model, the hardware and the latency you "
            "promise.' Here one stream of requests (4 per second) meets a bus of 1, 2, 4 ... 128 "
            "seats. Too few seats and the bus cannot carry the traffic: the queue grows and "
            "latency with it. Enough seats and throughput is the arrival rate; more seats than "
            "that add nothing but the wait for the bus to fill, so p99 rises again. With an SLO on "
            "p99 end-to-end latency (--slo-e2e) the answer is the window of batch sizes that meet "
            "it, and the largest of them leaves the most headroom. Change --rate, --gpu, --model "
            "or the SLO and the answer moves."
        ),
        defaults={
            **SERVER,
            "policy": "static",
            "batches": (1, 2, 4, 8, 16, 32, 64, 128),
            "rate": 4.0,
            "requests": 600,
            "prompt_len": "512",
            "output_len": "128",
            "slo_e2e": 8.0,
        },
        runner=_batch_size_sweep,
    )
)
