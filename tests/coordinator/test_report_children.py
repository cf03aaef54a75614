"""The run report lists every child beside its operator, ε, relative change from its parent, and how it started:
its rate on its first step against its parent's on the birth step."""

from __future__ import annotations

import pytest
import torch

from coordinator.record.births import birth_rates, child_epsilon, evolution_table, summarise
from populora.config import load_config
from populora.store import ArtifactStore, lora_config_dict

KEY = "base_model.model.model.layers.0.self_attn.q_proj.lora_{}.weight"


def _event(child, parent, op="M1", change=0.0712):
    return {"child": child, "retired": "r.X", "parents": [parent], "operator": op, "relative_change": change,
            "effective_rank": 1.9}


def test_children_with_operator_epsilon_and_relative_change(tmp_path):
    store = ArtifactStore(tmp_path)
    weights = {KEY.format("A"): torch.ones(2, 4), KEY.format("B"): torch.ones(4, 2)}
    store.save("r.T2", weights, lora_config_dict(2, 4.0, ["q_proj"]), version=1, meta={"epsilon": 0.05})
    rows = [{"step": 10, "evolution": [_event("r.T2", "r.T0")]}]
    cfg = load_config(preset="cpu-tiny", env=False, overrides=[f"store.root={tmp_path}"])
    assert child_epsilon(str(tmp_path), "r.T2") == 0.05
    assert child_epsilon(str(tmp_path), "r.nope") is None and child_epsilon(None, "r.T2") is None
    page = evolution_table(rows, cfg)
    assert "<td>M1</td><td>0.05</td><td>0.071</td>" in page and "r.T0" in page
    assert "<td>M1</td><td>-</td>" in evolution_table(rows, None)  # no store: ε unknown, still listed
    assert "No evolution" in evolution_table([{"step": 1}], None)


def test_a_child_is_compared_on_its_first_step_with_its_parent_on_the_birth_step():
    rows = [
        {"step": 3, "population": {"r.S0": {"role": "student"}, "r.T0": {"role": "teacher"},
                                   "r.T1": {"role": "teacher"}},
         "task_types": {"code_o": {"proposals": 6}, "code_i": {"proposals": 6}},  # 6 proposals a teacher
         "student_solve_rate": {"r.S0": 0.5, "r.S1": 0.1},
         "valid_programs": [{"teacher": "r.T0"}] * 3 + [{"teacher": "r.T1"}],
         "evolution": [_event("r.S2", "r.S0"), _event("r.T2", "r.T0", "M2", 0.1)]},
        {"step": 4, "population": {"r.S2": {"role": "student"}, "r.T2": {"role": "teacher"}},
         "task_types": {"code_o": {"proposals": 3}, "code_f": {"proposals": 3}},
         "student_solve_rate": {"r.S2": 0.25}, "valid_programs": [{"teacher": "r.T2"}] * 6},
    ]
    s, t = birth_rates(rows)
    assert (s["role"], s["parent_rate"], s["child_rate"], s["difference"]) == ("student", 0.5, 0.25, -0.25)
    assert (t["role"], t["parent_rate"], t["child_rate"]) == ("teacher", 0.5, 1.0)
    assert t["difference"] == pytest.approx(0.5) and t["operator"] == "M2"
    summary = summarise([s, t])
    assert summary["M1"]["student"]["n"] == 1 and summary["M2"]["teacher"]["difference"] == pytest.approx(0.5)
    # a child born on the last step has no next step: its rate is unknown, and it is left out of the summary
    last = birth_rates(rows[:1])
    assert all(b["child_rate"] is None and b["difference"] is None for b in last) and summarise(last) == {}


def test_the_births_command_summarises_runs_and_refuses_a_missing_one(tmp_path, capsys):
    import json

    from coordinator.record.births import main

    run = tmp_path / "r"
    run.mkdir()
    rows = [{"step": 3, "student_solve_rate": {"r.S0": 0.5}, "population": {"r.S0": {"role": "student"}},
             "evolution": [_event("r.S2", "r.S0")]},
            {"step": 4, "student_solve_rate": {"r.S2": 0.25}, "population": {"r.S2": {"role": "student"}}}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([str(run)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["births"][0]["run"] == "r" and out["summary"]["M1"]["student"]["difference"] == -0.25
    assert main([str(tmp_path / "missing")]) == 2 and "no metrics.jsonl" in capsys.readouterr().err
