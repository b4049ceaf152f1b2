"""The course's numbers for lessons 1-3 (taxi and bus, the knee, the three policies).

``scripts/make_course_figures.py`` calls every function of ``LESSONS`` with the dict of values it
fills and ``figure(name)``, which draws a course figure, saves it and returns its lesson's summary.
Each function runs the lesson functions (``batchsim.teach.lessons``) and the command line its
lesson quotes, and rounds each number to the precision the prose needs. Lessons 4-8 and the GPU
lab are in ``course_values_late.py``, split for size, not job.
"""

from __future__ import annotations

from course_format import Figure, cli_block, fixed

__all__ = ["LESSONS"]


def lesson1(v: dict[str, str], figure: Figure) -> None:
    """Lesson 1, the taxi and the bus (notebook 1)."""
    from batchsim.teach import lessons

    s = figure("01-why-batch.png")
    p = s["policies"]
    v["l1.taxi_capacity"] = fixed(s["taxi_capacity"], 1)
    v["l1.ride_s"] = fixed(1 / s["taxi_capacity"], 2)
    for k in ("taxi", "static", "dynamic"):
        v[f"l1.{k}_thr"] = fixed(p[k]["request_throughput"], 1)
        v[f"l1.{k}_mean"] = fixed(p[k]["mean_e2e"], 1)
        v[f"l1.{k}_p99"] = fixed(p[k]["p99_e2e"], 1)
        v[f"l1.{k}_per_1000"] = fixed(p[k]["cost_per_request"] * 1000, 3)
        v[f"l1.{k}_batch"] = fixed(p[k]["mean_batch_size"], 1)
    v["l1.cost_ratio"] = fixed(p["taxi"]["cost_per_request"] / p["static"]["cost_per_request"], 1)
    v["l1.table"] = "```\n" + s["table"] + "\n```"
    low = figure("01-why-batch-low-load.png")
    for k in ("taxi", "static", "dynamic"):
        v[f"l1.low_{k}_mean"] = fixed(low["policies"][k]["mean_e2e"], 2)
        v[f"l1.low_{k}_per_1000"] = fixed(low["policies"][k]["cost_per_request"] * 1000, 3)
        v[f"l1.low_{k}_busy_per_1000"] = fixed(
            low["policies"][k]["cost_per_request_busy"] * 1000, 3
        )
        v[f"l1.low_{k}_busy"] = f"{low['policies'][k]['busy_fraction']:.0%}"
    for rate in (30, 2):
        for seats in (4, 16, 64):
            r, _ = lessons.why_batch(rate=rate, max_batch=seats, max_wait=0.2)
            st = r["policies"]["static"]
            v[f"l1.r{rate}_b{seats}_thr"] = fixed(st["request_throughput"], 1)
            v[f"l1.r{rate}_b{seats}_p99"] = fixed(st["p99_e2e"], 1)
            v[f"l1.r{rate}_b{seats}_per_1000"] = fixed(st["cost_per_request"] * 1000, 3)
            v[f"l1.r{rate}_b{seats}_busy"] = f"{st['busy_fraction']:.0%}"
            # the run's start is a visible part of a short run: the panel's note
            if (rate, seats) == (
                30,
                64,
            ):
                e = r["edges"]["static"]
                v["l1.r30_b64_first_s"] = fixed(e["first_departure_s"], 1)
                v["l1.r30_b64_first_share"] = f"{e['share_of_run']:.0%}"
                v["l1.r30_b64_busy_after"] = f"{e['busy_after']:.0%}"
                v["l1.r30_b64_thr_after"] = fixed(e["throughput_after"], 1)
    long, _ = lessons.why_batch(rate=30, max_batch=64, max_wait=0.2, requests=4000)
    v["l1.r30_b64_long_thr"] = fixed(long["policies"]["static"]["request_throughput"], 2)
    v["l1.r30_b64_long_busy"] = f"{long['policies']['static']['busy_fraction']:.0%}"
    v["l1.r30_b64_long_p99"] = fixed(long["policies"]["static"]["p99_e2e"], 1)
    v["cli.taxi-vs-bus"] = cli_block(["run", "taxi-vs-bus"])
    v["cli.laundromat"] = cli_block(["run", "laundromat"])


def lesson2(v: dict[str, str], figure: Figure) -> None:
    """Lesson 2, the roofline (notebook 5): one GPU and model, and the other phase, prefill."""
    from batchsim.machine.catalog import DEFAULT_CATALOG
    from batchsim.teach import lessons

    gpu = DEFAULT_CATALOG.gpu("A100-80GB")
    model = DEFAULT_CATALOG.model("llama-3-8b")
    r1, _ = lessons.roofline(gpu="A100-80GB", model="llama-3-8b", batch=1, context=0)
    r64, _ = lessons.roofline(gpu="A100-80GB", model="llama-3-8b", batch=64, context=0)
    r32 = figure("02-roofline.png")
    v["l2.weight_gb"] = fixed(model.weight_bytes("fp16") / 1e9, 1)
    v["l2.bandwidth_tbs"] = fixed(gpu.bandwidth_gbs / 1000, 2)
    v["l2.tflops"] = fixed(gpu.tflops, 0)
    v["l2.hand_ms"] = fixed(model.weight_bytes("fp16") / gpu.bandwidth * 1e3, 1)
    v["l2.flop_ms"] = fixed(2 * model.params / (gpu.tflops * 1e12) * 1e3, 3)
    v["l2.step1_ms"] = fixed(r1["step_ms"], 1)
    v["l2.tps1"] = fixed(r1["tokens_per_s"], 0)
    v["l2.tps64"] = fixed(r64["tokens_per_s"], 0)
    v["l2.speedup64"] = fixed(r64["speedup_vs_batch1"], 0)
    v["l2.step64_ms"] = fixed(r64["step_ms"], 1)
    v["l2.knee0"] = str(r1["knee"])
    v["l2.knee512"] = str(r32["knee"])
    v["l2.ridge"] = fixed(gpu.ridge("fp16"), 0)
    # the other phase: prefill (the roofline figure's third panel)
    v["l2.prefill512_ms"] = fixed(r32["prefill_ms"], 1)
    v["l2.prefill512_tps"] = fixed(r32["prefill_tokens_per_s"], 0)
    v["l2.prefill_knee"] = str(r32["prefill_knee"])
    p8k, _ = lessons.roofline(gpu="A100-80GB", model="llama-3-8b", batch=1, context=0, prompt=8192)
    v["l2.prefill8k_ms"] = fixed(p8k["prefill_ms"], 0)
    v["l2.decode32_tps"] = fixed(r32["tokens_per_s"], 0)


def lesson2_published(v: dict[str, str], figure: Figure) -> None:
    """Lesson 2's check: the roofline against what engines published
    (batchsim.machine.validation)."""
    s = figure("02-published.png")
    per = s["per_engine"]
    trt, vllm = per["trt-llm throughput"], per["vllm TPOT"]
    v["l2.pub_points"] = str(s["points"])
    v["l2.pub_trt_points"] = str(trt["points"])
    v["l2.pub_trt_median"] = fixed(100 * trt["median"], 0)
    v["l2.pub_trt_worst"] = fixed(100 * trt["worst"], 0)
    v["l2.pub_vllm_points"] = str(vllm["points"])
    v["l2.pub_vllm_median"] = fixed(100 * vllm["median"], 0)
    v["l2.pub_vllm_worst"] = fixed(100 * vllm["worst"], 0)
    vthr, held = per["vllm throughput"], s["held_out"]["vllm"]
    v["l2.pub_vllm_thr_points"] = str(vthr["points"])
    v["l2.pub_vllm_thr_median"] = fixed(100 * vthr["median"], 0)
    v["l2.pub_vllm_thr_worst"] = fixed(100 * vthr["worst"], 0)
    v["l2.pub_vllm_held_points"] = str(held["points"])
    v["l2.pub_vllm_held_worst"] = fixed(100 * held["worst"], 0)
    # Time to first token, per engine: points no preset was fitted to (held out of both fits).
    for key, engine in (("vllm", "vllm"), ("trt", "trt-llm")):
        ttft = per[f"{engine} TTFT"]
        v[f"l2.pub_{key}_ttft_points"] = str(ttft["points"])
        v[f"l2.pub_{key}_ttft_median"] = fixed(100 * ttft["median"], 0)
        v[f"l2.pub_{key}_ttft_worst"] = fixed(100 * ttft["worst"], 0)
    v["l2.pub_within"] = str(s["within_target"])
    v["l2.pub_beyond"] = str(s["beyond_worst"])
    v["l2.pub_table"] = "```\n" + s["table"] + "\n```"
    kv = {k["hardware"]: k for k in s["kv"]}["H100-SXM"]
    v["l2.pub_kv_h100"] = f"{kv['predicted']:,}"
    v["l2.pub_kv_h100_logged"] = f"{kv['kv_tokens']:,}"
    v["l2.pub_kv_h100_error"] = f"{100 * kv['error']:+.1f}"


def lesson2_knees(v: dict[str, str]) -> None:
    """Lesson 2's table of knees: three GPUs, two models, with and without a cached context."""
    from batchsim.core.errors import ConfigError
    from batchsim.machine.server import Server
    from batchsim.teach import lessons

    rows = [
        "| GPU | model | step at batch 1 | tokens/s at 1 | tokens/s at 64 | knee (no context) | "
        "knee (512 cached) |",
        "|---|---|---|---|---|---|---|",
    ]
    knees, knee_kv = {}, {}
    for g in ("T4", "A100-80GB", "H100-SXM"):
        for m in ("gpt2", "llama-3-8b"):
            try:
                a, _ = lessons.roofline(gpu=g, model=m, batch=1, context=0)
                b, _ = lessons.roofline(gpu=g, model=m, batch=64, context=0)
                c, _ = lessons.roofline(gpu=g, model=m, batch=1, context=512)
            except ConfigError:
                rows.append(f"| {g} | {m} | does not fit (weights > 90 % of memory) | | | | |")
                continue
            knees[(g, m)] = a["knee"]
            k512 = c["knee"]
            if k512:
                # A knee is only reachable if its rows' KV cache fits beside the weights.
                srv = Server.named(g, m)
                need = k512 * 512 * srv.kv.bytes_per_token / 1e9
                fits = srv.kv.max_batch(512)
                k512_txt = (
                    f"{k512}"
                    if k512 <= fits
                    else f"{k512}: needs {fixed(need, 0)} GB of KV, room for {fits} rows"
                )
                knee_kv[(g, m)] = (k512, need, fits, srv.kv.bytes_per_token * srv.kv.tokens / 1e9)
            else:
                k512_txt = "none"
            rows.append(
                f"| {g} | {m} | {fixed(a['step_ms'], 2)} ms | {fixed(a['tokens_per_s'], 0)} | "
                f"{fixed(b['tokens_per_s'], 0)} | {a['knee']} | {k512_txt} |"
            )
    v["l2.knee_table"] = "\n".join(rows)
    k, need, fits, room = knee_kv[("H100-SXM", "llama-3-8b")]
    v["l2.h100_knee512"] = str(k)
    v["l2.h100_knee512_gb"] = fixed(need, 0)
    v["l2.h100_kv_gb"] = fixed(room, 0)
    v["l2.h100_rows512"] = str(fits)
    v["l2.knee_gpt2_a100"] = str(knees[("A100-80GB", "gpt2")])
    v["l2.knee_h100"] = str(knees[("H100-SXM", "llama-3-8b")])


def lesson3(v: dict[str, str], figure: Figure) -> None:
    """Lesson 3, static, dynamic, continuous (notebook 2), and the prefill stall."""
    from batchsim.teach import lessons

    s = figure("03-policies.png")
    p = s["policies"]
    for k in ("taxi", "static", "dynamic", "continuous"):
        v[f"l3.{k}_thr"] = fixed(p[k]["request_throughput"], 2)
        v[f"l3.{k}_mean"] = fixed(p[k]["mean_e2e"], 1)
        v[f"l3.{k}_p99"] = fixed(p[k]["p99_e2e"], 1)
        v[f"l3.{k}_ttft_ms"] = fixed(p[k]["mean_ttft"] * 1e3, 0)
        v[f"l3.{k}_ttft_dlv_s"] = fixed(p[k]["mean_ttft_delivered"], 1)
        v[f"l3.{k}_ttft_dlv_ms"] = fixed(p[k]["mean_ttft_delivered"] * 1e3, 0)
        v[f"l3.{k}_tpot_ms"] = fixed(p[k]["mean_tpot"] * 1e3, 1)
        v[f"l3.{k}_step_ms"] = fixed(p[k]["mean_step_time"] * 1e3, 1)
        v[f"l3.{k}_padded"] = f"{p[k]['padded_row_fraction']:.0%}"
        v[f"l3.{k}_batch"] = fixed(p[k]["mean_batch_size"], 1)
    v["l3.table"] = "```\n" + s["table"] + "\n```"
    sat, _ = lessons.batching_policies(policy="dynamic", rate=30)
    for k in ("taxi", "static", "dynamic", "continuous"):
        v[f"l3.sat_{k}"] = fixed(sat["policies"][k]["request_throughput"], 1)
    figure("03-policies-continuous.png")
    v["cli.mixed-lengths"] = cli_block(["run", "mixed-lengths"])
    st = figure("03-prefill-stall.png")
    whole, chunk = st["modes"]["whole prompt"], st["modes"]["chunks of 512"]
    v["l3.stall_decode_ms"] = fixed(st["decode_ms"], 1)
    v["l3.stall_prefill_ms"] = fixed(st["whole_prefill_ms"], 0)
    v["l3.stall_whole_gap_ms"] = fixed(whole["worst_gap_ms"], 0)
    v["l3.stall_chunk_gap_ms"] = fixed(chunk["worst_gap_ms"], 0)
    v["l3.stall_whole_ttft_ms"] = fixed(whole["long_ttft_ms"], 0)
    v["l3.stall_chunk_ttft_ms"] = fixed(chunk["long_ttft_ms"], 0)
    v["l3.stall_chunk_steps"] = str(chunk["stall_steps"])
    v["l3.stall_table"] = "```\n" + st["table"] + "\n```"
    gaps = {512: chunk["worst_gap_ms"]}
    for c in (128, 256, 1024, 2048):
        sc, _ = lessons.prefill_stall(prompt_tokens=8192, running=32, chunk_tokens=c)
        gaps[c] = sc["modes"][f"chunks of {c}"]["worst_gap_ms"]
        v[f"l3.stall_gap_c{c}"] = fixed(gaps[c], 0)
    ok = [c for c in sorted(gaps) if gaps[c] < 100]
    v["l3.stall_best_chunk"] = fixed(max(ok), 0) if ok else "none of these"
    v["l3.stall_best_gap"] = fixed(gaps[max(ok)], 0) if ok else "-"
    bigger = [c for c in sorted(gaps) if c > (max(ok) if ok else 0)]
    v["l3.stall_next_chunk"] = fixed(bigger[0], 0) if bigger else "-"
    v["l3.stall_next_gap"] = fixed(gaps[bigger[0]], 0) if bigger else "-"


LESSONS = (lesson1, lesson2, lesson2_knees, lesson2_published, lesson3)
