"""Small calibration settings stored in a real database (real claims, embeddings and imported
scores), and the checks that a stored run equals a computation from scratch."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit
from sqlalchemy import Engine

from checkworthy.data.records import Claim
from checkworthy.data.text import normalise_text
from checkworthy.method.corrections import LabelledSet
from checkworthy.runs.calibration_run import compute
from checkworthy.runs.comparisons import CompareInputs
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.runs.recalibration import spec_from_run
from checkworthy.scorers.base import OK, Score
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_results, load_run
from checkworthy.store.embeddings import store_embeddings
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.claims import clef, clef_claims


@dataclass
class World:
    """A small real calibration setting stored under its own dataset name."""

    tag: str
    lineage: str
    target: str
    key: store.ScoreKey
    ls0: int
    target_ids: list[int]
    lab_ids: list[int]
    extra: list[Claim]
    extra_ids: list[int] = field(default_factory=list)
    train: list[Claim] = field(default_factory=list)
    dev: list[Claim] = field(default_factory=list)


def fake_score(text_: str, label: int) -> float:
    """A deterministic weak model: label-leaning, with text-hash noise."""
    u = int(hashlib.sha256(text_.encode()).hexdigest()[:8], 16) / 2**32
    return round(float(np.clip(0.35 + 0.25 * label + 0.5 * (u - 0.5), 0, 1)), 4)


def build_world(engine, tag: str, n_per_class: int = 60, n_extra: int = 60, seed: int = 11) -> World:
    """Store targets, a labelled set and spare labelled claims under dataset ``tag``; embed and score them."""
    train, dev = clef()
    dev_texts = {normalise_text(c.text) for c in dev}
    by_text: dict[str, set[int]] = {}
    for c in train:
        by_text.setdefault(normalise_text(c.text), set()).add(c.label)
    clean = [c for c in train
             if normalise_text(c.text) not in dev_texts and len(by_text[normalise_text(c.text)]) == 1]
    rng = np.random.default_rng(seed)
    n = n_per_class + n_extra
    pos = [clean[i] for i in rng.permutation([i for i, c in enumerate(clean) if c.label == 1])[:n]]
    neg = [clean[i] for i in rng.permutation([i for i, c in enumerate(clean) if c.label == 0])[:n]]
    lab = pos[:n_per_class] + neg[:n_per_class]
    extra = [c for pair in zip(pos[n_per_class:], neg[n_per_class:]) for c in pair][:n_extra]
    lineage, target = f"{tag}:calibration", f"{tag}:test"
    with engine.begin() as conn:
        lab_ids = store.store_claims_with_labels(
            conn, [store.NewClaim(tag, "train", c.source_id, c.text, c.label) for c in lab], f"{tag}:file")
        t_ids = store.store_claims_with_labels(
            conn, [store.NewClaim(tag, "dev-test", c.source_id, c.text, c.label) for c in dev], f"{tag}:file")
        extra_ids = store.store_claims_with_labels(  # stored unlabelled: the data team labels them later
            conn, [store.NewClaim(tag, "train", c.source_id, c.text) for c in extra], f"{tag}:file")
        model = store.ensure_model(conn, f"file:{tag}", "file")
        params = {"source": f"{tag}-scores"}
        store.insert_predictions(conn, model, "none", params, [
            (store.sha256_text(c.text), {"imported": Score(fake_score(c.text, c.label), OK, "imported")})
            for c in lab + dev + extra])
        ensure_embeddings(conn, [store.sha256_text(c.text) for c in lab + dev + extra])
        ls0 = store.create_label_set(conn, lineage, lab_ids)
        lineages.register_target(conn, target, lineage, t_ids)
        lineages.set_head(conn, lineage, ls0, "initial")
    key = store.ScoreKey(model, "none", store.params_hash(params), "imported")
    return World(tag, lineage, target, key, ls0, t_ids, lab_ids, extra, extra_ids, train, dev)


def spec(w: World, label_set_id: int, k: int = 5, target_ids=None) -> RunSpec:
    """The run spec of ``w``'s targets (or ``target_ids``) on a label set."""
    return RunSpec(w.target, tuple(sorted(target_ids or w.target_ids)), label_set_id, w.key, RunMethods(k))


def results(conn, run_id):
    """A stored run's results by claim id."""
    return {r["claim_id"]: r for r in load_results(conn, run_id)}


def assert_equals_full(engine, s: RunSpec, run_id: int) -> dict:
    """The stored run equals a from-scratch computation of the same spec (same SQL kNN, same NN-PPI)."""
    with engine.connect() as conn:
        out = compute(conn, s)
        got = results(conn, run_id)
    ids, res, nb = out.claim_ids, out.result, out.neighbours
    assert nb is not None  # a computed outcome holds its neighbours
    assert sorted(got) == sorted(int(i) for i in ids)
    for i, cid in enumerate(ids):
        r = got[int(cid)]
        assert list(r["neighbour_ids"]) == [int(x) for x in nb.neighbour_ids[i]]
        assert list(r["neighbour_distances"]) == [float(x) for x in nb.distances[i]]
        assert (r["theta"], r["ci_low"], r["ci_high"], r["knn_mean"], r["decision"]) == (
            float(res.theta[i]), float(res.ci_low[i]), float(res.ci_high[i]), float(res.knn_mean[i]),
            bool(res.decision[i]))
    return got


def truly_affected(old: dict, new: dict, changed: set[int]) -> set[int]:
    """Claims whose neighbour list differs, or whose (same) neighbours include a relabelled claim."""
    return {c for c in new if c not in old or list(old[c]["neighbour_ids"]) != list(new[c]["neighbour_ids"])
            or set(new[c]["neighbour_ids"]) & changed}


def assert_incremental_equals_full(engine, run_id: int, parent_id: int, label_set_id: int,
                                   targets, flipped: set[int]) -> tuple[int, int]:
    """A stored incremental run: complete, on ``label_set_id``, child of ``parent_id``; row for row a
    full recomputation; and it recomputed exactly the claims the change affects (the rest copied).
    Returns (claims recomputed, claims in the run)."""
    with engine.connect() as conn:
        run = load_run(conn, run_id)
        old_res = {x["claim_id"]: x for x in load_results(conn, parent_id)}
    assert (run["mode"], run["status"], run["parent_run_id"], run["label_set_id"]) == (
        "incremental", "complete", parent_id, label_set_id)
    new_res = assert_equals_full(engine, spec_from_run(run, label_set_id, targets), run_id)
    with engine.connect() as conn:
        recomputed = {r["claim_id"] for r in load_results(conn, run_id) if r["computed_in_run"] is None}
    assert recomputed == truly_affected(old_res, new_res, flipped)
    assert 0 < len(recomputed) < len(new_res)
    return len(recomputed), len(new_res)


@dataclass(frozen=True)
class Scenario:
    """A labelled set L and claims U to calibrate, stored with real embeddings and scores."""

    name: str
    lab_ids: list[int]
    unl_ids: list[int]
    label_set_id: int
    key: store.ScoreKey
    scores: dict[str, float]

    def spec(self, k: int = 5, **kw) -> RunSpec:
        methods = RunMethods(k, **kw)
        return RunSpec(f"{self.name}:U", tuple(self.unl_ids), self.label_set_id, self.key, methods)


def build_scenario(engine: Engine, name: str, n_lab: int = 40, n_unl: int = 15, offset: int = 0,
                   seed: int = 0, vectors: Mapping[str, np.ndarray] | None = None) -> Scenario:
    """Store ``n_lab + n_unl`` real claims under dataset ``name`` (labels on all, so metrics are
    stored too), their embeddings, one imported score each, and a label set over the first
    ``n_lab``. Deterministic: the same arguments give the same data in any database.

    ``vectors`` (text hash -> embedding, e.g. read from another database) are stored instead of
    embedding the texts again: the model is slow on a shared CPU and gives the same vectors."""
    claims = clef_claims()[offset : offset + n_lab + n_unl]
    rng = np.random.default_rng(seed)
    scores = {c.text: round(float(np.clip(0.5 + 0.25 * c.label + rng.normal(0, 0.2), 0, 1)), 4)
              for c in claims}
    with engine.begin() as conn:
        ids = store.store_claims_with_labels(
            conn, [store.NewClaim(name, "L" if i < n_lab else "U", c.source_id, c.text, c.label)
                   for i, c in enumerate(claims)], f"test:{name}")
        hashes = [store.sha256_text(c.text) for c in claims]
        if vectors is None:
            ensure_embeddings(conn, hashes)
        else:
            store_embeddings(conn, hashes, np.stack([vectors[h] for h in hashes]))
        ls = store.create_label_set(conn, f"{name}:L", ids[:n_lab])
        model = store.ensure_model(conn, f"file:{name}", "file")
        params = {"source": name}
        store.insert_predictions(
            conn, model, "none", params,
            [(store.sha256_text(t), {"imported": Score(s, OK, repr(s))}) for t, s in scores.items()])
    key = store.ScoreKey(model, "none", store.params_hash(params), "imported")
    return Scenario(name, ids[:n_lab], ids[n_lab:], ls, key, scores)


def synthetic(m: int = 800, n: int = 800, seed: int = 0, kind: str = "token_prob") -> CompareInputs:
    """Claims on a line: P(Y=1 | x) = x, a biased noisy score, neighbours = nearest in x."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, m + n)
    y = (rng.uniform(0, 1, m + n) < x).astype(int)
    c = expit(2.0 * (x - 0.3) + rng.normal(0, 0.8, m + n))  # too high, noisy
    xl = x[:m]
    kmax = 90

    def lists(xq: np.ndarray, loo: bool) -> tuple[np.ndarray, np.ndarray]:
        d = np.abs(xq[:, None] - xl[None, :])
        if loo:
            np.fill_diagonal(d, np.inf)
        order = np.argsort(d, axis=1, kind="stable")[:, :kmax]
        return order, np.take_along_axis(d, order, axis=1)

    nl, dl = lists(xl, True)
    nq, dq = lists(x[m:], False)
    cal = LabelledSet(y=y[:m], c=c[:m], nbr=nl, dist=dl)
    return CompareInputs(cal=cal, c=c[m:], nbr=nq, dist=dq, y=y[m:], k=5, score_kind=kind)
