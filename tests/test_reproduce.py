"""Comparing two runs' records (populora/reproduce.py): clock readings left out, the first record that departs
named with its path and both values, floats bit for bit or within a tolerance."""

from populora.reproduce import differences, first_difference, normal


def test_records_are_compared_without_clock_readings_or_the_cache():
    a = {"1/update": {"stats": {"x": {"loss": 1.0, "seconds": 2.0}}, "served_ms": 5.0, "sandbox_cpu_seconds": 0.3}}
    b = {"1/update": {"stats": {"x": {"loss": 1.0, "seconds": 3.0}}, "served_ms": 9.0, "sandbox_cpu_seconds": 0.4}}
    assert normal(a) == normal(b)
    # the first run of a machine fits the warm start, the next finds it in the cache: the same adapter
    assert normal({"0/warmstart": {"cached": False, "digest": "d"}}) == normal({"0/warmstart": {"cached": True,
                                                                                               "digest": "d"}})
    assert normal(a) != normal({"1/update": {"stats": {"x": {"loss": 1.5, "seconds": 2.0}}}})


def test_long_integer_lists_are_kept_as_a_digest():
    ids = list(range(20))
    kept = normal({"ids": ids, "short": [1, 2], "t": (1, 2)}, digest_over=16)
    assert kept["ids"].startswith("sha256:20:") and kept["short"] == [1, 2] and kept["t"] == [1, 2]
    assert kept["ids"] != normal({"ids": ids[::-1]}, digest_over=16)["ids"]
    assert normal({"ids": ids})["ids"] == ids


def test_the_first_record_that_departs_in_the_order_the_run_made_them():
    first = {"0/seed": {"n": 1}, "1/propose": {"texts": ["a", "b"], "lp": 0.5}, "1/check": {"rho": 0.25}}
    same = {k: dict(v) for k, v in first.items()}
    assert first_difference(first, same) is None
    # later records differ too: the first in the run's order is named, with the path inside it and both values
    again = {**same, "1/propose": {"texts": ["a", "c"], "lp": 0.5}, "1/check": {"rho": 0.5}}
    assert first_difference(first, again) == "1/propose/texts[1]: 'b' expected, 'c' got"
    assert first_difference(first, {**same, "0/seed": {"n": 1, "m": 2}}) == "0/seed/m: unexpected"
    assert first_difference(first, {"0/seed": {"n": 1}}) == "1/propose: missing"
    assert first_difference({"0/seed": {}}, {"0/seed": {}, "1/match": {}}) == "1/match: unexpected"


def test_floats_bit_for_bit_or_within_a_tolerance():
    a, b = {"loss": 0.1 + 0.2}, {"loss": 0.3}
    assert first_difference({"1/update": a}, {"1/update": b}) == "1/update/loss: 0.30000000000000004 expected, 0.3 got"
    assert first_difference({"1/update": a}, {"1/update": b}, rel_tol=1e-6) is None
    assert differences(a, b) == [] and differences(a, b, rel_tol=0, abs_tol=0) != []
    assert differences([1, 2], [1]) == [": 2 items expected, 1 got"]
    assert len(differences({str(i): i for i in range(30)}, {str(i): -i - 1 for i in range(30)}, limit=5)) == 5
