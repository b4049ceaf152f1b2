"""Who sent a request: a short id per client, for fairness (``--max-queue-per-client``) and the
record.

A client is its address by default (the host, without the port: a script opening many connections is
one client, and a script cannot pretend to be another machine on the room's network); with
``--client-by key``, its API key (``Authorization: Bearer KEY``), for a room where students share
one machine and each has a key of their own (a request with no key is then its address again). Not
by key by default: OpenAI's client needs some key, and a room where everyone leaves it "EMPTY" would
be one client, while a script rotating keys would be many. The id is a short hash of that, so the
record and the dashboard can show whose requests waited without printing anyone's key or address.
``--api-key`` works as ``vllm serve``'s: every ``/v1`` route needs ``Authorization: Bearer KEY``
with that key, compared in constant time; ``/health`` and ``/metrics`` stay open (a load balancer
and a scraper do not hold the key).
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import Request

from .protocol import RequestError

__all__ = ["client_id", "check_key"]


def _bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


def client_id(request: Request, by: str = "address") -> str:
    """Eight hex digits naming the client: its host, or with ``by`` "key" its bearer key when it
    sent one."""
    key = _bearer(request) if by == "key" else None
    who = f"key:{key}" if key else f"host:{request.client.host if request.client else '?'}"
    return hashlib.sha256(who.encode()).hexdigest()[:8]


def check_key(request: Request, api_key: str) -> None:
    """A 401 unless the request carries ``Authorization: Bearer`` with ``api_key``."""
    key = _bearer(request)
    if key is None or not hmac.compare_digest(key.encode(), api_key.encode()):
        raise RequestError(
            401,
            None,
            "missing or wrong API key: send the header Authorization: Bearer KEY",
            "AuthenticationError",
        )
