"""The step-phase queue of distributed runs: Redis Streams with one consumer group per run (embedded runs call their
phases directly and need no queue).

A job names one phase of one step of one run. A consumer acknowledges a job only after the phase's result is
persisted, so a worker killed mid-phase leaves its job pending; another consumer reclaims it after `claim_idle_ms`
and runs the phase again (phases are idempotent: see coordinator.run.phases). A worker still computing its phase
holds the job (`holding`: its idle time starts again every third of `claim_idle_ms`), so a phase that takes longer
than that (a warm-start fit, a SmolLM2 propose batch on CPU) is not taken over and run a second time beside it.

While Redis is away every call waits for it (retries with backoff, `outage.wait_s` at most). Redis restarted
without its data (no append-only file) loses the stream: a consumer recreates the group, and the coordinator
publishes its job again when the entry it published is gone (coordinator.run.journal).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from populora.retry import Backoff, redis_unavailable, retrying

log = logging.getLogger(__name__)


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


class RedisStreamQueue:
    """Distributed mode: one Redis stream per run with one consumer group; XAUTOCLAIM reclaims stale entries."""

    GROUP = "workers"

    def __init__(self, url: str, run_id: str, prefix: str = "populora", claim_idle_ms: int = 60_000,
                 backoff: Backoff | None = None, tls: dict[str, str] | None = None):
        from populora.datastores import redis_client

        # tls: the CA, client certificate and key of a rediss:// URL (populora.datastores.redis_tls)
        self.client = redis_client(url, **(tls or {}))
        self.stream = f"{prefix}:steps:{run_id}"
        self.claim_idle_ms = claim_idle_ms
        self.backoff = backoff  # how long every call waits for Redis to come back (None: not at all)
        self._retry(self._ensure_group, "create the consumer group")

    @classmethod
    def from_config(cls, cfg, run_id: str) -> RedisStreamQueue:
        q = cfg.queue
        from populora.datastores import redis_tls

        tls = redis_tls(cfg) if q.redis_url.startswith("rediss://") else None
        return cls(q.redis_url, run_id, q.stream_prefix, q.claim_idle_ms, Backoff.from_config(cfg), tls)

    def _retry(self, fn, what: str):
        return retrying(fn, f"the step queue {self.stream} ({what})", redis_unavailable, self.backoff, log)

    def _ensure_group(self) -> None:
        import redis

        try:
            self.client.xgroup_create(self.stream, self.GROUP, id="0", mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def discard_earlier(self) -> int:
        """Drop every entry of the stream (and its consumer group, made again empty): called when the journal holds
        nothing of this run yet, so that no entry can be one of its jobs. An earlier run of the same id against
        another journal (a database made anew, a benchmark run again) leaves its jobs here, and a worker would
        otherwise replay them against this run's journal and fail them. Returns how many entries were dropped."""
        def drop() -> int:
            n = int(self.client.xlen(self.stream) or 0)
            if n:
                self.client.delete(self.stream)
                self._ensure_group()
            return n

        n = self._retry(drop, "drop the jobs of an earlier run")
        if n:
            log.warning("the step queue %s held %d jobs of an earlier run with this id (this run's journal has "
                        "none): dropped", self.stream, n)
        return n

    def publish(self, job: PhaseJob) -> str:
        entry = self._retry(lambda: self.client.xadd(self.stream, {"job": job.to_json()}),
                            f"publish {job.phase} of step {job.step}")
        return entry.decode() if isinstance(entry, bytes) else str(entry)

    def holds(self, entry_id: str) -> bool:
        """Whether the stream still has the entry (acknowledged or not): False once Redis lost its data."""
        return bool(self._retry(lambda: self.client.xrange(self.stream, entry_id, entry_id, count=1),
                                f"look up entry {entry_id}"))

    def _delivery(self, entry_id, fields, deliveries: int = 1) -> Delivery:
        eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        return Delivery(eid, PhaseJob.from_json(fields[b"job"]), deliveries)

    def consume(self, consumer: str, block_ms: int = 1000) -> Delivery | None:
        return self._retry(lambda: self._consume(consumer, block_ms), f"take a job as {consumer}")

    def _consume(self, consumer: str, block_ms: int) -> Delivery | None:
        import redis

        try:
            return self._take(consumer, block_ms)
        except redis.ResponseError as e:
            # NOGROUP: Redis restarted without its data. UNBLOCKED: the stream was deleted while this consumer
            # waited on it (discard_earlier, by a coordinator starting a run of the same id). Either way the group
            # is made again and the consumer reads on.
            if "NOGROUP" not in str(e) and "UNBLOCKED" not in str(e):
                raise
            log.warning("the step queue %s lost its consumer group (%s): creating it again", self.stream,
                        str(e).split(" ", 1)[0])
            self._ensure_group()
            return None

    def _take(self, consumer: str, block_ms: int) -> Delivery | None:
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

    def hold(self, consumer: str, delivery: Delivery) -> bool:
        """Keep `delivery` with `consumer`, who is still working on it: its idle time starts again and its delivery
        count stays, so no other consumer takes it over meanwhile. False once the entry is no longer pending with
        `consumer` (acknowledged, taken over, or lost with Redis' data)."""
        import redis

        def hold() -> bool:
            try:
                mine = self.client.xpending_range(self.stream, self.GROUP, delivery.entry_id, delivery.entry_id, 1,
                                                  consumername=consumer)
                if not mine:
                    return False
                # JUSTID: the retry counter is not incremented; min_idle_time 0: claimed whatever its idle time
                return bool(self.client.xclaim(self.stream, self.GROUP, consumer, 0, [delivery.entry_id],
                                               justid=True))
            except redis.ResponseError as e:  # NOGROUP: Redis restarted without its data, the job with it
                if "NOGROUP" not in str(e):
                    raise
                return False

        return self._retry(hold, f"hold {delivery.job.phase} of step {delivery.job.step}")

    @contextmanager
    def holding(self, consumer: str, delivery: Delivery) -> Iterator[None]:
        """While the body runs, `hold` the delivery every third of `claim_idle_ms` (from a thread of its own): a job
        is taken over from a consumer that stopped (killed, or done without acknowledging: a failed phase), never
        from one still computing it."""
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.claim_idle_ms / 3000):
                try:
                    if not self.hold(consumer, delivery):
                        return
                except Exception as e:  # Redis away past the outage wait: the job may be taken over, as it was
                    log.warning("%s could not hold %s of step %d: %s", consumer, delivery.job.phase,
                                delivery.job.step, e)
                    return

        thread = threading.Thread(target=beat, daemon=True, name=f"hold-{delivery.entry_id}")
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=5)  # a beat waiting on Redis goes on by itself; it holds nothing acknowledged

    def ack(self, delivery: Delivery) -> None:
        import redis

        def ack() -> None:
            try:
                self.client.xack(self.stream, self.GROUP, delivery.entry_id)
            except redis.ResponseError as e:  # the group is gone with Redis' data: nothing left to acknowledge
                if "NOGROUP" not in str(e):
                    raise
                log.warning("acknowledging %s: the step queue %s has no consumer group any more (%s)",
                            delivery.entry_id, self.stream, e)

        self._retry(ack, f"acknowledge {delivery.job.phase} of step {delivery.job.step}")

    def depth(self) -> int:
        return self._retry(self._depth, "read its depth")

    def _depth(self) -> int:
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
