"""The step-phase queue: one interface, an in-process implementation (embedded) and Redis Streams (distributed).

A job names one phase of one step of one run. A consumer acknowledges a job only after the phase's result is
persisted, so a worker killed mid-phase leaves its job pending; another consumer reclaims it after `claim_idle_ms`
and runs the phase again (phases are idempotent: see coordinator.phases).
"""

from __future__ import annotations

import json
import queue as _queue
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class PhaseJob:
    run_id: str
    step: int
    phase: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> PhaseJob:
        d = json.loads(text)
        return cls(str(d["run_id"]), int(d["step"]), str(d["phase"]))


@dataclass(frozen=True)
class Delivery:
    """A job handed to a consumer; `entry_id` is what `ack` takes; `deliveries` counts attempts so far."""

    entry_id: str
    job: PhaseJob
    deliveries: int = 1


class StepQueue(ABC):
    """Phase jobs for one run; at-least-once delivery, acknowledged after the result is persisted."""

    @abstractmethod
    def publish(self, job: PhaseJob) -> str: ...

    @abstractmethod
    def consume(self, consumer: str, block_ms: int = 1000) -> Delivery | None:
        """The next job for this consumer: a reclaimed stale one first, else a new one; None after block_ms."""

    @abstractmethod
    def ack(self, delivery: Delivery) -> None: ...

    @abstractmethod
    def depth(self) -> int:
        """Jobs published and not yet acknowledged."""

    def close(self) -> None:  # noqa: B027 - optional
        pass


class InProcessQueue(StepQueue):
    """Embedded mode: a thread-safe FIFO; unacknowledged jobs go back to the front when reclaimed."""

    def __init__(self, claim_idle_ms: int = 60_000):
        self._q: _queue.Queue[Delivery] = _queue.Queue()
        self._pending: dict[str, tuple[Delivery, float]] = {}
        self._lock = threading.Lock()
        self._next = 0
        self.claim_idle_ms = claim_idle_ms

    def publish(self, job: PhaseJob) -> str:
        with self._lock:
            self._next += 1
            entry = f"{self._next}-0"
        self._q.put(Delivery(entry, job))
        return entry

    def consume(self, consumer: str, block_ms: int = 1000) -> Delivery | None:
        now = time.monotonic()
        with self._lock:
            for entry, (d, since) in list(self._pending.items()):
                if (now - since) * 1000 >= self.claim_idle_ms:
                    again = Delivery(entry, d.job, d.deliveries + 1)
                    self._pending[entry] = (again, now)
                    return again
        try:
            d = self._q.get(timeout=block_ms / 1000)
        except _queue.Empty:
            return None
        with self._lock:
            self._pending[d.entry_id] = (d, time.monotonic())
        return d

    def ack(self, delivery: Delivery) -> None:
        with self._lock:
            self._pending.pop(delivery.entry_id, None)

    def depth(self) -> int:
        with self._lock:
            return self._q.qsize() + len(self._pending)


class RedisStreamQueue(StepQueue):
    """Distributed mode: one Redis stream per run with one consumer group; XAUTOCLAIM reclaims stale entries."""

    GROUP = "workers"

    def __init__(self, url: str, run_id: str, prefix: str = "populora", claim_idle_ms: int = 60_000):
        import redis

        self.client = redis.Redis.from_url(url)
        self.stream = f"{prefix}:steps:{run_id}"
        self.claim_idle_ms = claim_idle_ms
        try:
            self.client.xgroup_create(self.stream, self.GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def publish(self, job: PhaseJob) -> str:
        entry = self.client.xadd(self.stream, {"job": job.to_json()})
        return entry.decode() if isinstance(entry, bytes) else str(entry)

    def _delivery(self, entry_id, fields, deliveries: int = 1) -> Delivery:
        eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        return Delivery(eid, PhaseJob.from_json(fields[b"job"]), deliveries)

    def consume(self, consumer: str, block_ms: int = 1000) -> Delivery | None:
        claimed = self.client.xautoclaim(self.stream, self.GROUP, consumer, min_idle_time=self.claim_idle_ms,
                                         start_id="0-0", count=1)
        entries = claimed[1] if claimed else []
        for entry_id, fields in entries:
            if fields:  # deleted entries come back as None
                info = self.client.xpending_range(self.stream, self.GROUP, entry_id, entry_id, 1)
                times = int(info[0]["times_delivered"]) if info else 2
                return self._delivery(entry_id, fields, times)
        got = self.client.xreadgroup(self.GROUP, consumer, {self.stream: ">"}, count=1, block=block_ms)
        for _stream, items in got or []:
            for entry_id, fields in items:
                return self._delivery(entry_id, fields)
        return None

    def ack(self, delivery: Delivery) -> None:
        self.client.xack(self.stream, self.GROUP, delivery.entry_id)

    def depth(self) -> int:
        pending = self.client.xpending(self.stream, self.GROUP)
        n_pending = int(pending["pending"]) if pending else 0
        groups = self.client.xinfo_groups(self.stream)
        lag = 0
        for g in groups:
            name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
            if name == self.GROUP:
                lag = int(g.get("lag") or 0)
        return n_pending + lag

    def close(self) -> None:
        self.client.close()


def make_queue(cfg, run_id: str) -> StepQueue:
    if cfg.queue.backend == "redis":
        return RedisStreamQueue(cfg.queue.redis_url, run_id, cfg.queue.stream_prefix, cfg.queue.claim_idle_ms)
    return InProcessQueue(cfg.queue.claim_idle_ms)
