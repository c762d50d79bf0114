"""Point corrections by hand, power tuning on synthetic data, and CV that only sees L."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.spatial import cKDTree
from sklearn.metrics import f1_score

from checkworthy.method.corrections import (
    CORRECTIONS,
    Choice,
    LabelledSet,
    Neighbourhood,
    adaptive_k_sizes,
    correction_global,
    correction_ppi,
    correction_shrink,
    correction_weighted,
    estimate_lambda,
    exclude_same_group,
    select_by_cv,
)

# L: residuals r = y - c = 0.2, -0.6, -0.3, 0.6, 0.1
Y_L = np.array([1, 0, 0, 1, 1])
C_L = np.array([0.8, 0.6, 0.3, 0.4, 0.9])
NBR_L = np.array([[3, 4, 1], [2, 0, 3], [1, 4, 0], [0, 2, 4], [3, 0, 1]])


def small_case(k: int = 3) -> Neighbourhood:
    cal = LabelledSet(Y_L, C_L, NBR_L, np.tile([0.1, 0.2, 0.3], (5, 1)))
    dist = np.array([[0.1, 0.2, 0.4], [0.1, 0.1, 0.3]])
    return Neighbourhood(np.array([0.9, 0.2]), np.array([[0, 1, 2], [3, 4, 0]]), cal, dist, k=k)


def test_baselines_and_paper_by_hand():
    nb = small_case()
    np.testing.assert_allclose(CORRECTIONS["raw"](nb), [0.9, 0.2])
    np.testing.assert_allclose(CORRECTIONS["knn"](nb), [1 / 3, 1.0])
    np.testing.assert_allclose(CORRECTIONS["paper"](nb), [0.9 - 0.7 / 3, 0.2 + 0.3])
    np.testing.assert_allclose(CORRECTIONS["paper"](nb.with_k(1)), [1.1, 0.8])  # unclipped
    np.testing.assert_allclose(CORRECTIONS["clipped"](nb.with_k(1)), [1.0, 0.8])


def test_clipping_never_changes_a_decision():
    rng = np.random.default_rng(0)
    nb = world(rng, 300, 500)[0].with_k(3)
    paper, clipped = CORRECTIONS["paper"](nb), CORRECTIONS["clipped"](nb)
    assert (paper > 1).any() or (paper < 0).any()
    for t in (0.3, 0.5, 0.74):
        np.testing.assert_array_equal(paper >= t, clipped >= t)


def test_weighted_by_hand_and_limits():
    nb = small_case()
    w = np.exp(-np.array([0.0, 0.1, 0.3]) / 0.1)  # row 0: distances minus the nearest's
    expected0 = 0.9 + (w @ [0.2, -0.6, -0.3]) / w.sum()
    assert correction_weighted(nb, tau=0.1)[0] == pytest.approx(expected0)
    np.testing.assert_allclose(correction_weighted(nb, tau=np.inf), CORRECTIONS["paper"](nb))
    # a tiny tau keeps only the nearest (row 1 has two at the same distance)
    np.testing.assert_allclose(correction_weighted(nb, tau=1e-6), [0.9 + 0.2, 0.2 + (0.6 + 0.1) / 2])


def ici_case() -> Neighbourhood:
    # neighbours 0-3 have residual 0, neighbours 4-7 residual -1; L's residual variance 2/7
    y = np.array([1, 1, 1, 1, 0, 0, 0, 0])
    c = np.ones(8)
    nbr_l = (np.arange(8)[:, None] + np.arange(1, 8)) % 8
    cal = LabelledSet(y, c, nbr_l)
    dist = np.array([[0.1, 0.11, 0.12, 0.13, 0.5, 0.6, 0.7, 0.8]])
    return Neighbourhood(np.array([0.5]), np.arange(8)[None, :], cal, dist)


def test_adaptive_k_by_hand():
    nb = ici_case()
    # ICI, gamma = 1, k_min = 2 (se^2 = ((k'-1) s_k'^2 + 2/7) / k'^2):
    # k'=2..4 intervals 0 +/- 0.267, 0.178, 0.134; k'=5 [-0.408, 0.008] and k'=6 [-0.545, -0.121]
    # still meet the running intersection [-0.134, ...]; k'=7 [-0.631, -0.226] does not -> k = 6
    mean, size = adaptive_k_sizes(nb, rule="ici", gamma=1.0, k_min=2)
    assert size[0] == 6 and mean[0] == pytest.approx(-2 / 6)
    assert adaptive_k_sizes(nb, rule="ici", gamma=10.0)[1][0] == 8  # wide intervals: use all
    # radius: within 1.2 x the 2nd neighbour's distance (0.132): the first four
    mean, size = adaptive_k_sizes(nb, rule="radius", rho=0.2, k_min=2)
    assert size[0] == 4 and mean[0] == 0.0
    # constant residuals never trigger the rule
    same = Neighbourhood(np.array([0.5]), np.array([[0, 1, 2, 3]]), nb.cal)
    assert adaptive_k_sizes(same, rule="ici", gamma=0.5)[1][0] == 4


def test_power_tuning_by_hand_and_its_endpoints():
    nb = small_case()
    # row 0: mean y = 1/3, mean c = 1.7/3; row 1: mean y = 1, mean c = 0.7
    lam = 0.4
    np.testing.assert_allclose(
        correction_ppi(nb, lam=lam), [1 / 3 + lam * (0.9 - 1.7 / 3), 1 + lam * (0.2 - 0.7)]
    )
    np.testing.assert_allclose(correction_ppi(nb, lam=1.0), CORRECTIONS["paper"](nb))
    np.testing.assert_allclose(correction_ppi(nb, lam=0.0), CORRECTIONS["knn"](nb))
    np.testing.assert_allclose(correction_shrink(nb, kappa=1.0), CORRECTIONS["paper"](nb))
    np.testing.assert_allclose(correction_shrink(nb, kappa=0.0), CORRECTIONS["raw"](nb))
    np.testing.assert_allclose(correction_shrink(nb, kappa=0.5), [0.9 - 0.35 / 3, 0.2 + 0.15])


@pytest.mark.parametrize("form", ["ppi++", "shrink"])
def test_estimate_lambda_minimises_leave_one_out_brier(form):
    rng = np.random.default_rng(1)
    cal = world(rng, 400, 1)[0].cal
    loo = Neighbourhood.loo(cal, 5)
    fn = correction_ppi if form == "ppi++" else correction_shrink
    key = "lam" if form == "ppi++" else "kappa"

    def brier(lam: float) -> float:
        return float(np.mean((cal.y - fn(loo, **{key: lam})) ** 2))

    numeric = minimize_scalar(brier, bounds=(-3, 3), method="bounded").x
    assert estimate_lambda(cal, 5, form=form, bounds=None) == pytest.approx(numeric, abs=1e-4)


def test_power_tuning_tracks_how_informative_the_score_is():
    rng = np.random.default_rng(2)
    useless = world(rng, 1000, 1, score="noise")[0].cal
    perfect = world(rng, 1000, 1, score="true")[0].cal
    assert estimate_lambda(useless, 10) < 0.15  # close to the KNN baseline
    assert estimate_lambda(perfect, 10) > 0.8  # close to the paper's NN-PPI


def test_global_rectifier_leaves_the_claim_out_on_L():
    nb = small_case()
    r = Y_L - C_L  # sums to 0
    np.testing.assert_allclose(correction_global(nb), nb.c + r.mean())
    np.testing.assert_allclose(correction_global(Neighbourhood.loo(nb.cal)), C_L + (r.sum() - r) / 4)


# ------------------------------------------------------------------------------ CV


def p_true(x):
    return 1 / (1 + np.exp(-(4 * (x[:, 0] - 0.5) + 2 * np.sin(6 * x[:, 1]))))


def world(rng, m: int, n: int, K: int = 10, score: str = "biased"):
    """L and test claims in [0, 1]^2 with known P(Y | x) and LOO neighbours for L."""
    x = rng.random((m + n, 2))
    p = p_true(x)
    y = (rng.random(m + n) < p).astype(int)
    c = {
        "biased": np.clip(0.55 + 0.35 * p + rng.normal(0, 0.1, m + n), 0, 1),
        "noise": rng.random(m + n),
        "true": p,
    }[score]
    tree = cKDTree(x[:m])
    dist, idx = tree.query(x, K + 1)
    # labelled claims drop themselves (their own nearest, at distance 0); test claims the farthest
    dist = np.vstack([dist[:m, 1:], dist[m:, :K]])
    idx = np.vstack([idx[:m, 1:], idx[m:, :K]])
    cal = LabelledSet(y[:m], c[:m], idx[:m], dist[:m])
    return Neighbourhood(c[m:], idx[m:], cal, dist[m:]), y[m:]


def test_cv_cannot_see_test_claims():
    params = inspect.signature(select_by_cv).parameters
    first = next(iter(params.values()))
    assert first.kind is inspect.Parameter.POSITIONAL_ONLY and first.name == "cal"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params.values())[1:])
    assert not {"c", "nbr", "dist", "nb", "test", "queries"} & set(params)
    rng = np.random.default_rng(3)
    nb, _ = world(rng, 300, 50)
    with pytest.raises(TypeError):
        select_by_cv(nb)  # a Neighbourhood of test claims is refused
    with pytest.raises(ValueError, match="own neighbour"):
        LabelledSet(nb.cal.y, nb.cal.c, np.arange(nb.cal.m)[:, None])


def test_cv_scores_are_leave_one_out_f1():
    rng = np.random.default_rng(4)
    nb, _ = world(rng, 500, 10)
    cal = nb.cal
    res = select_by_cv(cal, ks=(3,), grid={"paper": [{}], "knn": [{}]})
    r = (cal.y - cal.c)[cal.nbr[:, :3]].mean(axis=1)
    expected = f1_score(cal.y, (cal.c + r >= 0.5).astype(int), average="weighted")
    paper = next(ch for ch in res.table if ch.method == "paper")
    assert paper.cv_score == pytest.approx(expected)


def test_cross_fitted_lambda_does_not_use_the_claims_own_fold():
    rng = np.random.default_rng(5)
    cal = world(rng, 400, 1)[0].cal
    grid = {"ppi++": [{"lam": None}]}
    base = select_by_cv(cal, ks=(5,), grid=grid, seed=1)
    # the final choice carries lam fitted on all of L, as a plain number
    assert base.best.params["lam"] == pytest.approx(estimate_lambda(cal, 5))
    assert isinstance(base.best.params["lam"], float)


def test_cv_prefers_knn_for_a_useless_score_and_the_model_for_a_perfect_one():
    rng = np.random.default_rng(6)
    nb, y = world(rng, 1000, 2000, score="noise")
    best = select_by_cv(nb.cal).best
    assert best.method in {"knn", "ppi++", "weighted", "adaptive-k"}
    if best.method == "ppi++":
        assert best.params["lam"] < 0.15
    nb, y = world(rng, 1000, 2000, score="true")
    best = select_by_cv(nb.cal).best
    theta = best.theta(nb)
    # with the true probability as score, the selected method is at least as good as the paper's
    paper = Choice("paper", 10).theta(nb)
    assert (
        f1_score(y, theta >= best.threshold, average="weighted")
        >= f1_score(y, paper >= 0.5, average="weighted") - 0.02
    )


def test_cv_beats_the_paper_on_the_gemma_like_world_out_of_sample():
    rng = np.random.default_rng(7)
    gains = []
    for _ in range(4):
        nb, y = world(rng, 1300, 2000)
        best = select_by_cv(nb.cal).best
        paper = (Choice("paper", 10).theta(nb) >= 0.5).astype(int)
        gains.append(
            f1_score(y, best.predict(nb), average="weighted") - f1_score(y, paper, average="weighted")
        )
    assert np.mean(gains) > 0


def test_target_prevalence_reweights_the_f1():
    rng = np.random.default_rng(8)
    cal = world(rng, 400, 1)[0].cal
    grid = {"paper": [{}]}
    plain = select_by_cv(cal, ks=(5,), grid=grid).best.cv_score
    same = select_by_cv(cal, ks=(5,), grid=grid, target_prevalence=float(cal.y.mean())).best.cv_score
    assert same == pytest.approx(plain)
    ts = np.round(np.arange(0.3, 0.81, 0.05), 2)
    low = select_by_cv(cal, ks=(5,), grid=grid, thresholds=ts, target_prevalence=0.15).best
    high = select_by_cv(cal, ks=(5,), grid=grid, thresholds=ts, target_prevalence=0.85).best
    assert low.threshold > high.threshold  # rarer positives need more evidence


def test_choice_applies_its_own_k():
    nb = small_case()
    choice = Choice("paper", 1)
    np.testing.assert_allclose(choice(nb), [1.1, 0.8])
    np.testing.assert_array_equal(choice.predict(nb), [1, 1])


def test_exclude_same_group_by_hand():
    groups = np.array(["a", "a", "b", "b", "c"])
    nbr = np.array([[1, 2, 3, 4], [0, 4, 2, 3], [3, 0, 1, 4], [2, 4, 0, 1], [0, 1, 2, 3]])
    dist = np.tile([0.1, 0.2, 0.3, 0.4], (5, 1))
    out, d = exclude_same_group(nbr, dist, groups, 2)
    np.testing.assert_array_equal(out, [[2, 3], [4, 2], [0, 1], [4, 0], [0, 1]])
    np.testing.assert_allclose(d[0], [0.2, 0.3])
    LabelledSet(np.array([0, 1, 0, 1, 1]), np.full(5, 0.5), out, d)  # still a valid LOO set
    with pytest.raises(ValueError, match="outside their group"):
        exclude_same_group(nbr, dist, groups, 4)


def test_neighbour_scores_as_seen_from_each_claim_replace_c_of_the_neighbours():
    """Hand-computed: L = 3 claims; nbr_c gives claim 0's view of its neighbours' scores."""
    from checkworthy.method.corrections import LabelledSet, Neighbourhood, correction_paper

    cal = LabelledSet(y=np.array([1, 0, 1]), c=np.array([0.5, 0.2, 0.9]),
                      nbr=np.array([[1, 2], [0, 2], [0, 1]]),
                      nbr_c=np.array([[0.4, 0.6], [0.5, 0.9], [0.5, 0.2]]))
    loo = Neighbourhood.loo(cal, 2)
    # claim 0: 0.5 + ((0 - 0.4) + (1 - 0.6)) / 2 = 0.5; without nbr_c: 0.5 + ((0 - 0.2) + (1 - 0.9)) / 2 = 0.45
    assert correction_paper(loo)[0] == pytest.approx(0.5)
    plain = Neighbourhood.loo(LabelledSet(y=cal.y, c=cal.c, nbr=cal.nbr), 2)
    assert correction_paper(plain)[0] == pytest.approx(0.45)
    # claims outside L (no nbr_c) use L's own scores
    q = Neighbourhood(c=np.array([0.3]), nbr=np.array([[0, 1]]), cal=cal, k=2)
    assert correction_paper(q)[0] == pytest.approx(0.3 + ((1 - 0.5) + (0 - 0.2)) / 2)
    with pytest.raises(ValueError, match="nbr_c has shape"):
        LabelledSet(y=cal.y, c=cal.c, nbr=cal.nbr, nbr_c=np.zeros((3, 3)))
