"""``adapt`` of a lineage whose labels are not English: a stack over the shared multilingual model,
cross-fitted, registered and compared with the champion by the same rule, and used by the
lineage's next predict once it is champion. Real USE, real sklearn, real Postgres; 120 Spanish
tweets of CheckThat! 2022."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import yaml

from checkworthy.cli.main import main
from checkworthy.config import PARAMS_FILE
from checkworthy.data.datasets import MULTILINGUAL_TWEETS, load_tweets
from checkworthy.runs.adapt import AdaptSettings, adapt, adapt_start, distinct_labels
from checkworthy.runs.own_scores import labelled_lineage
from checkworthy.scorers.classifier import LINEAGE_STACK, model_type
from checkworthy.scorers.crossfit import FULL
from checkworthy.scorers.embedders import USE_MULTILINGUAL, embed
from checkworthy.scorers.lineage_stack import LineageStackScorer, load_lineage_stack
from checkworthy.scorers.lora_classifier import load_lora
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


SLOW = "classifier:gemma-lora-ml"


@pytest.fixture(scope="module")
def adapted_slow(adapted, spanish, engine):
    """The Spanish lineage adapted again with the multilingual Gemma LoRA as the slower model, read
    for the quarter of L the cheap stack is least sure of."""
    out, lab, s = adapted
    from checkworthy.config import load_params

    slow = replace(s, slow_model=SLOW, slow_share=0.25)
    return adapt(engine, lab, load_params(spanish["params"]), slow, 2026, dvc=None, echo=print), lab, slow


def test_a_slower_model_reads_only_the_band_the_labels_fixed(adapted_slow, engine):
    """Each claim: the cheap stack's probability, or within the band (a quarter of L's out-of-fold
    probabilities) the stack over the Gemma LoRA's logit too; the same claim scores the same alone
    or in a batch."""
    out, lab, s = adapted_slow
    ref = out.spec.removeprefix("classifier:")
    model = load_lineage_stack(ref, s.artefact_root)
    gemma = load_lora(SLOW.removeprefix("classifier:"))
    assert model.manifest["slow_model"]["model"] == f"{gemma.name}@{gemma.version}"
    assert model.manifest["slow_model"]["share"] == 0.25
    assert model.slow is not None and set(model.slow.stacks) == set(model.members)
    half_width = model.slow.half_width
    assert half_width == model.manifest["slow_model"]["half_width"] and 0 < half_width < 0.5
    scorer = LineageStackScorer(ref, root=s.artefact_root)
    assert scorer.params()["slow_model"] == model.slow.ref
    with engine.connect() as conn:
        training = registry.version(conn, out.version_id)["training"]
    assert (training["slow_model"], training["slow_share"]) == (SLOW, 0.25)
    texts = [*lab.texts, "El paro bajó un 3% en marzo, según el Ministerio de Trabajo."]
    scores = scorer.score(texts)
    got = np.array([g["p_positive"].score for g in scores])
    use = embed(USE_MULTILINGUAL, texts)
    shared_logit = logit(model.shared.predict_proba(texts, use))
    who = [model.member_of(t) for t in texts]
    cheap = np.array([model.members[m].proba([t], shared_logit[i:i + 1], use[i:i + 1])[0]
                      for i, (t, m) in enumerate(zip(texts, who))])
    sent = np.flatnonzero(np.abs(cheap - 0.5) <= half_width)
    assert 0.2 <= np.mean(np.abs(cheap[:-1] - 0.5) <= half_width) <= 0.3  # L's share, out of fold
    kept = np.setdiff1d(np.arange(len(texts)), sent)
    assert got[kept] == pytest.approx(cheap[kept], abs=1e-6)
    slow_logit = logit(gemma.predict_proba([texts[i] for i in sent]))
    for j, i in enumerate(sent):
        m = who[i]
        own = model.members[m].own_logits([texts[i]], use[i:i + 1])
        expected = model.slow.stacks[m].proba(np.c_[shared_logit[i:i + 1], slow_logit[j:j + 1], own])[0]
        assert got[i] == pytest.approx(expected, abs=1e-5)
    named = [json.loads(g["p_positive"].raw).get("slow_model") for g in scores]  # what an audit reads
    assert [i for i, n in enumerate(named) if n == model.slow.ref] == sent.tolist()
    assert {named[i] for i in kept} == {None}
    alone = scorer.score([texts[sent[0]]])[0]["p_positive"].score
    assert alone == pytest.approx(got[sent[0]], abs=1e-5)


def test_english_labels_take_the_stack_when_a_slower_model_is_set_or_asked_for(adapted):
    """With a slower model or ``adapt.trainer: stack``, labels in any language are a stack's (the
    MiniLM path is English's without them)."""
    from checkworthy.config import load_params

    _, _, s = adapted
    params = load_params(PARAMS_FILE)
    english = distinct_labels("en", 0, [("The unemployment rate fell to 3.5% last year.", 1),
                                        ("Thank you all for coming tonight, it is great to be here.", 0)])
    assert adapt_start(english, params, s) == (True, s.start)
    assert adapt_start(english, params, replace(s, slow_model=SLOW)) == (False, SHARED)
    assert adapt_start(english, params, replace(s, trainer="stack")) == (False, SHARED)


@pytest.mark.parametrize(("option", "message"), [
    (["--slow-model", SHARED], "adapt.slow_model 'classifier:multilingual-tweets': not a classifier with an "
                               "adapter of its own"),
    (["--slow-model", "classifier:no-such-model"], "adapt.slow_model 'classifier:no-such-model': no classifier"),
    (["--slow-share", "0"], "--slow-share: must lie above 0 and at most 1, got 0"),
    (["--trainer", "minilm-lora", "--slow-model", SLOW], "adapt.slow_model 'classifier:gemma-lora-ml' is "
                                                          "weighed by a stack, not by adapt.trainer minilm-lora"),
])
def test_adapt_refuses_a_slower_model_it_cannot_use_before_training(spanish, use_db, capsys, option, message):
    root = spanish["tmp"] / "models"
    before = sorted(root.rglob("*")) if root.exists() else []
    assert main(["adapt", "--labeled", str(spanish["L"]), "--params", str(spanish["params"]), "--no-dvc",
                 *option]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert (sorted(root.rglob("*")) if root.exists() else []) == before
