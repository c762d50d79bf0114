"""``adapt`` of a lineage whose labels are not English: a stack over the shared multilingual model,
cross-fitted, registered and compared with the champion by the same rule, and used by the
lineage's next predict once it is champion. Real USE, real sklearn, real Postgres; 120 Spanish
tweets of CheckThat! 2022."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import yaml

from checkworthy.cli.main import main
from checkworthy.config import PARAMS_FILE
from checkworthy.data.datasets import MULTILINGUAL_TWEETS, load_tweets
from checkworthy.runs.adapt import AdaptSettings, adapt, distinct_labels
from checkworthy.runs.own_scores import labelled_lineage
from checkworthy.scorers.classifier import LINEAGE_STACK, model_type
from checkworthy.scorers.crossfit import FULL
from checkworthy.scorers.embedders import USE_MULTILINGUAL, embed
from checkworthy.scorers.lineage_stack import LineageStackScorer, load_lineage_stack
from checkworthy.scorers.multilingual import load_multilingual, logit
from checkworthy.scorers.registry import make_scorer
from checkworthy.store import model_registry as registry
from checkworthy.testing.claims import write_csv
from checkworthy.testing.datasets import raw_path

SHARED = "classifier:multilingual-tweets"


@pytest.fixture(scope="module")
def spanish(tmp_path_factory):
    """L: 40 check-worthy and 80 other Spanish train tweets; U: 30 more; a params file whose
    adapted models go under a temporary root (2 folds)."""
    tmp = tmp_path_factory.mktemp("adapt-es")
    lt = MULTILINGUAL_TWEETS["tweets-es"]
    split, fname = next((s, f) for s, f in lt.files.items() if s.endswith("-train"))
    claims = load_tweets(raw_path("multilingual", lt.folder, fname), split)[0]
    pos, neg = [c for c in claims if c.label], [c for c in claims if not c.label]
    lab, unl = pos[:40] + neg[:80], pos[40:50] + neg[80:100]
    params = tmp / "params.yaml"
    params.write_text(yaml.safe_dump({
        "extends": str(PARAMS_FILE),
        "predict": {"correction": "platt", "interval": "mondrian", "k": 5},
        "adapt": {"folds": 2, "root": str(tmp / "models"), "n_boot": 300}}))
    return {"tmp": tmp, "params": params,
            "L": write_csv(tmp / "L-es.csv", ["id", "text", "label"], [(c.source_id, c.text, c.label) for c in lab]),
            "U": write_csv(tmp / "U-es.csv", ["id", "text"], [(c.source_id, c.text) for c in unl])}


@pytest.fixture(scope="module")
def adapted(spanish, engine):
    """One adapt of the Spanish lineage (not versioned with DVC: the English tests cover it)."""
    from checkworthy.config import load_params
    from checkworthy.runs.own_scores import read_scored_csv, store_labelled

    params = load_params(spanish["params"])
    s = AdaptSettings.from_params(params)
    rows = read_scored_csv(spanish["L"], label_required=True, scored=False)
    with engine.begin() as conn:
        label_set = store_labelled(conn, spanish["L"], rows)
    lab = distinct_labels(labelled_lineage(spanish["L"]), label_set, [(r.text, r.label) for r in rows])
    out = adapt(engine, lab, params, s, 2026, dvc=None, echo=print)
    return out, lab, s


def test_adapt_of_a_spanish_lineage_trains_the_stack_and_scores_its_labels_out_of_fold(adapted, engine):
    out, lab, s = adapted
    ref = out.spec.removeprefix("classifier:")
    assert model_type(ref, s.artefact_root) == LINEAGE_STACK
    scorer, _ = make_scorer(out.spec, root=str(s.artefact_root))
    assert isinstance(scorer, LineageStackScorer)
    model = load_lineage_stack(ref, s.artefact_root)
    shared = load_multilingual(SHARED.removeprefix("classifier:"))
    assert model.manifest["shared_model"] == f"{shared.name}@{shared.version}"
    assert scorer.params()["shared_model"] == model.manifest["shared_model"]
    assert set(model.members) == {FULL, "fold-1", "fold-2"}
    who = [model.member_of(t) for t in lab.texts]
    assert set(who) == {"fold-1", "fold-2"}
    unseen = "El paro bajó un 3% en marzo, según el Ministerio de Trabajo."
    assert model.member_of(unseen) == FULL
    got = np.array([g["p_positive"].score for g in scorer.score([*lab.texts, unseen])])
    use = embed(USE_MULTILINGUAL, [*lab.texts, unseen])
    shared_logit = logit(shared.predict_proba([*lab.texts, unseen], use))
    for i, (t, m) in enumerate(zip([*lab.texts, unseen], [*who, FULL])):  # each by its own fold's member
        expected = model.members[m].proba([t], shared_logit[i:i + 1], use[i:i + 1])[0]
        assert got[i] == pytest.approx(expected, abs=1e-6)
    in_sample = model.members[FULL].proba(lab.texts, shared_logit[:-1], use[:-1])
    assert not np.allclose(in_sample, got[:-1])  # the full member would score L as it remembers it
    with engine.connect() as conn:
        rows = registry.versions(conn, lab.lineage)
        mine = registry.version(conn, out.version_id)
        decision = registry.decisions(conn, out.version_id)[-1]
    assert [r["spec"] for r in rows] == [SHARED, out.spec]  # the first champion: the model for other languages
    assert out.champion == SHARED and mine["n_labels"] == 120 and mine["training"]["start"] == SHARED
    f = decision["figures"]
    assert decision["decided_by"] == "rule" and f["n"] == 120 and f["low"] <= f["difference"] <= f["high"]
    assert f["promote"] == (f["low"] > 0) == out.promoted
    assert mine["status"] == ("champion" if out.promoted else "challenger")


def test_predict_of_the_spanish_lineage_uses_its_champion(adapted, spanish, use_db, capsys, last_run_and_scores):
    """Promoted by hand (whatever the rule said), the stack scores the lineage's next predict: L's
    stored scores are its fold members'."""
    out, lab, s = adapted
    if not out.promoted:
        assert main(["models", "promote", str(out.version_id), "--reason", "test"]) == 0
    res = spanish["tmp"] / "out.csv"
    assert main(["predict", "--labeled", str(spanish["L"]), "--unlabeled", str(spanish["U"]),
                 "--params", str(spanish["params"]), "--out", str(res)]) == 0
    assert out.spec in capsys.readouterr().out
    run, stored = last_run_and_scores(out.spec)
    assert run == (out.spec, lab.label_set_id)
    scorer = LineageStackScorer(out.spec.removeprefix("classifier:"), root=s.artefact_root)
    expected = [g["p_positive"].score for g in scorer.score(lab.texts)]
    assert [stored[t] for t in lab.texts] == pytest.approx(expected, abs=1e-6)


def test_a_stack_whose_arrays_do_not_match_the_manifest_is_refused(adapted, tmp_path):
    out, _, s = adapted
    name, version = out.spec.removeprefix("classifier:").split("@")
    copy = tmp_path / name / version
    shutil.copytree(s.artefact_root / name / version, copy)
    data = bytearray((copy / "model.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / "model.npz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="model.npz does not match its manifest's sha256"):
        load_lineage_stack(f"{name}@{version}", tmp_path)
