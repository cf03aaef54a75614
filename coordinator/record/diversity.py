"""The members' weight diversity at a step (spec 11), recorded in the run's metrics: mean pairwise cosine and
relative distance of their updates, computed from the stored LoRA factors."""

from __future__ import annotations

import math

from populora.analysis.diversity import population_diversity
from populora.store import ArtifactStore, StoreError, lora_factors, peft_module_names


def nan_to_none(x: float | None) -> float | None:
    """JSON has no NaN: an undefined mean (no pairs, zero updates) is recorded as null."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def members_diversity(population: dict, store: ArtifactStore) -> dict | None:
    """Mean pairwise cosine and relative distance of the updates of a step's members ({adapter_id: {"version": v,
    ...}}, a metrics row's `population`), from their stored factors (spec 11; populora.analysis.diversity never
    forms a dense update); None with fewer than two members or when a member's version is not in the store."""
    if len(population) < 2:
        return None
    factors, scaling = {}, {}
    try:
        for adapter_id, member in population.items():
            version = store.read(store.ref(adapter_id, member["version"]))
            factors[adapter_id] = {m: lora_factors(version.weights, m) for m in peft_module_names(version.weights)}
            scaling[adapter_id] = version.scaling
    except (OSError, ValueError, KeyError, TypeError, StoreError):
        return None
    d = population_diversity(factors, scaling)
    return {"cosine": nan_to_none(d.mean_cosine), "distance": nan_to_none(d.mean_distance)}
