"""The benches' printed figures keep the precision their ratios are checked at (bench/harness.py)."""
import json
import math

import pytest

from bench.harness import emit, rounded


@pytest.mark.parametrize("value", [0.04454961541635404, 123.456789, 7.1e-9, -0.000123456, 0.999949, 31.0])
def test_a_rounded_figure_keeps_four_significant_figures(value):
    assert rounded(value, 3) == pytest.approx(value, rel=5e-4)


def test_decimals_still_apply_where_they_keep_more():
    assert rounded(123.456789, 3) == 123.457
    assert rounded(0.5, 3) == 0.5


@pytest.mark.parametrize("value", [0.0, math.inf, -math.inf])
def test_zero_and_infinities_pass_through(value):
    assert rounded(value, 3) == value
    assert math.isnan(rounded(math.nan, 3))


def test_a_ratio_of_printed_figures_matches_the_printed_ratio(capsys):
    a, b = 0.0131234567, 0.29456789
    emit({"a": a, "b": b, "ratio": a / b, "n": 3}, digits=3)
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 3
    assert out["ratio"] == pytest.approx(out["a"] / out["b"], rel=1e-3)
