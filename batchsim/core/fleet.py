"""A fleet: N servers behind a router, and its figures for the whole and for each server.

More buses or bigger buses? A fleet of N servers (``simulate(..., replicas=N, router=...)``
or ``drive`` with N policies) serves one stream of requests; each server has its own
policy instance, its own KV cache and its own step log, and a router (``core.router``)
picks the server of each request as it arrives. Its ``RunResult`` holds every request
(with the server it went to) and every step (with the server that ran it):

- ``summarize(result)`` gives the fleet's figures: throughput and latency over all
  requests, and ``busy_fraction`` as the share of server-time spent busy;
- ``replica_result(result, i)`` is server i's share, whose summary reads like any single
  server's; it is rented for the fleet's whole run, so its cost is its share of the bill;
- ``fleet_summaries`` gives both, and the bill is N x $/hour over the makespan.
"""

from __future__ import annotations

from dataclasses import replace

from .errors import check_at_most, check_int_at_least

__all__ = ["MAX_REPLICAS", "check_replicas", "replica_result", "fleet_summaries"]

#: The most servers a simulated fleet may have: far past any one deployment, inside what a run holds
#: (each server keeps its own policy and step log; a request's server is stored in 16 bits).
MAX_REPLICAS = 4096


def check_replicas(replicas) -> None:
    check_int_at_least("replicas", replicas, 1)
    check_at_most("replicas", replicas, MAX_REPLICAS, "servers")


def replica_result(result, i: int):
    """Server ``i``'s share of a fleet's result: its requests, its steps, its memory, the fleet's
    span."""
    n = result.replicas
    if not 0 <= i < n:
        raise IndexError(f"replica {i} of a fleet of {n}")
    if n == 1:
        return result
    meta = dict(result.meta)
    meta.update(replica=i, rented_until=result.makespan)
    return replace(
        result,
        records=result.records.for_replica(i),
        kv_peak_tokens=meta["replica_kv_peak"][i],
        preemptions=meta["replica_preemptions"][i],
        meta=meta,
        replicas=1,
    )


def fleet_summaries(result, slo=None, streaming: bool | None = None) -> tuple[dict, list[dict]]:
    """(the fleet's summary, one summary per server)."""
    from .metrics import summarize

    whole = summarize(result, slo, streaming)
    if result.replicas == 1:
        return whole, [whole]
    return whole, [
        summarize(replica_result(result, i), slo, streaming) for i in range(result.replicas)
    ]
