"""A shape of a few milliseconds (above ``--inline-ms``, under ``IDLE_INLINE``)
runs inline while the server is idle, a client waiting for each answer before
asking again (server/api/common.py ``ServerState.inline_ok``); when other queries
arrive closer together than its cost, or one is running, the pool runs it."""

from __future__ import annotations

import asyncio
import threading
import time

from server.api import common
from server.api.common import ServerState, query_shape
from server.settings import Settings


def _burn(seconds: float) -> None:  # costs are taken on the thread's CPU clock
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_idle_server_runs_a_few_ms_shape_inline():
    state = ServerState(Settings(inline_ms=1), database=None)
    main = threading.get_ident()
    where: list[bool] = []
    cost = 0.002
    assert cost < common.IDLE_INLINE

    def job():
        where.append(threading.get_ident() == main)
        _burn(cost)
        return 1

    heavy = query_shape("SELECT * WHERE { ?s <http://ex.org/p> ?o }")
    cheap = query_shape("ASK { <http://ex.org/a> ?p ?o }")

    async def serial(n: int) -> None:
        for _ in range(n):
            await state.run(job, heavy)
            await asyncio.sleep(cost * 1.5)  # the client reads the answer, then asks again

    async def crowded(n: int) -> None:
        for _ in range(n):
            for _ in range(3):  # other clients' cheap queries just before
                await state.run(lambda: 1, cheap)
            await state.run(job, heavy)

    async def go():
        await serial(2)
        assert where == [False, False]  # unknown shape: the pool until seen twice
        where.clear()
        await serial(3)
        assert where == [True, True, True]  # idle: inline although over --inline-ms
        where.clear()
        await crowded(3)
        assert where == [False, False, False]  # queries arriving close together: the pool
        where.clear()
        state.running += 1  # another query under way (e.g. in the pool)
        try:
            await serial(2)
        finally:
            state.running -= 1
        assert where == [False, False]

    asyncio.run(go())


def test_over_the_idle_bound_stays_in_the_pool():
    state = ServerState(Settings(inline_ms=1), database=None)
    main = threading.get_ident()
    where: list[bool] = []

    def job():
        where.append(threading.get_ident() == main)
        _burn(common.IDLE_INLINE * 1.4)
        return 1

    shape = query_shape("SELECT * WHERE { ?s <http://ex.org/q> ?o }")

    async def go():
        for _ in range(4):
            await state.run(job, shape)
            await asyncio.sleep(0.02)

    asyncio.run(go())
    assert where == [False] * 4


def test_new_constant_of_a_cheap_shape_is_probed_inline():
    """A text never seen whose shape with its IRIs blanked ran cheap (twice or more) is probed
    inline (server/api/common.py ``coarse_shape``): a lookup of ever new entities does not pay
    the pool's hop per entity. Once that coarse shape ran expensive, new constants go to the pool."""
    state = ServerState(Settings(inline_ms=5), database=None)
    main = threading.get_ident()
    where: list[bool] = []

    def job(cost: float):
        def run():
            where.append(threading.get_ident() == main)
            _burn(cost)
            return 1
        return run

    def shape(i: int) -> str:
        return query_shape(f"SELECT ?p ?o WHERE {{ <http://ex.org/e{i}> ?p ?o }}")

    other = query_shape("SELECT ?p ?o WHERE { ?s ?p <http://ex.org/e1> }")

    async def go():
        state.running += 1   # (not idle: only the shape's cost decides)
        try:
            await state.run(job(0.0), shape(0))
            assert where == [False]               # nothing known yet: the pool
            await state.run(job(0.0), shape(1))
            assert where == [False, False]        # the coarse shape seen once
            for i in range(2, 5):
                await state.run(job(0.0), shape(i))
            assert where[2:] == [True, True, True]   # new entities of a cheap shape: inline
            where.clear()
            await state.run(job(0.0), other)
            assert where == [False]               # another shape: not taught by these
            where.clear()
            await state.run(job(0.02), shape(5))  # an expensive entity (inline: its own cost unknown)
            await state.run(job(0.02), shape(6))
            await state.run(job(0.0), shape(7))
            assert where[-1] is False             # the coarse shape ran expensive: the pool
        finally:
            state.running -= 1

    asyncio.run(go())
