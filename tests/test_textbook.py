"""The textbook server (``batchsim.textbook``) against the fast one (``batchsim.simulate``).

Both serve the same seeded workload with the same policy, limits and step-time model; the
per-request records must be equal to the last float (arrival, start, first and last token,
finish, tokens, preemptions, longest gap between tokens, rejection and its words), and so
must the KV peak, the preemptions and the policy's description. No rounding is allowed on
the requests' times: both clocks set events at absolute times and add a pass's seconds to its
start in the same order. A random step-time model (``ExponentialStepTime``) is held to the same
equality: the fast path puts back the draws of a run's passes that an arrival cut off, so each
pass takes the draw it takes here.

The step logs differ in shape by design: the fast path writes one row per run of identical
decode passes (``repeat``), the textbook one row per pass. Expanded, they must agree row for
row, the KV in use of each run's first pass included, and every row's start exactly; the
durations are compared as sums over each run to 1e-9 relative, because a run's duration is one
subtraction (end - start) in the fast path and a sum of its passes' here. For the same reason
the two summary figures that sum the log's durations (``FROM_THE_LOG``: ``busy_fraction`` and
``mean_step_time``) are compared to 1e-12 relative. Every other figure of ``summarize`` is
compared exactly, the makespan (``duration``) and the throughputs too: both read the clock's
own last end, not a row's start + duration read back (``batchsim.core.steplog``).

Each of ``SEEDS`` workloads is served under all four policies, each policy with knobs drawn
from the same seed: tiny KV budgets that reject and preempt, roomy ones and none; chunked
prefill on and off; token budgets that bind; a model's context and a pass's token limit;
arrivals at the same instant and on the step-time grid; constant, linear (three pass
plans), roofline, profiled and exponentially random step times. Each policy's test also
counts what its cases exercised and fails if a kind of case it promises is missing.

The same seeds again, each with a process of the user's own (lab 6's outage, one to three times,
``Maintenance``), hold ``go_down`` / ``come_back`` to the same records: among them a server taken
down inside a run of passes priced as one step (it ends after the pass running, as the textbook's
does), and one brought back and taken down at one instant (it runs nothing). Both were the fast
path's faults until this test found them.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from batchsim import (
    ConstantStepTime,
    Continuous,
    Dynamic,
    LinearStepTime,
    Poisson,
    Server,
    Static,
    Taxi,
    Uniform,
    Workload,
    load_step_time,
    make_policy,
    make_workload,
    simulate,
    summarize,
    textbook,
)
from batchsim.core.limits import ServerLimits
from batchsim.sim.steptime import ExponentialStepTime

SEEDS = range(500)
PROFILE = (
    Path(__file__).resolve().parent.parent
    / "realrun"
    / "reference"
    / "data"
    / "reference-calibration-tiny-gpt2-cpu.json"
)
PER_REQUEST = (
    "arrival",
    "prompt_tokens",
    "output_tokens",
    "start",
    "first_token",
    "finish",
    "last_token",
    "tokens",
    "preemptions",
    "itl_max",
)
#: Summary figures that sum the step log's durations: equal to 1e-12 relative (see the docstring).
FROM_THE_LOG = ("busy_fraction", "mean_step_time")


@dataclass(frozen=True)
class Exponential(ExponentialStepTime):
    """``ExponentialStepTime``, counting the draws put back (``exercised`` reports them)."""

    put_back_draws: list = field(default_factory=list, init=False, compare=False, repr=False)

    def put_back(self, seconds) -> None:
        self.put_back_draws.append(len(seconds))
        super().put_back(seconds)


def profiled_without_decision_costs():
    """The shipped reference profile, less what it charges per decision rather than per pass
    (``batchsim.textbook``'s docstring): no gap between steps; a repeat's pass costs a step's."""
    model = load_step_time(PROFILE)
    return replace(model, step_gap=0.0, policy_gaps={}, repeat_extra=model.step_extra)


def step_time_of(rng: np.random.Generator):
    kind = rng.integers(7)
    if kind == 0:
        return ConstantStepTime(0.01)  # on the arrivals' grid when they are: ties at pass ends
    if kind == 1:
        return ConstantStepTime(float(rng.uniform(1e-3, 0.1)))
    if kind == 2:
        return Server.named().step_time  # the roofline of an A100 running Llama-3-8B
    if kind == 3:
        return profiled_without_decision_costs()  # its wake-up penalty is priced too
    if kind == 6:  # random: each run gets a generator in this state (``case``)
        seed = int(rng.integers(2**32))
        return Exponential(float(rng.uniform(1e-3, 0.1)), np.random.default_rng(seed))
    c = [float(rng.uniform(0, top)) for top in (0.03, 1e-4, 1e-3, 1e-5)]
    c[0] += 1e-3
    return LinearStepTime(*c, plan=str(rng.choice(["fused", "grouped", "paged"])))


def workload_of(rng: np.random.Generator) -> Workload:
    n = int(rng.integers(1, 25))
    if rng.random() < 0.25:  # on a grid of 10 ms, several at one instant
        arrivals = np.sort(rng.integers(0, 3 * n, n)) * 0.01
    else:
        gaps = rng.exponential(rng.uniform(0.002, 0.3), n)
        gaps[rng.random(n) < 0.2] = 0.0  # several at one instant
        arrivals = np.cumsum(gaps)
    return Workload.from_arrays(arrivals, rng.integers(1, 200, n), rng.integers(1, 40, n), "seeded")


def limits_of(rng: np.random.Generator) -> ServerLimits:
    # KV: none; tiny (most requests rejected); each request fits but a few together do not
    # (preemption, twice as often); roomy.
    mid = int(rng.integers(250, 700))
    kv = [None, int(rng.integers(20, 250)), mid, mid, int(rng.integers(700, 5000))][rng.integers(5)]
    context = int(rng.integers(60, 260)) if rng.random() < 0.15 else None
    step = int(rng.integers(40, 400)) if rng.random() < 0.15 else None
    return ServerLimits(kv_budget_tokens=kv, context_len=context, max_step_tokens=step)


def policies_of(name: str, rng: np.random.Generator):
    """(fast policy, textbook policy) with the same knobs."""
    if name == "taxi":
        return Taxi(), textbook.Taxi()
    if name == "static":
        b = int(rng.integers(1, 7))
        return Static(b), textbook.Static(b)
    if name == "dynamic":
        b, wait = int(rng.integers(1, 7)), float(rng.choice([0.0, 0.01, 0.1, 0.5]))
        return Dynamic(b, wait), textbook.Dynamic(b, wait)
    knobs = dict(
        max_seqs=int(rng.integers(1, 9)),
        max_batched_tokens=int(rng.integers(8, 400)),
        block_size=int(rng.choice([1, 2, 4, 16])),
        chunked_prefill=bool(rng.random() < 0.6),
        watermark=float(rng.choice([0.0, 0.01, 0.2])),
    )
    return Continuous(**knobs), textbook.Continuous(**knobs)


def drawn(seed: int, name: str):
    """Seed ``seed``'s workload, limits and step time (the same for every policy), and the fast
    and the textbook policy under ``name``, with the same knobs."""
    rng = np.random.default_rng([seed, 0])
    wl, limits, st = workload_of(rng), limits_of(rng), step_time_of(rng)
    knobs_rng = np.random.default_rng([seed, 1, list(textbook.POLICIES).index(name)])
    return (wl, limits, st, *policies_of(name, knobs_rng))


def case(seed: int, name: str):
    """Seed ``seed``'s case under ``name``: (the fast run, the textbook's, the textbook's policy,
    a label for a failure, the draws the fast run put back: a random model's passes cut off by
    an arrival)."""
    wl, limits, st, fast_policy, book_policy = drawn(seed, name)
    twin = copy.deepcopy(st)  # a random model's generator, in the same state for both runs
    fast = simulate(wl, fast_policy, st, limits=limits)
    book = textbook.simulate(wl, book_policy, twin, limits=limits)
    label = f"seed {seed}: {book_policy!r}, {limits}, {st!r}"
    return fast, book, book_policy, label, sum(getattr(st, "put_back_draws", ()))


def assert_same(fast, book, label: str = "") -> None:
    a, b = fast.records, book.records
    for name in PER_REQUEST:
        x, y = getattr(a, name), getattr(b, name)
        differs = x != y
        if x.dtype.kind == "f":
            differs &= ~(np.isnan(x) & np.isnan(y))
        if differs.any():
            i = int(np.flatnonzero(differs)[0])
            raise AssertionError(
                f"{label}: {name} of request {i}: fast {x[i]!r}, textbook {y[i]!r}"
            )
    assert a.rejected == b.rejected, f"{label}: rejected"
    for name in (
        "policy",
        "step_time",
        "kv_budget_tokens",
        "kv_peak_tokens",
        "preemptions",
        "workload",
    ):
        assert getattr(fast, name) == getattr(book, name), f"{label}: {name}"
    sa, sb = a.steps, b.steps
    reps = sa["repeat"]
    assert (sb["repeat"] == 1).all() and int(reps.sum()) == len(sb["repeat"]), label
    for name in ("batch_size", "prompt_tokens", "decode_rows", "padded_rows", "preempted"):
        assert np.array_equal(np.repeat(sa[name], reps), sb[name]), f"{label}: step log {name}"
    first = np.cumsum(reps) - reps  # the textbook's row of each fast row's first pass
    assert np.array_equal(sa["start"], sb["start"][first]), f"{label}: step starts"
    assert np.array_equal(sa["kv_in_use"], sb["kv_in_use"][first]), f"{label}: kv_in_use"
    if len(reps):
        np.testing.assert_allclose(
            np.add.reduceat(sb["duration"], first),
            sa["duration"],
            rtol=1e-9,
            err_msg=f"{label}: step durations",
        )
    s, t = summarize(fast), summarize(book)
    assert s.keys() == t.keys(), label
    for k in s:
        if k in FROM_THE_LOG and s[k] is not None:
            assert s[k] == pytest.approx(t[k], rel=1e-12), f"{label}: {k}"
        else:
            assert s[k] == t[k], f"{label}: {k}"


def exercised(fast, book, policy, put_back: int) -> set[str]:
    """The kinds of case one comparison put to the test (``PROMISED`` counts them)."""
    r, steps = book.records, book.records.steps
    tags = {"rejected"} if any(x is not None for x in r.rejected) else set()
    if put_back:
        tags.add("random runs cut")  # draws of passes an arrival cut off, put back
    if (fast.records.steps["repeat"] > 1).any():
        tags.add("runs of passes")  # the fast path priced several passes as one step
    if (
        fast.kv_budget_tokens is None
        and policy.name == "continuous"
        and ((steps["prompt_tokens"][1:] == 0) & (np.diff(steps["kv_in_use"]) > 0)).any()
    ):
        tags.add("no budget, rows grew a block")  # a decode pass's KV counts its new blocks
    if fast.preemptions:
        tags.add("preempted")
    if (steps["padded_rows"] > 0).any():
        tags.add("padded rows")
    if policy.name == "dynamic" and (r.start == r.arrival + policy.max_wait).any():
        tags.add("left on its deadline")
    if policy.name == "continuous":
        tags.add("chunked" if policy.chunked_prefill else "unchunked")
        if (steps["prompt_tokens"] == policy.budget).any():
            tags.add("token budget binds")
        served = r.prompt_tokens[~np.isnan(r.finish)]
        if policy.chunked_prefill and (served > policy.budget).any():
            tags.add("prompt split across passes")
    return tags


#: How many of the SEEDS must exercise each kind of case, per policy.
PROMISED = {
    "taxi": {"rejected": 50, "runs of passes": 300},
    "static": {"rejected": 50, "runs of passes": 300, "padded rows": 200},
    "dynamic": {
        "rejected": 50,
        "runs of passes": 300,
        "padded rows": 200,
        "left on its deadline": 200,
    },
    "continuous": {
        "rejected": 50,
        "runs of passes": 300,
        "preempted": 75,
        "chunked": 250,
        "unchunked": 150,
        "token budget binds": 100,
        "prompt split across passes": 100,
        "random runs cut": 25,
        "no budget, rows grew a block": 60,
    },
}


@pytest.mark.parametrize("name", list(textbook.POLICIES))
def test_the_textbook_gives_the_fast_paths_records(name):
    seen: dict[str, int] = {}
    for seed in SEEDS:
        fast, book, policy, label, put_back = case(seed, name)
        assert_same(fast, book, label)
        for tag in exercised(fast, book, policy, put_back):
            seen[tag] = seen.get(tag, 0) + 1
    short = {k: (seen.get(k, 0), n) for k, n in PROMISED[name].items() if seen.get(k, 0) < n}
    assert not short, f"{name}: too few cases of (seen, promised) {short}"


class Maintenance:
    """A process of the user's own, as lab 6 writes it: ``servers[0]`` stays up ``up`` seconds,
    goes down, and comes back ``down`` seconds later, for each ``(up, down)`` of ``windows``.
    With ``watch``, a second process that never ends looks at the server every 37 ms: the run
    ends when the server has served everyone, whatever a user's process still waits for.
    ``outages``: each (went down, came back) instant, as the run saw them."""

    def __init__(self, windows: list[tuple[float, float]], watch: bool) -> None:
        self.windows, self.watch = windows, watch
        self.outages: list[tuple[float, float]] = []

    def processes(self) -> list:
        return [self.outage, self.looks] if self.watch else [self.outage]

    def outage(self, env, servers):
        for up, down in self.windows:
            yield env.timeout(up)
            servers[0].go_down()
            went = env.now
            self.outages.append((went, math.inf))  # until it is back, if the run lasts that long
            yield env.timeout(down)
            servers[0].come_back()
            self.outages[-1] = (went, env.now)

    def looks(self, env, servers):
        while True:
            yield env.timeout(0.037)
            assert servers[0].down in (True, False)


def outages_of(rng: np.random.Generator, wl: Workload) -> list[tuple[float, float]]:
    """One to three outages over the arrivals' span, as (seconds up before, seconds down); one in
    ten lasts no time. Drawn from continuous distributions, they never fall at the very instant of
    an arrival or of a pass's end: there the order of the user's event and the server's is when
    SimPy scheduled each, and the fast path schedules a sleeping server's wake-up otherwise (an
    interrupt, or an event after the instant's others); ``batchsim.textbook.server`` says more.
    Nor is a server brought back and taken down at one instant: the fast path runs a step there
    (``test_back_and_down_at_one_instant_runs_nothing``)."""
    span = float(wl.arrivals[-1]) + 0.1
    windows = []
    for i in range(int(rng.integers(1, 4))):
        up = float(rng.uniform(0.0, span / 2))
        down = 0.0 if rng.random() < 0.1 else float(rng.exponential(0.3))
        windows.append((up if i == 0 else max(up, 1e-3), down))
    return windows


def outage_case(seed: int, name: str):
    """``case``, with an outage process of the user's (a ``Maintenance``) on both servers: (the
    fast run, the textbook's, a label, the fast run's ``Maintenance``, the textbook run's)."""
    wl, limits, st, fast_policy, book_policy = drawn(seed, name)
    rng = np.random.default_rng([seed, 2])
    windows, watch = outages_of(rng, wl), bool(rng.random() < 0.3)
    on_fast, on_book = Maintenance(windows, watch), Maintenance(windows, watch)
    twin = copy.deepcopy(st)
    fast = simulate(wl, fast_policy, st, limits=limits, processes=on_fast.processes())
    book = textbook.simulate(wl, book_policy, twin, limits=limits, processes=on_book.processes())
    label = f"seed {seed}: {book_policy!r}, {limits}, {st!r}, outages {windows}"
    return fast, book, label, on_fast, on_book


def outage_tags(book, maintenance: Maintenance) -> set[str]:
    """The kinds of outage one comparison put to the test (``OUTAGES_PROMISED`` counts them)."""
    steps, arrivals = book.records.steps, book.records.arrival
    starts, ends = steps["start"], steps["start"] + steps["duration"]
    tags = {"a process that never ends"} if maintenance.watch else set()
    for went, back in maintenance.outages:
        if ((starts < went) & (went < ends)).any():
            tags.add("down while a pass ran")
        elif (starts > went).any():
            tags.add("down between passes")  # asleep, with work to come
        if ((arrivals >= went) & (arrivals < back)).any():
            tags.add("arrived while down")
        if back == went:
            tags.add("back at once")
        if (starts == back).any():
            tags.add("a pass started as it came back")
    return tags


#: How many of the SEEDS must exercise each kind of outage, per policy (every policy the same).
#: ``compared``: cases compared (every one: none is set aside).
OUTAGES_PROMISED = {
    "compared": len(SEEDS),
    "down while a pass ran": 30,
    "down between passes": 75,
    "arrived while down": 75,
    "back at once": 15,
    "a pass started as it came back": 40,
    "a process that never ends": 30,
}


@pytest.mark.parametrize("name", list(textbook.POLICIES))
def test_an_outage_gives_the_fast_paths_records(name):
    seen: dict[str, int] = {}
    for seed in SEEDS:
        fast, book, label, on_fast, on_book = outage_case(seed, name)
        assert_same(fast, book, label)
        assert on_fast.outages == on_book.outages, label
        for tag in {"compared"} | outage_tags(book, on_book):
            seen[tag] = seen.get(tag, 0) + 1
    short = {k: (seen.get(k, 0), n) for k, n in OUTAGES_PROMISED.items() if seen.get(k, 0) < n}
    assert not short, f"{name}: too few cases of (seen, promised) {short}"


def run_with(processes, engine, arrival: float = 0.0):
    """One request (a 10-token prompt, 100 tokens out) at 10 ms a pass, with ``processes``."""
    wl = Workload.from_arrays([arrival], [10], [100])
    return engine(
        wl,
        make_policy("continuous") if engine is simulate else "continuous",
        ConstantStepTime(0.01),
        processes=processes,
    )


def down_between(*times):
    """A user's process: down at ``times[0]``, back at ``times[1]``, down at ``times[2]``, ...;
    two at one time, at one instant (no yield between)."""

    def process(env, servers):
        for i, t in enumerate(times):
            if t > env.now:
                yield env.timeout(t - env.now)
            servers[0].come_back() if i % 2 else servers[0].go_down()

    return process


def test_go_down_lets_the_pass_running_end_and_come_back_decides_at_once():
    res = run_with([down_between(0.255, 1.0)], textbook.simulate)
    starts = res.records.steps["start"]
    assert not ((starts > 0.255) & (starts < 1.0)).any()
    assert (starts == 1.0).any()  # back at 1.0 s, it runs a pass at once
    # The pass running at 0.255 s ends at 0.26 s with its token: 26 made, 74 from 1.0 s.
    assert res.records.finish[0] == pytest.approx(1.0 + 74 * 0.01)
    assert res.records.itl_max[0] == pytest.approx(1.0 - 0.26 + 0.01)


def test_go_down_ends_a_priced_run_after_the_pass_running():
    process = down_between(0.255, 1.0)
    assert_same(run_with([process], simulate), run_with([process], textbook.simulate))


def test_back_and_down_at_one_instant_runs_nothing():
    # Down before the request comes at 0.2 s; back and down again at 0.5 s; back at 0.8 s.
    res = run_with([down_between(0.105, 0.5, 0.5, 0.8)], textbook.simulate, arrival=0.2)
    assert res.records.steps["start"][0] == 0.8


def test_back_and_down_at_one_instant_runs_nothing_on_the_fast_path_too():
    res = run_with([down_between(0.105, 0.5, 0.5, 0.8)], simulate, arrival=0.2)
    assert res.records.steps["start"][0] == 0.8


def test_a_server_never_brought_back_is_an_error_not_a_hang():
    def down_for_good(env, servers):
        yield env.timeout(0.1)
        servers[0].go_down()

    with pytest.raises(RuntimeError, match="went down and nothing brings it back"):
        run_with([down_for_good], textbook.simulate)


def test_the_comparison_sees_one_ulp():
    fast, book, _, label, _ = case(3, "continuous")
    assert_same(fast, book, label)
    i = int(np.flatnonzero(~np.isnan(book.records.finish))[0])
    book.records.finish[i] = math.nextafter(book.records.finish[i], math.inf)
    with pytest.raises(AssertionError, match="finish"):
        assert_same(fast, book, label)


def test_same_seed_same_records_another_seed_others():
    def run(seed: int):
        wl = make_workload(Poisson(8.0), Uniform(4, 120), Uniform(1, 30), n=40, seed=seed)
        return textbook.simulate(
            wl,
            "continuous",
            LinearStepTime(0.01, 1e-5, 3e-4, 1e-7),
            kv_budget_tokens=300,
            max_seqs=4,
            block_size=4,
        )

    first, again, other = run(11), run(11), run(12)
    assert_same(first, again, "same seed")
    assert first.preemptions > 0  # the run compared is one with something to get wrong
    assert not np.array_equal(first.records.finish, other.records.finish)


def test_a_gap_between_passes_is_paid_every_pass_in_the_textbook():
    # The documented difference: the textbook decides before every pass and pays the step gap
    # each time; the fast path decides a run of decode passes at once and pays it once a run.
    wl = Workload.from_arrays([0.0], [10], [10])
    st = LinearStepTime(0.01, step_gap=0.001)
    fast, book = simulate(wl, Continuous(), st), textbook.simulate(wl, "continuous", st)
    assert list(fast.records.steps["repeat"]) == [1, 9]  # the prefill, then nine decodes at once
    assert book.records.finish[0] - fast.records.finish[0] == pytest.approx(8 * 0.001)


def test_knobs_by_name_take_the_fast_paths_defaults():
    for name in textbook.POLICIES:
        assert repr(textbook.make_policy(name)) == repr(make_policy(name))
    # One set of knobs for every policy: each takes its own.
    assert repr(textbook.make_policy("static", max_batch=4, max_seqs=2)) == "Static(max_batch=4)"


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda wl, st: textbook.simulate([1, 2], "taxi", st), "workload"),
        (lambda wl, st: textbook.simulate(wl, "bus", st), "policy"),
        (lambda wl, st: textbook.simulate(wl, Taxi(), st), "policy"),  # the fast path's policy
        (lambda wl, st: textbook.simulate(wl, "taxi", 0.01), "step_time"),
        (lambda wl, st: textbook.simulate(wl, "static", st, max_batch=0), "max_batch"),
        (lambda wl, st: textbook.simulate(wl, "dynamic", st, max_wait=-1), "max_wait"),
        (lambda wl, st: textbook.simulate(wl, "continuous", st, block_size=2.5), "block_size"),
        (
            lambda wl, st: textbook.simulate(wl, "continuous", st, chunked_prefill="no"),
            "chunked_prefill",
        ),
        (lambda wl, st: textbook.simulate(wl, "continuous", st, max_seq=4), "max_seq"),
        (lambda wl, st: textbook.simulate(wl, "continuous", st, scheduler="vllm-v1"), "scheduler"),
        (lambda wl, st: textbook.simulate(wl, textbook.Taxi(), st, max_batch=2), "knobs"),
        (lambda wl, st: textbook.simulate(wl, "taxi", st, kv_budget_tokens=-5), "kv_budget_tokens"),
        (lambda wl, st: textbook.simulate(wl, "taxi", st, limits=1000), "limits"),
        (lambda wl, st: textbook.Continuous(watermark=1.5), "watermark"),
        (lambda wl, st: textbook.simulate(wl, "taxi", st, processes=print), "processes"),
        (
            lambda wl, st: textbook.simulate(wl, "taxi", st, processes=[lambda env, servers: 1]),
            "process",
        ),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(call, field):
    wl = Workload.from_arrays([0.0, 0.1], [5, 5], [3, 3])
    with pytest.raises(ValueError, match=field):
        call(wl, ConstantStepTime(0.01))


def test_the_reading_example_runs():
    import doctest

    assert doctest.testmod(textbook).failed == 0
