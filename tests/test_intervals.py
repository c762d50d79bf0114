"""Interval methods: exact formulas by hand, coverage on synthetic data with known P(Y | x).

Coverage tests follow statistical libraries' practice: many seeded trials, each with a fresh
labelled set L and fresh test claims; the mean coverage must reach the nominal level within a
stated tolerance of about 6 Monte Carlo standard errors (per-trial sd of coverage ~ 0.02, so
SE ~ 0.0016 over 150 trials; tolerance 0.01 overall, 0.015 within a class). Coverage means
what the paper counts: the gold label Y (0 or 1) lies in [lo, hi].
"""

from __future__ import annotations

from statistics import NormalDist, stdev

import numpy as np
import pytest
from crepes import ConformalRegressor
from scipy import stats
from scipy.spatial import cKDTree

from checkworthy.method import metrics, nnppi
from checkworthy.method.corrections import CORRECTIONS
from checkworthy.method.intervals import (
    INTERVAL_METHODS,
    LabelledSet,
    Neighbourhood,
    conformal_quantile,
    interval_conformal,
    interval_conformal_mondrian,
    interval_conformal_split,
    interval_t,
    interval_t_predictive,
    interval_z,
    label_sets,
    summarise,
)

ALPHA = 0.05
KS = (3, 5, 10)
CONFORMAL = (
    "conformal",
    "conformal-local",
    "mondrian",
    "mondrian-local",
    "conformal-split",
    "mondrian-split",
)

# ------------------------------------------------------------------ synthetic world


def p_true(x: np.ndarray, shift: float = 0.0) -> np.ndarray:
    """Known P(Y = 1 | x): smooth, spanning about 0.02 to 0.98."""
    return 1 / (1 + np.exp(-(4 * (x[:, 0] - 0.5) + 2 * np.sin(6 * x[:, 1]) + shift)))


def draw(rng: np.random.Generator, n: int, shift: float = 0.0):
    """Claims as points in [0, 1]^2; a weak, upward-biased model score (like Gemma 3 270M)."""
    x = rng.random((n, 2))
    p = p_true(x, shift)
    y = (rng.random(n) < p).astype(int)
    c = np.clip(0.55 + 0.35 * p + rng.normal(0, 0.1, n), 0, 1)
    return x, y, c


def knn(xq: np.ndarray, xr: np.ndarray, k: int, loo: bool = False):
    """k nearest rows of ``xr`` for each row of ``xq``; ``loo`` drops each point itself."""
    dist, idx = cKDTree(xr).query(xq, k + 1 if loo else k)
    return (idx[:, 1:], dist[:, 1:]) if loo else (idx, dist)


def world(rng, m=400, n=400, K=80, balanced=False, shift=0.0):
    """L (optionally class-balanced from a larger pool, as in the paper) and test claims."""
    if balanced:
        x, y, c = draw(rng, 10 * m, shift)
        sel = np.concatenate([rng.choice(np.flatnonzero(y == v), m // 2, replace=False) for v in (0, 1)])
        xl, yl, cl = x[sel], y[sel], c[sel]
    else:
        xl, yl, cl = draw(rng, m, shift)
    xt, yt, ct = draw(rng, n, shift)
    nl, dl = knn(xl, xl, K, loo=True)
    nt, dt = knn(xt, xl, K)
    return Neighbourhood(ct, nt, LabelledSet(yl, cl, nl, dl), dt), yt


def run_trials(trials: int, seed: int, methods, **kw) -> dict[tuple[str, int], np.ndarray]:
    """(method, k) -> (trials, 3) coverage overall / class 0 / class 1 (+ set size)."""
    rng = np.random.default_rng(seed)
    out: dict[tuple[str, int], list] = {(mth, k): [] for mth in methods for k in KS}
    for t in range(trials):
        nb, y = world(rng, **kw)
        for k in KS:
            for mth in methods:
                opts = {"seed": t} if mth.endswith("split") else {}
                s = summarise(*INTERVAL_METHODS[mth](nb.with_k(k), ALPHA, **opts), y)
                out[mth, k].append((s.coverage, s.coverage_0, s.coverage_1, s.mean_set_size))
    return {key: np.array(v) for key, v in out.items()}


@pytest.fixture(scope="module")
def exchangeable():
    return run_trials(150, seed=20260101, methods=CONFORMAL)


@pytest.fixture(scope="module")
def label_shift():
    # L class-balanced (50%), test claims at their natural ~28% prevalence, as in the paper
    return run_trials(
        80, seed=20260102, methods=("mondrian", "mondrian-local", "mondrian-split"), balanced=True, shift=-1.5
    )


# ------------------------------------------------------------------------ the paper


def small_case(k: int = 3) -> Neighbourhood:
    y = np.array([1, 0, 0, 1, 1])
    c = np.array([0.8, 0.6, 0.3, 0.4, 0.9])
    nbr_l = np.array([[3, 4, 1], [2, 0, 3], [1, 4, 0], [0, 2, 4], [3, 0, 1]])
    cal = LabelledSet(y, c, nbr_l)
    return Neighbourhood(np.array([0.9, 0.2]), np.array([[0, 1, 2], [3, 4, 0]]), cal, k=k)


def test_z_interval_reproduces_paper_formula_exactly():
    # claim 0: residuals 0.2, -0.6, -0.3 -> theta = 0.9 - 0.7/3 = 0.666667, sd (ddof=1) = 0.404145
    # claim 1: residuals 0.6, 0.1, 0.2   -> theta = 0.2 + 0.3     = 0.5,      sd (ddof=1) = 0.264575
    # half-width = z_0.975 * sd / sqrt(3) = 0.457325, 0.299389
    lo, hi = interval_z(small_case(), ALPHA)
    np.testing.assert_allclose(lo, [0.6666667 - 0.4573249, 0.5 - 0.2993894], atol=1e-6)
    np.testing.assert_allclose(hi, [0.6666667 + 0.4573249, 0.5 + 0.2993894], atol=1e-6)
    # and the formula written independently with the standard library, to full precision
    z = NormalDist().inv_cdf(1 - ALPHA / 2)
    for i, (ci, r) in enumerate([(0.9, [0.2, -0.6, -0.3]), (0.2, [0.6, 0.1, 0.2])]):
        theta = ci + sum(r) / 3
        assert lo[i] == pytest.approx(theta - z * stdev(r) / 3**0.5, abs=1e-12)
        assert hi[i] == pytest.approx(theta + z * stdev(r) / 3**0.5, abs=1e-12)


def test_z_interval_is_the_paper_module_interval_unclipped():
    nb = small_case()
    res = nnppi.nnppi(nb.c, nb.y_nbr(), nb.c_nbr(), alpha=ALPHA)
    lo, hi = interval_z(nb, ALPHA)
    np.testing.assert_array_equal(lo, res.ci_low)
    np.testing.assert_array_equal(hi, res.ci_high)
    # theta beyond [0, 1] stays there, as the paper reports (e.g. 1.03, -0.33)
    cal = LabelledSet(np.array([1, 1, 0, 0]), np.array([0.1, 0.2, 0.9, 0.8]), np.array([[1], [0], [3], [2]]))
    over = Neighbourhood(np.array([0.95, 0.05]), np.array([[0], [2]]), cal)
    assert interval_z(over, ALPHA)[0][0] == pytest.approx(1.85)


def test_t_and_predictive_t_by_hand():
    lo, hi = interval_t(small_case(), ALPHA)
    t2 = 4.302652729749462  # t_{2, 0.975}
    np.testing.assert_allclose(hi - lo, 2 * t2 * np.array([0.4041452, 0.2645751]) / np.sqrt(3), rtol=1e-6)
    lo_p, hi_p = interval_t_predictive(small_case(), ALPHA)
    np.testing.assert_allclose(
        hi_p - lo_p, 2 * t2 * np.array([0.4041452, 0.2645751]) * np.sqrt(4 / 3), rtol=1e-6
    )
    with pytest.raises(ValueError):
        interval_t(small_case(k=1), ALPHA)


def gaussian_neighbourhoods(rng, n: int, k: int, mu: np.ndarray, sigma: float):
    """Each claim gets its own k residuals ~ N(mu_i, sigma^2) (encoded as y = 0, c = -r)."""
    r = mu[:, None] + sigma * rng.standard_normal((n, k))
    m = n * k
    cal = LabelledSet(np.zeros(m, int), -r.ravel(), (np.arange(m)[:, None] + np.arange(1, 3)) % m)
    return Neighbourhood(rng.random(n), np.arange(m).reshape(n, k), cal)


@pytest.mark.parametrize("k", KS)
def test_t_interval_covers_the_mean_under_its_model_and_z_does_not(k):
    rng = np.random.default_rng(k)
    n, sigma = 40_000, 0.3
    mu = rng.uniform(-0.5, 0.5, n)
    nb = gaussian_neighbourhoods(rng, n, k, mu, sigma)
    target = nb.c + mu  # what theta estimates under the paper's model
    lo, hi = interval_t(nb, ALPHA)
    assert np.mean((lo <= target) & (target <= hi)) == pytest.approx(0.95, abs=0.005)
    lo, hi = interval_z(nb, ALPHA)
    z_cov = np.mean((lo <= target) & (target <= hi))
    expected = 2 * stats.t.cdf(stats.norm.ppf(0.975), k - 1) - 1  # 0.811 at k = 3
    assert z_cov == pytest.approx(expected, abs=0.006)
    # a new draw from the same normal lies in the predictive t interval 95% of the time
    new = target + sigma * rng.standard_normal(n)
    lo, hi = interval_t_predictive(nb, ALPHA)
    assert np.mean((lo <= new) & (new <= hi)) == pytest.approx(0.95, abs=0.005)


def test_paper_style_intervals_undercover_binary_labels():
    """The paper's finding, reproduced: z intervals are no prediction intervals for Y."""
    cov = run_trials(20, seed=7, methods=("z", "t"))
    for k in KS:
        assert cov["z", k][:, 0].mean() < 0.7
    assert cov["z", 10][:, 0].mean() < cov["z", 3][:, 0].mean()  # worse as k grows, as in the paper


# ----------------------------------------------------------------------- conformal


def test_conformal_quantile_matches_crepes():
    rng = np.random.default_rng(0)
    for m in (19, 20, 57, 400):
        res = rng.exponential(size=m)
        cr = ConformalRegressor().fit(res)
        lo, hi = cr.predict_int(np.zeros(1), confidence=1 - ALPHA)[0]
        assert conformal_quantile(res, ALPHA) == pytest.approx(hi)
    assert conformal_quantile(np.arange(10.0), ALPHA) == np.inf  # fewer than 1/alpha - 1 claims


def test_conformal_by_hand():
    nb = small_case(k=1)
    # leave-one-out theta_j = c_j + (Y - c) of j's nearest:
    # 0.8 + 0.6, 0.6 - 0.3, 0.3 - 0.6, 0.4 + 0.2, 0.9 + 0.6
    theta_l = np.array([1.4, 0.3, -0.3, 0.6, 1.5])
    scores = np.abs(nb.cal.y - theta_l)  # 0.4, 0.3, 0.3, 0.4, 0.5
    q = conformal_quantile(scores, 0.2)  # ceil(0.8 * 6) = 5th smallest = 0.5
    assert q == pytest.approx(0.5)
    lo, hi = interval_conformal(nb, 0.2)
    theta = nb.c + (nb.cal.y - nb.cal.c)[nb.nbr[:, 0]]
    np.testing.assert_allclose(lo, theta - 0.5)
    np.testing.assert_allclose(hi, theta + 0.5)


def test_mondrian_interval_is_the_label_set_even_beyond_0_1():
    # leave-one-out theta: class 1 -> 1.0, 1.0, 1.0, 0.5; class 0 -> 0, 0, 0, 0.5
    # alpha = 0.4: q0 = 3rd smallest of (0, 0, 0, 0.5) = 0; q1 = 3rd of 1 - theta = (0, 0, 0, 0.5) = 0
    y = np.array([1, 1, 1, 0, 0, 0, 0, 1])
    c = np.array([0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.6, 0.4])
    cal = LabelledSet(y, c, np.array([[1], [2], [0], [4], [5], [3], [3], [0]]))
    # query 0: theta = 0.1 - 0.6 = -0.5 (label 0 admitted: -0.5 <= q0); query 1: theta = 0.9 + 0.6 = 1.5
    nb = Neighbourhood(np.array([0.1, 0.9]), np.array([[6], [7]]), cal)
    lo, hi = interval_conformal_mondrian(nb, 0.4)
    np.testing.assert_array_equal(label_sets(lo, hi), [[True, False], [False, True]])
    np.testing.assert_allclose(lo, [-0.5, 1.0])
    np.testing.assert_allclose(hi, [0.0, 1.5])


def test_split_needs_enough_listed_neighbours():
    rng = np.random.default_rng(1)
    nb, _ = world(rng, m=60, n=10, K=3)
    with pytest.raises(ValueError, match="reference neighbours"):
        interval_conformal_split(nb, ALPHA)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("method", CONFORMAL)
def test_conformal_coverage_exchangeable(exchangeable, method, k):
    cov = exchangeable[method, k]
    assert cov[:, 0].mean() >= 1 - ALPHA - 0.01
    assert cov[:, 0].mean() <= 1 - ALPHA + 0.02  # valid but not vacuous
    assert cov[:, 3].mean() < 1.9  # sets are not all {0, 1}
    if method.startswith("mondrian"):
        assert cov[:, 1].mean() >= 1 - ALPHA - 0.015
        assert cov[:, 2].mean() >= 1 - ALPHA - 0.015


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("method", ("mondrian", "mondrian-local", "mondrian-split"))
def test_mondrian_holds_each_class_under_label_shift(label_shift, method, k):
    cov = label_shift[method, k]
    assert cov[:, 1].mean() >= 1 - ALPHA - 0.015
    assert cov[:, 2].mean() >= 1 - ALPHA - 0.015
    assert cov[:, 0].mean() >= 1 - ALPHA - 0.01


def test_marginal_can_fail_a_class_where_mondrian_does_not():
    """Surprising positives (p = 0.1 regions) are missed by marginal sets, not by Mondrian."""
    rng = np.random.default_rng(11)
    marg, mond = [], []
    for _ in range(30):
        x = rng.random((800, 2))
        p = np.where(x[:, 0] < 0.6, 0.1, 0.5)
        y = (rng.random(800) < p).astype(int)
        c = np.clip(0.7 + rng.normal(0, 0.05, 800), 0, 1)
        nl, _ = knn(x[:400], x[:400], 10, loo=True)
        nt, _ = knn(x[400:], x[:400], 10)
        nb = Neighbourhood(c[400:], nt, LabelledSet(y[:400], c[:400], nl))
        marg.append(summarise(*interval_conformal(nb, ALPHA), y[400:]).coverage_1)
        mond.append(summarise(*interval_conformal_mondrian(nb, ALPHA), y[400:]).coverage_1)
    assert np.mean(marg) < 0.92
    assert np.mean(mond) >= 1 - ALPHA - 0.02


# ------------------------------------------------------------------------ plumbing


def test_registry_uniform_signature_and_summary_agrees_with_metrics():
    rng = np.random.default_rng(3)
    nb, y = world(rng, m=200, n=100, K=60)
    nb = nb.with_k(5)
    assert set(INTERVAL_METHODS) == {"z", "t", "t-pred", *CONFORMAL}
    for name, fn in INTERVAL_METHODS.items():
        lo, hi = fn(nb, ALPHA)
        assert lo.shape == hi.shape == (nb.n,) and np.all(lo <= hi), name
        s = summarise(lo, hi, y)
        ref = metrics.interval_coverage(y, lo, hi)
        assert (s.coverage, s.coverage_0, s.coverage_1) == pytest.approx((ref["all"], ref["0"], ref["1"]))


def test_interval_accepts_any_correction():
    rng = np.random.default_rng(4)
    nb, _ = world(rng, m=200, n=50, K=10)
    for corr in ("knn", "ppi++", "weighted", "adaptive-k", "global"):
        lo, hi = interval_conformal_mondrian(nb, ALPHA, correction=corr)
        assert np.isfinite(lo).all() and np.isfinite(hi).all()


def test_labelled_set_rejects_self_neighbours():
    with pytest.raises(ValueError, match="own neighbour"):
        LabelledSet(np.array([0, 1]), np.array([0.2, 0.3]), np.array([[0], [0]]))


def test_local_distance_scale_covers():
    rng = np.random.default_rng(12)
    cov = []
    for _ in range(60):
        nb, y = world(rng, K=5)
        for fn in (INTERVAL_METHODS["conformal-local"], INTERVAL_METHODS["mondrian-local"]):
            s = summarise(*fn(nb, ALPHA, scale="distance", beta=1.0), y)
            cov.append(s.coverage)
    assert np.mean(cov) >= 1 - ALPHA - 0.01


@pytest.mark.parametrize("method", ["conformal", "mondrian", "conformal-local", "mondrian-local"])
def test_sets_follow_the_scores_exactly_with_a_constant_score(method):
    """A constant score makes theta the neighbours' label mean (4 values at k = 3): many test
    scores equal the quantile, where rounding in ``theta + q`` once dropped 13% of positives."""
    rng = np.random.default_rng(13)
    nb, y = world(rng, m=400, n=400, K=3)
    const = Neighbourhood(
        np.full(nb.n, 0.8), nb.nbr, LabelledSet(nb.cal.y, np.full(nb.cal.m, 0.8), nb.cal.nbr, nb.cal.dist)
    )
    lo, hi = INTERVAL_METHODS[method](const, ALPHA)
    theta = CORRECTIONS["paper"](const)
    theta_l = CORRECTIONS["paper"](Neighbourhood.loo(const.cal, 3))
    yl = const.cal.y
    if method.endswith("local"):
        scale = lambda n: n.residuals().std(axis=1, ddof=1) * np.sqrt(4 / 3) + 0.05  # noqa: E731
        s, s_l = scale(const), scale(Neighbourhood.loo(const.cal, 3))
    else:
        s, s_l = np.ones(const.n), np.ones(const.cal.m)
    if method.startswith("mondrian"):
        q0 = conformal_quantile((theta_l / s_l)[yl == 0], ALPHA)
        q1 = conformal_quantile(((1 - theta_l) / s_l)[yl == 1], ALPHA)
        expected = np.column_stack([theta / s <= q0, (1 - theta) / s <= q1])
    else:
        q = conformal_quantile(np.abs(yl - theta_l) / s_l, ALPHA)
        expected = np.column_stack([np.abs(theta) / s <= q, np.abs(1 - theta) / s <= q])
    np.testing.assert_array_equal(label_sets(lo, hi), expected)


def test_split_conformal_carries_each_claims_view_of_its_neighbours_scores():
    """``nbr_c`` (cross-fitted neighbour scores) follows the reference restriction column for column:
    equal to ``c[nbr]`` it changes nothing; shifted, it moves the calibration scores."""
    from dataclasses import replace

    nb, _ = world(np.random.default_rng(5), m=300, n=50, K=60)
    cal = nb.cal
    same = replace(nb, cal=LabelledSet(y=cal.y, c=cal.c, nbr=cal.nbr, dist=cal.dist, nbr_c=cal.c[cal.nbr]))
    for method in ("conformal-split", "mondrian-split", "conformal"):
        a, b = INTERVAL_METHODS[method](nb.with_k(5)), INTERVAL_METHODS[method](same.with_k(5))
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    shifted = replace(nb, cal=LabelledSet(y=cal.y, c=cal.c, nbr=cal.nbr, dist=cal.dist,
                                          nbr_c=np.clip(cal.c[cal.nbr] + 0.3, 0, 1)))
    assert not np.array_equal(INTERVAL_METHODS["conformal-split"](nb.with_k(5))[1],
                              INTERVAL_METHODS["conformal-split"](shifted.with_k(5))[1])
