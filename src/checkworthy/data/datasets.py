"""The datasets: ClaimBuster, CLEF 2024 CheckThat! Task 1 (English), the CheckThat! 2021/2022
English tweets (Task 1A) and the CheckThat! tweets in Arabic, Spanish, Dutch, Bulgarian and
Turkish (2022 and 2024 train and dev files): their names, files and known checksums, and a loader
for each format.

Every loader applies its format's description (:mod:`checkworthy.data.dataset_schemas`) with the
one reader (:mod:`checkworthy.data.dataset_reader`): it repairs what can be repaired without
guessing, drops what is lost, and *reports* every such decision in a
:class:`~checkworthy.data.records.LoadReport`; anything malformed beyond that raises
:class:`~checkworthy.errors.DataError` naming the file, line and field. The splits are in
:mod:`checkworthy.data.splits`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from checkworthy.config import DATA_DIR
from checkworthy.data.dataset_reader import read_claims
from checkworthy.data.dataset_schemas import CLAIMBUSTER_SCHEMA, CLEF_SCHEMA, TWEETS_SCHEMA, DatasetSchema
from checkworthy.data.hashing import PathArg
from checkworthy.data.records import Claim, LoadReport

__all__ = [
    "CLAIMBUSTER",
    "CLEF",
    "CLEF_N_PER_CLASS",
    "TWEETS",
    "TWEET_FILES",
    "KNOWN_SHA256",
    "MULTILINGUAL_TWEETS",
    "RAW_FOLDERS",
    "LanguageTweets",
    "load_claimbuster",
    "load_clef",
    "load_dataset",
    "load_tweets",
]

CLAIMBUSTER = "claimbuster"
CLEF = "clef2024"
TWEETS = "tweets"

#: the tweet files under ``data/raw/tweets`` by split: the two train files (L's pool, CT22 first:
#: its label wins for a tweet in both), the dev files and CT21's test (U is CT22 dev)
TWEET_FILES = {
    "ct22-train": "CT22_english_1A_checkworthy_train.tsv",
    "ct21-train": "CT21_1A_english_train_v1.tsv",
    "ct22-dev": "CT22_english_1A_checkworthy_dev.tsv",
    "ct21-dev": "CT21_1A_english_dev_v1.tsv",
    "ct21-test": "CT21_1A_english_test.tsv",
}


class LanguageTweets(NamedTuple):
    """One language's CheckThat! tweet files: ``data/raw/multilingual/<folder>/<file>`` by split."""

    language: str  # ISO 639-1
    folder: str
    files: Mapping[str, str]


#: the tweets in other languages, one dataset a language, named ``tweets-`` and its ISO 639-1 code.
#: Only train and dev files (2022, 2024) are in the project: no CheckThat! test split of 2024 or later
MULTILINGUAL_TWEETS: dict[str, LanguageTweets] = {
    "tweets-ar": LanguageTweets("ar", "arabic", {"ct24-train": "CT24_checkworthy_arabic_train.tsv"}),
    "tweets-es": LanguageTweets("es", "spanish", {
        "ct22-train": "CT22_spanish_1A_checkworthy_train.tsv",
        "ct22-dev": "CT22_spanish_1A_checkworthy_dev.tsv",
        "ct22-dev-test": "CT22_spanish_1A_checkworthy_dev_test.tsv",
    }),
    "tweets-nl": LanguageTweets("nl", "dutch", {"ct24-train": "CT24_checkworthy_dutch_train.tsv"}),
    "tweets-bg": LanguageTweets("bg", "bulgarian", {
        "ct22-train": "CT22_bulgarian_1A_checkworthy_train.tsv",
        "ct22-dev": "CT22_bulgarian_1A_checkworthy_dev.tsv",
    }),
    "tweets-tr": LanguageTweets("tr", "turkish", {
        "ct22-train": "CT22_turkish_1A_checkworthy_train.tsv",
        "ct22-dev": "CT22_turkish_1A_checkworthy_dev.tsv",
    }),
}

#: the folders under ``data/raw`` the loaders read (a checkout lacking one has an older ``data/``)
RAW_FOLDERS = ("claimbuster", "clef2024", "tweets",
               *(f"multilingual/{t.folder}" for t in MULTILINGUAL_TWEETS.values()))

#: per-class size of the CLEF calibration set (paper: 2,406 = 2 x 1,203)
CLEF_N_PER_CLASS = 1203

#: sha256 of the official files as listed in the datasets README, keyed by file name
KNOWN_SHA256: dict[str, str] = {
    "crowdsourced.csv": "11026f911d96476daed6c9a83ba0fbf3555598c04ef9b7fa567eeadee8693843",
    "CT24_checkworthy_english_train.tsv": (
        "c86e5338b1ffe16b23334574ef6a994987e54bdf9d1dbdaeb747e6e55266a193"
    ),
    "CT24_checkworthy_english_dev-test.tsv": (
        "aaf9e9427545c1213465e8857da00fb9fe4d4a7c337bab2ae0a75150fa8c01f2"
    ),
    "CT22_english_1A_checkworthy_train.tsv": (
        "c48a9e17af37811b217da7344ce384cbafb4c0d1b3d21fc2afdc29eafe8c419d"
    ),
    "CT22_english_1A_checkworthy_dev.tsv": (
        "e341d06059ce7bc459e346a3b6dc63b0b196809593491024a651f2052e83b26d"
    ),
    "CT21_1A_english_train_v1.tsv": "c0a26bb7e35a664c072d5d7a5b159b3d48f54e5ffc5c321cfe7a7a4d518b0f0d",
    "CT21_1A_english_dev_v1.tsv": "b3bb25415a98ac2ea21538f6ecbf797c8156e8a50e6633e938e5df5307493e3d",
    "CT21_1A_english_test.tsv": "5efa8c4ba48216f3c9a452f04ad4eef232cd196265bbfe949b754d3538356668",
    "CT24_checkworthy_arabic_train.tsv": "201631e0bed24b148e767b807fa6d088854d49e0d3ce0e394af063135c65553b",
    "CT22_spanish_1A_checkworthy_train.tsv": (
        "67ce48a90038b3cc581b51683ff6f0aa542ae8f996fc3c0225eabd1429bf1977"
    ),
    "CT22_spanish_1A_checkworthy_dev.tsv": "5b374c429e9100ad3f5b920656e03d825f1f81b37ef6c3d7dff0a92e8226c90d",
    "CT22_spanish_1A_checkworthy_dev_test.tsv": (
        "444c4aa3dccec6748be43475031a5de8c861d511337b91cfd8d2e4c3fc1ee622"
    ),
    "CT24_checkworthy_dutch_train.tsv": "a72255ee369ae93b703dc2b0aaefdd5fdd115ecd24d93055e2e444240b0cfa61",
    "CT22_bulgarian_1A_checkworthy_train.tsv": (
        "aea3e634ce91dd2bc09cc7c92f2048d9263e701a4f0bfed05da0e5a0c4e047ad"
    ),
    "CT22_bulgarian_1A_checkworthy_dev.tsv": (
        "b6b9d987ec0c51517b194d97e014daad648db9c77ea64275cd8b89f0fa8f73b0"
    ),
    "CT22_turkish_1A_checkworthy_train.tsv": (
        "f492b51558142328a15cfa506fec0fcd3767e5eb68d4c7a48ae7019dbb6f8e2d"
    ),
    "CT22_turkish_1A_checkworthy_dev.tsv": "d7eb7a3ad1baa729f3f0a19be5f75091c6c1de9f50c2853789b2119ada4ac5b0",
}


# --------------------------------------------------------------------------- loaders


def load_claimbuster(path: PathArg, *, expected_sha256: str | None = None) -> tuple[list[Claim], LoadReport]:
    """Load ClaimBuster ``crowdsourced.csv``.

    Label: check-worthy (1) iff ``Verdict == 1``; ``Verdict`` -1 (non-factual) and 0
    (unimportant factual) both map to 0, the original verdict stays in
    ``extra["Verdict"]``. Split: ``"2012"`` / ``"2016"`` by ``File_id`` prefix, else
    ``"other"``.

    Defect handling: CSV doubled quotes are decoded by the parser; CRLF and a BOM
    are normalised; whitespace around texts is stripped; empty and spreadsheet-error
    texts (``#NAME?``) are dropped; duplicate ids/texts, including texts with
    conflicting labels, are kept and reported (dropping them would move the split
    counts away from the paper's). Every decision goes to the report.

    Parameters
    ----------
    path
        The CSV file.
    expected_sha256
        If given, the file's sha256 is compared with it and a mismatch is noted in the
        report (not raised: the data team may edit files on purpose).

    Raises
    ------
    DataError
        Missing column, wrong field count, bad ``Verdict``, empty or non-integer
        ``Sentence_id``, quoting error, NUL or non-UTF-8 bytes.
    """
    return read_claims(path, CLAIMBUSTER_SCHEMA, CLAIMBUSTER, expected_sha256=expected_sha256)


def load_clef(
    path: PathArg, split: str, *, expected_sha256: str | None = None
) -> tuple[list[Claim], LoadReport]:
    """Load one CLEF 2024 CheckThat! Task 1 English TSV (``Sentence_id, Text, class_label``).

    Label: 1 iff ``class_label == "Yes"``. ``split`` names the file's partition
    (e.g. ``"train"``, ``"dev"``, ``"dev-test"``) and is copied onto every claim.

    Defect handling (each reported):

    - glued rows: a ``class_label`` field reading ``Yes``/``No`` immediately followed
      by digits, with more fields after it, is a missing newline; the line is split
      into its rows (train line 16877: ids 24098 and 29286);
    - CRLF line endings and a BOM are normalised;
    - CSV-style quoted texts (``"Now, let's ..."``, ``""`` inside) are unquoted;
    - texts that are a spreadsheet error (``#NAME?``) are dropped: the sentence is
      lost (ClaimBuster ``crowdsourced.csv`` holds it under the same id);
    - whitespace around texts is stripped; empty texts are dropped;
    - duplicate ids and duplicate texts (including conflicting labels) are kept
      and reported.

    Raises
    ------
    DataError
        Missing column, wrong field count, label other than ``Yes``/``No``, empty or
        non-integer ``Sentence_id``, quoting error, NUL or non-UTF-8 bytes.
    """
    return read_claims(path, CLEF_SCHEMA, CLEF, split, expected_sha256=expected_sha256)


def load_tweets(
    path: PathArg, split: str, *, expected_sha256: str | None = None, dataset: str = TWEETS
) -> tuple[list[Claim], LoadReport]:
    """Load one CheckThat! tweet file (2021, 2022 Task 1A; 2024 Task 1), in any language:
    ``tweet_id``, ``tweet_text`` and the label, ``class_label`` (2022, 2024), ``check_worthiness``
    (2021) or ``claim_worthiness`` (2021 dev), 0/1 (2021, 2022) or Yes/No (2024), one kind a file.
    The tweet id is the claim's id; ``split`` (e.g. ``"ct22-train"``) is copied onto every claim
    and ``dataset`` (``tweets``, or ``tweets-es`` and the like: :data:`MULTILINGUAL_TWEETS`) names
    it; the other columns (topic, URL, CT21's ``claim``) go to ``extra``.

    CSV-style quoted texts are unquoted and whitespace around texts is stripped (both reported);
    empty texts are dropped (reported); a tweet id a spreadsheet rounded to a float (CT22 English
    train lines 1225 and 1355, CT24 Arabic train four rows, CT22 Turkish train one:
    ``1.37041E+18``, the URL too) is lost, so its row is dropped (reported); duplicate ids and
    texts are kept and reported, like the other loaders.

    Raises
    ------
    DataError
        Missing column, wrong field count, a label other than 0/1 or Yes/No (or both kinds in
        one file), a non-integer tweet id, quoting error, NUL or non-UTF-8 bytes.
    """
    return read_claims(path, TWEETS_SCHEMA, dataset, split, expected_sha256=expected_sha256)


class _Files(NamedTuple):
    """Where a dataset's files lie under ``data/raw``, by split (in the order they are read), and
    their format."""

    folder: str
    files: Mapping[str, str]
    schema: DatasetSchema


_FILES: dict[str, _Files] = {
    CLAIMBUSTER: _Files("claimbuster", {"": "crowdsourced.csv"}, CLAIMBUSTER_SCHEMA),
    CLEF: _Files("clef2024", {"train": "CT24_checkworthy_english_train.tsv",
                              "dev-test": "CT24_checkworthy_english_dev-test.tsv"}, CLEF_SCHEMA),
    TWEETS: _Files("tweets", TWEET_FILES, TWEETS_SCHEMA),
    **{name: _Files(f"multilingual/{tweets.folder}", tweets.files, TWEETS_SCHEMA)
       for name, tweets in MULTILINGUAL_TWEETS.items()},
}


def load_dataset(name: str) -> tuple[list[Claim], list[LoadReport]]:
    """All claims of a dataset (the files under ``data/raw`` its splits need; every file of a
    language's tweets) and what loading repaired or dropped."""
    if name not in _FILES:
        raise ValueError(f"unknown dataset {name!r} (known: {', '.join(_FILES)})")
    layout = _FILES[name]
    folder = DATA_DIR / "raw" / layout.folder
    loaded = [read_claims(folder / fname, layout.schema, name, split, expected_sha256=KNOWN_SHA256.get(fname))
              for split, fname in layout.files.items()]
    return [c for claims, _ in loaded for c in claims], [report for _, report in loaded]
