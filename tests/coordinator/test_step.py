"""The step's typed records and the phase journal, without services; two phases on a real sandbox, without a
database."""

from __future__ import annotations

import pytest

from coordinator.run.journal import Journal, JournalDB, PhaseDone, PhaseJournal
from coordinator.run.phases import Run, check, rollouts, validate
from populora.config import load_config
from populora.records import (
    PHASE_RECORDS,
    Attempt,
    Checked,
    CodecError,
    Matched,
    Member,
    Pairing,
    Proposal,
    Proposed,
    Solved,
    Updated,
    UpdateStats,
    Validated,
    Verdict,
    from_json,
    to_json,
)
from populora.tasks import BufferSet, Triplet


def _proposal(pid="m/p0", teacher="T0", text="", task_type="code_o"):
    return Proposal(id=pid, task_type=task_type, teacher=teacher, match_id="m", version=1, text=text,
                    prompt_token_ids=[1, 2], response_token_ids=[3, 4, 5])


def test_records_round_trip_through_json():
    task = Triplet("code_o", "def f(a):\n    return a", ["1"], ["1"], complexity={"ast_depth": 3})
    validated = Validated({"m/p0": Verdict(True, "ok", "", task), "m/p1": Verdict(False, "no_answer", "x")},
                          BufferSet(4))
    updated = Updated({"T0": Member("teacher", 2)}, {"T0": UpdateStats(loss=0.5, grad_norm=1.5, tokens=7)}, "seq")
    for record in (validated, updated, Matched([Pairing("m", "T0", "S0", "code_o", 0.4)]),
                   Proposed([_proposal()]), Checked({"a": "correct"}, {"m/p0": 1.0, "m/p1": None})):
        back = from_json(type(record), to_json(record))
        assert to_json(back) == to_json(record)
    assert from_json(Updated, to_json(updated)).population["T0"] == Member("teacher", 2)


def test_records_read_the_layout_runs_have_stored():
    """A phase result as the first release wrote it (plain JSON) decodes into the typed record."""
    stored_update = {"population": {"r.T0": {"role": "teacher", "version": 3}},
                     "stats": {"r.T0": {"loss": 0.1, "grad_norm": 2.0, "mean_abs_advantage": 0.7, "tokens": 40,
                                        "seconds": 1.5, "rollouts": 4}}, "mode": "sequential", "reused": []}
    got = from_json(PHASE_RECORDS["update"], stored_update)
    assert got.population["r.T0"].version == 3 and got.stats["r.T0"].grad_norm == 2.0
    stored_check = {"outcomes": {"x/a0": "wrong"}, "rho": {"x": 0.0}}
    assert from_json(PHASE_RECORDS["check"], stored_check).rho == {"x": 0.0}


def test_a_malformed_stored_record_names_the_field():
    with pytest.raises(CodecError, match=r"\$\.pairings\[0\]: Pairing needs the field 'student'"):
        from_json(Matched, {"pairings": [{"match_id": "m", "teacher": "T0", "task_type": "code_o"}]})
    with pytest.raises(CodecError, match=r"\$\.population\.T0\.version: expected int"):
        from_json(Updated, {"population": {"T0": {"role": "teacher", "version": "two"}}, "stats": {}})


@pytest.fixture
def db(tmp_path):
    d = JournalDB(f"sqlite:///{tmp_path / 'journal.sqlite'}")
    d.create_run("r", "population", "")
    yield d
    d.close()


def test_once_stores_then_skips(db):
    calls = []

    def phase(x):
        calls.append(x)
        return Checked({"a": "correct"}, {"t": x})

    j = Journal(db, "r")
    assert j.once(1, "check", phase, 0.5).rho == {"t": 0.5}
    assert Journal(db, "r").once(1, "check", phase, 0.9).rho == {"t": 0.5}  # a resumed run reads, never reruns
    assert calls == [0.5]
    with pytest.raises(TypeError, match="not Checked"):
        j.once(2, "check", lambda: Solved([]))
    assert j.get(2, "check") is None


def test_a_phase_worker_computes_only_its_phase(db):
    Journal(db, "r").once(1, "solve", lambda: Solved([]))
    j = PhaseJournal(db, "r", 1, "check")
    assert j.once(1, "solve", lambda: pytest.fail("stored phases are read")) == Solved([])
    with pytest.raises(PhaseDone):
        j.once(1, "check", lambda: Checked({}, {}))
    assert Journal(db, "r").get(1, "check") == Checked({}, {})
    with pytest.raises(RuntimeError, match="propose of step 2 runs before check"):
        PhaseJournal(db, "r", 2, "check").once(2, "propose", lambda: Proposed([]))


ANSWER = "<answer>```python\ndef f(a):\n    return a * 2\n```\n```input\n21\n```</answer>"


def test_validate_check_and_rewards_on_a_real_sandbox(zygote, tmp_path):
    """Phases are plain functions of records and services: validate and check run here on a real sandbox service,
    with no journal and no database."""
    from populora.store import ArtifactStore
    from services.sandbox.service import SandboxService

    cfg = load_config(preset="cpu-tiny", env=False)
    sandbox = SandboxService(zygote, cfg.tasks, cfg.sandbox)
    run = Run("r", cfg, services=type("S", (), {"sandbox": sandbox})(), store=ArtifactStore(tmp_path))
    proposed = Proposed([_proposal("m/p0", text=ANSWER), _proposal("m/p1", text="no answer here")])
    buffers = BufferSet(8)
    validated = validate(run, proposed, buffers)
    assert [validated.verdicts[p].reason for p in ("m/p0", "m/p1")] == ["ok", "no_answer"]
    task = validated.verdicts["m/p0"].task
    assert task.outputs == ["42"] and task.teacher_id == "T0" and task.task_id == "m/p0"
    assert validated.buffers.size("code_o") == 2 and buffers.size("code_o") == 1  # the input is left as it was

    solved = Solved([Attempt(f"m/p0/a{k}", "m/p0", "S0", "m", text, [1], [2, 3]) for k, text in enumerate(
        ["<think>x</think><answer>42</answer>", "<think>x</think><answer>41</answer>", "42"])])
    checked = check(run, solved, validated)
    assert [checked.outcomes[f"m/p0/a{k}"] for k in range(3)] == ["correct", "wrong", "malformed"]
    assert checked.rho == {"m/p0": pytest.approx(1 / 3)}

    batch = rollouts(cfg.rewards, proposed, validated, solved, checked)
    assert [r.reward for r in batch["T0"]] == [pytest.approx(2 / 3), -1.0]  # 1 - rho; invalid proposal
    assert [r.reward for r in batch["S0"]] == [1.0, -0.5, -1.0]
