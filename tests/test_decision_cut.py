"""The F1 cut on theta: the best positive-class F1 on L, ties to the cut nearest the run's threshold."""

from __future__ import annotations

import numpy as np
import pytest

from checkworthy.method.corrections import class_weights
from checkworthy.method.decision_cut import CUTS, PriorDecision, auto_prior, decide_prior, f1_cut
from checkworthy.method.prevalence import Prevalence, prior_threshold


def test_the_cut_with_the_best_f1_is_chosen() -> None:
    theta = np.array([0.05, 0.1, 0.2, 0.3, 0.35, 0.6, 0.1, 0.25, 0.4, 0.05])
    y = np.array([0, 0, 0, 1, 1, 1, 0, 1, 1, 0])
    cut = f1_cut(theta, y, 0.5)
    assert cut.f1 == pytest.approx(1.0) and 0.2 < cut.threshold <= 0.25  # 0.21 to 0.25 part the classes
    assert cut.threshold == 0.25  # of the tied cuts, the nearest 0.5
    assert cut.f1_at_run_threshold == pytest.approx(2 * 1 / 5 / (1 + 1 / 5))  # only 0.6 called: recall 1/5
    assert CUTS[0] == 0.05 and CUTS[-1] == 0.95 and len(CUTS) == 91


@pytest.mark.parametrize(("theta", "y"), [([0.2, 0.4], [1]), ([], []), ([0.2, np.nan], [0, 1])])
def test_a_cut_it_cannot_choose_is_refused(theta, y) -> None:
    with pytest.raises(ValueError, match="finite, of one length, and not empty"):
        f1_cut(theta, y, 0.5)


def test_a_rarer_positive_class_in_the_batch_raises_the_cut() -> None:
    """Balanced L, a batch with a fifth check-worthy: L weighted to the batch's share chooses the
    cut that batch's F1 is best at, above the balanced L's own best cut (the label-shift case)."""
    rng = np.random.default_rng(3)

    def draw(n: int, share: float) -> tuple[np.ndarray, np.ndarray]:
        y = (rng.uniform(size=n) < share).astype(int)
        return 1 / (1 + np.exp(-rng.normal(np.where(y == 1, 1.0, -1.0), 1.0))), y

    theta_l, y_l = draw(1_000, 0.5)
    theta_b, y_b = draw(40_000, 0.2)
    own, weighted = f1_cut(theta_l, y_l, 0.5), f1_cut(theta_l, y_l, 0.5, batch_share=0.2)
    best_on_batch = f1_cut(theta_b, y_b, 0.5).threshold
    assert own.threshold < weighted.threshold
    assert abs(weighted.threshold - best_on_batch) < abs(own.threshold - best_on_batch)
    w = class_weights(y_l, 0.2)
    assert np.sum(w[y_l == 1]) / np.sum(w) == pytest.approx(0.2)
    one_class = np.array([1, 1])  # one class only, or a share at 0 or 1: unweighted
    assert f1_cut([0.2, 0.7], one_class, 0.5, batch_share=0.2) == f1_cut([0.2, 0.7], one_class, 0.5)
    assert f1_cut(theta_l, y_l, 0.5, batch_share=0.0) == own


def share(labelled: float, estimate: float | None, low: float | None, high: float | None) -> Prevalence:
    """A batch's share as :func:`~checkworthy.method.prevalence.share_positive` reports it."""
    return Prevalence(estimate, low, high, 0.3, labelled, labelled - 0.03, labelled + 0.03, 0.95, 1000, 300,
                      None if estimate is not None else "no signal")


@pytest.mark.parametrize(("p", "decided_as", "words"), [
    (share(0.31, 0.29, 0.24, 0.35), "f1", "0.310 lies within the batch's 95% interval 0.240-0.350"),
    (share(0.50, 0.29, 0.24, 0.35), "labelled", "0.500 lies outside the batch's 95% interval"),
    (share(0.31, 0.30, None, None), "f1", "estimated share of check-worthy claims 0.300 (no interval) lies within"),
    (share(0.50, 0.30, None, None), "labelled", "lies outside the labelled file's exact 95% interval 0.470-0.530"),
    (share(0.31, None, None, None), "labelled", "not estimated (no signal)"),
])
def test_auto_takes_the_f1_cut_only_where_the_labelled_share_is_the_batchs(p, decided_as, words) -> None:
    got, why = auto_prior(p)
    assert got == decided_as and words in why


THETA_L = np.array([0.05, 0.1, 0.2, 0.3, 0.35, 0.6, 0.1, 0.25, 0.4, 0.05])
Y_L = np.array([0, 0, 0, 1, 1, 1, 0, 1, 1, 0])


def test_each_prior_gives_its_threshold_and_records_what_it_decided_at() -> None:
    within, unknown = share(0.5, 0.29, 0.24, 0.55), share(0.5, None, None, None)
    assert decide_prior("labelled", within, THETA_L, Y_L, 0.5) == (0.5, None)
    t, batch = decide_prior("batch", within, THETA_L, Y_L, 0.5)
    assert t == prior_threshold(0.5, 0.29, 0.5) == batch.threshold_on_theta
    assert (batch.mode, batch.labelled, batch.batch, batch.from_labels) == ("batch", 0.5, 0.29, True)
    t, none = decide_prior("batch", unknown, THETA_L, Y_L, 0.5)
    assert t == 0.5 and none.note == "no batch estimate (no signal): L's prior" and not none.from_labels
    t, cut = decide_prior("f1", within, THETA_L, Y_L, 0.5)
    assert t == f1_cut(THETA_L, Y_L, 0.5, 0.29).threshold == cut.threshold_on_theta
    assert cut.at_f1_cut and cut.from_labels and cut.weighted_to_batch_share == 0.29
    t, auto = decide_prior("auto", within, THETA_L, Y_L, 0.5)
    assert (t, auto.mode, auto.decided_as) == (cut.threshold_on_theta, "auto", "f1")
    assert auto.f1_labelled == cut.f1_labelled and "lies within" in (auto.why or "")
    t, fallback = decide_prior("auto", unknown, THETA_L, Y_L, 0.5)
    assert t == 0.5 and (fallback.decided_as, fallback.threshold_on_theta) == ("labelled", 0.5)
    assert not fallback.from_labels


def test_a_prior_is_stored_as_before_and_read_back_unchanged() -> None:
    """``params.prior`` keeps its keys: only what is set, and an F1 cut's share even when it was not
    weighted (None)."""
    _, unweighted = decide_prior("f1", share(0.5, None, None, None), THETA_L, Y_L, 0.5)
    stored = unweighted.as_dict()
    assert set(stored) == {"mode", "threshold_on_theta", "f1_labelled", "f1_labelled_at_run_threshold",
                           "weighted_to_batch_share"} and stored["weighted_to_batch_share"] is None
    _, auto = decide_prior("auto", share(0.5, None, None, None), THETA_L, Y_L, 0.5)
    assert auto.as_dict() == {"mode": "auto", "threshold_on_theta": 0.5, "decided_as": "labelled",
                              "why": auto.why}
    for prior in (unweighted, auto):
        assert PriorDecision.from_dict(prior.as_dict()) == prior
