"""Drift: the radius's promise by Monte-Carlo, then on the real store: claims of the labelled set's
own kind raise nothing, claims of another domain raise the figure, the report shows it and the flow
emits ``checkworthy.drift.detected``.

Real data for the store part: the world of :mod:`tests.test_recalibrate` (CLEF 2024 claims, MiniLM
embeddings) and, as another domain, cooking instructions.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from prefect import flow

from checkworthy.flows.tasks import announce_drift
from checkworthy.method.drift import ALPHA, QUANTILE, check_drift, fit_radius
from checkworthy.runs.calibration_run import RunSpec, run_calibration
from checkworthy.scorers.base import OK, Score
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_run
from checkworthy.store.embeddings import ensure_embeddings
from tests.test_flows import _event_stored
from tests.test_recalibrate import build_world

TRIALS = 300


def _sphere(rng: np.random.Generator, n: int, centres: np.ndarray, spread: float) -> np.ndarray:
    """Unit vectors around randomly chosen centres (claims cluster by topic)."""
    v = centres[rng.integers(len(centres), size=n)] + rng.normal(0, spread, (n, centres.shape[1]))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _nearest(q: np.ndarray, lab: np.ndarray, loo: bool = False) -> np.ndarray:
    d = 1.0 - q @ lab.T
    if loo:
        np.fill_diagonal(d, np.inf)
    return d.min(axis=1)


def test_claims_like_the_labelled_ones_rarely_alert_and_others_always_do():
    """Over many draws of L (300) and a batch (200) from one clustered distribution, the share beyond
    the radius averages at most 1 - q and no alert comes (the tolerance is three times that); a
    batch from other topics alerts every time."""
    rng = np.random.default_rng(12)
    dim = 16
    centres = rng.normal(size=(8, dim))
    elsewhere = rng.normal(size=(3, dim))
    shares, alerts, shifted = [], 0, 0
    for _ in range(TRIALS):
        lab = _sphere(rng, 300, centres, 0.6)
        radius = fit_radius(_nearest(lab, lab, loo=True))
        same = check_drift(_nearest(_sphere(rng, 200, centres, 0.6), lab), radius)
        shares.append(same.share)
        alerts += same.alert
        other = check_drift(_nearest(_sphere(rng, 200, elsewhere, 0.6), lab), radius)
        shifted += other.alert
    assert np.mean(shares) <= (1 - QUANTILE) + 0.005
    assert alerts / TRIALS <= ALPHA
    assert shifted == TRIALS


def test_a_tiny_labelled_set_has_no_radius():
    assert fit_radius([0.2, 0.3, 0.1]) is None  # ceil(4 * 0.95) = 4 > 3 claims
    assert check_drift([0.5, 0.9], None).n_beyond == 0
    with pytest.raises(ValueError, match="quantile"):
        fit_radius([0.1], 1.0)


COOKING = [f"Stir in {n} grams of {what} and let the {dish} simmer for {m} minutes over low heat."
           for n, what, dish, m in zip(range(50, 650, 20), ["butter", "flour", "sugar", "rice", "garlic"] * 6,
                                       ["sauce", "soup", "stew", "risotto", "broth", "curry"] * 5,
                                       range(3, 33))]


@pytest.fixture(scope="module")
def world(engine):
    """The world, and a target of cooking instructions scored and embedded like its claims."""
    w = build_world(engine, "t14-drift")
    with engine.begin() as conn:
        ids = store.upsert_claims(conn, [store.NewClaim(w.tag, "incoming", f"cook-{i}", t)
                                         for i, t in enumerate(COOKING)])
        model = store.ensure_model(conn, f"file:{w.tag}", "file")
        store.insert_predictions(conn, model, "none", {"source": f"{w.tag}-scores"}, [
            (store.sha256_text(t), {"imported": Score(0.3, OK, "imported")}) for t in COOKING])
        ensure_embeddings(conn, [store.sha256_text(t) for t in COOKING])
        lineages.register_target(conn, f"{w.tag}:cooking", w.lineage, ids)
    return w, ids


def test_a_batch_of_the_same_kind_raises_nothing_and_another_domain_raises_the_figure(engine, db_url, harness,
                                                                                     world):
    w, cooking = world
    same = run_calibration(engine, RunSpec(w.target, tuple(sorted(w.target_ids)), w.ls0, w.key, 5))
    other = run_calibration(engine, RunSpec(f"{w.tag}:cooking", tuple(sorted(cooking)), w.ls0, w.key, 5))
    with engine.connect() as conn:
        d_same, d_other = (load_run(conn, r)["params"]["drift"] for r in (same, other))
    assert d_same["radius"] == d_other["radius"] and d_same["quantile"] == QUANTILE
    assert d_same["n"] == len(w.target_ids) and d_same["share"] <= d_same["tolerance"] and not d_same["alert"]
    assert d_other["n"] == len(cooking) and d_other["share"] >= 0.9 and d_other["alert"]

    @flow(name="drift-announcement")
    def announce(run_ids: list[int]) -> None:
        announce_drift(db_url, run_ids)

    announce([same, other])
    assert _event_stored(str(uuid.uuid5(uuid.NAMESPACE_URL, f"checkworthy:drift:run:{other}")))
    assert not _event_stored(str(uuid.uuid5(uuid.NAMESPACE_URL, f"checkworthy:drift:run:{same}")))
