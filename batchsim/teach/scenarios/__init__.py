"""Named scenarios: the stories of the course, each runnable with one command.

A scenario is a name, a one-line summary, a short story, and defaults for the
command-line knobs (any flag the user gives wins over the scenario's default).
Most scenarios run several policies on one identical workload and compare them;
a scenario may instead bring its own ``runner``. ``base`` holds the machinery,
``library`` the stories; importing this package registers them all.

    python -m batchsim scenarios           # list them
    python -m batchsim run taxi-vs-bus     # run one, print the table, write figures
"""

from . import fleet as _fleet  # noqa: F401 - registers the fleet scenario
from .base import (
    SCENARIOS,
    Run,
    Scenario,
    ScenarioReport,
    get_scenario,
    register,
    run_policies,
    run_set,
)
from .library import FLAGSHIP, SERVER, batch_capacity

__all__ = [
    "Scenario",
    "ScenarioReport",
    "SCENARIOS",
    "register",
    "get_scenario",
    "run_policies",
    "run_set",
    "Run",
    "FLAGSHIP",
    "SERVER",
    "batch_capacity",
]
