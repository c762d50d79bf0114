"""The multilingual classifier: the shipped artefact scores Spanish and Arabic claims, its trainer
refuses bad input in one line and never learns an excluded text, and predict picks it for a team
whose labels are not English."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from checkworthy.cli.main import main
from checkworthy.data.datasets import MULTILINGUAL_TWEETS, load_tweets
from checkworthy.data.records import Claim
from checkworthy.runs.embedding import english_labels
from checkworthy.runs.predict import Recommended, for_language
from checkworthy.runs.train_multilingual import MultilingualSpec, read_exclude_texts, train_multilingual
from checkworthy.scorers.multilingual import MultilingualScorer, load_multilingual
from checkworthy.scorers.registry import make_scorer
from checkworthy.settings import PredictSettings
from checkworthy.testing.claims import write_csv
from checkworthy.testing.datasets import raw_path

SHIPPED = "multilingual-tweets"
SPANISH = ["El desempleo subió un 12% en 2021 según el INE, la cifra más alta en una década.",
           "¡Buenos días a todos! Qué bonito día para pasear por el parque.",
           "El Gobierno aprobó ayer 3.000 millones de euros para la sanidad pública."]
ARABIC = ["ارتفع عدد الإصابات بفيروس كورونا في مصر إلى 500 حالة اليوم بحسب وزارة الصحة.",
          "صباح الخير يا أصدقاء، أتمنى لكم يوما سعيدا."]


def tweets(language: str, n: int) -> list[Claim]:
    """The first ``n`` train tweets of a language's file."""
    lt = next(t for t in MULTILINGUAL_TWEETS.values() if t.language == language)
    split, fname = next((s, f) for s, f in lt.files.items() if s.endswith("-train"))
    return load_tweets(raw_path("multilingual", lt.folder, fname), split)[0][:n]


def test_the_shipped_model_scores_spanish_and_arabic_claims():
    scorer, prompt = make_scorer(f"classifier:{SHIPPED}")
    assert isinstance(scorer, MultilingualScorer) and prompt[0] == "none"
    got = scorer.score(SPANISH + ARABIC)
    p = np.array([g["p_positive"].score for g in got])
    assert len(got) == 5 and ((p > 0) & (p < 1)).all()
    assert all(g["paper_c"].score == max(q, 1 - q) for g, q in zip(got, p))
    model = scorer.model
    assert {"ar", "es", "bg", "tr", "en"} <= set(model.languages)  # nl: every Dutch tweet is the bench's
    # each text goes through its language's TF-IDF stack, not the USE head alone
    from checkworthy.scorers.embedders import USE_MULTILINGUAL, embed

    use_only = model.use_head.proba(embed(USE_MULTILINGUAL, SPANISH + ARABIC))
    assert not np.allclose(use_only, p)
    assert p[0] > p[1] and p[3] > p[4]  # a claim with figures above a greeting
    params = scorer.params()
    assert params["model_type"] == "multilingual_tfidf_use" and params["version"] == model.version
    assert model.manifest["training_data"]["excluded_texts"]["n_texts"] > 0


def test_training_refuses_bad_input_in_one_line(tmp_path, capsys):
    bad = write_csv(tmp_path / "x.csv", ["id", "claim"], [("1", "hola")])
    with pytest.raises(ValueError, match=r"--exclude-texts .*x.csv: no 'text' column"):
        read_exclude_texts(bad)
    assert main(["train-classifier", "--name", "m", "--method", "multilingual"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --exclude-texts: needed with --method multilingual, and only with it"]
    assert main(["train-classifier", "--name", "m", "--method", "multilingual", "--exclude-texts",
                 str(tmp_path / "none.csv")]) == 2
    assert capsys.readouterr().err.strip().endswith("none.csv: no such file")
    with pytest.raises(ValueError, match="not one string"):
        train_multilingual("m", "one text", claims={"es": tweets("es", 40)}, root=tmp_path, cache=None)
    one_class = [c for c in tweets("es", 200) if c.label == 0][:20]
    with pytest.raises(ValueError, match="language es: the training set needs both classes"):
        train_multilingual("m", ["x"], claims={"es": one_class}, root=tmp_path, cache=None)
    assert not (tmp_path / "m").exists()


def test_a_trained_model_never_learns_an_excluded_text(tmp_path):
    claims = {"es": tweets("es", 120), "ar": tweets("ar", 120), "nl": tweets("nl", 30)}
    excluded = [c.text for c in claims["es"][:10] + claims["nl"]]
    model = train_multilingual("small", excluded, MultilingualSpec(max_features=2000, folds=2),
                               claims=claims, root=tmp_path, cache=None)
    data = model.manifest["training_data"]
    assert data["languages"]["es"]["n_texts"] <= 110 and data["languages"]["es"]["n_rows_excluded"] == 10
    assert data["excluded_texts"]["n_texts"] == 40
    assert data["languages_left_out"] == ["nl"] and "nl" not in model.languages  # the USE head scores it
    again = load_multilingual("small", tmp_path)
    assert again.version == model.version and set(again.languages) == {"es", "ar"}
    assert len(again.languages["es"].vocabulary) <= 2000
    (tmp_path / "small" / model.version / "model.npz").write_bytes(b"tampered")
    with pytest.raises(ValueError, match="does not match its manifest's sha256"):
        load_multilingual("small", tmp_path)


def test_labels_that_are_not_english_choose_the_multilingual_model():
    rec = Recommended.of(PredictSettings())
    assert for_language(rec, english_labels(SPANISH)).model == "classifier:multilingual-tweets"
    english = ["The unemployment rate rose to 12 percent last year.", "Good morning, everyone!"]
    assert for_language(rec, english_labels(english)).model == rec.model == "classifier:minilm-student"


@pytest.mark.slow
def test_predict_on_spanish_claims_uses_the_multilingual_model(use_db, tmp_path, capsys):
    es = tweets("es", 80)
    lab, unl = es[:60], es[60:72]
    lab_csv = write_csv(tmp_path / "L.csv", ["id", "text", "label"], [(c.source_id, c.text, c.label) for c in lab])
    unl_csv = write_csv(tmp_path / "U.csv", ["id", "text"], [(c.source_id, c.text) for c in unl])
    out = tmp_path / "OUT.csv"
    assert main(["predict", "--labeled", str(lab_csv), "--unlabeled", str(unl_csv), "--out", str(out),
                 "--k", "5"]) == 0
    assert f"classifier:{SHIPPED} p_positive" in capsys.readouterr().out
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 12 and all(r["language"] == "es" for r in rows[:3])
