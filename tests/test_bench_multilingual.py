"""The multilingual-embeddings bench's kNN label-mean scorer and threshold, on tiny hand-made input."""

from __future__ import annotations

import numpy as np
import pytest

from bench.bench_multilingual_embeddings import best_threshold, knn_label_mean, knn_quality, positive_f1

#: two clusters on the plane: three labelled 1 near (1, 0), three labelled 0 near (0, 1)
LABELLED = np.array([[1.0, 0.0], [0.9, 0.1], [0.8, 0.3], [0.0, 1.0], [0.1, 0.9], [0.3, 0.8]])
LABELS = [1, 1, 1, 0, 0, 0]


def test_the_score_is_the_mean_label_of_the_k_nearest_by_cosine() -> None:
    queries = np.array([[5.0, 0.2], [0.1, 3.0], [1.0, 0.9]])  # lengths differ: cosine ignores them
    assert knn_label_mean(queries, LABELLED, LABELS, k=1).tolist() == [1.0, 0.0, 1.0]
    assert knn_label_mean(queries, LABELLED, LABELS, k=3).tolist() == [1.0, 0.0, pytest.approx(2 / 3)]
    assert knn_label_mean(queries, LABELLED, LABELS, k=6).tolist() == [0.5, 0.5, 0.5]
    assert knn_label_mean(queries, LABELLED, LABELS, k=10).tolist() == [0.5, 0.5, 0.5]  # k capped at |L|


def test_leave_one_out_never_counts_a_claim_as_its_own_neighbour() -> None:
    labels = [1, 0, 0, 0, 0, 0]
    loo = knn_label_mean(LABELLED, LABELLED, labels, k=1, leave_one_out=True)
    assert loo[0] == 0.0  # its nearest other is [0.9, 0.1], labelled 0
    assert loo[1] == 1.0  # and [1, 0] is the nearest other of [0.9, 0.1]
    assert knn_label_mean(LABELLED, LABELLED, labels, k=1)[0] == 1.0


def test_the_tuned_threshold_and_f1() -> None:
    y, scores = [0, 0, 1, 1, 0], np.array([0.1, 0.3, 0.6, 0.8, 0.7])
    assert positive_f1(y, scores, 0.5) == pytest.approx(0.8)
    assert best_threshold(y, scores) == 0.6  # F1 0.8; 0.3 and 0.8 give 2/3, 0.7 gives 1/2
    q = knn_quality(np.array([[2.0, 0.1], [0.2, 2.0]]), [1, 0], LABELLED, LABELS, k=3)
    assert (q.auc, q.f1_at_half, q.f1_at_threshold) == (1.0, 1.0, 1.0)


def test_a_mismatch_of_labels_and_vectors_is_refused() -> None:
    with pytest.raises(ValueError, match="5 labels for 6"):
        knn_label_mean(LABELLED, LABELLED, LABELS[:5])


def test_the_cascade_sends_the_claims_the_cheap_model_is_least_sure_of() -> None:
    from bench.bench_gemma_multilingual import cascade

    cheap, better = np.array([0.9, 0.45, 0.1, 0.55, 0.6]), np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    assert cascade(cheap, better, 0.0).tolist() == cheap.tolist()
    assert cascade(cheap, better, 0.4).tolist() == [0.9, 1.0, 0.1, 0.0, 0.6]  # 0.45 and 0.55 (0.05 off)
    assert cascade(cheap, better, 1.0).tolist() == better.tolist()
