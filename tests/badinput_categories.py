"""The bad-input suite's newer front doors, by category: fleets, schedulers, sweeps, plans, the API,
engines.

Each list holds issue 23's cases (what a careless or hostile user tried on what was added
since the suite began) and their neighbours, declared as in ``badinput_cases``: ``refuse``
is exit code 2 and one line naming the field and the value (``ConfigError`` from Python);
``accept`` with ``note`` is exit 0 and a note that says what was ignored and why.
"""

from __future__ import annotations

import json
import warnings

from badinput import Case
from badinput_cases import R, _api, _wl, refuse, rr

# -- fleets -------------------------------------------------------------------------------------
FLEETS: list[Case] = [
    refuse(
        "run fleet --replicas 2 (its runs set their own)",
        ("run", "fleet", "--replicas", "2", "--no-plots", "--requests", "40"),
        "--replicas",
        "2",
        "fleet",
    ),
    refuse(
        "run fleet --max-seqs 16 (its labels name 64 and 8)",
        ("run", "fleet", "--max-seqs", "16", "--no-plots", "--requests", "40"),
        "--max-seqs",
        "16",
        "fleet",
    ),
    Case(
        "run fleet --router random: four GPUs routed at random",
        ("run", "fleet", "--router", "random", "--no-plots", "--requests", "40", "--json"),
        accept=True,
        requests=40,
    ),
    Case(
        "run --router random on one server: a note",
        (*R, "--router", "random", "--requests", "20", "--json"),
        accept=True,
        requests=20,
        note=("--router", "random", "ignored", "--replicas"),
    ),
    Case(
        "run --replicas 2 --router random: no note",
        (*R, "--replicas", "2", "--router", "random", "--requests", "20"),
        accept=True,
    ),
]

# -- schedulers (sweep --scheduler tcp://...) ------------------------------------------------------
_SW = ("sweep", "replicas=1,2", "--policy", "continuous", "--requests", "40", "--no-plots")


def _sched(id_, serve, *words) -> Case:
    return Case(id_, (*_SW, "--scheduler", "tcp://127.0.0.1:{port}"), tuple(words), serve=serve)


SCHEDULERS: list[Case] = [
    _sched(
        "scheduler port that accepts and never answers",
        "silent",
        "scheduler",
        "127.0.0.1",
        "no reply",
    ),
    _sched("scheduler port held by an HTTP server", "http", "scheduler", "127.0.0.1", "no reply"),
    _sched(
        "scheduler port held by sshd (a banner, not a frame)",
        "ssh",
        "scheduler",
        "Dask's protocol",
        "SSH-2.0",
    ),
    Case(
        "scheduler: a real Dask scheduler passes the probe",
        (*_SW, "--scheduler", "tcp://127.0.0.1:{port}", "--json"),
        accept=True,
        requests=40,
        serve="dask",
        note=("the Dask cluster at tcp://127.0.0.1",),
    ),
]

# -- sweeps ---------------------------------------------------------------------------------------
_S = ("--requests", "20", "--no-plots", "--jobs", "1")


def _sweep_refuse(id_, spec, extra, *words) -> Case:
    return refuse(id_, ("sweep", spec, *extra, *_S), *words)


def _same_default_server(t) -> bool:
    """sweep and run simulate the same server: the same point gives the same p99 and the same
    bill."""
    from badinput import run_case

    got = []
    for argv in (
        ("sweep", "max_seqs=64,32", "--policy", "continuous", "--json", *_S),
        ("run", "--policy", "continuous", "--json", "--requests", "20", "--no-plots"),
    ):
        code, out, err = run_case(Case("x", argv), t)
        assert code == 0, err
        got.append(json.loads(out)["runs"][0]["summary"])
    (sweep, run) = got
    assert (
        sweep["p99_e2e"] == run["p99_e2e"]
        and sweep["cost_per_request"] == run["cost_per_request"] is not None
    ), got
    return True


SWEEPS: list[Case] = [
    _sweep_refuse(
        "sweep max_wait=0,0.1 --policy continuous (identical rows)",
        "max_wait=0,0.1",
        ("--policy", "continuous"),
        "max_wait",
        "continuous",
        "changes nothing",
    ),
    _sweep_refuse(
        "sweep router on one server",
        "router=random,round-robin",
        ("--policy", "continuous"),
        "router",
        "one server",
        "--replicas",
    ),
    _sweep_refuse(
        "sweep max_seqs=8,16 --max-seqs 32 (the flag dropped)",
        "max_seqs=8,16",
        ("--max-seqs", "32"),
        "--max-seqs",
        "32",
        "sweep of max_seqs",
    ),
    _sweep_refuse(
        "sweep max_seqs=8,8,16 (a value twice)", "max_seqs=8,8,16", (), "max_seqs", "8", "twice"
    ),
    _sweep_refuse(
        "sweep rate=1,1.0 (the same value written twice)", "rate=1,1.0", (), "rate", "twice"
    ),
    Case(
        "sweep rate=1,2 --max-wait 0.2 --policy continuous: a note",
        ("sweep", "rate=1,2", "--policy", "continuous", "--max-wait", "0.2", "--json", *_S),
        accept=True,
        note=("--max-wait", "0.2", "ignored"),
    ),
    Case(
        "sweep rate=1,2 --router random on one server: a note",
        ("sweep", "rate=1,2", "--policy", "continuous", "--router", "random", "--json", *_S),
        accept=True,
        note=("--router", "ignored"),
    ),
    Case(
        "sweep router=random,round-robin --replicas 2",
        (
            "sweep",
            "router=random,round-robin",
            "--policy",
            "continuous",
            "--replicas",
            "2",
            "--json",
            *_S,
        ),
        accept=True,
    ),
    _api("sweep and run: one default server", _same_default_server, ok=True),
    refuse(
        "run --policy taxi,taxi (a policy twice, one row)",
        ("--policy", "taxi,taxi"),
        "policy",
        "taxi",
        "more than once",
    ),
]

# -- plans ----------------------------------------------------------------------------------------
_P = ("plan", "--rate", "5", "--requests", "40", "--scheduler", "none")
PLANS: list[Case] = [
    refuse(
        "plan --gpus L4,L4,L4",
        (*_P, "--gpus", "L4,L4,L4", "--slo-p99-e2e", "5"),
        "gpus",
        "L4",
        "more than once",
    ),
    refuse(
        "plan --policies taxi,taxi",
        (*_P, "--policies", "taxi,taxi", "--slo-p99-e2e", "5"),
        "policies",
        "taxi",
    ),
    refuse(
        "plan --slo-ttft 1 --slo-p99-ttft 2",
        (*_P, "--slo-ttft", "1", "--slo-p99-ttft", "2"),
        "--slo-p99-ttft",
        "2",
        "1",
    ),
    refuse(
        "plan --slo-tpot 1 --slo-tpot 2",
        (*_P, "--slo-tpot", "0.1", "--slo-p99-tpot", "0.2"),
        "--slo-p99-tpot",
        "0.2",
    ),
    refuse(
        "plan --prompt-len 10000 on H100 (no prompt fits the context)",
        (*_P, "--prompt-len", "10000", "--gpus", "H100-SXM", "--slo-p99-e2e", "5"),
        "prompt-len",
        "10000",
        "context",
    ),
    refuse(
        "plan --slo-tpot 0.0001 shows 0.1 ms",
        (
            *_P,
            "--slo-tpot",
            "0.0001",
            "--gpus",
            "L4",
            "--policies",
            "continuous",
            "--max-replicas",
            "2",
        ),
        "0.1 ms",
    ),
    refuse(
        "plan --max-replicas 1000000",
        (*_P, "--max-replicas", "1000000", "--slo-p99-e2e", "5"),
        "max-replicas",
        "1000000",
    ),
]


# -- the Python API --------------------------------------------------------------------------------
def _st():
    from batchsim import ConstantStepTime

    return ConstantStepTime(0.01)


def _p():
    from batchsim import make_policy

    return make_policy("continuous")


def _sim(workload, policy, step_time, **kw):
    from batchsim import simulate

    return simulate(workload, policy, step_time, **kw)


def _check(workload, policy, step_time):
    from batchsim.sim.arguments import check_simulate_args

    return check_simulate_args(workload, policy, step_time)


#: (id, arguments as a function of nothing, extra keywords, words): simulate's positional arguments
#: gone wrong.
_SIMULATE_ARGS = [
    (
        "'continuous'",
        lambda: (_wl(), "continuous", _st()),
        {},
        ("policy", "'continuous'", "make_policy"),
    ),
    ("'warp'", lambda: (_wl(), "warp", _st()), {}, ("policy", "'warp'")),
    ("None policy", lambda: (_wl(), None, _st()), {}, ("policy", "None")),
    ("5 as policy", lambda: (_wl(), 5, _st()), {}, ("policy", "5")),
    (
        "[p, p] with replicas=2",
        lambda: (_wl(), [_p(), _p()], _st()),
        {"replicas": 2},
        ("policy", "list of 2", "replicas"),
    ),
    ("step time 0.01", lambda: (_wl(), _p(), 0.01), {}, ("step_time", "0.01", "ConstantStepTime")),
    ("step time None", lambda: (_wl(), _p(), None), {}, ("step_time", "None")),
    ("workload [1, 2, 3]", lambda: ([1, 2, 3], _p(), _st()), {}, ("workload", "[1, 2, 3]")),
]

#: Passes once ``simulate`` calls ``check_simulate_args`` first (the driver's rewrite wires it).
API_SIMULATE: list[Case] = [
    _api(f"simulate(wl, {name})", lambda t, a=args, kw=kw: _sim(*a(), **kw), *words)
    for name, args, kw, words in _SIMULATE_ARGS
]


def _quiet_or_noted(fn, *words):
    """Run ``fn``; its ``BatchsimNote`` warnings must hold every word (none given: it must stay
    quiet)."""
    from batchsim import BatchsimNote

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BatchsimNote)
        fn()
    seen = [str(w.message) for w in caught if issubclass(w.category, BatchsimNote)]
    if words:
        assert any(all(w in m for w in words) for m in seen), seen
    else:
        assert not seen, seen
    return True


def _make(name, **kw):
    from batchsim import make_policy

    return make_policy(name, **kw)


API: list[Case] = [
    *[
        _api(f"check_simulate_args(wl, {name})", (lambda a: lambda t: _check(*a()))(args), *words)
        for name, args, kw, words in _SIMULATE_ARGS
    ],
    _api(
        "check_simulate_args(good arguments)", lambda t: _check(_wl(), _p(), _st()) is None, ok=True
    ),
    _api(
        "make_policy('continuous', max_wait=0.1, max_batch=3): a note",
        lambda t: _quiet_or_noted(
            lambda: _make("continuous", max_wait=0.1, max_batch=3),
            "max_wait",
            "max_batch",
            "continuous",
        ),
        ok=True,
    ),
    _api(
        "make_policy('static', max_batch=3, max_seqs=8): one set for every policy, quiet",
        lambda t: _quiet_or_noted(lambda: _make("static", max_batch=3, max_seqs=8)),
        ok=True,
    ),
    _api(
        "make_policy('taxi', max_batch=3): the taxi reads no knob, a note",
        lambda t: _quiet_or_noted(lambda: _make("taxi", max_batch=3), "max_batch=3", "taxi"),
        ok=True,
    ),
]


# -- engines (realrun) -----------------------------------------------------------------------------
_RR = ("--rate", "50", "--prompt-len", "8", "--output-len", "3")


def _memory_line_names_no_zero(t) -> bool:
    from realrun.cli.engines import memory_line as _memory_line

    line = _memory_line({"engine": "vllm"})
    assert "0 MiB" not in line and "not measured" in line and "vllm" in line, line
    return True


def _fleet_memory(t):
    from realrun.clock.fleet import check_fleet_memory
    from realrun.engine.model import load_model

    check_fleet_memory(load_model("tiny-gpt2", device="cpu", threads=1), 4096, memory=8e9)


def _hf_min_block_is_transformers(t) -> bool:
    from transformers.generation.continuous_batching.initialization import BOUNDS

    from realrun.reference.baselines import HF_MIN_BLOCK

    assert BOUNDS["page_size"][0] == HF_MIN_BLOCK, BOUNDS
    return True


def _hf_continuous_block_1(t):
    from realrun.engine.model import load_model
    from realrun.reference.baselines import run_hf_continuous

    run_hf_continuous(_wl(), load_model("tiny-gpt2", device="cpu", threads=1), block_size=1)


ENGINES: list[Case] = [
    rr(
        "realrun --replicas 4096 --requests 10 (engines past the requests)",
        ("--replicas", "4096", "--policy", "dynamic"),
        "replicas",
        "4096",
        "requests",
    ),
    _api(
        "realrun fleet of 4096 engines on an 8 GB machine", _fleet_memory, "replicas", "4096", "GB"
    ),
    rr(
        "realrun --engine hf-continuous --block-size 1",
        (
            "--engine",
            "hf-continuous",
            "--policy",
            "continuous",
            "--max-seqs",
            "1",
            "--block-size",
            "1",
        ),
        "block-size",
        "1",
        "4",
    ),
    _api("run_hf_continuous(block_size=1)", _hf_continuous_block_1, "block_size", "1", "4"),
    _api("HF_MIN_BLOCK is transformers' own bound", _hf_min_block_is_transformers, ok=True),
    rr(
        "realrun --engine vllm --replicas 2",
        ("--engine", "vllm", "--replicas", "2"),
        "replicas",
        "2",
        "vllm",
    ),
    rr(
        "realrun --engine vllm --model /no/such/folder",
        ("--engine", "vllm", "--model", "/no/such/folder"),
        "model",
        "/no/such/folder",
        "no such folder",
    ),
    rr(
        "realrun --model /no/such/folder",
        ("--model", "/no/such/folder"),
        "model",
        "/no/such/folder",
        "no such folder",
    ),
    _api("realrun memory line without a measurement", _memory_line_names_no_zero, ok=True),
    Case(
        "realrun GPT-2 folder, vocab 32000, eos 50256, no pad id",
        (
            "run",
            "--model",
            "{tmp}/gpt2_32k",
            "--policy",
            "dynamic",
            "--requests",
            "24",
            "--rate",
            "100",
            "--prompt-len",
            "uniform:4,60",
            "--output-len",
            "uniform:1,6",
            "--threads",
            "1",
            "--no-plots",
            "--json",
        ),
        accept=True,
        requests=24,
        main="realrun",
        prepare="gpt2_32k",
        note=("eos_token_id", "50256", "vocabulary"),
    ),
    Case(
        "realrun --router random on one engine: a note",
        (
            "run",
            "--requests",
            "3",
            "--threads",
            "1",
            "--no-plots",
            "--json",
            "--router",
            "random",
            *_RR,
        ),
        accept=True,
        requests=3,
        main="realrun",
        note=("--router", "ignored"),
    ),
    Case(
        "realrun --replicas 2: a fleet of two engines",
        (
            "run",
            "--requests",
            "6",
            "--threads",
            "1",
            "--no-plots",
            "--json",
            "--replicas",
            "2",
            *_RR,
        ),
        accept=True,
        requests=6,
        main="realrun",
    ),
]

CATEGORIES: dict[str, list[Case]] = {
    "fleets": FLEETS,
    "schedulers": SCHEDULERS,
    "sweeps": SWEEPS,
    "plans": PLANS,
    "api": API,
    "engines": ENGINES,
}
