"""The embedding head (pure): C chosen on L, out-of-fold probabilities, and its place in compare()."""

import numpy as np
import pytest

from checkworthy.method.embedding_head import features, fit_head
from checkworthy.runs.comparisons import CompareInputs, CompareOptions, compare
from checkworthy.testing.worlds import synthetic


def two_topics(m: int = 200, seed: int = 0):
    """Embeddings on two directions; the label follows the direction, the score is pure noise."""
    rng = np.random.default_rng(seed)
    y = np.arange(m) % 2
    emb = rng.normal(0, 0.3, (m, 8))
    emb[:, 0] += np.where(y == 1, 1.0, -1.0)
    return emb, rng.uniform(0, 1, m), y


def test_features_put_the_score_beside_the_embedding():
    x = features(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([0.25, 0.75]))
    assert x.tolist() == [[1.0, 2.0, 0.25], [3.0, 4.0, 0.75]]


def test_head_learns_what_the_embedding_knows_and_ignores_a_useless_score():
    emb, c, y = two_topics()
    head = fit_head(emb, c, y)
    assert ((head.oof >= 0.5) == y).mean() > 0.95
    assert ((head.predict(emb, c) >= 0.5) == y).mean() > 0.95
    assert head.C in (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


def test_out_of_fold_probabilities_never_see_their_own_label():
    """Each claim's out-of-fold probability is a model fitted on the other folds alone."""
    from sklearn.linear_model import LogisticRegression

    from checkworthy.method.embedding_head import stratified_folds

    emb, c, y = two_topics()
    head = fit_head(emb, c, y, Cs=(1.0,))
    x = features(emb, c)
    for train, test in stratified_folds(y, 5, 0):
        assert not set(train) & set(test)
        model = LogisticRegression(C=1.0, max_iter=2000).fit(x[train], y[train])
        assert head.oof[test] == pytest.approx(model.predict_proba(x[test])[:, 1], abs=1e-12)
    assert sum(len(t) for _, t in stratified_folds(y, 5, 0)) == len(y)


def test_needs_two_of_each_class():
    emb, c, _ = two_topics(10)
    with pytest.raises(ValueError, match="two labelled claims of each class"):
        fit_head(emb, c, np.array([1] + [0] * 9))


def test_compare_reports_the_head_only_when_embeddings_are_given():
    inp = synthetic(m=300, n=300)
    rng = np.random.default_rng(1)
    x = np.r_[inp.cal.c, inp.c]  # any features: here a noisy copy of the score's position
    emb = np.column_stack([x + rng.normal(0, 0.1, len(x)), rng.normal(0, 1, len(x))])
    opts = CompareOptions(intervals=("z",), sets=(), calibrators=())
    without = compare(inp, opts)
    assert not any(r.family.startswith("head") for r in without.rows)
    with_head = compare(CompareInputs(**{**inp.__dict__, "emb_cal": emb[:300], "emb": emb[300:]}), opts)
    fams = {(r.family, r.method, r.k) for r in with_head.rows if r.family.startswith("head")}
    cv = with_head.info["head"]["cv_choice"]
    assert {("head", "minilm-head", None), ("head", "minilm-head+nnppi", inp.k),
            ("head-cv", cv["method"], cv["k"])} == fams
    # the targets' labels play no part: flipping them changes the figures, not the choice
    flipped = compare(CompareInputs(**{**inp.__dict__, "emb_cal": emb[:300], "emb": emb[300:],
                                       "y": 1 - inp.y}), opts)
    assert flipped.info["head"] == with_head.info["head"]


def test_neighbour_scores_come_from_a_head_that_saw_neither_claim():
    """nbr_c[i, col] for neighbour j: the head fitted without i's fold and j's fold; the diagonal
    pair (same fold) is the out-of-fold head, so c of L is unchanged."""
    from sklearn.linear_model import LogisticRegression

    from checkworthy.method.corrections import LabelledSet
    from checkworthy.method.embedding_head import stratified_folds

    emb, c, y = two_topics(120)
    head = fit_head(emb, c, y, Cs=(1.0,))
    nbr = np.array([[(i + 1) % 120, (i + 7) % 120, (i + 60) % 120] for i in range(120)])
    cal = head.labelled_set(LabelledSet(y=y, c=c, nbr=nbr))
    assert cal.c.tolist() == head.oof.tolist()
    folds = stratified_folds(y, 5, 0)
    fold = np.empty(120, int)
    for f, (_, test) in enumerate(folds):
        fold[test] = f
    x = features(emb, c)
    for i, col in ((0, 0), (5, 1), (33, 2), (90, 0)):
        j = nbr[i, col]
        keep = (fold != fold[i]) & (fold != fold[j])
        model = LogisticRegression(C=1.0, max_iter=2000).fit(x[keep], y[keep])
        assert cal.nbr_c[i, col] == pytest.approx(model.predict_proba(x[[j]])[0, 1], abs=1e-9)
    same = fold[nbr] == fold[:, None]
    np.testing.assert_allclose(cal.nbr_c[same], head.oof[nbr][same])


def test_a_head_is_fitted_once_per_process_for_the_same_inputs():
    """The head does not depend on k: the runs of one model at k = 3, 5 and 10 share one fit (equal
    inputs, not the same arrays); other scores, labels or options are another fit."""
    emb, c, y = two_topics(80)
    head = fit_head(emb, c, y, Cs=(1.0,))
    assert fit_head(emb.copy(), c.copy(), y.copy(), Cs=(1.0,)) is head
    other_c, other_y = c.copy(), y.copy()
    other_c[0] += 0.5
    other_y[[0, 1]] = other_y[[1, 0]]
    for got in (fit_head(emb, other_c, y, Cs=(1.0,)), fit_head(emb, c, other_y, Cs=(1.0,)),
                fit_head(emb, c, y, Cs=(1.0,), seed=1), fit_head(emb, c, y, Cs=(0.3,))):
        assert got is not head
