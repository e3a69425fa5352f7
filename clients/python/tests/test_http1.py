"""The clients' HTTP/1.1 transports (async, then sync) against servers answering exactly what the test says:
chunked answers, answers read to the end, 1xx skipped, connections kept alive and dropped when the
server closed them, garbage decided by the fail mode, a pool of one connection shared in turn."""

from __future__ import annotations

import asyncio
import select
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from floodgate import AsyncFloodgate, Floodgate
from support import HANG_GUARD, RawServer, RunningFloodgate, wait_for

VERDICT = b'{"allowed":true,"retry_after_ms":null,"limits":[]}'


def answer(head: bytes, body: bytes = VERDICT) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + head + b"\r\n" + body


@pytest.fixture
def raw() -> Iterator[list[RawServer]]:
    made: list[RawServer] = []
    yield made
    for server in made:
        server.close()


def serve(raw: list[RawServer], answers: list[bytes | tuple[bytes, bool]]) -> RawServer:
    server = RawServer(answers)
    raw.append(server)
    return server


@pytest.mark.anyio
async def test_a_chunked_answer_with_trailers_is_read(raw: list[RawServer]) -> None:
    half = len(VERDICT) // 2
    chunked = b"%x\r\n%s\r\n%x;ext=1\r\n%s\r\n0\r\nx-trailer: 1\r\n\r\n" % (
        half,
        VERDICT[:half],
        len(VERDICT) - half,
        VERDICT[half:],
    )
    server = serve(raw, [answer(b"transfer-encoding: chunked\r\n", chunked)])
    async with AsyncFloodgate(server.url, deadline=5.0) as client:
        for _ in range(2):
            decision = await client.check({"user": "u1"})
            assert decision.status == 200 and decision.failure is None
    assert server.connections == 1


@pytest.mark.anyio
async def test_an_answer_without_a_length_is_read_to_the_end_and_its_connection_not_reused(
    raw: list[RawServer],
) -> None:
    server = serve(raw, [(answer(b"connection: close\r\n"), True)])
    async with AsyncFloodgate(server.url, deadline=5.0) as client:
        for _ in range(3):
            assert (await client.check({"user": "u1"})).failure is None
    assert server.connections == 3


@pytest.mark.anyio
async def test_informational_answers_are_skipped(raw: list[RawServer]) -> None:
    server = serve(raw, [b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"content-length: %d\r\n" % len(VERDICT))])
    async with AsyncFloodgate(server.url, deadline=5.0) as client:
        assert (await client.check({"user": "u1"})).failure is None


@pytest.mark.anyio
async def test_a_connection_the_server_closed_while_idle_is_not_reused(raw: list[RawServer]) -> None:
    # The server closes each connection right after its answer, without saying so in a header.
    server = serve(raw, [(answer(b"content-length: %d\r\n" % len(VERDICT)), True)])
    async with AsyncFloodgate(server.url, deadline=5.0) as client:
        assert (await client.check({"user": "u1"})).failure is None
        idle = client._transport._idle  # the connection back in the pool
        # Until the loop has read the server's close (the server sends nothing else).
        assert await asyncio.wait_for(idle[0].reader.read(1), HANG_GUARD) == b""
        assert (await client.check({"user": "u1"})).failure is None
    assert server.connections == 2


@pytest.mark.anyio
async def test_garbage_is_decided_by_the_fail_mode(raw: list[RawServer]) -> None:
    server = serve(raw, [(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", True)])
    async with AsyncFloodgate(server.url, deadline=5.0, fail_mode="closed", breaker=False) as client:
        decision = await client.check({"user": "u1"})
        assert not decision.allowed and decision.failure is not None
        assert client.stats().failed_closed == 1


@pytest.mark.anyio
async def test_a_pool_of_one_connection_serves_concurrent_calls_in_turn(server: RunningFloodgate, uid: str) -> None:
    async with AsyncFloodgate(server.url, deadline=5.0, max_connections=1) as client:
        decisions = await asyncio.gather(*(client.check({"suite": "tokens", "tenant": uid}) for _ in range(8)))
        assert all(d.status == 200 for d in decisions)
        assert len(client._transport._idle) == 1


# === the sync transport, the same answers ===


def test_sync_chunked_read_to_the_end_and_1xx(raw: list[RawServer]) -> None:
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(VERDICT), VERDICT)
    kept = serve(raw, [answer(b"transfer-encoding: chunked\r\n", chunked)])
    closing = serve(raw, [(answer(b"connection: close\r\n"), True)])
    informational = serve(
        raw, [b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n" + answer(b"content-length: %d\r\n" % len(VERDICT))]
    )
    for server, connections in ((kept, 1), (closing, 3), (informational, 1)):
        with Floodgate(server.url, deadline=5.0) as client:
            for _ in range(3):
                assert client.check({"user": "u1"}).failure is None
        assert server.connections == connections


def closed_by_the_server(sock: socket.socket) -> Callable[[], bool]:
    return lambda: bool(select.select([sock], [], [], 0)[0])


def test_sync_a_connection_the_server_closed_while_idle_is_not_reused(raw: list[RawServer]) -> None:
    server = serve(raw, [(answer(b"content-length: %d\r\n" % len(VERDICT)), True)])
    with Floodgate(server.url, deadline=5.0) as client:
        for _ in range(3):
            assert client.check({"user": "u1"}).failure is None
            # Until the server's close has reached this end (what the pool asks before reusing it).
            wait_for(closed_by_the_server(client._transport._idle[0].sock), "the server's close")
    assert server.connections == 3


def test_sync_garbage_is_decided_by_the_fail_mode(raw: list[RawServer]) -> None:
    server = serve(raw, [(b"HTTP/1.1 banana\r\n\r\n", True)])
    with Floodgate(server.url, deadline=5.0, fail_mode="closed", breaker=False) as client:
        decision = client.check({"user": "u1"})
        assert not decision.allowed and decision.failure is not None


def test_sync_threads_share_a_pool_of_one_connection(server: RunningFloodgate, uid: str) -> None:
    with Floodgate(server.url, deadline=5.0, max_connections=1) as client:
        with ThreadPoolExecutor(max_workers=4) as pool:
            decisions = list(pool.map(lambda _: client.check({"suite": "tokens", "tenant": uid}), range(12)))
        assert all(d.status == 200 for d in decisions)
        assert len(client._transport._idle) == 1
