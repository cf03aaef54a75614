"""The run report lists every child beside its operator, ε and relative change from its parent."""

from __future__ import annotations

import torch

from coordinator.report import _evolution_table, child_epsilon
from populora.store import ArtifactStore, lora_config_dict

KEY = "base_model.model.model.layers.0.self_attn.q_proj.lora_{}.weight"


def test_children_with_operator_epsilon_and_relative_change(tmp_path):
    store = ArtifactStore(tmp_path)
    weights = {KEY.format("A"): torch.ones(2, 4), KEY.format("B"): torch.ones(4, 2)}
    store.save("r.T2", weights, lora_config_dict(2, 4.0, ["q_proj"]), version=1, meta={"epsilon": 0.05})
    rows = [{"step": 10, "evolution": [{"child": "r.T2", "retired": "r.T1", "parents": ["r.T0"], "operator": "M1",
                                        "relative_change": 0.0712, "effective_rank": 1.9, "role": "teacher"}]}]
    assert child_epsilon(str(tmp_path), "r.T2") == 0.05
    assert child_epsilon(str(tmp_path), "r.nope") is None and child_epsilon(None, "r.T2") is None
    page = _evolution_table(rows, str(tmp_path))
    assert "<td>M1</td><td>0.05</td><td>0.071</td>" in page and "r.T0" in page
    assert "<td>M1</td><td>-</td>" in _evolution_table(rows, None)  # no store: ε unknown, still listed
    assert "No evolution" in _evolution_table([{"step": 1}], None)
