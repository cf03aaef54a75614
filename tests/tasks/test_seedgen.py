"""The seed-program generator (spec 13): determinism, coverage, every program valid in the real sandbox, the
held-out split kept apart, and warm-start examples that are valid proposals and correct answers."""

from __future__ import annotations

import pytest

from populora.config import load_config
from populora.tasks import Attempt, Proposal, check_answers, validate_proposals
from populora.tasks.seedgen import (
    CONSTRUCTS,
    HELDOUT_TEMPLATES,
    TEMPLATES,
    WARM_TEMPLATES,
    GeneratorError,
    format_examples,
    generate_programs,
    generate_word_problems,
    heldout_tasks,
    seed_proposals,
    triplets_from_verdicts,
    verify_programs,
)
from populora.tasks.triplet import CODE_TASK_TYPES as TASK_TYPES  # the types of program templates

SETTINGS = load_config(overrides=["tasks.timeout_s=2.0"], env=False).tasks


def test_same_seed_same_programs_other_seed_others():
    a = generate_programs(40, seed=3, n_inputs=10)
    assert a == generate_programs(40, seed=3, n_inputs=10)
    b = generate_programs(40, seed=4, n_inputs=10)
    assert [p.program for p in a] != [p.program for p in b]
    assert generate_programs(40, seed=3, stream="code_i") != a  # streams are independent sequences
    assert all(len(set(p.inputs)) == 10 for p in a)  # code_f needs N distinct inputs


def test_both_splits_cover_every_construct_and_never_meet():
    assert set(WARM_TEMPLATES) | set(HELDOUT_TEMPLATES) == set(TEMPLATES)
    assert not set(WARM_TEMPLATES) & set(HELDOUT_TEMPLATES)
    for split in (WARM_TEMPLATES, HELDOUT_TEMPLATES):
        covered = set().union(*(TEMPLATES[name].constructs for name in split))
        assert covered == set(CONSTRUCTS), sorted(set(CONSTRUCTS) - covered)
    warm = generate_programs(300, seed=0, split="warm")
    held = generate_programs(300, seed=0, split="heldout")
    assert {p.template for p in warm} == set(WARM_TEMPLATES)
    assert {p.template for p in held} == set(HELDOUT_TEMPLATES)
    assert not {p.program for p in warm} & {p.program for p in held}
    with pytest.raises(ValueError, match="unknown split"):
        generate_programs(1, seed=0, split="test")


@pytest.mark.parametrize("split", ["warm", "heldout"])
def test_every_generated_program_is_a_valid_task_in_the_sandbox(zygote, split):
    """Two programs of every template per task type, through proposal validation (spec 3) in the real sandbox."""
    n = 2 * len(TEMPLATES)
    for tt in TASK_TYPES:
        programs = generate_programs(n, seed=11, split=split, n_inputs=SETTINGS.code_f_inputs if tt == "code_f"
                                     else 1, stream=tt)
        tasks = verify_programs(programs, tt, zygote.run, SETTINGS)
        assert len(tasks) == n and all(t.task_type == tt for t in tasks)
        assert all(len(t.outputs) == len(p.inputs) for t, p in zip(tasks, programs))


def test_a_program_the_verifier_rejects_is_reported_with_its_template(zygote):
    strict = load_config(overrides=["tasks.max_output_repr=1"], env=False).tasks
    programs = generate_programs(3, seed=0)
    with pytest.raises(GeneratorError, match="template") as err:
        verify_programs(programs, "code_o", zygote.run, strict)
    assert "output_too_long" in str(err.value)


def test_heldout_tasks_come_from_the_heldout_templates_with_verifier_outputs(zygote):
    tasks = heldout_tasks(9, seed=5, runner=zygote.run, settings=SETTINGS)
    assert [t.task_type for t in tasks] == list(TASK_TYPES) * 3
    assert all(t.task_id.split("-")[1] in HELDOUT_TEMPLATES for t in tasks)
    again = heldout_tasks(9, seed=5, runner=zygote.run, settings=SETTINGS)
    assert [t.to_dict() for t in tasks] == [t.to_dict() for t in again]
    # the outputs are what the sandbox computes for f(input)
    o = next(t for t in tasks if t.task_type == "code_o")
    [check] = check_answers([Attempt("a", o, f"<think>x</think><answer>{o.outputs[0]}</answer>")], SETTINGS,
                            zygote.run)
    assert check.outcome == "correct"
    assert heldout_tasks(0, seed=5, runner=zygote.run, settings=SETTINGS) == []


def test_word_problems_are_valid_math_w_tasks_and_the_examples_right(zygote):
    """Every word template, twice, through math_w validation (spec 18) in the real sandbox and checker; the warm start's
    student examples box the verifier's answer, and the checker judges them right."""
    from populora.tasks.mathcheck import MathChecker
    from populora.tasks.seed_templates.words import WORD_TEMPLATES

    settings = load_config(overrides=["tasks.task_types=[math_w]", "tasks.timeout_s=3"], env=False).tasks
    programs = generate_word_problems(2 * len(WORD_TEMPLATES), seed=3)
    assert {p.template for p in programs} == set(WORD_TEMPLATES) and generate_word_problems(5, 3) == programs[:5]
    assert len({p.statement for p in programs}) == len(programs)
    with MathChecker(workers=2) as checker:
        verdicts = validate_proposals(seed_proposals(programs, "math_w"), settings, zygote.run, checker)
        assert all(v.valid for v in verdicts), [(v.reason, v.detail) for v in verdicts if not v.valid]
        tasks = triplets_from_verdicts(programs, "math_w", [(v.valid, v.reason, v.detail, v.task) for v in verdicts])
        examples = format_examples({"math_w": list(zip(programs, tasks))}, 8, seed=0, n_references=2,
                                   teacher_fraction=0.5, n_inputs=10)
        by_statement = {t.message: t for t in tasks}
        attempts = [Attempt(f"a{i}", by_statement[e.messages[-1][1].split("\n")[0]], e.response)
                    for i, e in enumerate(examples) if e.role == "student"]
        assert len(attempts) == 4 and all("\\boxed{" in a.response_text for a in attempts)
        assert {c.outcome for c in check_answers(attempts, settings, zygote.run, checker)} == {"correct"}
    teachers = [e for e in examples if e.role == "teacher"]
    assert all("```problem" in e.messages[-1][1] for e in teachers)  # the references are earlier problems


def test_warm_start_examples_are_valid_proposals_and_correct_answers(zygote):
    tasks = {}
    for tt in TASK_TYPES:
        programs = generate_programs(4, seed=2, n_inputs=SETTINGS.code_f_inputs if tt == "code_f" else 1, stream=tt)
        tasks[tt] = list(zip(programs, verify_programs(programs, tt, zygote.run, SETTINGS)))
    examples = format_examples(tasks, 24, seed=0, n_references=2, teacher_fraction=0.5,
                               n_inputs=SETTINGS.code_f_inputs)
    teachers = [e for e in examples if e.role == "teacher"]
    students = [e for e in examples if e.role == "student"]
    assert len(teachers) == len(students) == 12
    assert {e.task_type for e in teachers} == {e.task_type for e in students} == set(TASK_TYPES)
    given = {p.program for p, _ in tasks["code_f"]}
    verdicts = validate_proposals([
        Proposal(f"p{i}", e.task_type, e.response,
                 given_program=next(g for g in given if g in e.messages[-1][1]) if e.task_type == "code_f" else "")
        for i, e in enumerate(teachers)], SETTINGS, zygote.run)
    assert all(v.valid for v in verdicts), [v.reason for v in verdicts]
    by_prompt = {}
    for tt, pairs in tasks.items():
        for _, t in pairs:
            by_prompt[(tt, t.program, tuple(t.inputs))] = t
    attempts = []
    for i, e in enumerate(students):
        task = next(t for (tt, prog, _), t in by_prompt.items() if tt == e.task_type and
                    (prog in e.messages[-1][1] or (tt == "code_f" and t.message in e.messages[-1][1])))
        attempts.append(Attempt(f"a{i}", task, e.response))
    assert all(c.outcome == "correct" for c in check_answers(attempts, SETTINGS, zygote.run))
    assert all(e.messages[0][0] == "system" and e.messages[-1][0] == "user" for e in examples)
    with pytest.raises(ValueError):
        format_examples({}, 4, seed=0, n_references=1, teacher_fraction=0.5, n_inputs=10)
