"""The published benchmark files are read from where a user keeps them: `--data FILE`, or the publisher's file name in
the directory $POPULORA_BENCHMARKS names. The tree carries no copy; a missing file is an error that says what was
looked for where, how to give it and where its publisher offers it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from populora.evals import load_problems
from populora.evals.datafiles import BENCHMARKS_ENV, PUBLISHED
from populora.evals.problem import BenchmarkError
from tests.conftest import published_benchmarks
from tests.evals.own_rows import CRUXEVAL_LAYOUT_ROWS, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
WHERE = {"cruxeval.jsonl": "github.com/facebookresearch/cruxeval", "MbppPlus.jsonl": "github.com/evalplus/mbppplus_release",
         "math/gsm8k.test.jsonl": "github.com/openai/grade-school-math", "math/svamp.test.jsonl": "github.com/arkilpatel/SVAMP",
         "math/math500.test.jsonl": "github.com/openai/prm800k"}


def test_each_file_benchmark_names_its_publishers_file():
    assert PUBLISHED == {"cruxeval-o": "cruxeval.jsonl", "cruxeval-i": "cruxeval.jsonl", "mbpp-plus": "MbppPlus.jsonl",
                         "gsm8k": "math/gsm8k.test.jsonl", "svamp": "math/svamp.test.jsonl",
                         "math500": "math/math500.test.jsonl"}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_without_the_variable_the_error_says_how_to_give_the_file_and_where_it_is_published(name, monkeypatch):
    monkeypatch.delenv(BENCHMARKS_ENV, raising=False)
    with pytest.raises(BenchmarkError) as e:
        load_problems(name)
    message = str(e.value)
    for words in (PUBLISHED[name], "--data", BENCHMARKS_ENV, "is not set", WHERE[PUBLISHED[name]]):
        assert words in message, message


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_a_directory_without_the_file_is_named_with_the_path_looked_for(name, tmp_path, monkeypatch):
    (tmp_path / "other.jsonl").write_text("{}\n")
    monkeypatch.setenv(BENCHMARKS_ENV, str(tmp_path))
    with pytest.raises(BenchmarkError) as e:
        load_problems(name)
    message = str(e.value)
    for words in (str(tmp_path / PUBLISHED[name]), "--data", BENCHMARKS_ENV, WHERE[PUBLISHED[name]]):
        assert words in message, message


def test_the_file_is_read_from_the_directory_and_data_takes_precedence(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "cruxeval.jsonl", CRUXEVAL_LAYOUT_ROWS)
    monkeypatch.setenv(BENCHMARKS_ENV, str(tmp_path))
    got = load_problems("cruxeval-o")
    assert [p.id for p in got] == [r["id"] for r in CRUXEVAL_LAYOUT_ROWS]
    assert got[0].where == f"{tmp_path / 'cruxeval.jsonl'}:1"
    other = write_jsonl(tmp_path / "elsewhere.jsonl", CRUXEVAL_LAYOUT_ROWS[:2])
    assert len(load_problems("cruxeval-i", other)) == 2  # --data, not the directory's file
    with pytest.raises(BenchmarkError, match="does not exist"):  # a --data that is not there is not looked up
        load_problems("cruxeval-o", str(tmp_path / "nope.jsonl"))


def test_the_published_files_load_whole():
    """As the publishers release them (docs/eval.md): CRUXEval's 800 rows, 6 of them set apart for cruxeval-i; MBPP+'s
    378."""
    directory = published_benchmarks("cruxeval.jsonl", "MbppPlus.jsonl")
    assert len(load_problems("cruxeval-o")) == 800
    crux_i = load_problems("cruxeval-i")
    assert len(crux_i) == 800 and sum(bool(p.set_apart) for p in crux_i) == 6  # docs/eval.md: 794 scored
    assert len(load_problems("mbpp-plus")) == 378
    assert load_problems("cruxeval-o", limit=1)[0].where == f"{directory / 'cruxeval.jsonl'}:1"


def test_the_tree_carries_no_published_benchmark_file():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    pattern = re.compile(r"(cruxeval|mbppplus|humanevalplus|gsm8k|math500|svamp)[^/]*\.(jsonl|json|gz)$", re.I)
    assert not [f for f in listed.stdout.splitlines() if pattern.search(f)]
    assert not (ROOT / "populora" / "evals" / "data").exists()


def test_an_experiment_without_its_benchmark_file_stops_before_any_arm_trains(tmp_path, monkeypatch, capsys):
    """The experiment presets score CRUXEval-O and -I (eval.benchmarks): their file is looked up as `populora eval`
    looks it up, and a missing one is refused at the start, not after the arms trained."""
    from coordinator.cli import main

    monkeypatch.delenv(BENCHMARKS_ENV, raising=False)
    code = main(["experiment", "--preset", "cpu-tiny", "--budget", "flops=1e12",
                 "--set", f"run.output_dir={tmp_path / 'runs'}"])
    err = capsys.readouterr().err
    assert code == 2 and "cruxeval.jsonl" in err and BENCHMARKS_ENV in err and "--data" in err, err
    assert not (tmp_path / "runs").exists()
