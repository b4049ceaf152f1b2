"""Many seeded workloads through the referee, configuration by configuration: ``scan``.

For each configuration of ``referee_workloads.CONFIGURATIONS``, ``workloads`` seeded random
workloads are scheduled by vLLM's ``Scheduler`` and by batchsim's policy, and a ``ScanRow``
counts the workloads and steps that differ, and how often each rule of vLLM's scheduler
decided something (so a configuration that agrees is known to have tested its rule):

- ``full_rows``: steps with ``max_seqs`` requests running;
- ``full_budget``: steps that spent all of ``max_batched_tokens``;
- ``shared_budget``: steps whose decodes and prompt chunks spent all of ``max_batched_tokens``
  together (where the textbook would have given the prompts the whole budget). A running
  request that sits a step out (rule 2 of ``vllm_v1``) never shows here: under FCFS the only
  request given part of what it needs is the last one scheduled, so the next step's running
  requests need no more than the budget; batchsim keeps the rule all the same, as vLLM does;
- ``preemptions``: requests preempted (and recomputed);
- ``chunked``: requests admitted with only part of their prompt.

From the command line, in the environment that has vLLM::

    python -m realrun.reference.vllm.referee_scan --workloads 100
    # the textbook policy: where and why it differs
    python -m realrun.reference.vllm.referee_scan --textbook-table
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from batchsim.core.errors import ConfigError

from .referee import POLICIES, RefereeConfig, StepView, Verdict, referee
from .referee_workloads import CONFIGURATIONS, random_workload

__all__ = ["ScanRow", "scan", "bites", "main"]

BITES = ("full_rows", "full_budget", "shared_budget", "preemptions", "chunked")


@dataclass(frozen=True)
class ScanRow:
    """One configuration's scan: workloads and steps, those that differ, and how often each rule
    bit."""

    name: str
    config: RefereeConfig
    workloads: int
    differing_workloads: int
    steps: int
    differing_steps: int
    last_token_preemptions: (
        int  # vLLM's (async): requests preempted with their last token in flight
    )
    batchsim_last_token_preemptions: (
        int  # the same, as batchsim's policy counted them in its decisions
    )
    bites: tuple[tuple[str, int], ...]
    first: Verdict | None  # the first workload that differs, for its report

    def line(self) -> str:
        bit = ", ".join(f"{k} {v}" for k, v in self.bites)
        return (
            f"{self.name:34s} {self.differing_workloads:4d} of {self.workloads} workloads, "
            f"{self.differing_steps:6d} of {self.steps:7d} steps differ; {bit}; last-token "
            f"preemptions {self.last_token_preemptions} (batchsim "
            f"{self.batchsim_last_token_preemptions})"
        )


def bites(
    views: Sequence[StepView], config: RefereeConfig, prompts: dict[int, int]
) -> dict[str, int]:
    """How often each rule decided something in vLLM's schedule (the counts of
    ``ScanRow.bites``)."""
    out = dict.fromkeys(BITES, 0)
    # not admitted yet: only a request's first admission says whether its prompt was cut
    first = set(prompts)
    for v in views:
        given = dict(v.tokens)
        out["full_rows"] += len(given) == config.max_seqs
        full = sum(given.values()) == config.max_batched_tokens
        out["full_budget"] += full
        out["shared_budget"] += full and 1 in given.values() and max(given.values()) > 1
        out["preemptions"] += len(v.preempted)
        out["chunked"] += sum(given[r] < prompts[r] for r in v.admitted if r in first)
        first -= set(v.admitted)
    return out


def scan(
    workloads: int = 20,
    max_requests: int = 200,
    policy: str = "vllm-v1",
    configurations: dict[str, RefereeConfig] | None = None,
    first_seed: int = 0,
) -> tuple[ScanRow, ...]:
    """Referee ``workloads`` seeded workloads (seeds ``first_seed``...) in every configuration."""
    if workloads < 1:
        raise ConfigError(f"workloads must be >= 1, got {workloads}")
    rows = []
    for name, config in (configurations or CONFIGURATIONS).items():
        n_bad = steps = bad_steps = late = our_late = 0
        first = None
        total = dict.fromkeys(BITES, 0)
        for seed in range(first_seed, first_seed + workloads):
            requests = random_workload(seed, config, max_requests)
            v = referee(requests, config, policy)
            steps += len(v.vllm)
            bad_steps += len(v.differences)
            late += len(v.last_token_preemptions)
            our_late += v.batchsim_last_token_preemptions
            if not v.agrees:
                n_bad += 1
                first = first or v
            for k, c in bites(v.vllm, config, {r.id: r.prompt_tokens for r in requests}).items():
                total[k] += c
        rows.append(
            ScanRow(
                name,
                config,
                workloads,
                n_bad,
                steps,
                bad_steps,
                late,
                our_late,
                tuple(total.items()),
                first,
            )
        )
    return tuple(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Print one line per configuration (and the first difference of each); 1 if any step
    differs."""
    ap = argparse.ArgumentParser(
        prog="python -m realrun.reference.vllm.referee_scan", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--workloads", type=int, default=20, help="seeded workloads per configuration (default 20)"
    )
    ap.add_argument(
        "--max-requests",
        type=int,
        default=200,
        help="the most requests in a workload (default 200)",
    )
    ap.add_argument(
        "--policy", choices=POLICIES, default="vllm-v1", help="batchsim's scheduler to referee"
    )
    ap.add_argument(
        "--textbook-table",
        action="store_true",
        help="print where and why the textbook continuous policy first differs from vLLM, as a "
        "table",
    )
    args = ap.parse_args(argv)
    try:
        if args.textbook_table:
            from .referee_table import markdown, textbook_table

            print(
                "Where the textbook continuous policy first differs from vLLM's scheduler "
                "(workloads, by reason):"
            )
            print(markdown(textbook_table(args.workloads, args.max_requests)))
            return 0
        rows = scan(args.workloads, args.max_requests, args.policy)
    except ConfigError as e:
        print(f"referee_scan: {e}", file=sys.stderr)
        return 2
    print(f"{args.policy} against vLLM's own scheduler, prefix caching off (vLLM's default is on):")
    for row in rows:
        print(row.line())
        if row.first is not None:
            print(f"  first: {row.first.first}".replace("\n", "\n  "))
    return 1 if any(r.differing_workloads for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
