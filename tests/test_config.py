import pytest

from coordinator.cli import main as cli
from populora.config import Config, ConfigError, config_from_yaml, field_docs, list_presets, load_config


@pytest.mark.parametrize("preset", ["cpu-tiny", "cpu-smol", "cpu-smol-experiment", "gpu-7b-4t4s", "gpu-7b-baseline"])
def test_presets_load(preset):
    cfg = load_config(preset=preset, env=False)
    assert isinstance(cfg, Config)
    assert preset in list_presets()


def test_preset_contents():
    tiny = load_config(preset="cpu-tiny", env=False)
    assert tiny.model.name == "tiny" and tiny.population.n_teachers == 2 and tiny.population.n_students == 2
    smol = load_config(preset="cpu-smol", env=False)
    assert smol.model.name == "smollm2-135m"
    gpu = load_config(preset="gpu-7b-4t4s", env=False)
    assert gpu.generation.backend == "vllm" and gpu.lora.rank == 32 and gpu.population.n_teachers == 4
    base = load_config(preset="gpu-7b-baseline", env=False)
    assert base.run.mode == "baseline" and base.rewards.teacher_reward == "learnability"


def test_spec_choice_defaults():
    cfg = Config()
    assert cfg.tasks.n_samples == 4
    assert cfg.tasks.timeout_s == 5.0
    assert cfg.tasks.deterministic_runs == 2
    assert cfg.tasks.max_output_repr == 1000
    assert cfg.trainer.lr == 1e-5
    assert cfg.league.outcome == "aggregate" and cfg.league.margin == 0.05
    assert cfg.evolution.every_k == 10 and cfg.evolution.gamma == 0.25 and cfg.evolution.tournament_size == 2
    assert cfg.evolution.epsilon == 0.1 and cfg.evolution.m4_epsilon == 0.15 and cfg.evolution.dare_p == 0.7
    assert (cfg.evolution.x4_eta_min, cfg.evolution.x4_eta_max) == (1.0, 1.5)
    assert cfg.league.draw_probability == 0.10 and abs(cfg.league.beta - 25 / 6) < 1e-12


def test_every_field_documented():
    docs = field_docs()
    missing = [k for k, v in docs.items() if not v.strip()]
    assert not missing, f"fields without documentation: {missing}"


def test_overrides():
    cfg = load_config(preset="cpu-tiny", overrides=["lora.rank=4", "league.pfsp=hard",
                                                     "tasks.task_types=[code_o]"], env=False)
    assert cfg.lora.rank == 4 and cfg.league.pfsp == "hard" and cfg.tasks.task_types == ["code_o"]


def test_env_overrides(monkeypatch):
    monkeypatch.setenv("POPULORA__STORE__ROOT", "/data/store")
    monkeypatch.setenv("POPULORA__LEAGUE__MARGIN", "0.1")
    cfg = load_config(preset="cpu-tiny")
    assert cfg.store.root == "/data/store" and cfg.league.margin == 0.1


def test_secrets_from_files(monkeypatch, tmp_path):
    """NAME_FILE=PATH reads NAME from a file (container secrets kept out of every process's environment)."""
    (tmp_path / "token").write_text("s3cret-token\n")
    (tmp_path / "db").write_text("postgresql+psycopg://u:p%40ss@db:5432/x")
    monkeypatch.delenv("POPULORA_TOKEN", raising=False)
    monkeypatch.setenv("POPULORA_TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setenv("POPULORA__LEAGUE__DB_URL_FILE", str(tmp_path / "db"))
    cfg = load_config(preset="cpu-tiny")
    assert cfg.services.token == "s3cret-token" and cfg.league_db_url == "postgresql+psycopg://u:p%40ss@db:5432/x"
    assert config_from_yaml(cfg.to_yaml()).services.token == "s3cret-token"


@pytest.mark.parametrize("setup, message", [
    ({"POPULORA_TOKEN_FILE": "/nonexistent/token"}, "POPULORA_TOKEN_FILE=/nonexistent/token: cannot read the file"),
    ({"POPULORA_TOKEN_FILE": "{dir}/t", "POPULORA_TOKEN": "x"}, "both POPULORA_TOKEN and POPULORA_TOKEN_FILE"),
])
def test_bad_secret_files_are_named(monkeypatch, tmp_path, setup, message):
    (tmp_path / "t").write_text("x")
    monkeypatch.delenv("POPULORA_TOKEN", raising=False)
    for name, value in setup.items():
        monkeypatch.setenv(name, value.format(dir=tmp_path))
    with pytest.raises(ConfigError) as e:
        load_config(preset="cpu-tiny")
    assert message in str(e.value)


@pytest.mark.parametrize("override, field, allowed", [
    ("league.pfsp=bogus", "league.pfsp", "'var' or 'hard'"),
    ("generation.backend=tgi", "generation.backend", "'hf' or 'vllm'"),
    ("lora.rank=0", "lora.rank", "greater than or equal to 1"),
    ("lora.rankk=3", "lora.rankk", "unknown field"),
    ("evolution.operator_mix={M9: 1}", "evolution.operator_mix", "allowed"),
])
def test_invalid_values_name_the_field(override, field, allowed):
    with pytest.raises(ConfigError) as e:
        load_config(preset="cpu-tiny", overrides=[override], env=False)
    assert field in str(e.value) and allowed in str(e.value)


def test_unknown_preset_and_bad_override():
    with pytest.raises(ConfigError, match="allowed"):
        load_config(preset="nope", env=False)
    with pytest.raises(ConfigError, match="form"):
        load_config(preset="cpu-tiny", overrides=["lora.rank"], env=False)


def test_cli_show_and_invalid(capsys):
    assert cli(["config", "show", "--preset", "cpu-smol"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m" in out and "n_teachers: 2" in out
    assert cli(["config", "show", "--preset", "cpu-smol", "--set", "league.outcome=best_of"]) == 2
    err = capsys.readouterr().err
    assert "league.outcome" in err and "'aggregate' or 'per_task'" in err


def test_config_file_roundtrip(tmp_path):
    cfg = load_config(preset="gpu-7b-4t4s", env=False)
    path = tmp_path / "c.yaml"
    path.write_text(cfg.to_yaml())
    assert load_config(path=path, env=False) == cfg


def test_partial_service_endpoint_keeps_defaults():
    cfg = load_config(preset="cpu-tiny", overrides=["services.evolver.metrics_port=9999"], env=False)
    assert cfg.services.evolver.port == 50055 and cfg.services.evolver.metrics_port == 9999
    cfg = load_config(preset="cpu-tiny", overrides=["services.inference.port=6000"], env=False)
    assert cfg.services.inference.metrics_port == 9101


def test_a_reproducible_run_takes_no_thread_count_from_the_load():
    """run.reproducible: -1 (the free cores, which follow the load) becomes one thread; fixed counts stay."""
    assert load_config(preset="cpu-smol", env=False).generation.threads == -1
    cfg = load_config(preset="cpu-smol", env=False, overrides=["run.reproducible=true", "trainer.threads=-1"])
    assert (cfg.generation.threads, cfg.trainer.threads) == (1, 1)
    cfg = load_config(preset="cpu-smol", env=False, overrides=["run.reproducible=true", "generation.threads=2",
                                                             "trainer.threads=0"])
    assert (cfg.generation.threads, cfg.trainer.threads) == (2, 0)
    assert load_config(preset="cpu-smol-experiment", env=False).run.reproducible


def test_members_may_start_at_ranks_of_their_role_and_every_rank_is_known_at_the_start():
    """Spec 9, "Mixed ranks": per-role ranks cycled over the members, the run's ranks (the initial ones, the warm
    start's lora.rank, evolution.ranks) and the serving rank; R1 needs a second rank; one rank stays the default."""
    cfg = load_config(preset="cpu-tiny", env=False)
    assert (cfg.lora.teacher_ranks, cfg.lora.student_ranks, cfg.evolution.ranks) == ([], [], [])
    assert cfg.ranks == [8] and cfg.serving_rank == 32 and cfg.lora.initial_rank("teacher", 3) == 8
    cfg = load_config(preset="cpu-tiny", env=False, overrides=[
        "lora.teacher_ranks=[8, 64]", "lora.student_ranks=[16]", "evolution.ranks=[128]"])
    assert [cfg.lora.initial_rank("teacher", i) for i in range(3)] == [8, 64, 8]
    assert cfg.lora.initial_rank("student", 5) == 16 and cfg.lora.initial_rank("both", 0) == 8
    assert cfg.ranks == [8, 16, 64, 128] and cfg.serving_rank == 128
    with pytest.raises(ConfigError, match="R1"):
        load_config(preset="cpu-tiny", env=False, overrides=["evolution.operator_mix={M1: 1, R1: 1}"])
    assert load_config(preset="cpu-tiny", env=False, overrides=["evolution.operator_mix={R1: 1}",
                                                                "evolution.ranks=[16]"]).ranks == [8, 16]
    with pytest.raises(ConfigError, match="outside 1..512"):
        load_config(preset="cpu-tiny", env=False, overrides=["lora.teacher_ranks=[0, 8]"])
    with pytest.raises(ConfigError, match="crossover_rank"):
        load_config(preset="cpu-tiny", env=False, overrides=["evolution.crossover_rank=widest"])
    assert [load_config(env=False, overrides=[f"evolution.crossover_rank={rule}"]).evolution.crossover_child_rank(
        [16, 64, 8]) for rule in ("first", "larger", "smaller")] == [16, 64, 8]
