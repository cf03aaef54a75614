"""End-to-end, embedded: a run that plays math_w beside code_o (spec 18), on the echo model fitted to math_w's prompts
too: math_w proposed, validated (all but a step's first copy of the one problem are duplicates), solved, checked by
the math checker, rewarded, rated, and shown per type in metrics.jsonl and the report."""

import json

import pytest
import sqlalchemy as sa

from coordinator.run.journal import Journal
from coordinator.run.phases import rollouts
from populora.config import load_config
from tests.e2e.conftest import e2e_overrides
from tests.e2e.echo_model import echo_model_dir
from tests.e2e.records import train


@pytest.fixture(scope="module")
def math_echo_model():
    """The echo model fitted to the code prompts and math_w's (built once per machine, then cached)."""
    return str(echo_model_dir(with_math=True))


@pytest.mark.slow
def test_a_run_plays_math_w_beside_code_o(tmp_path, math_echo_model):
    # eight proposals a teacher: the echo model refuses about half the time (more in some steps), and a step needs one
    # math_w proposal that is not a refusal (all sixteen refuse with probability below 1e-3)
    over = [*e2e_overrides(tmp_path, math_echo_model), "tasks.task_types=[code_o,math_w]",
            "tasks.proposals_per_teacher=8"]
    cfg = load_config(preset="cpu-tiny", overrides=over, env=False)
    state, run_dir = train(cfg, "math", 2)
    j = Journal(state, "math")

    seeded = j.get(0, "seed")
    assert set(seeded.buffers.to_json()["buffers"]) == {"code_i", "code_o", "code_f", "math_w"}
    for s in (1, 2):
        proposed = j.get(s, "propose")
        validated, checked, rated = j.get(s, "validate"), j.get(s, "check"), j.get(s, "rate")
        maths = [p for p in proposed.proposals if p.task_type == "math_w"]
        assert len(maths) == 2 * 8  # 2 teachers x 8 proposals
        verdicts = [validated.verdicts[p.id] for p in maths]
        valid = [v for v in verdicts if v.valid]
        reasons = {v.reason for v in verdicts}
        # the echo model writes one problem or a refusal: the step's first copy is valid, the others duplicates
        assert len(valid) == 1 and reasons <= {"ok", "duplicate", "no_answer"}, reasons
        task = valid[0].task
        assert (task.outputs, task.message.startswith("Tom has 12 marbles"), task.inputs) == (["7"], True, [])
        assert "math_w" in validated.buffers.to_json()["buffers"]
        p = next(p for p in maths if validated.verdicts[p.id].valid)
        outcomes = {a: o for a, o in checked.outcomes.items() if a.startswith(p.id + "/")}
        assert len(outcomes) == 2 and set(outcomes.values()) <= {"correct", "wrong"}  # boxed 7 or boxed 8
        assert checked.rho[p.id] == sum(o == "correct" for o in outcomes.values()) / 2
        assert p.match_id in rated.reported  # the math_w match was rated
        # rewards: the valid proposal 1 - rho; a duplicate or a refusal 0 (spec 18), not the code types' -1
        batch = rollouts(cfg.rewards, proposed, validated, j.get(s, "solve"), checked)
        teacher_rewards = {r.reward for rows in batch.values() for r in rows
                           if r.role == "teacher" and r.task_type == "math_w"}
        assert teacher_rewards <= {0.0, 1.0 - checked.rho[p.id]} and -1.0 not in teacher_rewards

    engine = sa.create_engine(cfg.league_db_url)
    with engine.connect() as c:
        types = {r.task_type for r in c.execute(sa.text(
            "SELECT task_type FROM league_matches WHERE run_id='math'")).all()}
    engine.dispose()
    assert types == {"code_o", "math_w"}

    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[0]["seed_sizes"].keys() == {"code_o", "math_w"}
    for r in rows[1:]:
        m = r["task_types"]["math_w"]
        assert set(r["task_types"]) == {"code_o", "math_w"}
        assert m["proposals"] == 16 and m["valid_rate"] == 1 / 16 and m["solve_rate"] is not None
        assert m["rejections"].get("duplicate", 0) + m["rejections"].get("no_answer", 0) == 15
    from coordinator.record.report import write_report

    assert "math_w solve" in write_report(run_dir).read_text()
