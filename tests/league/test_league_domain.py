"""Domain math of the league: TrueSkill against the trueskill package, outcome rules, PFSP, selection, payoff."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import trueskill

from services.league.payoff import PayoffCell, update_cell
from services.league.pfsp import PfspParams, draw, f_hard, f_var, pfsp_probabilities
from services.league.ratings import (
    RatingParams,
    Result,
    Skill,
    conservative_skill,
    match_outcome,
    rate_match,
    win_probability,
    win_probability_matrix,
)
from services.league.selection import Member, n_to_replace, select_for_replacement
from tests.league.oracle import oracle_rate

PARAMS = RatingParams()


def test_environment_has_the_spec_defaults():
    env = PARAMS.environment()
    assert (env.mu, env.sigma, env.beta, env.tau, env.draw_probability) == pytest.approx(
        (25.0, 25.0 / 3, 25.0 / 6, 25.0 / 300, 0.10))
    assert env is not trueskill.global_env()


def test_ratings_equal_the_trueskill_package_over_a_random_season():
    rng = random.Random(7)
    env = PARAMS.environment()
    ours = {n: Skill(25.0, 25.0 / 3) for n in ("T0", "T1", "S0", "S1", "S2")}
    ref_env = trueskill.TrueSkill(mu=25.0, sigma=25.0 / 3, beta=25.0 / 6, tau=25.0 / 300, draw_probability=0.1)
    ref = {n: ref_env.create_rating() for n in ours}
    for _ in range(300):
        t, s = rng.choice(["T0", "T1"]), rng.choice(["S0", "S1", "S2"])
        rhos = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]) for _ in range(rng.randint(1, 4))]
        results = match_outcome(rhos, "aggregate", 0.05)
        ours[t], ours[s] = rate_match(env, ours[t], ours[s], results)
        oracle_rate(ref, t, s, rhos, ref_env)
    for name in ours:
        assert ours[name].mu == pytest.approx(ref[name].mu, abs=1e-12)
        assert ours[name].sigma == pytest.approx(ref[name].sigma, abs=1e-12)
        assert ours[name].conservative(3.0) == pytest.approx(ref_env.expose(ref[name]), abs=1e-12)


def test_win_probability_formula():
    a, b = Skill(30.0, 4.0), Skill(25.0, 6.0)
    beta = 25.0 / 6
    z = (30.0 - 25.0) / math.sqrt(2 * beta ** 2 + 16 + 36)
    expected = 0.5 * (1 + math.erf(z / math.sqrt(2)))
    assert win_probability(a, b, beta) == pytest.approx(expected, abs=1e-12)
    assert win_probability(a, b, beta) + win_probability(b, a, beta) == pytest.approx(1.0)
    assert win_probability(a, a, beta) == pytest.approx(0.5)
    m = win_probability_matrix(np.array([30.0, 25.0]), np.array([4.0, 6.0]), np.array([25.0, 30.0]),
                               np.array([6.0, 4.0]), beta)
    assert m[0, 0] == pytest.approx(expected, abs=1e-6)  # the vectorised erfc (A&S 7.1.26) is within 1.5e-7
    assert m[1, 1] == pytest.approx(1 - expected, abs=1e-6)


def test_conservative_skill():
    assert conservative_skill(25.0, 25.0 / 3) == pytest.approx(0.0)
    assert conservative_skill(30.0, 2.0, k=2.0) == pytest.approx(26.0)


@pytest.mark.parametrize("rhos,expected", [
    ([0.56], Result.STUDENT_WINS), ([0.55], Result.DRAW), ([0.5], Result.DRAW), ([0.45], Result.DRAW),
    ([0.44], Result.TEACHER_WINS), ([1.0, 0.0], Result.DRAW), ([1.0, 0.5], Result.STUDENT_WINS),
    ([0.0, 0.25, 0.5], Result.TEACHER_WINS)])
def test_aggregate_outcome_with_margin(rhos, expected):
    assert match_outcome(rhos, "aggregate", 0.05) == [expected]


def test_per_task_outcome_plays_one_game_per_task():
    assert match_outcome([1.0, 0.0, 0.5], "per_task", 0.05) == [Result.STUDENT_WINS, Result.TEACHER_WINS,
                                                                 Result.DRAW]
    with pytest.raises(ValueError, match="unknown outcome rule"):
        match_outcome([0.5], "best_of_three", 0.05)
    with pytest.raises(ValueError, match="at least one rho"):
        match_outcome([], "aggregate", 0.05)


@pytest.mark.parametrize("weighting", ["var", "hard"])
def test_pfsp_probabilities_follow_the_formula_and_sum_to_one(weighting):
    x = np.array([0.0, 0.1, 0.5, 0.9, 0.999])
    params = PfspParams(weighting, p=2.0, floor=0.01)
    probs = pfsp_probabilities(x, params)
    f = f_var if weighting == "var" else f_hard
    w = np.array([max(float(f(np.array(xi), 2.0)), 0.01) for xi in x])
    assert probs.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(probs, w / w.sum())
    assert (probs > 0).all()  # the floor keeps every pairing possible


def test_pfsp_weightings():
    assert f_var(np.array(0.5)) == pytest.approx(0.25)
    assert f_var(np.array(0.9)) == pytest.approx(0.09)
    assert f_hard(np.array(0.25), 2.0) == pytest.approx(0.5625)
    assert f_hard(np.array(0.25), 3.0) == pytest.approx(0.421875)
    with pytest.raises(ValueError, match="unknown PFSP weighting"):
        PfspParams("easy")


def test_pfsp_matrix_rows_and_mask():
    rng = np.random.default_rng(0)
    x = rng.random((50, 40))
    allowed = rng.random((50, 40)) > 0.3
    allowed[:, 0] = True
    probs = pfsp_probabilities(x, PfspParams(), allowed)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    assert (probs[~allowed] == 0).all()


def test_draw_follows_the_probabilities():
    probs = np.tile(np.array([[0.1, 0.6, 0.3]]), (20000, 1))
    idx = draw(probs, np.random.default_rng(1).random(20000))
    freq = np.bincount(idx, minlength=3) / 20000
    np.testing.assert_allclose(freq, [0.1, 0.6, 0.3], atol=0.015)
    edges = draw(np.array([[0.5, 0.5], [0.5, 0.5], [0.0, 1.0]]), np.array([0.0, 0.999999, 0.0]))
    assert edges.tolist() == [0, 1, 1]


def test_vectorised_erfc_is_within_its_bound_everywhere():
    from services.league.ratings import _erfc_inplace

    x = np.linspace(-9.0, 9.0, 36001)
    got = _erfc_inplace(x.copy())
    ref = np.array([math.erfc(v) for v in x])
    assert np.abs(got - ref).max() <= 1.5e-7
    got32 = _erfc_inplace(x.astype(np.float32))
    assert got32.dtype == np.float32 and np.abs(got32 - ref).max() <= 1e-6


def _draw_full_cdf(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The textbook inverse CDF, one row at a time: the first j whose running sum exceeds u * total."""
    out = np.empty(u.shape, dtype=np.int64)
    for i in range(weights.shape[0]):
        cum = np.cumsum(weights[i].astype(np.float64))
        for k in range(u.shape[1]):
            out[i, k] = min(int(np.searchsorted(cum, u[i, k] * cum[-1], side="right")), weights.shape[1] - 1)
    return out


@pytest.mark.parametrize("n_cols", [1, 2, 3, 7, 26, 500, 503])
def test_grouped_draw_equals_the_full_inverse_cdf(n_cols):
    rng = np.random.default_rng(n_cols)
    weights = rng.random((40, n_cols)).astype(np.float32) + 0.01
    weights[rng.random(weights.shape) < 0.2] = 0.0  # masked candidates
    weights[:, rng.integers(n_cols)] = 0.5  # every row keeps one
    u = rng.random((40, 3))
    picks = draw(weights, u)
    assert picks.shape == (40, 3)
    np.testing.assert_array_equal(picks, _draw_full_cdf(weights, u))
    assert (weights[np.arange(40)[:, None], picks] > 0).all()
    np.testing.assert_array_equal(draw(weights, u[:, 1]), picks[:, 1])  # one draw per row: a vector


def test_draw_never_lands_on_a_zero_weight_at_the_top_of_a_row():
    weights = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0], [0.0, 3.0, 0.0, 0.0]])
    u = np.array([[0.0, 0.5, np.nextafter(1.0, 0.0)]] * 3)
    picks = draw(weights, u)
    assert picks.tolist() == [[0, 1, 1], [3, 3, 3], [1, 1, 1]]


@pytest.mark.parametrize("n,gamma,expected", [(4, 0.25, 1), (8, 0.25, 2), (5, 0.25, 2), (1, 0.25, 0),
                                              (2, 0.9, 1), (3, 0.5, 2)])
def test_number_replaced(n, gamma, expected):
    assert n_to_replace(n, gamma) == expected


def test_selection_retires_the_worst_and_draws_parents_from_the_top_half():
    members = [Member(f"S{i}", float(i)) for i in range(8)]  # S7 best, S0 worst
    rng = random.Random(3)
    for _ in range(50):
        plans = select_for_replacement("student", members, 0.25, 2, rng)
        assert [p.retire_id for p in plans] == ["S0", "S1"]
        for p in plans:
            assert p.role == "student"
            assert len(p.parent_ids) == 2 and len(set(p.parent_ids)) == 2
            assert set(p.parent_ids) <= {"S7", "S6", "S5"}  # survivors S2..S7, top half S5..S7
            skills = [int(pid[1:]) for pid in p.parent_ids]
            assert skills[0] > skills[1]  # better first


def test_selection_with_a_single_survivor_gives_one_parent():
    plans = select_for_replacement("teacher", [Member("T0", 1.0), Member("T1", 2.0)], 0.5, 2, random.Random(0))
    assert [(p.retire_id, p.parent_ids) for p in plans] == [("T0", ["T1"])]
    assert select_for_replacement("both", [Member("B", 0.0)], 0.25, 2, random.Random(0)) == []


def test_payoff_is_an_exponentially_weighted_mean():
    cell = PayoffCell()
    assert cell.solve_rate is None
    rhos = [1.0, 0.0, 0.5, 0.25]
    for rho in rhos:
        cell = update_cell(cell, rho, 0.9)
    weights = [0.9 ** (len(rhos) - 1 - i) for i in range(len(rhos))]
    assert cell.solve_rate == pytest.approx(sum(w * r for w, r in zip(weights, rhos)) / sum(weights))
    assert cell.matches == 4
    assert update_cell(PayoffCell(), 0.3, 0.5).solve_rate == pytest.approx(0.3)


@pytest.mark.parametrize("params", [RatingParams(), RatingParams(mu=0.0, sigma=2.0, beta=1.5, tau=0.2,
                                                                 draw_probability=0.3)])
def test_closed_form_game_equals_the_factor_graph_everywhere(params):
    """rate_game's closed form against trueskill.rate_1vs1 on a grid of skills, including lopsided ones."""
    from services.league.ratings import rate_game

    env = params.environment()
    for mu_t, sg_t, mu_s, sg_s in [(25, 8.3, 25, 8.3), (40, 1.0, 5, 1.0), (5, 0.5, 45, 0.5), (25, 0.1, 26, 12.0),
                                   (100, 1.0, 0, 1.0), (30, 3.0, 20, 6.0)]:
        for result in Result:
            t, s = rate_game(env, Skill(mu_t, sg_t), Skill(mu_s, sg_s), result)
            rt, rs = env.create_rating(mu_t, sg_t), env.create_rating(mu_s, sg_s)
            try:
                if result is Result.STUDENT_WINS:
                    rs, rt = trueskill.rate_1vs1(rs, rt, env=env)
                else:
                    rt, rs = trueskill.rate_1vs1(rt, rs, drawn=result is Result.DRAW, env=env)
            except FloatingPointError:  # beyond the float backend: we keep the ratings instead of failing
                assert (t, s) == (Skill(mu_t, sg_t), Skill(mu_s, sg_s))
                continue
            for ours, ref in ((t, rt), (s, rs)):
                assert ours.mu == pytest.approx(ref.mu, rel=1e-9, abs=1e-9), (mu_t, mu_s, result)
                assert ours.sigma == pytest.approx(ref.sigma, rel=1e-9, abs=1e-9), (mu_t, mu_s, result)
