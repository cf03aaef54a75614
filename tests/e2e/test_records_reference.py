"""Which records an end-to-end run is compared with: the committed ones only where they were made with this
machine's echo model, else a seeded run made here, once per model and source tree."""

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
