"""The course's numbers for lessons 4-9 and the GPU lab (the roofline, memory, cost, fleets, the
engine, how sure).

The same contract as ``course_values.py``: each function fills its lesson's placeholders in the dict
``v``, drawing its figures with ``figure(name)`` where it takes one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from course_format import Figure, cli_block, fixed

__all__ = ["LESSONS"]


def lesson4(v: dict[str, str], figure: Figure) -> None:
    """Lesson 4, throughput, latency, theory and the SLO (notebook 6)."""
    from batchsim.sim.theory import MD1

    s = figure("04-theory.png")
    v["l4.table"] = "```\n" + s["table"] + "\n```"
    for load in (0.5, 0.7, 0.8, 0.9, 0.95):
        v[f"l4.md1_{int(load * 100)}"] = fixed(MD1(load / 0.02, 0.02).mean_wait * 1e3, 1)
    v["l4.md1_growth"] = fixed(MD1(0.9 / 0.02, 0.02).mean_wait / MD1(0.8 / 0.02, 0.02).mean_wait, 2)
    v["cli.batch-size-sweep"] = cli_block(["run", "batch-size-sweep"])


def lesson5(v: dict[str, str], figure: Figure) -> None:
    """Lesson 5, the KV cache (notebook 3)."""
    from batchsim.machine.catalog import DEFAULT_CATALOG
    from batchsim.machine.memory import kv_budget
    from batchsim.teach import lessons

    gpu = DEFAULT_CATALOG.gpu("A100-80GB")

    s = figure("05-memory.png")
    p = s["policies"]
    v["l5.bytes_per_token_kib"] = fixed(s["kv_bytes_per_token"] / 1024, 0)
    v["l5.budget_tokens"] = fixed(s["kv_budget_tokens"], 0)
    v["l5.rows"] = str(s["rows_that_fit"])
    v["l5.request_gb"] = fixed(1536 * s["kv_bytes_per_token"] / 1e9, 2)
    v["l5.static_batch"] = fixed(p["static"]["mean_batch_size"], 1)
    v["l5.cont_max_batch"] = str(p["continuous"]["max_batch_size"])
    v["l5.cont_preemptions"] = str(p["continuous"]["preemptions"])
    v["l5.static_tps"] = fixed(p["static"]["output_throughput"], 0)
    v["l5.cont_tps"] = fixed(p["continuous"]["output_throughput"], 0)
    v["l5.table"] = "```\n" + s["table"] + "\n```"
    ct, st_ = p["continuous"]["output_throughput"], p["static"]["output_throughput"]
    # The sentence follows the numbers: optimistic admission wins only while recomputation costs
    # less.
    v["l5.verdict"] = (
        f"{fixed(ct, 0)} tokens/s against {fixed(st_, 0)}. Optimistic admission wins, minus the "
        f"recomputation it causes."
        if ct >= st_
        else f"{fixed(ct, 0)} tokens/s against {fixed(st_, 0)}: here optimistic admission *loses*. "
        f"Every one of the {p['continuous']['preemptions']} preemptions threw away a request's "
        f"cache, to be recomputed: with 96 "
        "requests of 1,536 tokens and room for 9, the rows grow into each other's blocks again and "
        "again. Admitting more than fits pays only when answers are short or memory is ample; with "
        "long answers, fewer running rows (a lower `max_seqs`) stop the thrashing."
    )
    g3, _ = lessons.memory_wall(
        kv_budget_gb=8, prompt_tokens=1024, output_tokens=512, max_batch=32, model="llama-3-8b"
    )
    v["l5.gqa_rows"] = str(g3["rows_that_fit"])
    rows = [
        "| model | KV per token (fp16) | weights | KV budget on an A100-80GB | 4,096-token "
        "requests that fit |",
        "|---|---|---|---|---|",
    ]
    for m in ("gpt2", "llama-2-7b", "llama-3-8b", "mistral-7b"):
        mm = DEFAULT_CATALOG.model(m)
        b = kv_budget(gpu, mm, "fp16", 0.9)
        rows.append(
            f"| {m} | {fixed(mm.kv_bytes_per_token('fp16') / 1024, 0)} KiB | "
            f"{fixed(mm.weight_bytes('fp16') / 1e9, 1)} GB | {fixed(b.tokens, 0)} tokens | "
            f"{b.max_batch(4096)} |"
        )
        if m == "llama-2-7b":
            v["l5.a100_l2_rows_4096"] = str(b.max_batch(4096))
    v["l5.a100_table"] = "\n".join(rows)
    _lesson5_engine(v, figure)


#: What ``bench/engine_efficiency.py --json`` measured, that lesson 5 quotes (made on the course
#: machine).
ENGINE_KV = Path(__file__).resolve().parent.parent / "course" / "data" / "engine-kv.json"


def _lesson5_engine(v: dict[str, str], figure: Figure) -> None:
    """Lesson 5's real engine: the two layouts drawn for the same requests, and measured."""
    s = figure("05-kv-layouts.png")
    v["l5.layout_block"] = str(s["block_size"])
    v["l5.layout_rect"] = fixed(s["rectangle_tokens"], 0)
    v["l5.layout_held"] = fixed(s["block_tokens"], 0)
    v["l5.layout_pad_pct"] = fixed(s["rectangle_padding_pct"], 0)
    v["l5.layout_waste_pct"] = fixed(s["block_waste_pct"], 0)
    v["l5.layout_table"] = s["table"][0].upper() + s["table"][1:]
    m = json.loads(ENGINE_KV.read_text())
    mib = 2**20
    med, rounds = m["median_tokens_per_s"], m["tokens_per_s"]
    paged, padded = med["ours-continuous"], med["ours-padded"]
    held, padded_bytes = m["paged"]["kv_peak_bytes_used"], m["padded_peak_bytes"]
    v["l5.eng_command"] = m["command"]
    # "gpt2-random (offline, ...; 124.4M params) on cpu, ..."
    size = re.search(r"([\d.]+[MB]) params", m["model"])
    v["l5.eng_model"] = (
        m["model"].split(" (")[0]
        + (f", {size.group(1)} parameters" if size else "")
        + (", random weights" if "random" in m["model"] else "")
    )
    v["l5.eng_workload"] = m["workload"]
    v["l5.eng_rounds"] = str(m["rounds"])
    v["l5.eng_yardstick"] = fixed(m["host"]["yardstick_s"], 2)
    v["l5.eng_padded_mib"] = fixed(padded_bytes / mib, 0)
    v["l5.eng_pool_mib"] = fixed(m["paged"]["kv_pool_bytes"] / mib, 0)
    v["l5.eng_held_mib"] = fixed(held / mib, 0)
    v["l5.eng_paged_tps"] = fixed(paged, 0)
    v["l5.eng_padded_tps"] = fixed(padded, 0)
    v["l5.eng_paged_rounds"] = ", ".join(fixed(x, 0) for x in rounds["ours-continuous"])
    v["l5.eng_padded_rounds"] = ", ".join(fixed(x, 0) for x in rounds["ours-padded"])
    ratio = padded_bytes / held
    # The sentence follows the numbers: the speed claim only where every round agrees with it.
    faster = min(rounds["ours-continuous"]) > max(rounds["ours-padded"])
    speed = (
        f"and the pool ran {fixed(paged / padded, 2)}x as fast (every round of the pool beat every "
        f"round of the "
        "rectangle): attention reads only real tokens, and nothing is ever copied to make room"
        if faster
        else f"at about the same speed ({fixed(paged / padded, 2)}x, within the rounds' spread): "
        f"on this model "
        "the products, not the cache, take most of a pass"
    )
    same = (
        "Greedy tokens were identical either way."
        if m["greedy_identical"]
        else "Greedy tokens differed somewhere: a bug to report."
    )
    v["l5.eng_verdict"] = (
        f"The blocks held {fixed(ratio, 1)}x less memory than the rectangle's buffers, {speed}. "
        f"{same}"
    )


def lesson6_cost(v: dict[str, str], figure: Figure) -> None:
    """Lesson 6, cost (notebook 4)."""
    from batchsim.core.errors import ConfigError
    from batchsim.machine.catalog import DEFAULT_CATALOG
    from batchsim.teach import lessons

    s = figure("06-cost.png")
    b = s["batches"]
    v["l6.price"] = fixed(s["price_per_hour"], 2)
    v["l6.saving"] = fixed(s["saving"], 0)
    v["l6.per_1000_b1"] = fixed(b["batch 1"]["cost_per_request"] * 1000, 2)
    v["l6.per_1000_b32"] = fixed(b["batch 32"]["cost_per_request"] * 1000, 3)
    v["l6.per_m_b1"] = fixed(b["batch 1"]["cost_per_1m_tokens"], 2)
    v["l6.per_m_b32"] = fixed(b["batch 32"]["cost_per_1m_tokens"], 2)
    v["l6.rps_b1"] = fixed(b["batch 1"]["request_throughput"], 2)
    v["l6.rps_b32"] = fixed(b["batch 32"]["request_throughput"], 1)
    v["l6.claim_price"] = fixed(s["claim_implied_price"], 0)
    v["l6.claim_factor"] = fixed(s["claim_implied_price"] / s["price_per_hour"], 0)
    v["l6.table"] = "```\n" + s["table"] + "\n```"
    rows = [
        "| GPU | assumed $/hour | $/1M tokens, batch 1 | $/1M tokens, batch 32 | saving |",
        "|---|---|---|---|---|",
    ]
    for g in ("T4", "L4", "A10G", "A100-80GB", "H100-SXM", "H200"):
        try:
            c, _ = lessons.cost(gpu=g, max_batch=32)
        except ConfigError:
            rows.append(
                f"| {g} | {fixed(DEFAULT_CATALOG.gpu(g).price_per_hour, 2)} | llama-3-8b does not "
                f"fit | | |"
            )
            continue
        rows.append(
            f"| {g} | {fixed(c['price_per_hour'], 2)} | "
            f"{fixed(c['batches']['batch 1']['cost_per_1m_tokens'], 2)} | "
            f"{fixed(c['cost_per_1m_tokens'], 2)} | {fixed(c['saving'], 0)}x |"
        )
    v["l6.gpu_table"] = "\n".join(rows)
    c128, _ = lessons.cost(gpu="A100-80GB", max_batch=128)
    v["l6.per_m_b128"] = fixed(c128["cost_per_1m_tokens"], 2)
    v["cli.cost-10x"] = cli_block(["run", "cost-10x"])


def lesson6_fleet(v: dict[str, str], figure: Figure) -> None:
    """Lesson 6, a fleet (notebook 4's second panel): more buses or bigger buses."""
    from batchsim.teach import lessons

    f = figure("06-fleet.png")
    many, big, taxis = (f["rows"][k] for k in f["rows"])
    v["l6.fleet_table"] = "```\n" + f["table"] + "\n```"
    v["l6.fleet_many_per_m"] = fixed(many["cost_per_1m_tokens"], 2)
    v["l6.fleet_big_per_m"] = fixed(big["cost_per_1m_tokens"], 2)
    v["l6.fleet_taxi_per_m"] = fixed(taxis["cost_per_1m_tokens"], 2)
    v["l6.fleet_many_p99"] = fixed(many["p99_e2e"], 2)
    v["l6.fleet_big_p99"] = fixed(big["p99_e2e"], 2)
    v["l6.fleet_taxi_p99_ttft"] = fixed(taxis["p99_ttft"], 1)
    v["l6.fleet_ratio"] = fixed(many["cost_per_1m_tokens"] / big["cost_per_1m_tokens"], 1)
    for rate in (2.0, 16.0):
        for router in ("least-loaded", "least-kv", "round-robin", "random"):
            r, _ = lessons.fleet(router=router, rate=rate)
            row = next(iter(r["rows"].values()))
            v[f"l6.fleet_{int(rate)}_{router}_e2e"] = fixed(row["p99_e2e"], 2)
            v[f"l6.fleet_{int(rate)}_{router}_ttft"] = fixed(row["p99_ttft"], 2)
    # Where the one GPU falls behind: at whole rates, the fleet panel's slider stops (notebook 4,
    # answer 6).
    flip = lessons.fleet_flip()
    if flip["rate"] is None or flip["below"] is None:
        raise SystemExit(
            f"lessons.fleet_flip: no crossing from 1 to {lessons.FLIP_MAX_RATE} requests/s: "
            f"{flip['ratios']}"
        )
    v["l6.fleet_flip_rate"] = str(flip["rate"])
    v["l6.fleet_flip_below"] = str(flip["below"])
    v["l6.fleet_flip_big_p99"] = fixed(flip["big_p99"], 2)
    v["l6.fleet_flip_many_p99"] = fixed(flip["many_p99"], 2)
    v["l6.fleet_flip_below_big_p99"] = fixed(flip["below_big_p99"], 2)
    v["l6.fleet_flip_below_many_p99"] = fixed(flip["below_many_p99"], 2)
    v["l6.fleet_flip_max"] = str(lessons.FLIP_MAX_RATE)
    v["cli.fleet"] = cli_block(["run", "fleet"])


def lesson8(v: dict[str, str], figure: Figure) -> None:
    """Lesson 8, a real day (notebook 8): the Azure trace when it is beside the repository."""
    s = figure("08-real-day.png")
    v["l8.source"] = s["source"]
    v["l8.requests"] = str(s["requests"])
    v["l8.table"] = "```\n" + s["table"] + "\n```"
    for k, a in s["slo_attainment"].items():
        v[f"l8.att64_{k}"] = f"{a:.1%}"
    s32 = figure("08-real-day-batch32.png")
    v["l8.att32_continuous"] = f"{s32['slo_attainment']['continuous']:.1%}"
    v["l8.cost64"] = fixed(s["policies"]["continuous"]["cost_per_request"] * 1000, 3)


#: Lab 8's runs: lesson 9's worked example is dynamic's p50 E2E among them.
LAB8_RUNS = (
    Path(__file__).resolve().parent.parent / "course" / "labs" / "data" / "lab8-repeated-runs.json"
)
#: Two other predictions (s) held against the same runs: the lesson's three verdicts.
L9_OTHERS = (0.83, 0.75)


def lesson9(v: dict[str, str]) -> None:
    """Lesson 9, how sure can you be (lab 8): realrun's verdict by equivalence, worked by hand."""
    from realrun.judge.equivalence import judge, pooled_log_sd, runs_to_show, t90
    from realrun.judge.interval import ASSUMED, MetricSpread, RunSpread, interval_for
    from realrun.judge.verdict import TARGETS

    pct = lambda x, d=1: f"{x:+.{d}f} %"  # noqa: E731 - a signed per cent, as the lesson writes errors
    lab = json.loads(LAB8_RUNS.read_text())
    runs, predicted = lab["measured"]["dynamic"]["p50_e2e"], lab["predicted"]["dynamic"]["p50_e2e"]
    tol = TARGETS["p50_e2e"]
    v["l9.runs"] = ", ".join(fixed(x, 2) for x in runs[:-1]) + f" and {fixed(runs[-1], 2)} s"
    v["l9.pred"] = fixed(predicted, 2)
    v["l9.tol"] = fixed(tol, 0)
    # e^ln(p/m) - 1 = p/m - 1
    v["l9.each"] = ", ".join(pct((predicted / m - 1) * 100) for m in runs)
    sd, df = pooled_log_sd([runs])
    j = judge(predicted, runs, tol, sd, df)
    v.update(
        {
            "l9.err": pct(j.error_pct),
            "l9.sd": fixed(sd * 100, 1),
            "l9.df": str(df),
            "l9.t": fixed(t90(df), 2),
            "l9.half": fixed(j.resolvable_pct, 1),
            "l9.low": pct(j.low_pct),
            "l9.high": pct(j.high_pct),
            "l9.verdict": j.verdict,
            "l9.need10": str(runs_to_show(tol, sd, df)),
            "l9.need5": str(runs_to_show(5, sd, df)),
        }
    )
    psd, pdf = pooled_log_sd([lab["measured"][p]["p50_e2e"] for p in lab["measured"]])
    jp = judge(predicted, runs, tol, psd, pdf)
    v.update(
        {
            "l9.psd": fixed(psd * 100, 1),
            "l9.pdf": str(pdf),
            "l9.pt": fixed(t90(pdf), 2),
            "l9.phalf": fixed(jp.resolvable_pct, 1),
            "l9.plow": pct(jp.low_pct),
            "l9.phigh": pct(jp.high_pct),
            "l9.pverdict": jp.verdict,
        }
    )
    rows = [
        f"| predicted | error | 90 % interval | verdict at ±{fixed(tol, 0)} % |",
        "|---|---|---|---|",
    ]
    for p in (predicted, *L9_OTHERS):
        jj = judge(p, runs, tol, sd, df)
        rows.append(
            f"| {fixed(p, 2)} s | {pct(jj.error_pct, 0)} | {pct(jj.low_pct, 0)} to "
            f"{pct(jj.high_pct, 0)} | **{jj.verdict}** |"
        )
    v["l9.verdict_table"] = "\n".join(rows)
    level = ASSUMED.sd
    v["l9.level"] = fixed(level * 100, 0)
    rows = [
        "| runs R | spread "
        + fixed(psd * 100, 1)
        + f" % ({pdf} degrees of freedom) | spread {fixed(level * 100, 0)} % "
        "(taken as known) |",
        "|---|---|---|",
    ]
    for r in (1, 2, 3, 5, 10, 20):
        # The smallest difference r runs can show: the half-width of their interval, whatever they
        # measured.
        small = [
            fixed(judge(1.0, [1.0] * r, tol, s, d).resolvable_pct, 1)
            for s, d in ((psd, pdf), (level, None))
        ]
        rows.append(f"| {r} | ±{small[0]} % | ±{small[1]} % |")
    v["l9.smallest_table"] = "\n".join(rows)
    v["l9.level_need10"] = str(runs_to_show(10, level, None))
    v["l9.level_need5"] = str(runs_to_show(5, level, None))
    seed_sd, e = 0.03, 1.0  # a latency at light load: its own luck, and one for one with the level
    v["l9.seed_sd"], v["l9.e"] = fixed(seed_sd * 100, 0), fixed(e, 0)
    part, spread = MetricSpread(seed_sd, e), RunSpread(level, "assumed")
    seeds = interval_for(predicted, MetricSpread(seed_sd, 0.0), spread)
    one = interval_for(predicted, part, spread)
    med3 = interval_for(predicted, part, spread, repeats=3)
    med3ref3 = interval_for(predicted, part, spread, repeats=3, ref_runs=3)
    for k, (lo, hi) in {"seeds": seeds, "one": one, "med3": med3, "med3ref3": med3ref3}.items():
        v[f"l9.{k}_low"], v[f"l9.{k}_high"] = fixed(lo, 2), fixed(hi, 2)
    _lab8_answers(v, lab)


def _lab8_answers(v: dict[str, str], lab: dict) -> None:
    """Lab 8's answers for the teacher's notes: every verdict on the shipped runs, and Part C's
    case."""
    from realrun.judge.equivalence import judge, pooled_log_sd, runs_to_show
    from realrun.judge.interval import ASSUMED
    from realrun.judge.verdict import TARGETS

    rows = [
        "| metric (tolerance) | spread | policy | error | 90 % interval | verdict |",
        "|---|---|---|---|---|---|",
    ]
    counts = {"agrees": 0, "disagrees": 0, "cannot tell": 0}
    for metric in ("p50_e2e", "p99_e2e", "p50_ttft", "request_throughput"):
        tol = TARGETS[metric]
        sd, df = pooled_log_sd([lab["measured"][p][metric] for p in lab["measured"]])
        need = runs_to_show(tol, sd, df)
        for k, (policy, runs) in enumerate(
            (p, lab["measured"][p][metric]) for p in lab["measured"]
        ):
            j = judge(lab["predicted"][policy][metric], runs, tol, sd, df)
            counts[j.verdict] += 1
            head = (
                (
                    f"| {metric} (±{fixed(tol, 0)} %) | {fixed(sd * 100, 1)} %, {df} df; {need} "
                    f"run(s) show ±{fixed(tol, 0)} % |"
                )
                if k == 0
                else "| | |"
            )
            rows.append(
                f"{head} {policy} | {j.error_pct:+.1f} % | {j.low_pct:+.1f} to {j.high_pct:+.1f} % "
                f"| {j.verdict} |"
            )
            if (metric, policy) == ("request_throughput", "static"):
                v["l9.lab_static_thr"] = (
                    f"{j.error_pct:+.1f} % ({j.low_pct:+.1f} to {j.high_pct:+.1f} %)"
                )
        if metric == "p50_ttft":
            v["l9.lab_ttft_sd"], v["l9.lab_ttft_need"] = fixed(sd * 100, 0), str(need)
    v["l9.lab_table"] = "\n".join(rows)
    v.update({f"l9.lab_{k.replace(' ', '_')}": str(n) for k, n in counts.items()})
    c = judge(0.19, [0.21], TARGETS["p50_ttft"], ASSUMED.sd, None)
    v.update(
        {
            "l9.c_err": f"{c.error_pct:+.0f} %",
            "l9.c_low": f"{c.low_pct:+.0f} %",
            "l9.c_high": f"{c.high_pct:+.0f} %",
            "l9.c_half": fixed(c.resolvable_pct, 0),
            "l9.c_need": str(c.runs_needed),
            "l9.c_verdict": c.verdict,
        }
    )


def gpu_lab(v: dict[str, str]) -> None:
    """The GPU lab: what the roofline expects for GPT-2 (fp16) on classroom GPUs."""
    from batchsim.machine.server import Server
    from batchsim.teach import lessons

    rows = [
        "| GPU | batch 1 | batch 8 | batch 32 | tokens/s at 32 | knee | prefill of 512 tokens |",
        "|---|---|---|---|---|---|---|",
    ]

    for g in ("T4", "A100-80GB", "H100-SXM"):
        st = Server.named(g, "gpt2", dtype="fp16").step_time
        t = st.decode([1, 8, 32], 128)
        pre = st.prefill(512)
        rows.append(
            f"| {g} | {fixed(t['step_s'][0] * 1e3, 2)} ms | {fixed(t['step_s'][1] * 1e3, 2)} ms | "
            f"{fixed(t['step_s'][2] * 1e3, 2)} ms | {fixed(t['tokens_per_s'][2], 0)} | "
            f"{lessons.roofline(gpu=g, model='gpt2', batch=1, context=0)[0]['knee']} | "
            f"{fixed(pre['step_s'] * 1e3, 2)} ms |"
        )
    v["gpu.gpt2_table"] = "\n".join(rows)
    v["gpu.overhead_ms"] = fixed(Server.named("A100-80GB", "gpt2").step_time.overhead * 1e3, 1)


#: In the order the course runs; each fills its lesson's values.


LESSONS = (lesson4, lesson5, lesson6_cost, lesson6_fleet, lesson8, lesson9, gpu_lab)
