"""The trainer's and inference's replicas, held by the coordinator as one service object (distributed mode).

Each adapter lives on the replica that rendezvous hashing gives it over the live replicas (populora.placement, spec
17). `PlacedTrainer` and `PlacedInference` have the methods of the service they stand for, so the phases call them
as they call one replica: a call about one adapter goes to its owner; an update batch is split by owner, a
generation batch by owner but balanced (populora.placement.balanced: an adapter whose owner already has an even share
of the batch is generated on its next replica), the parts are sent to their replicas concurrently, and the results
come back in the order of the batch.

A replica that stops answering during a call (its process died) is probed; when it does not answer its health
check it leaves the live set, and the part of the batch it had is sent again to the adapters' new owners. That is
safe because a replica holds nothing the artifact store does not: a trainer takes an adapter it does not hold from
its latest stored version with its optimizer state, and recognises an update that another replica already wrote by
the request's digest; inference loads what it is asked for from the store, and sampling is seeded per request, so
the same tokens come back wherever a request runs. A replica that answers again (restarted), or that a DNS name
now resolves to, rejoins the live set at the next batch.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc

from populora.config import Config
from populora.config.deployment import ServiceEndpoint
from populora.pb import inference_pb2, trainer_pb2
from populora.placement import balanced, owner
from populora.retry import Backoff, retrying
from populora.rpc import ServiceError, connect, health_check
from populora.tls import tls_files

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

# Codes a call gets when its server went away in the middle (or was never there): the replica is probed then.
LOST = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


def resolve(host: str, port: int) -> list[tuple[str, str]]:
    """(name, address) of every IPv4 address `host` resolves to, sorted. The name is what placement hashes: the
    address's reverse DNS name where it has one (a StatefulSet pod's stable `trainer-0.trainer...`, a Compose
    container's `project-trainer-1...`), so a replica that comes back on another address keeps its adapters;
    else the address itself."""
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ServiceError(grpc.StatusCode.UNAVAILABLE, f"'{host}' does not resolve ({e}); no replica to call") from None
    out = []
    for ip in sorted({info[4][0] for info in infos}):
        try:
            name = socket.gethostbyaddr(ip)[0]
        except OSError:
            name = ip
        out.append((f"{name}:{port}", f"{ip}:{port}"))
    return out


def replica_addresses(ep: ServiceEndpoint) -> list[tuple[str, str]]:
    """(name, address) of each replica an endpoint names: its `replicas` list, every address `host` resolves to
    (`resolve`), or the one host:port."""
    if ep.replicas:
        return [(a, a) for a in ep.replicas]
    if ep.resolve:
        return resolve(ep.host, ep.port)
    return [(f"{ep.host}:{ep.port}",) * 2]


class Replicas:
    """The replicas of one placed service: a Remote per replica, and which of them are live."""

    REFRESH_S = 30.0  # how often a DNS name is resolved again, and replicas taken as dead are probed, at most

    def __init__(self, service: str, cfg: Config, addresses: Callable[[], list[tuple[str, str]]] | None = None):
        self.service, self.cfg = service, cfg
        ep = getattr(cfg.services, service)
        self._addresses = addresses or (lambda: replica_addresses(ep))
        self.backoff = Backoff.from_config(cfg)
        self.tls = tls_files(cfg.services.tls)
        self.remotes: dict[str, Any] = {}  # name -> Remote
        self.address: dict[str, str] = {}
        self.dead: set[str] = set()
        self._lock = threading.Lock()
        self._refreshed = 0.0
        self.refresh()

    def _connect(self, address: str) -> Any:
        s = self.cfg.services
        # no retrying in the Remote: a replica that does not answer is replaced by the others at once
        return connect(self.service, address, s.token, s.grpc_timeout_s, s.grpc_retries, None, self.tls, s.token_path)

    def refresh(self) -> None:
        """Resolve the replicas again; probe the ones taken as dead, which rejoin when they answer. A name that does
        not resolve (the replicas not started yet) keeps the replicas known so far."""
        try:
            found = dict(self._addresses())
        except ServiceError as e:
            log.warning("%s replicas: %s", self.service, e.message)
            self._refreshed = time.monotonic()
            return
        with self._lock:
            for name in list(self.remotes):
                if found.get(name) != self.address[name]:
                    self.remotes.pop(name).close()
                    self.address.pop(name)
                    self.dead.discard(name)
            for name, address in found.items():
                if name not in self.remotes:
                    self.remotes[name], self.address[name] = self._connect(address), address
            self._refreshed = time.monotonic()
        for name in sorted(self.dead):
            if self._answers(name):
                log.info("%s replica %s answers again: it takes its adapters back", self.service, name)
                with self._lock:
                    self.dead.discard(name)

    def live(self) -> list[str]:
        """The live replicas' names; waits (outage.wait_s, with backoff) while there is none."""
        if self.dead or getattr(self.cfg.services, self.service).resolve:
            if time.monotonic() - self._refreshed > self.REFRESH_S:
                self.refresh()

        def some() -> list[str]:
            with self._lock:
                names = sorted(set(self.remotes) - self.dead)
            if names:
                return names
            self.refresh()
            with self._lock:
                names = sorted(set(self.remotes) - self.dead)
            if not names:
                raise ServiceError(grpc.StatusCode.UNAVAILABLE, f"no {self.service} replica answers")
            return names

        return retrying(some, f"the {self.service} replicas", _unavailable, self.backoff, log)

    def _answers(self, name: str) -> bool:
        try:
            return health_check(self.address[name], timeout=2.0, tls=self.tls, server_name=self.service) == "SERVING"
        except grpc.RpcError:
            return False

    def lost(self, name: str, error: ServiceError) -> bool:
        """Whether `error` from replica `name` means the replica is gone (it is then taken out of the live set)."""
        if error.code not in LOST or self._answers(name):
            return False
        log.warning("%s replica %s does not answer (%s): its adapters go to the other replicas", self.service, name,
                    error.message)
        with self._lock:
            self.dead.add(name)
        return True

    def scatter(self, items: Sequence[T], key: Callable[[T], str], call: Callable[[Any, list[T]], list[R]],
                weight: Callable[[T], float] | None = None) -> list[R]:
        """`call(replica, part)` for each replica's part of `items` (by the owner of each item's key; with `weight`,
        each item's work, the keys balanced over the replicas), the parts concurrently; one result per item, in the
        order of `items`. A part whose replica is lost is placed again over the live replicas and sent again."""
        results: list[Any] = [None] * len(items)
        pending = list(range(len(items)))
        while pending:
            live = self.live()
            work: dict[str, float] = {}
            for i in pending:
                work[key(items[i])] = work.get(key(items[i]), 0.0) + (weight(items[i]) if weight else 0.0)
            where = balanced(work, live) if weight else {k: owner(k, live) for k in work}
            parts: dict[str, list[int]] = {}
            for i in pending:
                parts.setdefault(where[key(items[i])], []).append(i)
            with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix=f"{self.service}-part") as pool:
                futures = {name: pool.submit(call, self.remotes[name], [items[i] for i in idx])
                           for name, idx in parts.items()}
            pending, error = [], None
            for name, future in futures.items():
                try:
                    out = future.result()
                except ServiceError as e:
                    if self.lost(name, e):
                        pending += parts[name]
                        continue
                    error = error or e
                    continue
                for i, r in zip(parts[name], out, strict=True):
                    results[i] = r
            if error is not None:
                raise error
            pending.sort()
        return results

    def one(self, key: str, call: Callable[[Any], R]) -> R:
        """`call(owner)` on the owner of `key`, sent again to the next owner while owners are lost."""
        return self.scatter([key], lambda k: k, lambda remote, _part: [call(remote)])[0]

    def close(self) -> None:
        with self._lock:
            for remote in self.remotes.values():
                remote.close()


def _unavailable(e: BaseException) -> bool:
    return isinstance(e, ServiceError) and e.code == grpc.StatusCode.UNAVAILABLE


class PlacedTrainer:
    """The trainer's replicas as one trainer: each adapter's calls go to its owner. An adapter whose owner changed
    since this object last sent it anything (a replica joined) is freed on its old owner, when that one is live, so a
    replica's memory holds its own adapters only."""

    def __init__(self, replicas: Replicas):
        self.replicas = replicas
        self._where: dict[str, str] = {}  # adapter id -> the replica that last took a call about it
        self._lock = threading.Lock()

    def InitAdapter(self, req: trainer_pb2.InitAdapterRequest) -> trainer_pb2.InitAdapterResponse:
        return self._placed([req.adapter_id], self.replicas.one(req.adapter_id, lambda r: r.InitAdapter(req)))

    def AdoptAdapter(self, req: trainer_pb2.AdoptAdapterRequest) -> trainer_pb2.AdoptAdapterResponse:
        adapter_id = req.adapter.adapter_id
        return self._placed([adapter_id], self.replicas.one(adapter_id, lambda r: r.AdoptAdapter(req)))

    def DropAdapter(self, req: trainer_pb2.DropAdapterRequest) -> trainer_pb2.DropAdapterResponse:
        with self._lock:
            self._where.pop(req.adapter_id, None)
        return self.replicas.one(req.adapter_id, lambda r: r.DropAdapter(req))

    def WarmStart(self, req: trainer_pb2.WarmStartRequest) -> trainer_pb2.WarmStartResponse:
        return self.replicas.one(req.adapter_id, lambda r: r.WarmStart(req))

    def UpdateBatch(self, req: trainer_pb2.UpdateBatchRequest) -> trainer_pb2.UpdateBatchResponse:
        modes: list[str] = []

        def part(remote, updates: list[trainer_pb2.UpdateRequest]) -> list[trainer_pb2.UpdateResponse]:
            resp = remote.UpdateBatch(trainer_pb2.UpdateBatchRequest(updates=updates))
            modes.append(resp.mode)
            return list(resp.results)

        results = self.replicas.scatter(list(req.updates), lambda u: u.adapter.adapter_id, part)
        self._placed([u.adapter.adapter_id for u in req.updates])
        return trainer_pb2.UpdateBatchResponse(results=results, mode=modes[0] if modes else "")

    def _placed(self, adapter_ids: list[str], result: R | None = None) -> R | None:
        """Note where the adapters are now; free each one that moved on its old owner, if that one is live (a
        failure there changes nothing the run depends on: the new owner has the adapter from the store)."""
        live = self.replicas.live()
        moved = []
        with self._lock:
            for a in adapter_ids:
                now, before = owner(a, live), self._where.get(a)
                self._where[a] = now
                if before is not None and before != now and before in live:
                    moved.append((a, before))
        for a, before in moved:
            try:
                self.replicas.remotes[before].DropAdapter(trainer_pb2.DropAdapterRequest(adapter_id=a, moved=True))
                log.info("trainer: %s moved from %s to %s; freed on %s", a, before, owner(a, live), before)
            except (ServiceError, KeyError) as e:
                log.warning("trainer: could not free moved adapter %s on %s: %s", a, before, e)
        return result

    def close(self) -> None:
        self.replicas.close()


class PlacedInference:
    """The inference replicas as one inference service: each adapter is served by its owner (a request for the
    bare base model by the owner of its request id, so those spread too), except where a generation batch is
    balanced: a request's work is its samples times its token limit."""

    def __init__(self, replicas: Replicas):
        self.replicas = replicas

    def Generate(self, req: inference_pb2.GenerateRequest) -> Iterator[inference_pb2.GenerateResult]:
        def part(remote, requests: list[inference_pb2.GenerationRequest]) -> list[inference_pb2.GenerateResult]:
            got = {r.request_id: r for r in remote.Generate(inference_pb2.GenerateRequest(requests=requests))}
            missing = [r.request_id for r in requests if r.request_id not in got]
            if missing:
                raise ServiceError(grpc.StatusCode.INTERNAL, f"inference returned no result for {missing[:3]}")
            return [got[r.request_id] for r in requests]

        limit = self.replicas.cfg.generation.max_new_tokens

        def work(r: inference_pb2.GenerationRequest) -> float:
            """What a request costs to generate, for balancing: its samples times its token limit."""
            return max(1, r.sampling.n) * (r.sampling.max_new_tokens or limit)

        yield from self.replicas.scatter(list(req.requests), lambda r: r.adapter.adapter_id or r.request_id, part,
                                         weight=work)

    def Score(self, req: inference_pb2.ScoreRequest) -> inference_pb2.ScoreResponse:
        """Each row scored by its adapter's owner (a base row by the owner of its row id), the parts at once; the
        scores in the order of the rows."""
        def part(remote, rows: list[inference_pb2.ScoreRow]) -> list[inference_pb2.RowScore]:
            got = list(remote.Score(inference_pb2.ScoreRequest(rows=rows)).scores)
            if [g.row_id for g in got] != [r.row_id for r in rows]:
                raise ServiceError(grpc.StatusCode.INTERNAL, f"inference scored {len(got)} rows of {len(rows)}, or "
                                   "out of order")
            return got

        scores = self.replicas.scatter(list(req.rows), lambda r: r.adapter.adapter_id or r.row_id, part)
        return inference_pb2.ScoreResponse(scores=scores)

    def LoadAdapter(self, req: inference_pb2.LoadAdapterRequest) -> inference_pb2.LoadAdapterResponse:
        return self.replicas.one(req.adapter.adapter_id, lambda r: r.LoadAdapter(req))

    def UnloadAdapter(self, req: inference_pb2.UnloadAdapterRequest
                      ) -> inference_pb2.UnloadAdapterResponse:
        """From every live replica (a balanced batch may have loaded the adapter beside its owner): how many
        versions were unloaded in all. A replica found gone holds nothing to unload."""
        unloaded = 0
        for name in self.replicas.live():
            try:
                unloaded += self.replicas.remotes[name].UnloadAdapter(req).unloaded
            except ServiceError as e:
                if not self.replicas.lost(name, e):
                    raise
        return inference_pb2.UnloadAdapterResponse(unloaded=unloaded)

    def ListAdapters(self, req: inference_pb2.ListAdaptersRequest
                     ) -> inference_pb2.ListAdaptersResponse:
        """Every live replica's resident adapters together; the limits are one replica's."""
        names = self.replicas.live()
        each = [self.replicas.remotes[n].ListAdapters(req) for n in names]
        out = inference_pb2.ListAdaptersResponse()
        out.CopyFrom(each[0])
        for resp in each[1:]:
            out.adapters.extend(resp.adapters)
        return out

    def close(self) -> None:
        self.replicas.close()


def placed(service: str, cfg: Config) -> PlacedTrainer | PlacedInference:
    """The trainer's or inference's replicas as one service object."""
    kinds = {"trainer": PlacedTrainer, "inference": PlacedInference}
    return kinds[service](Replicas(service, cfg))
