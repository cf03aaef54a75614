"""The evolver service: the RPCs of proto/evolver.proto over the operators of spec §9 and the artifact store."""

from __future__ import annotations

import json
import logging
from contextlib import ExitStack

from populora.config import Config, EvolutionConfig
from populora.pb import evolver_pb2
from populora.rpc import CONTRACTS, invalid, not_found, precondition, ref_from_pb, ref_to_pb
from populora.store import META, AdapterRef, ArtifactStore, StoreError, validate_adapter_id
from services.evolver.adapters import EvolverError, ParentAdapter, open_parent
from services.evolver.breed import EPSILON_META_KEY, breed, get_operator
from services.evolver.operators import OPERATORS

log = logging.getLogger(__name__)


class EvolverService:
    """Breed: read the parents from the store, run one operator module by module, write the child as version 1.

    Stateless apart from the store, so any number of replicas can serve the same run.
    """

    CONTRACT = CONTRACTS["evolver"]
    GRPC_WORKERS = 4  # a 7B child holds about two adapters' worth of memory while it is built

    def __init__(self, store: ArtifactStore, evolution: EvolutionConfig | None = None):
        self.store = store
        self.evolution = evolution or EvolutionConfig()

    @classmethod
    def from_config(cls, cfg: Config) -> EvolverService:
        return cls(ArtifactStore(cfg.store_root), cfg.evolution)

    def Breed(self, request: evolver_pb2.BreedRequest) -> evolver_pb2.BreedResponse:
        """Make `child_id`@v1 from request.parents (better first) with one operator; nothing is written on error."""
        try:
            op = get_operator(request.operator)
        except EvolverError as e:
            raise invalid(str(e)) from None
        if len(request.parents) != op.n_parents:
            raise invalid(f"operator {op.name} takes {op.n_parents} parent(s), got {len(request.parents)}")
        try:
            validate_adapter_id(request.child_id)
        except StoreError as e:
            raise invalid(f"child_id: {e}") from None
        child_ref = self.store.ref(request.child_id, 1)
        if self.store.version_dir(request.child_id, 1).exists():
            raise precondition(f"child {child_ref.key} already exists in the store; choose a new child_id")
        refs = [self._resolve(ref_from_pb(p)) for p in request.parents]
        with ExitStack() as stack:
            parents = [self._open(ref, stack) for ref in refs]
            try:
                child = breed(parents, op.name, dict(request.params), int(request.seed), self.evolution)
            except EvolverError as e:
                raise invalid(str(e)) from None
        try:
            saved = self.store.save(request.child_id, child.weights, child.config, version=1,
                                    meta=child.meta([r.key for r in refs]))
        except StoreError as e:
            raise precondition(str(e)) from None
        log.info("bred %s with %s from %s in %.2fs (relative change %.4g)", saved.key, op.name,
                 [r.key for r in refs], child.seconds, child.relative_change)
        return evolver_pb2.BreedResponse(
            child=ref_to_pb(saved), relative_change=child.relative_change, effective_rank=child.effective_rank,
            epsilon=child.epsilon, seconds=child.seconds, stats=child.stats,
            params_json=json.dumps(child.params, sort_keys=True), rank=int(child.config["r"]))

    def ListOperators(self, request: evolver_pb2.ListOperatorsRequest) -> evolver_pb2.ListOperatorsResponse:
        """Every registered operator with its arity, a one-line description and its defaults from the config."""
        return evolver_pb2.ListOperatorsResponse(operators=[
            evolver_pb2.OperatorInfo(name=op.name, n_parents=op.n_parents, description=op.description,
                                     defaults=op.defaults(self.evolution))
            for op in sorted(OPERATORS.values(), key=lambda o: o.name)])

    def _resolve(self, ref: AdapterRef) -> AdapterRef:
        """A parent ref as stored (version 0 = the latest); errors name the missing adapter."""
        try:
            validate_adapter_id(ref.adapter_id)
        except StoreError as e:
            raise invalid(f"parent: {e}") from None
        try:
            return self.store.resolve(ref)
        except StoreError as e:
            raise not_found(f"parent: {e}") from None

    def _open(self, ref: AdapterRef, stack: ExitStack) -> ParentAdapter:
        try:
            parent = open_parent(self.store.path_of(ref), label=ref.key)
        except EvolverError as e:
            raise invalid(str(e)) from None
        stack.callback(parent.close)
        if EPSILON_META_KEY not in parent.meta:
            inherited = self._epsilon_of_earlier_version(ref)
            if inherited is not None:
                parent.meta[EPSILON_META_KEY] = inherited
        return parent

    def _epsilon_of_earlier_version(self, ref: AdapterRef) -> float | None:
        """A member's ε is written with its first version; trainer updates (v2, v3, ...) do not copy it, so the
        newest earlier version that has one is the member's."""
        for version in sorted((v for v in self.store.versions(ref.adapter_id) if v < ref.version), reverse=True):
            path = self.store.version_dir(ref.adapter_id, version) / META
            try:
                meta = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and EPSILON_META_KEY in meta:
                return meta[EPSILON_META_KEY]
        return None

