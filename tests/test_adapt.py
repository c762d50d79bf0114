"""A lineage's own model: cross-fitted fine-tuning on its labels, the model registry, the promotion
rule, and predict using the champion. Real MiniLM, real LoRA training (tiny: 2 folds, 1 epoch),
real Postgres, real DVC in a scratch repository; tweets (CheckThat! 2022), a kind of claim today's
model was not trained on."""

from __future__ import annotations

import csv
import random

import numpy as np
import pytest
import yaml
from sqlalchemy import text

from checkworthy.cli.main import main
from checkworthy.config import PARAMS_FILE
from checkworthy.method import promotion
from checkworthy.method.selective import fit_review, realised
from checkworthy.runs.adapt import (
    AdaptSettings,
    DvcVersioning,
    adapt,
    distinct_labels,
    labels_problem,
    train_crossfit,
)
from checkworthy.runs.own_scores import labelled_lineage
from checkworthy.scorers.crossfit import FULL, load_crossfit
from checkworthy.store import model_registry as registry
from checkworthy.store.audit import table_counts
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.scratch_project import make_dvc_repo


def tweets(name: str) -> list[tuple[str, str, int]]:
    """(tweet id, text, label) of a CheckThat! 2022 tweet file."""
    with raw_path("tweets", name).open(encoding="utf-8") as fh:
        return [(r["tweet_id"], r["tweet_text"].strip(), int(r["class_label"]))
                for r in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)]


@pytest.fixture(scope="module")
def sets():
    """L: 24 tweets a class of CT22 train; U: 40 of CT22 dev (12 check-worthy)."""
    rng = random.Random(4)
    train, dev = tweets("CT22_english_1A_checkworthy_train.tsv"), tweets("CT22_english_1A_checkworthy_dev.tsv")
    lab = rng.sample([t for t in train if t[2]], 24) + rng.sample([t for t in train if not t[2]], 24)
    unl = rng.sample([t for t in dev if t[2]], 12) + rng.sample([t for t in dev if not t[2]], 28)
    return lab, unl


def write(path, rows, label=True):
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label"] if label else ["id", "text"])
        w.writerows([(i, t, y) if label else (i, t) for i, t, y in rows])
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory, sets):
    """L.csv, U.csv and a params file: today's model is MiniLM LoRA alone (fast), adapted models go
    under a temporary root, 2 folds of 1 epoch."""
    tmp = tmp_path_factory.mktemp("adapt")
    lab, unl = sets
    params = tmp / "params.yaml"
    params.write_text(yaml.safe_dump({
        "extends": str(PARAMS_FILE),
        "predict": {"model": "classifier:minilm-lora", "score_kind": "p_positive", "correction": "platt",
                    "interval": "mondrian", "k": 5},
        "adapt": {"start": "minilm-lora", "folds": 2, "epochs": 1, "root": str(tmp / "models"),
                  "n_boot": 300}}))
    return {"tmp": tmp, "L": write(tmp / "L.csv", lab), "U": write(tmp / "U.csv", unl), "params": params}


def test_promotion_needs_the_whole_interval_above_zero():
    """A clearly better model is promoted; the champion's own scores, or a worse model, are not."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 150)
    good = np.clip(0.5 + 0.35 * (2 * y - 1) + rng.normal(0, 0.2, 300), 0.01, 0.99)
    weak = np.clip(0.5 + 0.05 * (2 * y - 1) + rng.normal(0, 0.2, 300), 0.01, 0.99)
    fold = np.arange(300) % 3
    up = promotion.compare(y, good, weak, fold, promotion.PromotionRule(n_boot=300))
    assert up["promote"] and up["low"] > 0 and up["f1_challenger"] > up["f1_champion"]
    same = promotion.compare(y, weak, weak, fold, promotion.PromotionRule(n_boot=300))
    assert not same["promote"] and same["difference"] == 0
    assert not promotion.compare(y, weak, good, fold, promotion.PromotionRule(n_boot=300))["promote"]


def test_too_few_labels_of_a_class_for_the_folds_are_named():
    assert labels_problem([1] * 30 + [0] * 30, 3) is None
    why = labels_problem([1] * 29 + [0] * 40, 3)
    assert "29 of class 1" in why and "at least 30" in why
    assert "at least 2 folds" in labels_problem([1] * 30 + [0] * 30, 1)


def test_without_cross_fitting_the_labelled_claims_look_better_than_they_are(sets, tmp_path):
    """The model trained on all of L scores L as it remembers it: its residuals on L shrink and
    Learn-then-Test, fitted on those scores, automates decisions on new claims that are wrong more
    often than L showed.
    The fold models' scores of L (cross-fitting) show the model's real errors instead."""
    lab, unl = sets
    labelled = distinct_labels("t", 0, [(t, y) for _, t, y in lab])
    s = AdaptSettings(folds=2, epochs=4, lr=2e-3, head_lr=2e-3, batch_size=8, val_share=0.2, root=str(tmp_path))
    folder, _ = train_crossfit(labelled, s, 7, print)
    art = load_crossfit(f"{folder.parent.name}@{folder.name}", tmp_path)
    y = np.array(labelled.labels)
    in_sample = art.members[FULL].predict_proba(labelled.texts)
    cross_fitted = art.predict_proba(labelled.texts)
    assert np.abs(y - in_sample).mean() < 0.8 * np.abs(y - cross_fitted).mean()  # measured: 0.33 vs 0.48
    y_u = np.array([label for _, _, label in unl])
    p_u = art.predict_proba([t for _, t, _ in unl])
    naive = fit_review(in_sample, y, risk="error", max_risk=0.2, delta=0.2)
    honest = fit_review(cross_fitted, y, risk="error", max_risk=0.2, delta=0.2)
    share_naive, risk_naive = realised(p_u, y_u, 0.5, "error", naive.margin)
    share_honest, _ = realised(p_u, y_u, 0.5, "error", honest.margin)
    # on its remembered scores L looks right 7 times in 8 and every new claim is decided
    # automatically, wrong more often than L showed; the fold models' scores automate nothing
    assert naive.margin is not None and risk_naive > naive.risk_labelled
    assert share_honest < share_naive


@pytest.fixture(scope="module")
def adapted(project, engine, sets):
    """One adapt of the L file's lineage through the run (versioned with DVC in a scratch repo)."""
    from checkworthy.config import load_params
    from checkworthy.runs.own_scores import read_scored_csv, store_labelled

    repo = make_dvc_repo(project["tmp"] / "dvc")
    params = load_params(project["params"])
    s = AdaptSettings.from_params(params, root=str(repo / "models" / "classifier"))
    rows = read_scored_csv(project["L"], label_required=True, scored=False)
    with engine.begin() as conn:
        label_set = store_labelled(conn, project["L"], rows)
    lab = distinct_labels(labelled_lineage(project["L"]), label_set, [(r.text, r.label) for r in rows])
    out = adapt(engine, lab, params, s, 2026, dvc=DvcVersioning(repo, "checkworthy adapt (test)"), echo=print)
    return out, lab, repo, s


def test_adapt_registers_the_challenger_with_its_figures_and_the_decision(adapted, engine):
    out, lab, repo, s = adapted
    name, version = out.spec.removeprefix("classifier:").split("@")
    assert (repo / "models" / "classifier" / f"{name}.dvc").exists()
    assert "checkworthy adapt (test)" in (repo / "models" / "classifier" / f"{name}.dvc").read_text()
    assert any((repo.parent / "dvcstore").rglob("*"))  # pushed to the scratch remote
    with engine.connect() as conn:
        rows = registry.versions(conn, lab.lineage)
        mine = registry.version(conn, out.version_id)
        decision = registry.decisions(conn, out.version_id)[-1]
    assert [r["spec"] for r in rows] == ["classifier:minilm-lora", out.spec]
    assert mine["label_fingerprint"] == lab.fingerprint and mine["n_labels"] == 48
    assert mine["artefact"]["dvc_md5"] and mine["artefact"]["version"] == version
    f = decision["figures"]
    assert decision["decided_by"] == "rule" and f["n"] == 48 and f["low"] <= f["difference"] <= f["high"]
    assert f["promote"] == (f["low"] > 0) == out.promoted
    assert mine["status"] == ("champion" if out.promoted else "challenger")
    assert mine["metrics"]["cv_f1_positive"] == pytest.approx(f["f1_challenger"])


def test_predict_of_the_lineage_uses_the_champion_with_out_of_fold_scores_for_l(adapted, project, use_db, capsys,
                                                                                last_run_and_scores):
    """Promoted by hand (whatever the rule said), the adapted model scores the lineage's next
    predict: L's stored scores are its fold models' (each claim by a model that never saw it), U's
    the model trained on all of L."""
    out, lab, _, s = adapted
    if not out.promoted:
        assert main(["models", "promote", str(out.version_id), "--reason", "test"]) == 0
    assert main(["models", "list", "--lineage", lab.lineage]) == 0
    listed = capsys.readouterr().out
    assert f"{out.version_id}\t{lab.lineage}\tchampion\t{out.spec}" in listed and "\tretired\t" in listed
    res = project["tmp"] / "out.csv"
    assert main(["predict", "--labeled", str(project["L"]), "--unlabeled", str(project["U"]),
                 "--params", str(project["params"]), "--out", str(res)]) == 0
    assert out.spec in capsys.readouterr().out
    art = load_crossfit(out.spec.removeprefix("classifier:"), s.artefact_root)
    run, stored = last_run_and_scores(out.spec)
    assert run == (out.spec, lab.label_set_id)
    folds = [art.member_of(t) for t in lab.texts]
    assert set(folds) == {"fold-1", "fold-2"}
    for member in ("fold-1", "fold-2"):
        texts = [t for t, m in zip(lab.texts, folds) if m == member]
        assert [stored[t] for t in texts] == pytest.approx(art.members[member].predict_proba(texts), abs=1e-6)
    with res.open() as fh:
        assert len(list(csv.DictReader(fh))) == 40


def test_models_promote_and_retire_refuse_unknown_versions_and_worse_models(adapted, use_db, capsys):
    out, lab, _, _ = adapted
    before = table_counts(use_db)
    assert main(["models", "promote", "999999"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no model version 999999" in err
    assert main(["models", "promote", str(out.version_id)]) == 2
    assert "already champion" in capsys.readouterr().err
    assert table_counts(use_db) == before
    assert main(["models", "retire", str(out.version_id), "--reason", "test"]) == 0
    with use_db.connect() as conn:
        assert registry.champion(conn, lab.lineage) is None  # params.yaml's predict: model in force again


def test_recalibrating_with_the_champion_reruns_the_lineage_newest_calibration(adapted, project, use_db):
    """With the adapted model retired, the lineage's newest calibration (predict's, with the adapted
    model) is run again with params.yaml's predict: model; run again, there is nothing to do."""
    from checkworthy.config import load_params
    from checkworthy.runs.adapt import recalibrate_with_champion

    out, lab, _, _ = adapted
    params = load_params(project["params"])
    runs = recalibrate_with_champion(use_db, lab.lineage, params)
    with use_db.connect() as conn:
        rows = conn.execute(text("SELECT m.spec, r.label_set_id, r.status FROM calibration_runs r JOIN models m "
                                 "ON m.id = r.model_id WHERE r.id = ANY(:i)"), {"i": runs}).all()
    assert [(r.spec, r.label_set_id, r.status) for r in rows] == [("classifier:minilm-lora", lab.label_set_id,
                                                                   "complete")]
    assert recalibrate_with_champion(use_db, lab.lineage, params) == []


def test_adapt_refuses_bad_input_before_writing(project, sets, use_db, tmp_path, capsys):
    lab, _ = sets
    few = write(tmp_path / "few.csv", lab[:15] + lab[24:60])  # 15 check-worthy: 2 folds need 20
    before = table_counts(use_db)
    cases = [
        (["adapt", "--labeled", str(few), "--params", str(project["params"]), "--no-dvc"], "15 of class 1"),
        (["adapt", "--labeled", str(project["L"]), "--lineage", "clef2024:calibration:seed=1",
          "--params", str(project["params"]), "--no-dvc"], "not --lineage clef2024:calibration:seed=1"),
        (["adapt", "--lineage", "no-such-lineage", "--params", str(project["params"]), "--no-dvc"],
         "no label set of that name"),
        (["adapt", "--params", str(project["params"])], "--labeled FILE or --lineage NAME"),
        (["adapt", "--labeled", str(project["L"]), "--params", str(project["params"]), "--folds", "1",
          "--no-dvc"], "at least 2 folds"),
        (["adapt", "--labeled", str(project["L"]), "--params", str(project["params"])],
         "outside the project, so DVC cannot version it"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, (argv, err)
    assert table_counts(use_db) == before


def test_the_adapt_flow_skips_a_lineage_whose_labels_have_not_changed(adapted, project, db_url, harness):
    """The deployment's flow: a lineage whose newest model was trained on the labels in force is
    not trained again, and says why."""
    from checkworthy.flows.pipeline import adapt_flow

    out, lab, _, _ = adapted
    from checkworthy.runs.flow_types import Adapted, FlowContext

    done = adapt_flow(lineages=[lab.lineage], ctx=FlowContext(params_path=str(project["params"]), db_url=db_url),
                      version_artefacts=False)
    assert done.lineages == [Adapted(lab.lineage, False, f"version {out.version_id} was trained on these labels")]
    assert done.runs == []
