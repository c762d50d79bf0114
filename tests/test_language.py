"""Each claim's language: detected once per text and stored, written to OUT.csv, answered by the
API and carried to the review queue; claims in a language the labelled set has none of are held
back for a person, and ``predict`` says so in one line and measures each language."""

from __future__ import annotations

import csv
import re

import pytest
from sqlalchemy import text

from checkworthy.cli.main import main
from checkworthy.data.datasets import load_clef, load_tweets
from checkworthy.runs.own_scores import OUT_COLUMNS
from checkworthy.store.audit import table_counts
from checkworthy.testing.claims import write_csv
from checkworthy.testing.datasets import raw_path

pytestmark = pytest.mark.slow

MODEL = ["--model", "classifier:minilm-lr", "--score-kind", "p_positive"]


def arabic_tweets(n: int) -> list:
    """The first ``n`` Arabic tweets of CheckThat! 2024's train file that read as Arabic."""
    from checkworthy.data.language import detect

    tweets, _ = load_tweets(raw_path("multilingual", "arabic", "CT24_checkworthy_arabic_train.tsv"),
                            "ct24-train", dataset="tweets-ar")
    return [t for t, d in zip(tweets[:4 * n], detect(t.text for t in tweets[:4 * n])) if d.code == "ar"][:n]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """L: 40 English debate claims; U: 10 English dev-test claims, then 6 Arabic tweets (labelled)."""
    train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    test, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    lab = [c for c in train if c.label == 1][:20] + [c for c in train if c.label == 0][:20]
    unl = test[:10] + arabic_tweets(6)
    d = tmp_path_factory.mktemp("language")
    return (write_csv(d / "L.csv", ["id", "text", "label"], [(c.source_id, c.text, c.label) for c in lab]),
            write_csv(d / "U.csv", ["id", "text", "label"], [(c.source_id, c.text, c.label) for c in unl]),
            d)


def test_a_batch_in_a_language_the_labels_lack_is_drift_held_back_and_measured(use_db, files, capsys):
    lab, unl, d = files
    out = d / "OUT.csv"
    argv = ["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--out", str(out), "--k", "5", *MODEL]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == OUT_COLUMNS and OUT_COLUMNS[-1] == "language"
    assert [r["language"] for r in rows] == ["en"] * 10 + ["ar"] * 6
    assert all(r["review"] == "1" for r in rows[10:])  # held back for a person, whatever theta says
    line = next(x for x in printed.splitlines() if x.startswith("drift: "))
    assert "6 claims in ar, a language the labelled set has none of: a person decides them" in line
    assert "nnppi by language: ar (6 claims)" in printed and "en (10 claims)" in printed
    with use_db.connect() as conn:
        stored = dict(conn.execute(text(
            "SELECT language, count(*) FROM text_languages GROUP BY language")).all())
        drift = conn.execute(text("SELECT params->'drift' FROM calibration_runs ORDER BY id DESC LIMIT 1")).scalar()
        queued = conn.execute(text(
            "SELECT count(*) FROM review_queue q JOIN calibration_runs r ON r.id = q.run_id "
            "WHERE r.id = (SELECT max(id) FROM calibration_runs) AND q.cause = 'drift'")).scalar()
    assert stored["ar"] >= 6 and stored["en"] >= 50 - stored.get("und", 0)
    assert drift["languages"] == {"ar": 6}
    assert queued >= 6
    before = table_counts(use_db)  # again: every language is stored once, the run reused
    assert main(argv) == 0
    assert table_counts(use_db) == before


def test_an_english_batch_has_no_language_drift(use_db, files, capsys):
    lab, _, d = files
    en = d / "U_en.csv"
    with open(d / "U.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    write_csv(en, rows[0], rows[1:11])
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(en), "--out", str(d / "en.csv"),
                 "--k", "5", *MODEL]) == 0
    printed = capsys.readouterr().out
    assert "a language the labelled set has none of" not in printed and "by language" not in printed
    with use_db.connect() as conn:
        drift = conn.execute(text("SELECT params->'drift' FROM calibration_runs ORDER BY id DESC LIMIT 1")).scalar()
    assert "languages" not in drift


def test_the_realised_automated_share_leaves_out_claims_in_a_new_language(use_db, files, capsys):
    """The realised figures of a run's rule (``evaluate``'s, the report's "Decide or review") hold
    its claims back as the run did, by language too: with a calm figure naming ar and a rule that
    decides every claim, the 6 Arabic tweets are not counted as decided automatically."""
    import numpy as np

    from checkworthy.method.drift import CALM, NEW_LANGUAGE, Drift
    from checkworthy.runs.held_out import review_figures
    from checkworthy.store.calibration_runs import load_results
    from checkworthy.store.languages import drift_status_of

    lab, unl, d = files
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--out", str(d / "OUT.csv"),
                 "--k", "5", *MODEL]) == 0
    with open(unl, newline="", encoding="utf-8") as fh:
        gold = {r["id"]: int(r["label"]) for r in csv.DictReader(fh)}
    arabic = set(list(gold)[10:])
    run_id = int(re.search(r"\(run (\d+), ", capsys.readouterr().out)[1])  # the run predict printed
    with use_db.connect() as conn:
        res = load_results(conn, run_id)
        calm = Drift(0.95, 0.5, len(res), 0, 0.0, 0.05, 0.15, 1.0, False, (("ar", 6),))
        status = drift_status_of(conn, [r["claim_id"] for r in res], [r["neighbour_distances"][0] for r in res],
                                 calm)
    assert [r["source_id"] for r in res if r["source_id"] in gold] == [r["source_id"] for r in res]
    assert status.tolist() == [NEW_LANGUAGE if r["source_id"] in arabic else CALM for r in res]
    y = np.array([gold[r["source_id"]] for r in res])
    theta = np.array([r["theta"] for r in res])
    every = {"threshold": 0.5, "risk": "error", "margin": 0.0, "max_risk": 0.1}
    assert review_figures(every, y, theta, status)["automated_share"] == 10 / 16
    assert review_figures(every, y, theta)["automated_share"] == 1.0


def test_review_export_carries_the_language_and_its_direction(use_db, files, tmp_path):
    """After the mixed batch: Label Studio tasks and the CSV to fill in carry each claim's language;
    Arabic is written right to left, and the labelling configuration lays each claim out in its
    own direction."""
    import json

    from checkworthy.data.label_studio import LABEL_CONFIG
    from checkworthy.runs.own_scores import upload_dataset

    lab, unl, d = files
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--out", str(d / "OUT.csv"),
                 "--k", "5", *MODEL]) == 0
    out = tmp_path / "tasks.json"
    target = ["--target", f"{upload_dataset(unl)}:unlabeled"]  # this batch's entries, not the session's
    assert main(["review", "export", "--format", "label-studio", "--out", str(out), *target]) == 0
    tasks = [t["data"] for t in json.loads(out.read_text(encoding="utf-8"))]
    arabic = [t for t in tasks if t["language"] == "ar"]
    assert len(arabic) >= 6 and all(t["dir"] == "rtl" for t in arabic)
    assert all(t["dir"] == "ltr" for t in tasks if t["language"] == "en")
    assert "unicode-bidi: plaintext" in LABEL_CONFIG and 'value="$text"' in LABEL_CONFIG
    csv_out = tmp_path / "todo.csv"
    assert main(["review", "export", "--format", "csv", "--out", str(csv_out), *target]) == 0
    with open(csv_out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["language"] for r in rows} >= {"ar"}


def test_explain_prints_the_claims_language(use_db, files, capsys):
    lab, unl, d = files
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--out", str(d / "OUT.csv"),
                 "--k", "5", *MODEL]) == 0
    with open(unl, newline="", encoding="utf-8") as fh:
        last = list(csv.DictReader(fh))[-1]["id"]
    capsys.readouterr()
    assert main(["explain", last]) == 0
    printed = capsys.readouterr().out
    assert "  language:   ar (confidence " in printed and "py3langid 0.4.0" in printed


def test_a_text_empty_after_normalisation_is_refused_before_anything_is_written(use_db, files, capsys):
    """Zero-width spaces and a direction mark are no text: the row is refused in one line naming the
    file, the line and the field, and nothing is stored."""
    lab, unl, d = files
    bad = d / "U_invisible.csv"
    write_csv(bad, ["id", "text"], [("a", "The unemployment rate fell to 4 percent last year."),
                                     ("b", "\u200b\u200b\u200f")])
    before = table_counts(use_db)
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(bad), "--out", str(d / "bad.csv"),
                 "--k", "5", *MODEL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0] and "3" in err[0] and "text" in err[0]
    assert "empty after normalisation" in err[0]
    assert table_counts(use_db) == before
    assert not (d / "bad.csv").exists()


@pytest.mark.parametrize("bad_text, said", [
    ("https://t.co/x1y2z3 @someone 2020", "no detectable language (no words"),
    ("\U0001F600\U0001F600 !!!", "no detectable language (no words"),
    ("CОVID-19 cases rose by 40 percent", "mixed scripts: the word 'CОVID-19' is latin but for the look-alike "
                                         "letters 'О' (cyrillic)"),
])
def test_a_text_in_no_detectable_language_or_mixed_scripts_is_refused(use_db, files, capsys, bad_text, said):
    """A text with no words (only a link, mentions, numbers, emoji) or a word spelt with another
    script's look-alike letters is refused in one line naming the file, line and field, before
    anything is stored."""
    lab, _, d = files
    odd = d / "U_unreadable.csv"
    write_csv(odd, ["id", "text"], [("a", "The unemployment rate fell to 4 percent last year."),
                                    ("b", bad_text)])
    before = table_counts(use_db)
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(odd), "--out", str(d / "odd.csv"),
                 "--k", "5", *MODEL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(odd) in err[0] and "row 3" in err[0] and "text" in err[0], err
    assert said in err[0]
    assert table_counts(use_db) == before
    assert not (d / "odd.csv").exists()


def test_a_short_text_no_language_stands_out_in_is_kept_as_und(use_db, files):
    """Words in no language py3langid is sure of (a two-word reply) are real input: kept,
    calibrated, its language ``und`` (never drift for language: und names no language)."""
    lab, _, d = files
    odd = d / "U_und.csv"
    write_csv(odd, ["id", "text"], [("a", "The unemployment rate fell to 4 percent last year."),
                                    ("b", "ok ok")])
    out = d / "und.csv"
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(odd), "--out", str(out),
                 "--k", "5", *MODEL]) == 0
    with open(out, newline="", encoding="utf-8") as fh:
        assert [r["language"] for r in csv.DictReader(fh)] == ["en", "und"]


def test_mixed_scripts_as_people_write_them_are_readable():
    """Only homographs are refused: words that mix scripts as languages write them are kept."""
    from checkworthy.data.language import unreadable

    for fine in ("COVID-ваксина е тук", "«سبوتنيك-V» ضد كورونا", "東京タワーは高い", "ЕвропаСрещуCOVID19"):
        assert unreadable(fine) is None, fine
    assert "'р' (cyrillic)" in (unreadable("Tрump won the vote") or "")
    assert "'a' (latin)" in (unreadable("Итaлиaнcкитe власти") or "")


def test_the_api_refuses_a_text_empty_after_normalisation():
    from checkworthy.serve.inputs import Limits, check_texts
    from checkworthy.serve.refusals import ApiError

    assert check_texts([" Taxes rose. "], Limits(), "sentences") == ["Taxes rose."]
    with pytest.raises(ApiError) as got:
        check_texts(["Taxes rose.", "\ufeff\u200b"], Limits(), "sentences")
    assert got.value.field == "sentences[1]" and "empty after normalisation" in str(got.value)
    with pytest.raises(ApiError) as got:
        check_texts(["Taxes rose.", "Tрump won"], Limits(), "sentences")
    assert got.value.field == "sentences[1]" and "mixed scripts" in str(got.value)


def test_claims_in_a_language_l_lacks_are_far_and_the_line_names_them():
    """Pure: und and unknown languages never count; a calm figure's claims in a new language are far."""
    import numpy as np

    from checkworthy.method.drift import (
        CALM,
        NEW_LANGUAGE,
        Drift,
        drift,
        drift_status,
        unlike_labelled,
        with_languages,
    )
    from checkworthy.report.drift import drift_line

    langs = ["en", "ar", "und", None, "ar", "tr"]
    figure = with_languages(drift(np.linspace(0.1, 0.5, 40), np.full(6, 0.2)), langs, {"en"})
    assert not figure.alert and figure.languages == (("ar", 2), ("tr", 1))
    stored = figure.as_dict()  # as a run's params->'drift' holds it: the languages last, most first
    assert list(stored)[-1] == "languages" and stored["languages"] == {"ar": 2, "tr": 1}
    assert Drift.from_dict(stored) == figure
    status = drift_status(np.full(6, 0.2), figure, langs)
    assert status.tolist() == [CALM, NEW_LANGUAGE, CALM, CALM, NEW_LANGUAGE, NEW_LANGUAGE]
    assert drift_status(np.full(6, 0.2), figure).tolist() == [CALM] * 6  # no languages given
    assert unlike_labelled(figure)  # 3 of 6 in new languages: more than the tolerated 15%
    assert drift_line(figure) == ("drift: 2 claims in ar, 1 in tr, languages the labelled set has none of: "
                                  "a person decides them; label some of them so that the labelled set "
                                  "covers the language")
    english = with_languages(drift(np.linspace(0.1, 0.5, 40), np.full(3, 0.2)), ["en"] * 3, {"en"})
    assert english.languages is None and "languages" not in english.as_dict()
    assert drift_line(english) is None and not unlike_labelled(english)
