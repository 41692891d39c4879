"""Transactions on ``rmq.AsyncClient`` in its own terms: ``async with`` a transaction, and
an ``async def`` checker run by ``await client.run()`` (the behaviour suite,
test_transactions.py, runs every other promise on both clients)."""

from __future__ import annotations

import asyncio
import time

import pytest

import rmq
from rmq.errors import TransactionClosed

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_async_with_commits_on_exit_and_rolls_back_on_an_exception(redis_url: str) -> None:
    async with rmq.AsyncClient(redis_url) as client:
        await client.create_topic("orders")
        async with client.transaction("orders", id="kept") as tx:
            assert await tx.send_many([b"a", b"b"]) == 2
            assert await client.claim("orders") == []
        with pytest.raises(RuntimeError, match="the database refused"):
            async with client.transaction("orders", id="dropped") as failed:
                await failed.send(b"c")
                raise RuntimeError("the database refused")
        assert (tx.state, failed.state) == ("committed", "rolled_back")
        with pytest.raises(TransactionClosed):
            await client.transaction("orders", id="dropped").commit()
        assert sorted(m.body for m in await client.claim("orders")) == [b"a", b"b"]


async def test_an_async_checker_runs_in_the_runtime_until_cancelled(redis_url: str) -> None:
    async with rmq.AsyncClient(redis_url) as client:
        await client.create_topic("orders", check_after=0.05)
        await client.transaction("orders", id="crashed-after-its-commit").send(b"ship")
        await client.transaction("orders", id="never-committed").send(b"bill")
        asked: list[str] = []

        @client.checker("orders")
        async def committed(tx_id: str) -> bool:  # runs on the check-back's own loop
            asked.append(tx_id)
            return tx_id.startswith("crashed")

        running = asyncio.create_task(client.run())
        deadline = time.monotonic() + 30
        try:
            while await client.open_transactions("orders"):  # until the runtime closed both
                assert time.monotonic() < deadline, f"still open; asked {asked}"
                await asyncio.sleep(0.02)
        finally:
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
        assert sorted(asked) == ["crashed-after-its-commit", "never-committed"]
        assert [m.body for m in await client.claim("orders")] == [b"ship"]
