"""Which records an end-to-end run is compared with: the committed ones only where they were made with this
machine's echo model, else a seeded run made here, once per model and source tree; and the comparison with the
committed records themselves, skipped where they were made with another echo model, failed where they differ."""

from __future__ import annotations

import json

import pytest

from tests.e2e import records


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "echo"
    path.mkdir()
    (path / "model.safetensors").write_bytes(b"weights fitted on this machine")
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_CACHE", str(tmp_path / "cache"))


def test_the_golden_records_apply_only_to_the_model_they_were_made_with(tmp_path, model, monkeypatch):
    fingerprint = tmp_path / "golden.model"
    monkeypatch.setattr(records, "GOLDEN_MODEL", fingerprint)
    fingerprint.write_text(records.model_fingerprint(model) + "\n")
    assert records.golden_applies(model)
    (model / "model.safetensors").write_bytes(b"another machine's fit")
    assert not records.golden_applies(model)
    fingerprint.unlink()
    assert not records.golden_applies(model)


def test_elsewhere_the_comparison_with_the_golden_records_is_skipped_naming_both_models(tmp_path, model,
                                                                                        monkeypatch):
    golden, fingerprint = tmp_path / "golden.json", tmp_path / "golden.model"
    golden.write_text(json.dumps({"phases": {"1/propose": "kept"}}))
    monkeypatch.setattr(records, "GOLDEN", golden)
    monkeypatch.setattr(records, "GOLDEN_MODEL", fingerprint)
    fingerprint.write_text("0" * 64 + "\n")
    here = records.model_fingerprint(model)
    with pytest.raises(pytest.skip.Exception) as skipped:
        records.golden_records(model)
    assert "the echo model differs" in str(skipped.value) and "0" * 64 in str(skipped.value) and here in str(
        skipped.value)
    fingerprint.unlink()  # no digest kept beside them: skipped too, naming this machine's model
    with pytest.raises(pytest.skip.Exception) as skipped:
        records.golden_records(model)
    assert "golden.model is missing" in str(skipped.value) and here in str(skipped.value)


def test_where_the_golden_records_apply_a_changed_run_fails_the_comparison(tmp_path, model, monkeypatch):
    golden, fingerprint = tmp_path / "golden.json", tmp_path / "golden.model"
    golden.write_text(json.dumps({"phases": {"1/propose": {"valid": 3, "loss": 0.5}}}))
    monkeypatch.setattr(records, "GOLDEN", golden)
    monkeypatch.setattr(records, "GOLDEN_MODEL", fingerprint)
    fingerprint.write_text(records.model_fingerprint(model) + "\n")
    assert not records.differences(records.golden_records(model), {"phases": {"1/propose": {"valid": 3,
                                                                                            "loss": 0.5}}})
    diff = records.differences(records.golden_records(model), {"phases": {"1/propose": {"valid": 2, "loss": 0.5}}})
    assert diff and any("1/propose" in d and "valid" in d for d in diff), diff


def test_writing_the_golden_records_again_keeps_the_run_made_here(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    (tree / "tests/e2e/golden").mkdir(parents=True)
    (tree / "tests/e2e/records.py").write_text("RULE = 1\n")
    monkeypatch.setattr(records, "ROOT", tree)
    monkeypatch.setattr(records, "SOURCES", ("tests/e2e",))
    monkeypatch.setattr(records, "GOLDEN", tree / "tests/e2e/golden/cpu_tiny_records.json")
    before = records.source_fingerprint()
    records.GOLDEN.write_text("{}\n")
    records.GOLDEN.with_suffix(".model").write_text("0" * 64 + "\n")
    assert records.source_fingerprint() == before
    (tree / "tests/e2e/records.py").write_text("RULE = 2\n")  # the code changed
    assert records.source_fingerprint() != before


def test_where_the_golden_applies_it_is_the_reference(tmp_path, model, monkeypatch, cache):
    golden = tmp_path / "golden.json"
    golden.write_text(json.dumps({"phases": {"1/propose": "kept"}}))
    monkeypatch.setattr(records, "GOLDEN", golden)
    monkeypatch.setattr(records, "GOLDEN_MODEL", tmp_path / "golden.model")
    (tmp_path / "golden.model").write_text(records.model_fingerprint(model))

    def never(_work):
        raise AssertionError("no reference run where the golden records apply")

    assert records.reference_records(model, never) == {"phases": {"1/propose": "kept"}}


def test_elsewhere_a_run_made_here_once_per_model_and_source_tree(tmp_path, model, monkeypatch, cache):
    monkeypatch.setattr(records, "GOLDEN_MODEL", tmp_path / "golden.model")
    (tmp_path / "golden.model").write_text("0" * 64)
    made = []

    def make(work):
        made.append(work)
        assert work.is_dir()
        return {"run": len(made)}

    assert records.reference_records(model, make) == {"run": 1}
    assert records.reference_records(model, make) == {"run": 1} and len(made) == 1  # from the cache
    monkeypatch.setattr(records, "source_fingerprint", lambda: "f" * 64)  # the code changed
    assert records.reference_records(model, make) == {"run": 2}
    (model / "model.safetensors").write_bytes(b"refitted")  # another model
    assert records.reference_records(model, make) == {"run": 3}
