"""Drift: the radius's promise by Monte-Carlo, then on the real store: claims of the labelled set's
own kind raise nothing, claims of another domain raise the figure, the flow emits
``checkworthy.drift.detected`` with the line a person reads and leaves it as an artifact; a drifting
batch's claims beyond the radius go to a person (the cause stored), all its claims when most of it
lies beyond, and its share of check-worthy claims is not estimated; ``checkworthy predict`` on
tweets against debate labels says all of it.

Real data for the store part: the world of :mod:`tests.test_recalibrate` (CLEF 2024 claims, MiniLM
embeddings) and, as another domain, cooking instructions; for the command, ClaimBuster's 2012
debates as L and CheckThat! 2022 dev tweets as U, scored by the MiniLM logistic classifier.
"""

from __future__ import annotations

import asyncio
import csv
import json
import uuid
from dataclasses import replace

import numpy as np
import pytest
from prefect import flow
from sqlalchemy import text

from checkworthy.cli.main import main
from checkworthy.data.datasets import load_claimbuster, load_tweets
from checkworthy.flows.tasks import announce_drift
from checkworthy.method.coverage import k_center
from checkworthy.method.drift import (
    ALPHA,
    CALM,
    DRIFTING,
    FAR,
    QUANTILE,
    Drift,
    check_drift,
    drift_status,
    fit_radius,
)
from checkworthy.method.prevalence import share_positive, under_drift
from checkworthy.method.sampling import balanced_sample
from checkworthy.method.selective import ReviewRule
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.runs.flow_types import FlowContext
from checkworthy.runs.review_queue import export_rows
from checkworthy.scorers.base import OK, Score
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_results, load_run
from checkworthy.store.embeddings import claim_embeddings
from checkworthy.store.run_spec import RunMethods, RunRecord, RunSpec
from checkworthy.testing.claims import COOKING, write_csv
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.events import event_stored
from checkworthy.testing.worlds import build_world

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


def test_the_figure_is_stored_as_it_always_was():
    """A figure's JSON (a run's ``params->'drift'``, an API answer, the drift event) keeps its keys
    and their order, ``languages`` only when there are any; read back it is the same figure, and a
    run record holding one writes its params back unchanged."""
    figure = check_drift([0.1, 0.5, 0.9], 0.3)
    stored = figure.as_dict()
    assert list(stored) == ["quantile", "radius", "n", "n_beyond", "share", "expected", "tolerance", "p_value",
                            "alert"]
    assert Drift.from_dict(stored) == figure
    params = {"correction": "paper", "drift": stored | {"languages": {"ar": 2, "tr": 1}}, "k_used": 5}
    record = RunRecord.from_json(params)
    assert record.drift is not None and record.drift.languages == (("ar", 2), ("tr", 1))
    assert record.drift.n_new_language == 3
    assert json.dumps(record.to_json()) == json.dumps(params)


def test_drift_acts_only_when_the_batch_alerts():
    """Drift counts only in a batch that alerts; there the claims beyond the radius go to a person
    whatever their theta, and every claim of a batch mostly beyond, each with its reason; the
    batch's share is withdrawn."""
    nearest = [0.1, 0.5, 0.9]
    another = Drift(QUANTILE, 0.3, 10, 6, 0.6, 0.05, 0.15, 1e-4, True)
    assert drift_status(nearest, another).tolist() == [DRIFTING, FAR, FAR]
    assert drift_status(nearest, replace(another, share=0.4)).tolist() == [CALM, FAR, FAR]
    for calm in (None, replace(another, alert=False)):
        assert drift_status(nearest, calm).tolist() == [CALM] * 3
    rule = ReviewRule("error", 0.1, 0.1, 0.5, 0.2, 200, 120, 0.05, 0.01)
    theta = [0.95, 0.55, 0.02]
    assert rule.review(theta).tolist() == [0, 1, 0] and rule.review(theta, [CALM] * 3).tolist() == [0, 1, 0]
    assert rule.review(theta, [DRIFTING, CALM, FAR]).tolist() == [1, 1, 1]
    reasons = rule.reasons(theta, [DRIFTING, CALM, FAR])
    assert reasons[0].startswith("to a person (in a batch of another kind") and "margin" in reasons[1]
    assert reasons[2].startswith("to a person (far from every labelled claim")
    p = under_drift(share_positive([0, 0, 1, 1], [0, 1, 1, 1], [1, 0, 1]))
    assert (p.estimate, p.low, p.high, p.not_estimable) == (None, None, None, "drift") and p.labelled == 0.5




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
    same = run_calibration(engine, RunSpec(w.target, tuple(sorted(w.target_ids)), w.ls0, w.key, RunMethods(5)))
    other = run_calibration(engine, RunSpec(f"{w.tag}:cooking", tuple(sorted(cooking)), w.ls0, w.key, RunMethods(5)))
    with engine.connect() as conn:
        d_same, d_other = (load_run(conn, r)["params"]["drift"] for r in (same, other))
    assert d_same["radius"] == d_other["radius"] and d_same["quantile"] == QUANTILE
    assert d_same["n"] == len(w.target_ids) and d_same["share"] <= d_same["tolerance"] and not d_same["alert"]
    assert d_other["n"] == len(cooking) and d_other["share"] >= 0.9 and d_other["alert"]

    @flow(name="drift-announcement")
    def announce(run_ids: list[int]) -> None:
        announce_drift(FlowContext(db_url=db_url), run_ids)

    announce([same, other])
    other_event = str(uuid.uuid5(uuid.NAMESPACE_URL, f"checkworthy:drift:run:{other}"))
    assert event_stored(other_event)
    assert not event_stored(str(uuid.uuid5(uuid.NAMESPACE_URL, f"checkworthy:drift:run:{same}")))
    line = (f"drift: {d_other['share']:.0%} of run {other} ({w.tag}:cooking) ({d_other['n_beyond']} of "
            f"{d_other['n']} claims) lies beyond the labelled set's radius")
    assert _event_payload(other_event)["message"].startswith(line)
    artifacts = _artifacts([f"drift-run-{other}", f"drift-run-{same}"])
    assert list(artifacts) == [f"drift-run-{other}"] and artifacts[f"drift-run-{other}"].startswith(line)
    assert "`checkworthy review export`" in artifacts[f"drift-run-{other}"]


def test_a_batch_of_another_kind_goes_to_a_person_and_loses_its_share(engine, world):
    """Same runs as above (reused): every claim of the cooking batch (almost all beyond the radius)
    is queued with cause ``drift``, those beyond as far from every labelled claim, none automated;
    its share of check-worthy claims is not estimated. The batch of L's own kind queues none for
    drift and keeps its estimate."""
    w, cooking = world
    same = run_calibration(engine, RunSpec(w.target, tuple(sorted(w.target_ids)), w.ls0, w.key, RunMethods(5)))
    other = run_calibration(engine, RunSpec(f"{w.tag}:cooking", tuple(sorted(cooking)), w.ls0, w.key, RunMethods(5)))
    with engine.connect() as conn:
        p_same, p_other = (load_run(conn, r)["params"] for r in (same, other))
        causes = {r: conn.execute(text("SELECT cause, reason FROM review_queue WHERE run_id = :r"),
                                  {"r": r}).all() for r in (same, other)}
    assert all(cause == "rule" for cause, _ in causes[same])
    assert len(causes[other]) == len(cooking) and all(cause == "drift" for cause, _ in causes[other])
    far = [why for _, why in causes[other] if "far from every labelled claim" in why]
    assert len(far) == p_other["drift"]["n_beyond"] and p_other["review"]["automated_share"] == 0
    assert p_other["prevalence"]["not_estimable"] == "drift" and p_other["prevalence"]["estimate"] is None
    assert p_same["prevalence"]["not_estimable"] is None and p_same["prevalence"]["estimate"] is not None


def test_a_batch_partly_beyond_sends_only_its_far_claims_to_a_person(engine, world):
    """70 claims of L's kind and 30 cooking instructions: the batch alerts with under half of it
    beyond the radius, so only the claims beyond go to a person for drift; the rest follow the
    rule chosen on L. Its share of check-worthy claims is not estimated either."""
    w, cooking = world
    mixed = sorted(w.target_ids)[:70] + list(cooking)
    with engine.begin() as conn:
        lineages.register_target(conn, f"{w.tag}:mixed", w.lineage, mixed)
    run = run_calibration(engine, RunSpec(f"{w.tag}:mixed", tuple(sorted(mixed)), w.ls0, w.key, RunMethods(5)))
    with engine.connect() as conn:
        params = load_run(conn, run)["params"]
        rows = load_results(conn, run)
        queued = {c: (cause, why) for c, cause, why in conn.execute(
            text("SELECT claim_id, cause, reason FROM review_queue WHERE run_id = :r"), {"r": run})}
    d, rule = params["drift"], ReviewRule.from_dict(params["review"])
    assert d["alert"] and d["n_beyond"] >= 30 and d["share"] < 0.5
    for r in rows:
        if r["neighbour_distances"][0] > d["radius"]:
            assert queued[r["claim_id"]][0] == "drift" and "far from every labelled claim" in queued[r["claim_id"]][1]
        elif rule.review([r["theta"]])[0]:
            assert queued[r["claim_id"]][0] == "rule"
        else:
            assert r["claim_id"] not in queued
    assert sum(c == "drift" for c, _ in queued.values()) == d["n_beyond"]
    assert params["review"]["automated_share"] == pytest.approx(1 - len(queued) / len(rows))
    assert params["prevalence"]["not_estimable"] == "drift"


def test_a_coverage_export_spreads_the_claims_beyond_first_then_the_most_uncertain(engine, use_db, world,
                                                                                 tmp_path, capsys):
    """A drifted batch (40 claims of L's kind, the cooking instructions): ``review export --order
    coverage`` lists the claims queued for drift first, in greedy k-center order over their stored
    embeddings, then the others most uncertain first; the command writes them and says so."""
    w, cooking = world
    batch = sorted(w.target_ids)[:40] + list(cooking)
    target = f"{w.tag}:mixed-coverage"
    with engine.begin() as conn:
        lineages.register_target(conn, target, w.lineage, batch)
    run = run_calibration(engine, RunSpec(target, tuple(sorted(batch)), w.ls0, w.key, RunMethods(5)))
    with engine.connect() as conn:
        queued = conn.execute(text("SELECT claim_id, cause FROM review_queue WHERE run_id = :r"), {"r": run}).all()
        rows = export_rows(conn, None, target, "coverage", seed=3)
        top = export_rows(conn, 5, target, "coverage", seed=3)
        far = {c for c, cause in queued if cause == "drift"}
        drift = [r["claim_id"] for r in export_rows(conn, None, target) if r["claim_id"] in far]
        vectors = claim_embeddings(conn, drift)
        alert = load_run(conn, run)["params"]["drift"]["alert"]
    assert alert and drift
    ids = [r["claim_id"] for r in rows]
    assert sorted(ids) == sorted(c for c, _ in queued) and [r["claim_id"] for r in top] == ids[:5]
    assert ids[:len(drift)] == [drift[i] for i in k_center(vectors, len(drift), seed=3)]
    rest = rows[len(drift):]
    assert [r["priority"] for r in rest] == sorted((r["priority"] for r in rest), reverse=True)
    out = tmp_path / "cover.csv"
    assert main(["review", "export", "--order", "coverage", "--seed", "3", "--target", target,
                 "--format", "csv", "--limit", "5", "--out", str(out)]) == 0
    with out.open(encoding="utf-8") as fh:
        assert [r["id"] for r in csv.DictReader(fh)] == [r["source_id"] for r in top]
    assert "5 claims to label, those beyond the labelled set's radius spread first" in capsys.readouterr().out


def test_predict_on_tweets_against_debate_labels_says_the_drift_and_acts(use_db, tmp_path, capsys):
    """``checkworthy predict`` (auto correction, Mondrian interval), L = 100 + 100 claims of the 2012
    debates, U = 40 CheckThat! 2022 dev tweets: the drift line, every claim to a person (OUT's
    review column, the queue's cause), no promise made for the batch, its share not estimable."""
    debates, _ = load_claimbuster(raw_path("claimbuster", "crowdsourced.csv"))
    debates = [c for c in debates if c.split == "2012"]
    lab = [debates[i] for i in balanced_sample([c.label for c in debates], 100, seed=3)]
    tweets, _ = load_tweets(raw_path("tweets", "CT22_english_1A_checkworthy_dev.tsv"), "ct22-dev")
    lab_file = write_csv(tmp_path / "L.csv", ["id", "text", "label"], [(c.source_id, c.text, c.label) for c in lab])
    unl_file = write_csv(tmp_path / "U.csv", ["id", "text", "label"],
                     [(c.source_id, c.text, c.label) for c in tweets[:40]])
    out = tmp_path / "OUT.csv"
    assert main(["predict", "--labeled", str(lab_file), "--unlabeled", str(unl_file), "--out", str(out),
                 "--model", "classifier:minilm-lr", "--score-kind", "p_positive", "--k", "5"]) == 0
    printed = capsys.readouterr().out
    with use_db.connect() as conn:
        run = conn.execute(text("SELECT id, params FROM calibration_runs ORDER BY id DESC LIMIT 1")).one()
        queued = dict(conn.execute(text(
            "SELECT c.source_id, q.reason FROM review_queue q JOIN claims c ON c.id = q.claim_id "
            "WHERE q.run_id = :r AND q.cause = 'drift'"), {"r": run.id}).all())
    d = run.params["drift"]
    far = [sid for sid, why in queued.items() if "far from every labelled claim" in why]
    assert d["alert"] and d["share"] >= 0.5 and len(queued) == 40 and len(far) == d["n_beyond"]
    assert (f"drift: {d['share']:.0%} of this batch ({d['n_beyond']} of 40 claims) lies beyond the labelled "
            "set's radius") in printed and "label some of those beyond it (`checkworthy review export`)" in printed
    assert (f"share check-worthy in this batch: not estimable: {d['share']:.0%} of the batch lies beyond the "
            "labelled set (drift)") in printed and "label-shift PPI" not in printed
    assert (f"review: 40 of 40 claims to a person (40 for drift: {d['n_beyond']} far from every labelled "
            f"claim, {40 - d['n_beyond']} within the labelled set's radius)") in printed
    assert "most of it is of another kind, so none of its claims is decided automatically" in printed
    assert "no Learn-then-Test promise for this batch, of another kind than the labelled file" in printed
    with open(out, newline="", encoding="utf-8") as fh:
        assert {r["review"] for r in csv.DictReader(fh)} == {"1"}


def _event_payload(event_id: str) -> dict:
    """The stored event's payload (the event is known to be stored)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        got = client._client.post("/events/filter", json={
            "filter": {"event": {"prefix": ["checkworthy.drift"]}}, "limit": 50}).json()
    return next(e["payload"] for e in got["events"] if e["id"] == event_id)


def _artifacts(keys: list[str]) -> dict[str, str]:
    """The Markdown of the artifacts with these keys that exist, by key."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def read():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=keys)))

    return {a.key: a.data for a in asyncio.run(read())}
