"""Each claim's language (checkworthy.data.language) on real tweets and debate sentences of the six
languages the project holds, and the ``und`` cases with their reasons."""

from __future__ import annotations

import re

import pytest

from checkworthy.data.datasets import MULTILINGUAL_TWEETS, TWEET_FILES, load_clef, load_tweets
from checkworthy.data.language import MIN_CONFIDENCE, NO_WORDS, UND, DetectedLanguage, detect, words_of
from checkworthy.testing.datasets import raw_path


def first_texts(n: int = 40) -> dict[str, list[str]]:
    """The first ``n`` texts of each language's train file (English: tweets and debates)."""
    out = {"en": [c.text for c in load_tweets(raw_path("tweets", TWEET_FILES["ct22-train"]), "ct22-train")[0][:n]]
           + [c.text for c in load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")[0][:n]]}
    for tweets in MULTILINGUAL_TWEETS.values():
        split = next(s for s in tweets.files if s.endswith("-train"))
        path = raw_path("multilingual", tweets.folder, tweets.files[split])
        out[tweets.language] = [c.text for c in load_tweets(path, split)[0][:n]]
    return out


def test_the_languages_of_real_claims():
    """On the first 40 texts of each train file (80 English) at most one is not its file's language."""
    for language, texts in first_texts().items():
        found = detect(texts)
        assert len(found) == len(texts)
        wrong = [(d.code, t[:60]) for d, t in zip(found, texts) if d.code != language]
        assert len(wrong) <= 1, (language, wrong)
        assert all(MIN_CONFIDENCE <= d.confidence <= 1 and not d.reason for d in found if d.code != UND)


def test_a_catalan_tweet_of_the_spanish_file_is_catalan():
    """The Spanish file holds Catalan tweets: the detector names the text's language, not the file's."""
    tweets = MULTILINGUAL_TWEETS["tweets-es"]
    claims, _ = load_tweets(raw_path("multilingual", tweets.folder, tweets.files["ct22-train"]), "ct22-train")
    text = next(c.text for c in claims if c.text.startswith("(2/2) Perfectament compatible"))
    assert detect([text])[0].code == "ca"


def test_und_with_the_reason():
    got = detect(["https://t.co/x @someone 12 🙂 #", "", "ERROR!", "Nov 2020"])
    assert [d.code for d in got] == [UND] * 4
    assert got[0].reason == got[1].reason == NO_WORDS
    assert "no language stands out" in got[2].reason and f"< {MIN_CONFIDENCE}" in got[2].reason
    assert all(d.confidence == 0.0 for d in got)
    assert detect([]) == []


def test_codes_are_iso_639_1_and_arabic_dialects_are_arabic():
    dialect = "روح عيش هناك ههه يقول بلد الانسانيه ولاتقط نقزات هههه والحكومه الكويتيه ادرى عن البدون"
    got = detect([dialect, "Dit is een zin in het Nederlands over de griep.", "Bu bir Türkçe cümledir ve aşı hakkında."])
    assert [d.code for d in got] == ["ar", "nl", "tr"]
    every = [t for texts in first_texts(20).values() for t in texts]
    every += ["Oxalá chova mañá en Vigo", "Bon dia a tothom", "Egun on guztioi", "Buenos días, tío"]
    assert all(re.fullmatch("[a-z]{2}|und", d.code) for d in detect(every))


def test_words_of_a_tweet():
    assert words_of("RT @who: Masks &amp; #COVID19 facts https://t.co/abc www.who.int/x  now") == \
        "RT : Masks & COVID19 facts now"
    assert words_of("e-mail a@b.org #1") == "e-mail a@b.org 1"


def test_detected_language_record():
    assert DetectedLanguage("en", 0.9).reason == ""
    for bad in (("en", 1.2, ""), ("und", 0.0, ""), ("en", 0.5, "why")):
        with pytest.raises(ValueError):
            DetectedLanguage(*bad)
