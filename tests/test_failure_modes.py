"""Failure categories and example picks, against cases worked out by hand."""

import pytest

from checkworthy.method import failure_modes as fm

#         gold, baseline, nnppi -> category
CASES = [(0, 1, 0, "fixed_fp"), (1, 0, 1, "fixed_fn"), (0, 1, 1, "persistent"), (1, 0, 0, "persistent"),
         (1, 1, 0, "regression"), (0, 0, 1, "regression"), (1, 1, 1, "correct"), (0, 0, 0, "correct")]


def test_classify_every_combination():
    y, b, n, expected = zip(*CASES)
    assert fm.classify(y, b, n).tolist() == list(expected)


def test_counts_per_category_and_gold_class():
    y, b, n, _ = zip(*CASES)
    c = fm.counts(y, fm.classify(y, b, n))
    assert c[("persistent", "all")] == 2 and c[("persistent", "0")] == 1 and c[("persistent", "1")] == 1
    assert c[("regression", "all")] == 2 and c[("fixed_fp", "0")] == 1 and c[("fixed_fp", "1")] == 0
    assert sum(c[(k, "all")] for k in (*fm.CATEGORIES, "correct")) == len(CASES)


def test_examples_are_the_clearest_first_ties_by_claim_id():
    cats = ["fixed_fp", "fixed_fp", "fixed_fp", "persistent", "persistent", "correct"]
    ids = [30, 10, 20, 40, 50, 60]
    score = [0.9, 0.7, 0.8, 0.9, 0.2, 0.5]
    theta = [0.2, 0.3, 0.4, 0.6, 0.05, 0.5]
    picks = fm.pick_examples(cats, ids, score, theta, n_per_category=2)
    # moves: 0.7, 0.4, 0.4 -> row 0, then the tie 0.4 goes to claim 10 (row 1) before claim 20 (row 2)
    assert picks["fixed_fp"] == [0, 1]
    # persistent: |theta - 0.5| = 0.1 (row 3), 0.45 (row 4) -> row 4 first
    assert picks["persistent"] == [4, 3]
    assert picks["fixed_fn"] == [] and picks["regression"] == []


def test_neighbour_effects_sum_to_the_move():
    eff = fm.neighbour_effects([1, 0, 0], [0.4, 0.5, 0.2])
    assert [e["residual"] for e in eff] == pytest.approx([0.6, -0.5, -0.2])
    assert sum(e["contribution"] for e in eff) == pytest.approx((0.6 - 0.5 - 0.2) / 3)
