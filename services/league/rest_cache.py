"""The league's read cache: each read response serialised once and served as bytes until a write changes it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response


class ReadCache:
    """Serialised read responses. An entry is valid while no write went through this service (its generation);
    past `ttl` seconds it is still served while one background query refreshes it, so the TTL only bounds how stale
    writes made by another league process can look (ttl + one query). One query per key at a time: concurrent
    misses wait for the same one instead of all querying the database; and at most `queries` builds at a time
    (`league.read_queries`), the others queued in arrival order."""

    def __init__(self, ttl: float, generation: Callable[[], int], queries: int = 8):
        self.ttl = ttl
        self.generation = generation
        self._entries: dict[tuple, tuple[int, float, bytes]] = {}
        self._inflight: dict[tuple, tuple[int, asyncio.Future]] = {}
        self.queries = queries
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    async def _query(self, key: tuple, build: Callable[[], object], gen: int) -> bytes:
        """Run one build in the thread pool once one of the `queries` slots is free (waiters in arrival order)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:  # one semaphore per event loop serving the app
            self._slots = (loop, asyncio.Semaphore(self.queries))
        async with self._slots[1]:
            return await run_in_threadpool(self._build, key, build, gen)

    async def get(self, key: tuple, build: Callable[[], object]) -> bytes:
        if self.ttl <= 0:
            return await self._query(key, build, self.generation())
        entry = self._entries.get(key)
        if entry is not None and entry[0] == self.generation():
            if time.monotonic() - entry[1] >= self.ttl:
                self._refresh(key, build)  # stale while revalidating
            return entry[2]
        return await asyncio.shield(self._refresh(key, build))

    def _refresh(self, key: tuple, build: Callable[[], object]) -> asyncio.Future:
        """The query for `key` at the current generation: the one in flight, or a new one."""
        gen = self.generation()
        running = self._inflight.get(key)
        if running is not None and running[0] == gen:
            return running[1]
        task = asyncio.ensure_future(self._query(key, build, gen))
        self._inflight[key] = (gen, task)
        task.add_done_callback(lambda done: self._done(key, done))
        return task

    def _done(self, key: tuple, task: asyncio.Future) -> None:
        running = self._inflight.get(key)
        if running is not None and running[1] is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved here so a failed background refresh is not reported as unhandled

    def _build(self, key: tuple, build: Callable[[], object], gen: int) -> bytes:
        """Query and serialise; `gen` was read before the query, so a write during it leaves the entry stale.
        A build may return bytes it serialised itself (the leaderboard does, in the database)."""
        now = time.monotonic()
        value = build()
        body = value if isinstance(value, bytes) else dumps(value)
        if self.ttl > 0:
            if len(self._entries) > 1024:
                self._entries.clear()
            current = self._entries.get(key)
            if current is None or current[0] <= gen:
                self._entries[key] = (gen, now, body)
        return body


def dumps(value: object) -> bytes:
    """Compact JSON; NaN or infinity would make it unreadable to a browser, so they are a bug here, not data."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def json_response(body: bytes) -> Response:
    return Response(content=body, media_type="application/json")
