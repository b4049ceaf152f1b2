"""Write the course's notebooks from one description, so all eight keep one shape.

Every notebook opens with what the student will learn, has one cell tagged
``parameters`` (CI overrides it to run small), shows the slider panel of
``batchsim.teach.widgets`` (which calls ``batchsim.teach.lessons`` and draws the
lesson's figure once, beside its sliders), and ends with questions. The student
material never points at the answers: those are in the teacher's edition. The notebooks hold no
logic: every computation is a package function the tests also call.

    python notebooks/build.py           # (re)write notebooks/*.ipynb, without outputs
    python notebooks/build.py --check   # exit 1 if a committed notebook differs from this file
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import v4

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Notebook:
    file: str
    title: str
    learn: tuple[str, ...]
    parameters: str
    cells: tuple[tuple[str, str], ...]  # ("md" | "code", source)
    questions: tuple[str, ...]
    course: str = ""  # the lesson this notebook goes with

    def build(self) -> nbformat.NotebookNode:
        nb = v4.new_notebook()
        nb.metadata = {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        }
        stem = self.file.split("_")[0]
        cells = []

        def add(kind: str, src: str, tags: tuple[str, ...] = ()) -> None:
            src = src.strip("\n")
            cell = v4.new_markdown_cell(src) if kind == "md" else v4.new_code_cell(src)
            cell["id"] = f"nb{stem}-{len(cells):02d}"
            if tags:
                cell["metadata"]["tags"] = list(tags)
            cells.append(cell)

        intro = [f"# {self.title}", "", "**What you will learn**", ""]
        intro += [f"- {item}" for item in self.learn]
        if self.course:
            intro += ["", f"Goes with {self.course}."]
        add("md", "\n".join(intro))
        add(
            "code",
            "# Parameters: CI runs this notebook small by overriding this cell.\n"
            + self.parameters.strip(),
            ("parameters",),
        )
        for kind, src in self.cells:
            add(kind, src)
        qs = ["## Questions to think about", ""] + [
            f"{i}. {q}" for i, q in enumerate(self.questions, 1)
        ]
        qs += [
            "",
            "Write your answers down before you discuss them: your teacher goes through them in "
            "class.",
        ]
        add("md", "\n".join(qs))
        nb.cells = cells
        return nb


IMPORTS = """
%matplotlib inline
from batchsim.teach import lessons, widgets
"""
# Notebook 7 runs a real model: its lesson and panel are realrun's (batchsim never imports realrun).
REAL_IMPORTS = """
%matplotlib inline
from realrun.classroom import lesson, widgets
"""


def _std(panel: str, before: str, between: str) -> tuple[tuple[str, str], ...]:
    """The usual body: a story, the imports, the slider panel (its figure and table at the starting
    values the story describes, drawn once), then what to try."""
    return (
        ("md", before),
        ("code", IMPORTS),
        ("code", f"panel = widgets.{panel}\npanel"),
        ("md", between),
    )


NOTEBOOKS: list[Notebook] = [
    Notebook(
        file="01_why_batch.ipynb",
        title="1. Why batch? The taxi, the bus and the laundromat",
        course="lesson 1, `course/lessons/01-taxi-and-bus.md`",
        learn=(
            "why a GPU that serves requests one at a time (a taxi) runs out of capacity long "
            "before it runs out of work,",
            "how a batch (a bus, a washing machine holding eight loads) multiplies throughput and "
            "divides the cost per request,",
            "what the bus costs the passenger: waiting for it to fill, and the long tail (p99) of "
            "that wait,",
            "why a timetable (leave when full *or* after a maximum wait) keeps most of the gain "
            "and little of the wait.",
        ),
        parameters="REQUESTS = 400  # requests per simulation\nSEED = 0",
        cells=_std(
            "why_batch_ui(requests=REQUESTS, seed=SEED)",
            """
A laundromat's washing machine takes 40 minutes whether it holds one load or eight. Run it for each
customer's single load and it serves 1.5 customers an hour; wait until eight loads are in and it
serves twelve. An inference server is that machine: each forward pass of the model reads all of its
weights from memory once (16 GB for Llama-3-8B), whether it computes the next token of one request
or of sixty-four. The taxi (one request per pass) pays that fixed cost for every token of every
request; the bus shares it among everyone aboard.

The panel below simulates one stream of requests, arriving at random at 8 per second, served three
ways: the taxi, a bus that leaves only when its 16 seats are full, and a bus with a timetable that
leaves when full or when its first passenger has waited 0.2 s.""",
            """
**Your turn.** Move the sliders (the figure updates when you let go). Start with a low arrival rate
(1 request/s) and raise it: find where the taxi stops keeping up (its throughput flattens while
arrivals keep rising, and its latency explodes). Then change the seats on the bus and the timetable,
and the price of the GPU. Read the notes under the table: a short run's start can lower a number, and
they say when it does.""",
        ),
        questions=(
            "At what arrival rate does the taxi stop keeping up? Why there (hint: the notes say "
            "how long one ride takes)?",
            "At 1 request/s, which policy has the worst mean latency, and why? What does the "
            "timetable fix?",
            "Try 4, 16 and 64 seats at 30 requests/s, then at 2 requests/s. When does a bigger bus "
            "help, and when does it hurt? Look at throughput, p99 and cost.",
            "The busy column shows the share of time the GPU computes. The taxi is always busy; "
            "why is its cost per request still the highest?",
            "A manager says: 'batching is 10x cheaper, so always batch 64'. Under which traffic is "
            "that wrong?",
        ),
    ),
    Notebook(
        file="02_static_dynamic_continuous.ipynb",
        title="2. Static, dynamic and continuous batching",
        course="lesson 3, `course/lessons/03-static-dynamic-continuous.md`",
        learn=(
            "how the bus that waits for N (static), the bus with a timetable (dynamic, as in "
            "Triton or Ray Serve) and the bus that never stops (continuous, as in Orca and vLLM) "
            "decide who rides when,",
            "why padded batches waste work when answers have different lengths (a 5-token answer "
            "rides until the 250-token one is done),",
            "how to read a latency distribution (CDF): the median, the tail, and where each policy "
            "sits,",
            "which policy fits which service: an offline job, a high-volume API, an interactive "
            "chat, a quiet internal tool,",
            "why one long prompt (prefill) can stall every running request's next token (decode), "
            "and how chunked prefill spreads it out.",
        ),
        parameters="REQUESTS = 300\nSHOW = 40  # requests drawn in the timeline\nSEED = 0",
        cells=_std(
            "policies_ui(requests=REQUESTS, show=SHOW, seed=SEED)",
            """
The timeline on the left is the bus stop: each line is a request, grey while it waits at the stop,
coloured while it rides; requests that boarded together share a colour, and the black dot is the
moment its first token was produced. With a padded batch (static, dynamic, and the taxi, which is a
batch of one) everyone gets off together, when the longest answer is done, exactly as Hugging Face
`generate()` returns a batch. With continuous batching every request boards at the next step after it
arrives and leaves the step its own answer ends.

The right panel is the cumulative distribution of end-to-end latency: the further left and the
steeper, the better. Where a curve crosses the dotted line is its p99.""",
            """
**Your turn.** Pick each policy in the dropdown and read its timeline. Then raise the load until the
padded policies fall behind, and find the load where continuous batching does too.""",
        )
        + (
            (
                "md",
                """
## Prefill and decode: the long prompt

A request is served in two phases. **Prefill** computes the whole prompt in one pass and produces the
first token: thousands of tokens at once, compute-bound, so it sets the time to first token.
**Decode** then produces one token per pass for every running request: memory-bound, so it sets the
time per token. In continuous batching both share the same steps, so a newcomer's prefill runs inside
the step that is everyone else's next token.

Below, 32 chats are decoding when someone pastes an 8,192-token document. Prefilled whole, it makes
one step as long as the prefill itself, and every chat's next token waits for it. With **chunked
prefill** (vLLM, Sarathi) the prompt goes through 512 tokens per step, beside the decodes.""",
            ),
            ("code", "stall = widgets.prefill_stall_ui()\nstall"),
            (
                "md",
                """
**Your turn.** Make the prompt longer, the chunks smaller and larger, and add running requests. Which
gap would a chat user notice? What does chunking cost the person who pasted the document?""",
            ),
        ),
        questions=(
            "In the dynamic timeline, why do some batches leave with fewer than 16 requests? What "
            "sets when they leave?",
            "The `padded` column is the share of decode rows that compute nothing useful. Where "
            "does it come from, and why is it 0 for continuous batching?",
            "Continuous batching has the smallest mean batch at low load, yet the best latency. "
            "Why is a small batch not a problem here?",
            "At what load does each policy stop keeping up? Order them and explain the order.",
            "Which policy would you choose for (a) a nightly job summarising a million documents, "
            "(b) a chat assistant, (c) an internal tool used ten times an hour? Why?",
            "In the second panel, why does one long prompt stall *every* running request, and what "
            "does chunked prefill trade to avoid it? Which chunk size would you pick for a chat "
            "service with a 100 ms per token SLO?",
        ),
    ),
    Notebook(
        file="03_memory.ipynb",
        title="3. Memory: the KV cache and the wall",
        course="lesson 5, `course/lessons/05-kv-cache-memory.md`",
        learn=(
            "what the KV cache is and how many bytes each token of context costs (2 x layers x KV "
            "heads x head size x bytes per number),",
            "why long contexts cap the batch: the memory wall, batch x context <= KV budget,",
            "how padded batches reserve memory up front while continuous batching allocates blocks "
            "as tokens arrive (PagedAttention), and what preemption costs when the blocks run out,",
            "why grouped-query attention (Llama-3, Mistral) makes room for four times the batch of "
            "Llama-2.",
        ),
        parameters="REQUESTS = 96  # the burst of identical requests",
        cells=_std(
            "memory_ui(requests=REQUESTS)",
            """
Every token a request has seen leaves a key and a value in every layer of the model: the KV cache.
For Llama-2-7B in fp16 that is 2 x 32 layers x 32 heads x 128 x 2 bytes = 512 KiB per token, so a
request with 1,536 tokens of context holds 0.8 GB. The GPU's memory holds the weights first; the
cache gets what is left, and the batch can only be as big as the number of such requests that fit.

Below, a burst of identical requests (1,024 tokens in, 512 out) arrives at once, as in an offline
job, and meets a KV cache of 8 GB. The static batch asks for 32 rows; memory allows far fewer.""",
            """
**Your turn.** Grow and shrink the KV budget and the context. Find the budget where memory stops being
the limit for 32 rows. Then switch the model to `llama-3-8b` (8 KV heads instead of 32) and see what
happens to the wall.""",
        ),
        questions=(
            "Work out by hand how many 1,536-token requests fit in 8 GB for Llama-2-7B, and check "
            "the notes.",
            "Continuous batching ran more rows at once than the static batch on the same memory. "
            "Where did the extra room come from?",
            "What is a preemption, what does it cost, and why does continuous batching preempt "
            "while the static batch never does?",
            "With `llama-3-8b` the wall moves. By how much, and which line of the model's shape "
            "explains it?",
            "An A100-80GB serves Llama-2-7B (13.5 GB of weights). With 90 % of memory usable, how "
            "large a batch of 4,096-token conversations fits? Is that enough to reach the "
            "roofline's knee (notebook 5)?",
        ),
    ),
    Notebook(
        file="04_cost.ipynb",
        title="4. Cost: dollars per request and per million tokens",
        course="lesson 6, `course/lessons/06-cost.md`",
        learn=(
            "how a GPU rented by the hour turns into dollars per request: $/hour / (3600 x "
            "requests per second),",
            "how batching divides that cost, and why the saving flattens,",
            "to check a cost claim with one multiplication: the seed material's '10 RPS = "
            "$0.10/request' implies a GPU costing $3,600 an hour,",
            "why $/1M tokens is the figure API providers quote.",
        ),
        parameters="REQUESTS = 256  # the backlog served at each batch size\nFLEET_REQUESTS = 600  "
        "# the traffic each fleet serves",
        cells=_std(
            "cost_ui(requests=REQUESTS)",
            """
A rented GPU costs the same per hour busy or idle, so the cost of a request is the hourly price
divided by how many requests the GPU finishes in an hour. Here a backlog of identical requests (256
tokens in, 128 out) keeps the GPU busy, and is served in static batches of 1, 2, 4, ... 32. The
price is the catalog's *assumed* on-demand price for one GPU (early 2026); prices differ between
providers by two or three times, so change it to yours.

The project's seed material claims: "Without batching: 1 GPU serves 10 RPS = $0.10/request. With
batching (size=32): 1 GPU serves 100 RPS = $0.01/request. Savings: 10x." The ratio is plausible;
now multiply: 10 requests/s x 3,600 s x $0.10 = $3,600 for one GPU-hour.""",
            """
**Your turn.** Pick other GPUs (their catalog price comes with them), change the price, and move the
batch size. Compare the saving from batching with the difference between GPUs.""",
        )
        + (
            (
                "md",
                """
## More buses, or bigger buses?

When traffic grows, one answer is more GPUs behind a router (a *fleet*); another is bigger batches
on the GPUs you have. Below, the same traffic meets three fleets: N GPUs each running batches of up
to B, one GPU running batches of N x B (the same seats, one bus), and N taxis. Every GPU is paid by
the hour, busy or idle. The router decides which GPU takes each request as it arrives:
*least-loaded* picks the one holding the fewest requests, *least-kv* the one with the least KV cache
in use, *round-robin* takes turns, *random* rolls a die. The right-hand chart shows how the router
split the requests over the fleet.""",
            ),
            ("code", "fleet_panel = widgets.fleet_ui(requests=FLEET_REQUESTS)\nfleet_panel"),
            (
                "md",
                """
**Your turn.** Move the number of GPUs and the batch per GPU, and compare the bill and the p99 of the
fleet with the one big bus. Raise the arrival rate, one request/s at a time, until the one GPU's p99
is clearly worse than the fleet's. Switch the router to random, then round-robin, and watch the split
and the p99.""",
            ),
        ),
        questions=(
            "What price per GPU-hour do the claim's figures imply for the batched case (100 RPS at "
            "$0.01)? Is the claim consistent with itself?",
            "On the A100 here, how many times cheaper is batch 32 than batch 1? Why is it more "
            "than the claim's 10x, and why does the curve flatten at large batches?",
            "A T4 costs a fifth of an A100-80GB per hour. Is it cheaper per request for this "
            "model? What limits it?",
            "These runs keep the GPU busy. What happens to $/request at 2 requests/s of real "
            "traffic (notebook 1)?",
            "An API charges $0.20 per million output tokens for an 8B model. With the numbers "
            "here, is that price above or below the cost of the GPU?",
            "At 2 requests/s, four GPUs with batches of 8 against one GPU with batches of 32: "
            "which costs less per token, and by how much? Is the one GPU's p99 much worse? At what "
            "arrival rate does that change?",
            "With 4 GPUs at 2 requests/s, compare the four routers on p99; then at 16 requests/s. "
            "When does the router matter, and why does least-kv do worst of all at the higher rate?",
        ),
    ),
    Notebook(
        file="05_roofline.ipynb",
        title="5. The roofline: why GPUs want batches",
        course="lesson 2, `course/lessons/02-why-gpus-want-batches.md`",
        learn=(
            "that a decode step is limited either by memory bandwidth (reading the weights and the "
            "KV cache) or by arithmetic (FLOPs), whichever is slower, and that a prefill is "
            "compute-bound from the start,",
            "why, at small batches, adding requests costs almost nothing: the weights are read "
            "once per step for everyone,",
            "where the knee is (the batch at which the step turns compute-bound) for a GPU and a "
            "model, and why long contexts move it,",
            "how to estimate tokens per second for a GPU from its datasheet.",
        ),
        parameters="GPU = 'A100-80GB'\nMODEL = 'llama-3-8b'",
        cells=_std(
            "roofline_ui(gpu=GPU, model=MODEL)",
            """
Generating one token for one request with Llama-3-8B multiplies every one of its 8 billion weights
once: 16 GFLOP. An A100 does 312 TFLOP/s, so that is 0.05 ms of arithmetic. But the weights (16 GB
in fp16) must come from memory at 2 TB/s: 8 ms. The GPU spends 99 % of the step waiting for memory.
Sixty-four requests in the same step need the weights read *once*, and do 64 times the arithmetic,
still far from the compute roof. This is the whole reason batching pays.

The model below is the roofline: step time = max(compute, memory) + a small fixed overhead, with
60 % of peak FLOP/s and 80 % of peak bandwidth reached in practice (assumptions stated in
`batchsim/machine/roofline.py`).

That is the *decode* phase: one new token per request per step. The third panel is the other phase,
*prefill*: a prompt's tokens are all computed in one pass, so a single 512-token prompt already does
512 tokens of arithmetic per weight read: a prefill is compute-bound from the start, a decode step
only at the knee.""",
            """
**Your turn.** Move the batch size and the context, and change GPU and model. Find the knee on a T4,
an A100 and an H100, for `gpt2` and for `llama-3-8b`.""",
        ),
        questions=(
            "At batch 1 the step is memory-bound. Estimate its time by hand from the weight bytes "
            "and the bandwidth, and compare with the figure.",
            "Why does the knee move to larger batches when each row has more cached context? Can "
            "it disappear?",
            "An H100 has about 3x the FLOP/s of an A100 but only 1.6x the bandwidth. What does "
            "that do to the knee, and to tokens/s at batch 1?",
            "Past the knee, tokens/s flattens. What limits the batch before the knee is even "
            "reached (notebook 3)?",
            "For `gpt2` on an A100 the knee is at a similar batch as for an 8B model. Why does the "
            "model size hardly move it?",
            "From how many prompt tokens is a prefill compute-bound? Compare with the decode knee "
            "at no context, and explain why the two numbers are (nearly) the same.",
        ),
    ),
    Notebook(
        file="06_theory.ipynb",
        title="6. Theory meets simulation",
        course="lesson 4, `course/lessons/04-throughput-latency-slo.md`",
        learn=(
            "that a server taking one request at a time is the textbook M/D/1 queue, and that its "
            "mean wait rho S / (2 (1 - rho)) explodes as the load approaches 1,",
            "that a bus waiting for N passengers makes each wait (N - 1) / (2 lambda) on average, "
            "however fast the GPU,",
            "how to check a simulator against theory, and why one run is not enough: replications "
            "and confidence intervals,",
            "that utilisation close to 100 % and low latency cannot go together.",
        ),
        parameters="REQUESTS = 2000  # per replication\nREPLICATIONS = 10\nSEED = 0",
        cells=_std(
            "theory_ui(requests=REQUESTS, seed=SEED, replications=REPLICATIONS)",
            """
To test a simulator, give it a case whose answer is known. A taxi whose every ride takes exactly
20 ms, with requests arriving at random (Poisson), is the M/D/1 queue: Poisson arrivals (M), a
deterministic service (D), one server. Its mean wait before service is

$$W_q = \\frac{\\rho\\, S}{2(1-\\rho)}, \\qquad \\rho = \\lambda S.$$

A bus of N seats that waits to fill has a different, simpler law: the i-th passenger waits for the
N - i who come after, so the mean wait is (N - 1) / (2 lambda). Both formulas live in
`batchsim/theory.py`; the simulator runs the same policies that serve the other lessons.""",
            """
**Your turn.** Raise the load towards 0.95 and watch the wait (log scale). Drop the replications to 1,
then raise them to 50: how does the error bar change? Change the seats on the bus.""",
        ),
        questions=(
            "At load 0.5, 0.8 and 0.9, what does the M/D/1 formula give? By what factor does the "
            "wait grow from 0.8 to 0.9?",
            "Why is a single replication not enough to say the simulator agrees with theory? How "
            "does the 95 % interval shrink as you add replications?",
            "The bus-fill wait does not depend on the service time. Why? When would that stop "
            "being true?",
            "The simulated mean is computed from the start, with an empty queue. Would a warm-up "
            "period change the result at load 0.9? In which direction?",
            "A provider promises 'p99 under 100 ms at 95 % utilisation' on one GPU serving one "
            "request at a time. What does this notebook tell you about that promise?",
        ),
    ),
    Notebook(
        file="07_predicted_vs_measured.ipynb",
        title="7. Predicted vs measured: the simulator meets a real model",
        course="lesson 7, `course/lessons/07-predicted-vs-measured.md`, and `course/gpu-lab.md`",
        learn=(
            "how to measure step times of a real model (`python -m realrun profile`) and build the "
            "simulator's profiled step-time model from them (calibration),",
            "how to run the same policy objects on a real PyTorch model and on the simulator, on "
            "the identical workload, and compare throughput and latency,",
            "where the prediction errs and why (noise, warm-up, Python overhead, the shape of the "
            "cost),",
            "that on a laptop CPU the model is tiny and random (timing is real, the text is not), "
            "and that the same notebook runs GPT-2 on a classroom GPU.",
        ),
        parameters=(
            "MODEL = 'tiny-gpt2'  # offline default; 'gpt2' on a GPU machine with the weights "
            "cached\nDEVICE = 'cpu'       # 'cuda' in the GPU lab\nREQUESTS = 24\nSEED = 0"
        ),
        cells=(
            (
                "md",
                """
Everything so far was predicted. This notebook measures. `realrun` runs the very same policy
objects as the simulator on a real model: a GPT-2-shaped network with random weights that needs no
download (`tiny-gpt2`), on this machine's CPU. First it profiles the model (times forward passes of
several shapes) and builds the simulator's step-time model from the timings; then it serves one
small workload both ways, simulated with that calibration and for real, and puts the numbers side by
side, with where the error comes from: the cost model's price of the passes that ran, and a replay
that proves both clocks scheduled the same steps.""",
            ),
            ("code", REAL_IMPORTS),
            (
                "code",
                "summary, fig = lesson.predicted_vs_measured(policy='continuous', rate=4.0, "
                "requests=REQUESTS,\n                                            model=MODEL, "
                "device=DEVICE, seed=SEED)\nprint(summary['table'])\nfor note in "
                "summary.get('notes', []):\n    print(note)\nfig",
            ),
            (
                "md",
                """
**Your turn.** Choose a policy and a load and press *Run* (each run measures the real model for a
few seconds, so it waits for the button rather than following the sliders).""",
            ),
            (
                "code",
                "panel = widgets.measured_ui(requests=REQUESTS, model=MODEL, device=DEVICE, "
                "seed=SEED)\npanel",
            ),
        ),
        questions=(
            "Which figure does the simulator predict best, and which worst? Give one cause for the "
            "worst.",
            "Run the same policy twice. How much do the measured numbers move between runs? What "
            "does that say about a 5 % prediction error?",
            "The profile also fits a line: c0 + c1 x prompt tokens + c2 x rows + c3 x cached "
            "tokens. Which term dominates on this CPU? Which would dominate on a GPU (notebook 5)? "
            "Where does the line miss the grid?",
            "Does the ranking of the policies (which is fastest, which has the best p99) agree "
            "between predicted and measured, even where the numbers differ?",
            "What would you change in the profile to make the prediction better for long prompts?",
        ),
    ),
    Notebook(
        file="08_real_day.ipynb",
        title="8. A real day of traffic",
        course="lesson 8, `course/lessons/08-a-real-day.md`",
        learn=(
            "what real LLM traffic looks like: the Azure 2023 conversation trace, bursty arrivals, "
            "long prompts, answers from a few tokens to a thousand,",
            "how to state a service-level objective (SLO) for a chat service: time to first token "
            "and time per output token,",
            "how to choose a policy and a batch size that meet it, and what the choice costs,",
            "why a configuration that looks fine on average can fail its SLO for minutes at a time.",
        ),
        parameters=(
            "MINUTES = 5.0   # how much of the trace to replay\nTRACE = None    # None: the Azure "
            "trace that ships with batchsim; 'synthetic': a fit to it"
        ),
        cells=_std(
            "real_day_ui(minutes=MINUTES, trace=TRACE)",
            """
Microsoft Azure published the arrival times and token counts of an hour of requests to a
conversational LLM service in November 2023 (Patel et al., "Splitwise", ISCA 2024; CC-BY-4.0).
About 5 requests arrive per second; prompts average 1,155 tokens, answers 211, with a long tail. The
file ships with batchsim (`batchsim/traces/`, its attribution beside it), so every copy of this notebook
replays the same requests; the notes under the table say which traffic ran.

The SLO of a chat service: the first token within 2 s (the user sees something happen) and then at
most 100 ms per token (faster than reading speed). Below, five minutes of the trace go through all
four policies on one A100 serving Llama-3-8B.""",
            """
**Your turn.** You are the engineer on call. Pick the policy and the batch size you would deploy, for
this SLO, on this GPU. Then tighten the SLO, move the window to a busier part of the day, or try
another GPU.""",
        ),
        questions=(
            "Which policy meets the SLO, and with what smallest batch (max running requests)? What "
            "goes wrong below it?",
            "Why do the static and dynamic batches fail so badly on this trace, when they did well "
            "in notebook 1?",
            "Look at the TTFT-over-time panel at batch 32. The SLO holds for a while, then fails "
            "for minutes. What is happening in the queue?",
            "Cost: what does one request cost with your choice? How would you lower it without "
            "breaking the SLO?",
            "This trace was served by a fleet, not one GPU. How many A100s would you need for the "
            "whole hour at your configuration, and how would you check it with this package?",
        ),
    ),
]


def write(check: bool = False) -> int:
    stale = []
    for spec in NOTEBOOKS:
        path = HERE / spec.file
        text = nbformat.writes(spec.build()) + "\n"
        if check:
            if not path.is_file() or path.read_text() != text:
                stale.append(spec.file)
        else:
            path.write_text(text)
    if stale:
        print(
            "stale notebooks (run python notebooks/build.py): " + ", ".join(stale), file=sys.stderr
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--check",
        action="store_true",
        help="only check that the committed notebooks are up to date",
    )
    return write(p.parse_args(argv).check)


if __name__ == "__main__":
    sys.exit(main())
