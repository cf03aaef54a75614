"""`make run-distributed`'s command line: the preset and its steps; replica counts and the population size, from
flags or the environment, refused with exit 2 and the reason when they are not counts."""

from __future__ import annotations

import pytest

from coordinator.distributed import parse_args


def test_counts_come_from_flags_or_the_environment(monkeypatch):
    monkeypatch.delenv("POPULATION", raising=False)
    monkeypatch.setenv("TRAINERS", "2")
    monkeypatch.setenv("INFERENCE", "3")
    args = parse_args([])
    assert (args.trainers, args.inference, args.population, args.overrides) == (2, 3, None, [])
    assert parse_args(["--trainers", "4"]).trainers == 4


def test_a_population_is_half_teachers_half_students(monkeypatch):
    monkeypatch.setenv("POPULATION", "8")
    args = parse_args(["--set", "run.seed=3"])
    assert args.overrides == ["population.n_teachers=4", "population.n_students=4", "run.seed=3"]
    assert parse_args(["--population", "2"]).overrides[:2] == ["population.n_teachers=1", "population.n_students=1"]


@pytest.mark.parametrize("argv, env, reason", [
    (["--population", "3"], {}, "even number of at least 2"),
    (["--population", "0"], {}, "even number of at least 2"),
    ([], {"POPULATION": "many"}, "'many' is not a whole number"),
    ([], {"TRAINERS": "x"}, "'x' is not a whole number"),
    (["--inference", "0"], {}, "a number of at least 1"),
])
def test_bad_counts_are_refused_naming_the_reason(monkeypatch, capsys, argv, env, reason):
    for name in ("TRAINERS", "INFERENCE", "POPULATION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2 and reason in capsys.readouterr().err



@pytest.mark.parametrize("preset", ["cpu-smol", "cpu-tiny"])
def test_the_run_goes_through_its_first_evolution_unless_told_its_steps(preset):
    from coordinator.distributed import run_steps
    from populora.config import load_config

    cfg = load_config(preset=preset, env=False)
    steps = run_steps(parse_args(["--preset", preset]), cfg)
    assert steps >= 3 and steps >= cfg.evolution.every_k  # an evolution happens at step every_k
    assert run_steps(parse_args(["--preset", preset, "--steps", "5"]), cfg) == 5


def test_the_default_run_is_the_default_model_after_its_warm_start():
    from populora.config import load_config

    args = parse_args([])
    cfg = load_config(preset=args.preset, env=False)
    assert (args.preset, cfg.model.name, cfg.warmstart.enabled) == ("cpu-smol", "smollm2-135m", True)
