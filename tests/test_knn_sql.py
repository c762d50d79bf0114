"""SQL kNN (pgvector, one statement) agrees with numpy brute force on real embeddings."""

import numpy as np
import pytest

from checkworthy.data.datasets import load_clef
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.scorers.base import OK, Score
from checkworthy.store import rows as store
from checkworthy.store.embeddings import load_embeddings
from checkworthy.store.knn import leave_one_out_neighbours, nearest_labelled
from checkworthy.testing.datasets import raw_path

N_LAB, N_Q = 120, 40


@pytest.fixture(scope="module")
def knn_setup(engine):
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    claims = claims[: N_LAB + N_Q]
    rng = np.random.default_rng(7)
    scores = rng.uniform(0, 1, len(claims))
    with engine.begin() as conn:
        new = [store.NewClaim("knn-test", "x", c.source_id, c.text, c.label) for c in claims]
        ids = store.store_claims_with_labels(conn, new, "test")
        ensure_embeddings(conn, [store.sha256_text(c.text) for c in claims])
        ls = store.create_label_set(conn, "knn-test:L", ids[:N_LAB])
        model = store.ensure_model(conn, "file:knn-test", "file")
        params = {"source": "knn-test"}
        store.insert_predictions(
            conn, model, "none", params,
            [(store.sha256_text(c.text), {"imported": Score(float(s), OK, f"{s}")})
             for c, s in zip(claims, scores)],
        )
        key = store.ScoreKey(model, "none", store.params_hash(params), "imported")
        emb = load_embeddings(conn, [store.sha256_text(c.text) for c in claims])
    vecs = np.stack([emb[store.sha256_text(c.text)] for c in claims])
    return dict(ids=np.array(ids), ls=ls, key=key, vecs=vecs, scores=scores,
                labels=np.array([c.label for c in claims]), texts=[c.text for c in claims])


def brute_force(vecs_q, vecs_l, ids_l, k):
    dist = 1.0 - vecs_q.astype(np.float64) @ vecs_l.astype(np.float64).T
    order = np.lexsort((np.broadcast_to(ids_l, dist.shape), dist), axis=1)[:, :k]
    return order, np.take_along_axis(dist, order, axis=1)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_sql_knn_matches_numpy(engine, knn_setup, k):
    s = knn_setup
    with engine.connect() as conn:
        nb = nearest_labelled(conn, s["ls"], s["ids"][N_LAB:], k, s["key"])
    assert list(nb.claim_ids) == sorted(s["ids"][N_LAB:])
    order, dist = brute_force(s["vecs"][N_LAB:], s["vecs"][:N_LAB], s["ids"][:N_LAB], k)
    q_pos = {cid: i for i, cid in enumerate(s["ids"][N_LAB:])}
    rows = [q_pos[c] for c in nb.claim_ids]
    np.testing.assert_allclose(nb.distances, dist[rows], atol=1e-5)
    expected_ids = s["ids"][:N_LAB][order[rows]]
    # identical neighbour lists wherever the k-th and (k+1)-th distances are not a float tie
    agree = (nb.neighbour_ids == expected_ids).all(axis=1)
    assert agree.mean() > 0.95
    # labels and scores come back with the neighbours
    lab_pos = {cid: i for i, cid in enumerate(s["ids"][:N_LAB])}
    for i in range(len(rows)):
        idx = [lab_pos[n] for n in nb.neighbour_ids[i]]
        assert list(nb.labels[i]) == list(s["labels"][idx])
        np.testing.assert_allclose(nb.scores[i], s["scores"][idx])


def test_ties_broken_by_claim_id_and_leave_one_out(engine, knn_setup):
    s = knn_setup
    with engine.connect() as conn:
        # labelled claims queried against their own set: each is its own nearest (distance 0)
        self_nb = nearest_labelled(conn, s["ls"], s["ids"][:5], 2, s["key"])
        loo = leave_one_out_neighbours(conn, s["ls"], s["ids"][:5], 2, s["key"])
    assert list(self_nb.neighbour_ids[:, 0]) == list(self_nb.claim_ids)
    assert np.allclose(self_nb.distances[:, 0], 0, atol=1e-6)
    assert not (loo.neighbour_ids == loo.claim_ids[:, None]).any()
    assert (np.diff(loo.distances, axis=1) >= 0).all()


def test_too_few_neighbours_is_an_error(engine, knn_setup):
    s = knn_setup
    with engine.connect() as conn, pytest.raises(ValueError, match="fewer than k"):
        nearest_labelled(conn, s["ls"], s["ids"][N_LAB:], N_LAB + 1, s["key"])
