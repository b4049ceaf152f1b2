"""Who a client is (``realrun.classroom.serve.clients``): by address by default, by key with
``--client-by key``."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")

from starlette.requests import Request  # noqa: E402

from realrun.classroom.serve.clients import check_key, client_id  # noqa: E402
from realrun.classroom.serve.protocol import RequestError  # noqa: E402


def _request(host: str, key: str | None = None) -> Request:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key is not None else []
    return Request(
        {
            "type": "http",
            "method": "POST",
            "path": "/v1/completions",
            "headers": headers,
            "client": (host, 50000),
        }
    )


def test_by_address_one_machine_is_one_client_whatever_key_it_sends():
    ids = {client_id(_request("10.0.0.5", key)) for key in ("a", "b", None)}
    assert len(ids) == 1 and len(ids.pop()) == 8
    assert client_id(_request("10.0.0.5")) != client_id(_request("10.0.0.6"))


def test_by_key_students_sharing_a_machine_are_told_apart_and_no_key_falls_back_to_the_address():
    a, b = (
        client_id(_request("127.0.0.1", "student-1"), "key"),
        client_id(_request("127.0.0.1", "student-2"), "key"),
    )
    assert a != b
    # the key, wherever it is sent from
    assert client_id(_request("10.0.0.9", "student-1"), "key") == a
    assert client_id(_request("127.0.0.1"), "key") == client_id(_request("127.0.0.1"))
    # The id names neither the key nor the address.
    assert "student" not in a and "127" not in client_id(_request("127.0.0.1"))


def test_the_key_is_checked_and_a_wrong_or_missing_one_is_a_401():
    check_key(_request("h", "room-7"), "room-7")
    for key in (None, "room-8", ""):
        with pytest.raises(RequestError) as e:
            check_key(_request("h", key), "room-7")
        assert e.value.status == 401
