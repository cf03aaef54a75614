"""The published benchmark files shipped with the harness: read by default, identical to their releases (the shared
copy, where the machine has it), and shipped with their attribution and licences."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from populora.evals import load_problems
from populora.evals.datafiles import SHIPPED, SHIPPED_DIR

SHARED = Path(__file__).resolve().parents[3] / "shared" / "benchmarks"


def test_cruxeval_and_mbpp_plus_load_without_a_data_file():
    assert len(load_problems("cruxeval-o")) == 800
    crux_i = load_problems("cruxeval-i")
    assert len(crux_i) == 800 and sum(bool(p.set_apart) for p in crux_i) == 6  # docs/eval.md: 794 scored
    assert len(load_problems("mbpp-plus")) == 378
    # --data still takes another copy
    assert len(load_problems("cruxeval-o", data=str(SHIPPED_DIR / "cruxeval.jsonl"), limit=5)) == 5


@pytest.mark.parametrize("name", sorted(set(SHIPPED.values())))
def test_each_shipped_file_is_its_release_byte_for_byte(name):
    readme = (SHIPPED_DIR / "README.md").read_text()
    digest = hashlib.sha256((SHIPPED_DIR / name).read_bytes()).hexdigest()
    assert f"`{name}`" in readme and digest in readme  # the README states what is shipped, with its digest
    if (SHARED / name).is_file():
        assert digest == hashlib.sha256((SHARED / name).read_bytes()).hexdigest()


def test_the_licences_travel_with_the_files():
    assert "Copyright (c) 2023 Meta" in (SHIPPED_DIR / "LICENSE-CRUXEval").read_text()
    assert "Apache License" in (SHIPPED_DIR / "LICENSE-Apache-2.0").read_text()
    assert "creativecommons.org/licenses/by/4.0" in (SHIPPED_DIR / "README.md").read_text()
