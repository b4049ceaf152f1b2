"""batchsim's top docstring maps the files one simulated step runs through: the map must stay true.

A continuous run of 300 requests (about 800 steps) is traced with ``sys.setprofile``. A step is
what the server's process does, from asking the policy to reporting the outcome: every batchsim
file called from inside ``ServerProcess.serve`` about once a step or more (90 % of the steps'
count: the recorder and the fold are called once per step that produced tokens) is a file of the
step's path, as is the server's own file, and those are exactly the files the map names. The
arrivals process (the workload, the router's hand-over, the limits a request is checked against)
is not a step; nor is what the server does once a request (its progress bar). A new file in the
path, or one the path no longer needs, fails here.
"""

from __future__ import annotations

import collections
import re
import sys

import batchsim
from batchsim import LogNormal, Poisson, Uniform, make_policy, make_workload, simulate
from batchsim.cli.options import DEFAULT_STEP_TIME
from batchsim.core.server import ServerProcess

SERVE = ServerProcess.serve.__code__  # the server's process: a step runs inside it


def _mapped() -> list[str]:
    block = batchsim.__doc__.split("in the order it runs", 1)[1]
    return re.findall(r"^    ((?:core|sim|machine)/[\w/]+\.py)", block, flags=re.M)


def test_the_map_names_the_files_a_step_runs_through():
    wl = make_workload(Poisson(5.0), Uniform(32, 512), LogNormal(128, 96), n=300, seed=1)
    calls: collections.Counter[str] = collections.Counter()

    def in_server(frame) -> bool:
        while frame is not None:
            if frame.f_code is SERVE:
                return True
            frame = frame.f_back
        return False

    def profile(frame, event, arg):
        if event == "call" and "/batchsim/" in frame.f_code.co_filename and in_server(frame):
            calls[frame.f_code.co_filename.replace("\\", "/").split("/batchsim/")[-1]] += 1

    sys.setprofile(profile)
    try:
        res = simulate(wl, make_policy("continuous"), DEFAULT_STEP_TIME)
    finally:
        sys.setprofile(None)
    steps = len(res.records.steps["start"])
    # so a file called once per request stays under the threshold
    assert steps > 2.5 * len(wl.requests)
    on_path = {f for f, n in calls.items() if n >= 0.9 * steps}
    # The server's own file is on the path whether or not its loop calls a function of that file
    # once a step (a lone server's loop runs each step in its own frame:
    # ``ServerProcess._serve_alone``).
    on_path.add(SERVE.co_filename.replace("\\", "/").split("/batchsim/")[-1])
    mapped = set(_mapped())
    assert mapped == on_path, (
        f"the map in batchsim/__init__.py names {sorted(mapped - on_path)} that a step no longer "
        f"runs through, and misses {sorted(on_path - mapped)}"
    )
    # continuous.py appears twice: deciding, then accounting
    assert len(mapped) == len(_mapped()) - 1


def test_the_map_counts_its_files():
    words = {"Twelve": 12, "Eleven": 11, "Thirteen": 13, "Ten": 10, "Nine": 9, "Eight": 8}
    said = re.search(r"\n(\w+) files[ ;]", batchsim.__doc__).group(1)
    assert words[said] == len(set(_mapped()))
