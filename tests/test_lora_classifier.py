"""The LoRA classifiers (MiniLM, Gemma 3 270M) and SetFit: small real fine-tunings, their artefacts, the
versioned models."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import replace

import numpy as np
import pytest

from checkworthy.method.metrics import roc_auc
from checkworthy.runs import train_classifier as training
from checkworthy.runs.train_lora import FineTuning, train_lora
from checkworthy.runs.train_setfit import SetFitSpec, train_setfit
from checkworthy.scorers import classifier
from checkworthy.scorers.lora_classifier import LoraClassifierScorer, load_lora
from checkworthy.scorers.registry import make_scorer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One epoch on 240 real ClaimBuster sentences of other debates, tested on 100 of 2016."""
    groups = training.load_groups(2026, {"claimbuster": None, "clef2024": 1203})
    rng = random.Random(3)
    other = groups["claimbuster:other"]
    small = {"claimbuster:other": rng.sample([c for c in other if c.label], 100)
             + rng.sample([c for c in other if not c.label], 140),
             "claimbuster:2016": rng.sample(groups["claimbuster:2016"], 100)}
    root = tmp_path_factory.mktemp("lora")
    data = training.TrainingData(["claimbuster:2016"], groups=small, sources=["claimbuster:other"])
    art = train_lora("tiny", FineTuning.for_base(epochs=1), data, root=root)
    return art, root, small


def test_fine_tuning_saves_a_small_verified_artefact(tiny):
    art, root, small = tiny
    folder = root / "tiny" / art.version
    assert (root / "tiny" / "LATEST").read_text().strip() == art.version
    assert sorted(p.name for p in folder.iterdir()) == ["adapter_config.json", "adapter_model.safetensors",
                                                        "head.safetensors", "manifest.json"]
    assert sum(p.stat().st_size for p in folder.iterdir()) < 5_000_000  # the adapter, not MiniLM
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "all-MiniLM-L6-v2"  # no machine's path
    m = art.manifest
    assert m["model_type"] == classifier.LORA and m["training_data"]["n_texts"] == 240
    assert m["hyperparameters"]["chosen_epoch"] == 1 and m["hyperparameters"]["n_val"] == 24
    assert set(m["metrics"]) == {"claimbuster:2016"} and 0 <= m["metrics"]["claimbuster:2016"]["roc_auc"] <= 1
    assert classifier.model_type("tiny", root) == classifier.LORA


def test_scores_from_the_saved_artefact_equal_the_trained_model(tiny):
    art, root, small = tiny
    texts = [c.text for c in small["claimbuster:2016"][:12]]
    scorer, prompt = make_scorer("classifier:tiny", root=str(root))
    assert isinstance(scorer, LoraClassifierScorer) and prompt[0] == "none"
    out = scorer.score(texts)
    p = np.array([o["p_positive"].score for o in out])
    assert p == pytest.approx(art.predict_proba(texts), abs=1e-6)
    assert [o["paper_c"].score for o in out] == pytest.approx([max(v, 1 - v) for v in p])
    assert p == pytest.approx(art.predict_proba(texts[::-1])[::-1], abs=1e-6)  # order does not matter
    assert scorer.params()["files_sha256"] == art.manifest["files"]
    head = root / "tiny" / art.version / "head.safetensors"
    head.write_bytes(head.read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match="sha256"):
        load_lora("tiny", root)


@pytest.mark.parametrize("name", ["minilm-lora", "gemma-lora"])
def test_the_versioned_model_separates_held_out_claims(name):
    """The DVC-tracked LoRA models (pulled from the project's remote in a fresh clone) rank 200
    ClaimBuster 2016 sentences, which they never saw, far above chance."""
    groups = training.load_groups(2026, {"claimbuster": None, "clef2024": 1203})
    claims = random.Random(5).sample(groups["claimbuster:2016"], 200)
    scorer, _ = make_scorer(f"classifier:{name}")
    assert "claimbuster:2016" in scorer.params()["excluded"]
    p = [o["p_positive"].score for o in scorer.score([c.text for c in claims])]
    assert roc_auc([c.label for c in claims], p) > 0.85


def test_setfit_saves_an_adapter_that_scores_like_the_trained_model(tiny, tmp_path):
    """SetFit (contrastive pairs, then a logistic head) on 40 texts a class, through the LoRA scorer."""
    _, _, small = tiny
    data = training.TrainingData(["claimbuster:2016"], groups=small, sources=["claimbuster:other"])
    art = train_setfit("sf", SetFitSpec(examples=40, steps=6), data, root=tmp_path)
    m = art.manifest
    assert m["model_type"] == classifier.SETFIT and art.normalise
    assert m["training_data"]["n_texts"] == 80 and m["training_data"]["n_positive"] == 40
    assert m["export_check"]["texts"] == 32 and m["export_check"]["max_abs_difference"] < 1e-4
    folder = tmp_path / "sf" / art.version
    assert sum(p.stat().st_size for p in folder.iterdir()) < 5_000_000
    scorer, _ = make_scorer("classifier:sf", root=str(tmp_path))
    texts = [c.text for c in small["claimbuster:2016"][:8]]
    assert isinstance(scorer, LoraClassifierScorer) and scorer.params()["model_type"] == classifier.SETFIT
    assert [o["p_positive"].score for o in scorer.score(texts)] == pytest.approx(art.predict_proba(texts),
                                                                                  abs=1e-6)


def test_gemma_base_trains_an_adapter_read_at_the_last_token(tiny, tmp_path):
    """Gemma 3 270M under the adapter, on a balanced 12 texts a class: a small artefact whose base is
    named without a path, scored through the registry like the trained model."""
    _, _, small = tiny
    data = training.TrainingData(["claimbuster:2016"], groups=small, sources=["claimbuster:other"])
    art = train_lora("tg", FineTuning.for_base("gemma3-270m"), data, examples=12, root=tmp_path)
    m = art.manifest
    assert m["model_type"] == classifier.GEMMA_LORA and m["base_model"]["pooling"] == "last"
    assert m["training_data"]["n_trained_on"] == 24 and m["hyperparameters"]["rank"] == 8
    assert m["hyperparameters"]["device"] == "cpu"
    folder = tmp_path / "tg" / art.version
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == "gemma-3-270m"
    assert sum(p.stat().st_size for p in folder.iterdir()) < 10_000_000  # the adapter, not Gemma
    scorer, _ = make_scorer("classifier:tg", root=str(tmp_path))
    texts = [c.text for c in small["claimbuster:2016"][:8]]
    assert scorer.params()["embedding_model"] == "gemma-3-270m"
    p = [o["p_positive"].score for o in scorer.score(texts)]
    assert p == pytest.approx(art.predict_proba(texts), abs=1e-5)
    assert p == pytest.approx(art.predict_proba(texts[::-1])[::-1], abs=1e-5)  # padding changes nothing


def test_the_ensemble_scores_the_mean_log_odds_of_its_members():
    """``ensemble:minilm-lora+gemma-lora``: the versioned models' mean log-odds, through the registry,
    with both members' identities and only the groups both kept out of training."""
    groups = training.load_groups(2026, {"claimbuster": None, "clef2024": 1203})
    texts = [c.text for c in random.Random(7).sample(groups["claimbuster:2016"], 16)]
    scorer, prompt = make_scorer("ensemble:minilm-lora+gemma-lora")
    assert prompt[0] == "none" and scorer.score_kinds == classifier.SCORE_KINDS
    members = [make_scorer(f"classifier:{n}")[0] for n in ("minilm-lora", "gemma-lora")]
    p = np.array([[o["p_positive"].score for o in m.score(texts)] for m in members])
    z = np.log(p / (1 - p)).mean(axis=0)
    got = scorer.score(texts)
    assert [o["p_positive"].score for o in got] == pytest.approx(1 / (1 + np.exp(-z)), abs=1e-9)
    params = scorer.params()
    assert [m["spec"] for m in params["members"]] == ["classifier:minilm-lora", "classifier:gemma-lora"]
    assert "claimbuster:2016" in params["excluded"]
    with pytest.raises(ValueError, match="two or more"):
        make_scorer("ensemble:minilm-lora")


@pytest.mark.parametrize("device", ["cuda", "tpu:0"])
def test_training_on_a_device_this_machine_lacks_is_refused_before_anything_is_written(device, tmp_path, capsys):
    from checkworthy.cli.main import main

    code = main(["train-classifier", "--name", "x", "--method", "lora", "--device", device,
                 "--root", str(tmp_path / "root")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and f"--device {device}" in err
    assert not (tmp_path / "root").exists()


def test_an_ensemble_in_the_store_joins_its_members_stored_scores(engine):
    """Members scored first (or found) under their own keys; the ensemble's stored score is the same
    as its fresh one, and once the members are stored the ensemble scores nothing again."""
    from checkworthy.runs.scoring import score_missing
    from checkworthy.store import rows as store

    tag = uuid.uuid4().hex[:8]
    groups = training.load_groups(2026, {"claimbuster": None, "clef2024": 1203})
    texts = [f"{c.text} ({tag})" for c in random.Random(11).sample(groups["claimbuster:2016"], 8)]
    with engine.begin() as conn:
        hashes = store.store_texts(conn, texts)
    ensemble, _ = make_scorer("ensemble:minilm-lora+gemma-lora")
    first, second = ensemble.members
    assert score_missing(engine, first, hashes[:4])[0] == 4  # one member has half the texts
    calls: list[tuple[int, int]] = []
    n_new, n_old, keys = score_missing(engine, ensemble, hashes, chunk_size=3,
                                       progress=lambda d, t: calls.append((d, t)))
    assert (n_new, n_old) == (8, 0)
    assert calls == [(3, 4), (4, 4), (3, 8), (6, 8), (8, 8), (3, 8), (6, 8), (8, 8)]  # first's 4, second's 8, own 8
    for member in (first, second):
        assert score_missing(engine, member, hashes)[:2] == (0, 8)
    with engine.connect() as conn:
        stored = store.stored_predictions(conn, {"p_positive": keys["p_positive"]}, hashes)
    fresh = [o["p_positive"].score for o in ensemble.score(texts)]
    assert [stored[(h, "p_positive")].score for h in hashes] == pytest.approx(fresh, abs=1e-5)  # other batches
    assert score_missing(engine, ensemble, hashes)[:2] == (0, 8)


def test_distillation_learns_the_teachers_probabilities_not_the_labels(tiny):
    """With a teacher's P(check-worthy) as targets the adapter follows the teacher: a teacher that
    says the opposite of every label turns the student's ranking of the labels upside down, where
    the labels themselves rank them the right way up (the same texts, seed and recipe)."""
    import torch

    from checkworthy.runs.train_lora import fine_tune
    from checkworthy.scorers.lora_classifier import MINILM, encode, logits, tokenizer

    _, _, small = tiny
    claims = small["claimbuster:other"]
    texts, y = [c.text for c in claims], np.array([c.label for c in claims])
    spec = FineTuning.for_base(epochs=2, lr=2e-3, head_lr=2e-3)
    by_label = fine_tune(texts, y, spec, seed=1, echo=lambda _: None)
    by_teacher = fine_tune(texts, y, spec, seed=1, echo=lambda _: None, targets=np.where(y == 1, 0.1, 0.9))
    batch = encode(tokenizer(), MINILM, texts)
    auc = {}
    for name, (encoder, head, _) in {"labels": by_label, "teacher": by_teacher}.items():
        with torch.inference_mode():
            p = torch.softmax(logits(encoder.eval(), head.eval(), batch), -1)[:, 1].numpy()
        auc[name] = roc_auc(y, p)
    assert by_teacher[2]["targets"].startswith("a teacher's") and by_label[2]["targets"] == "labels"
    assert auc["labels"] > 0.7 and auc["teacher"] < 0.3


def test_the_teachers_probabilities_come_through_the_store(use_db):
    """``train-classifier --teacher``'s targets are the teacher's stored p_positive: scored once, then
    read back (no new prediction row), in the texts' order."""
    from sqlalchemy import text as sql

    from checkworthy.runs.scoring import teacher_probabilities

    texts = [f"Unemployment fell by {n} percent last year, {uuid.uuid4().hex[:6]}." for n in range(5)]
    first = list(teacher_probabilities(use_db, "classifier:minilm-lr", texts))
    with use_db.connect() as conn:
        rows = conn.execute(sql("select count(*) from predictions")).scalar()
    again = list(teacher_probabilities(use_db, "classifier:minilm-lr", list(reversed(texts))))
    with use_db.connect() as conn:
        assert conn.execute(sql("select count(*) from predictions")).scalar() == rows
    direct = classifier.ClassifierScorer("minilm-lr").score(texts)
    assert first == pytest.approx([d["p_positive"].score for d in direct], abs=1e-9)
    assert again == pytest.approx(first[::-1], abs=1e-12)


def test_a_teacher_is_refused_before_anything_is_trained_but_for_lora(tmp_path, capsys):
    from checkworthy.cli.main import main

    code = main(["train-classifier", "--name", "x", "--method", "setfit", "--teacher", "classifier:minilm-lr",
                 "--root", str(tmp_path / "root")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "--teacher: only with --method lora" in err
    assert not (tmp_path / "root").exists()


def test_a_gemma_student_keeps_only_the_first_layers(tiny, tmp_path):
    """``layers``: the student reads Gemma cut to its first 2 layers: the manifest records them, the
    adapter wraps only those, and the scorer (its exported graph) cuts the base the same way. A depth
    the base lacks, or a cut of an encoder, is refused before anything is written."""
    _, _, small = tiny
    data = training.TrainingData(["claimbuster:2016"], groups=small, sources=["claimbuster:other"])
    art = train_lora("cut", replace(FineTuning.for_base("gemma3-270m"), layers=2), data, examples=8, root=tmp_path)
    assert art.manifest["base_model"]["layers"] == 2 and art.base.layers == 2
    folder = tmp_path / "cut" / art.version
    assert (folder / "adapter_model.safetensors").stat().st_size < 2_000_000  # 2 layers' adapter of 18
    scorer, _ = make_scorer("classifier:cut", root=str(tmp_path))
    texts = [c.text for c in small["claimbuster:2016"][:8]]
    p = [o["p_positive"].score for o in scorer.score(texts)]
    assert p == pytest.approx(art.predict_proba(texts), abs=1e-5)
    for base, layers in (("minilm", 2), ("gemma3-270m", 0)):
        with pytest.raises(ValueError, match="layers"):
            replace(FineTuning.for_base(base), layers=layers)
    with pytest.raises(ValueError, match="layers must lie between 1 and 18"):
        train_lora("deep", replace(FineTuning.for_base("gemma3-270m"), layers=19), data, examples=8, root=tmp_path)
    assert not (tmp_path / "deep").exists()
