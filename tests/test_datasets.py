"""Loaders and splits against the real ClaimBuster / CLEF 2024 / CheckThat! tweet files (English
and five other languages) and tiny broken ones."""

from __future__ import annotations

import csv
import pickle
from collections import Counter
from pathlib import Path

import pytest

from checkworthy.data.dataset_schemas import claimbuster_split
from checkworthy.data.datasets import (
    CLAIMBUSTER,
    CLEF,
    KNOWN_SHA256,
    MULTILINGUAL_TWEETS,
    RAW_FOLDERS,
    TWEET_FILES,
    TWEETS,
    load_claimbuster,
    load_clef,
    load_dataset,
    load_tweets,
)
from checkworthy.data.hashing import sha256_file
from checkworthy.data.records import Claim, LoadReport
from checkworthy.data.splits import build_splits, shared_texts
from checkworthy.data.text import normalise_text
from checkworthy.errors import DataError

REPO = Path(__file__).resolve().parents[1]
RAW_DIRS = (REPO / "data" / "raw", REPO.parent / "shared" / "datasets")  # shared/ sits beside the checkout

CB_FILE = "claimbuster/crowdsourced.csv"
CLEF_FILES = {s: f"clef2024/CT24_checkworthy_english_{s}.tsv" for s in ("train", "dev", "dev-test")}
NAME_LINES = {205: "8383", 839: "10112", 2642: "24520", 10606: "770", 12175: "24666", 22070: "25424"}


def raw_file(rel: str) -> Path:
    """The project's copy under data/raw if present, else the shared original; skip if neither."""
    for base in RAW_DIRS:
        if (base / rel).is_file():
            return base / rel
    pytest.skip(f"{rel} not found under {[str(b) for b in RAW_DIRS]}")


# --------------------------------------------------------------------------- fixtures (real files)


@pytest.fixture(scope="module")
def cb() -> tuple[list[Claim], LoadReport]:
    return load_claimbuster(raw_file(CB_FILE), expected_sha256=KNOWN_SHA256["crowdsourced.csv"])


@pytest.fixture(scope="module")
def clef() -> dict[str, tuple[list[Claim], LoadReport]]:
    out = {}
    for split, rel in CLEF_FILES.items():
        path = raw_file(rel)
        out[split] = load_clef(path, split, expected_sha256=KNOWN_SHA256.get(path.name))
    return out


def by_id(claims: list[Claim]) -> dict[str, Claim]:
    return {c.source_id: c for c in claims}


# --------------------------------------------------------------------------- ClaimBuster


def test_claimbuster_counts(cb):
    claims, report = cb
    assert report.rows_read == report.rows_kept == len(claims) == 22_501
    assert report.dropped == []
    per_split = {s: [c for c in claims if c.split == s] for s in ("2012", "2016", "other")}
    assert {s: (len(v), sum(c.label for c in v)) for s, v in per_split.items()} == {
        "2012": (2_487, 657),
        "2016": (2_745, 728),
        "other": (17_269, 4_028),
    }
    assert "sha256 matches the expected value" in report.notes


def test_claimbuster_label_is_verdict_one(cb):
    claims, _ = cb
    assert Counter(c.extra["Verdict"] for c in claims) == {-1: 14_685, 0: 2_403, 1: 5_413}
    assert all(c.label == int(c.extra["Verdict"] == 1) for c in claims)
    assert all(c.split == claimbuster_split(c.extra["File_id"]) for c in claims)


def test_claimbuster_conflicts_reported_and_kept(cb):
    claims, report = cb
    conflict_ids = {frozenset(d.source_ids) for d in report.conflicts}
    assert conflict_ids == {
        frozenset(p)
        for p in [
            ("39", "63"),
            ("40", "64"),
            ("19096", "20136"),
            ("27908", "27910"),
            ("29254", "29256"),
            ("34258", "34260"),
        ]
    }
    ids = by_id(claims)
    assert all(i in ids for group in conflict_ids for i in group)  # kept, not dropped
    assert Counter(s for d in report.conflicts for s in set(d.splits)) == {"other": 3, "2012": 1, "2016": 2}
    assert not [d for d in report.duplicates if d.kind == "id"]


def test_claimbuster_defects(cb):
    claims, report = cb
    ids = by_id(claims)
    # doubled quotes decoded
    assert ids["14683"].text.startswith(
        'I really can\'t believe Mr. Bush is still trying to make trust an issue after "read my lips" and'
    )
    assert all('""' not in c.text for c in claims)
    # trailing space stripped and reported
    assert (
        ids["2242"].text
        == "We do have to lower the cost of health care, not just in Medicare and Medicaid..."
    )
    assert any(r.row == 1588 and r.field == "Text" and "strip" in r.action for r in report.repairs)
    assert all("\r" not in c.text and c.text == c.text.strip() and c.text for c in claims)


def test_claimbuster_parser_agrees_with_csv_module(cb):
    claims, _ = cb
    with open(raw_file(CB_FILE), newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["Sentence_id"], r["Text"].strip(), r["File_id"]) for r in rows] == [
        (c.source_id, c.text, c.extra["File_id"]) for c in claims
    ]


# --------------------------------------------------------------------------- CLEF 2024


def test_clef_train_counts(clef):
    claims, report = clef["train"]
    assert report.rows_read == 22_501
    yes_before_drop = sum(c.label for c in claims)  # the dropped rows are all "No" (checked below)
    assert yes_before_drop == 5_413
    assert report.rows_kept == len(claims) == 22_501 - 6
    assert "sha256 matches the expected value" in report.notes


def test_clef_dev_test_counts(clef):
    claims, report = clef["dev-test"]
    assert report.rows_read == report.rows_kept == len(claims) == 318
    assert sum(c.label for c in claims) == 108
    assert {c.split for c in claims} == {"dev-test"}
    assert "sha256 matches the expected value" in report.notes
    dev, _ = clef["dev"]
    assert (len(dev), sum(c.label for c in dev)) == (1_032, 238)


def test_clef_glued_line_split(clef):
    claims, report = clef["train"]
    ids = by_id(claims)
    assert ids["24098"].text == "We've got to invest and grow." and ids["24098"].label == 0
    assert ids["29286"].text == "You can't bring back jobs." and ids["29286"].label == 0
    assert ids["24098"].extra["line"] == ids["29286"].extra["line"] == 16877
    glued = [r for r in report.repairs if r.field == "class_label"]
    assert len(glued) == 1 and glued[0].row == 16877 and "'No29286'" in glued[0].action
    assert all(c.source_id.isdigit() for c in claims)


def test_clef_name_rows_dropped(clef, cb):
    claims, report = clef["train"]
    assert {d.row for d in report.dropped} == set(NAME_LINES)
    assert all("#NAME?" in d.reason for d in report.dropped)
    assert all(f"id {NAME_LINES[d.row]}" in d.reason for d in report.dropped)
    assert not any(c.text.startswith("#") for c in claims)
    # the lost texts are in ClaimBuster under the same id, all "No" there too (hence 5,413 Yes stays)
    cb_ids = by_id(cb[0])
    assert [cb_ids[i].label for i in NAME_LINES.values()] == [0] * 6
    assert all(cb_ids[i].text.startswith("-") for i in NAME_LINES.values())


def test_clef_crlf_and_quotes(clef):
    for split in ("dev", "dev-test"):
        claims, report = clef[split]
        assert all("\r" not in c.text and "\r" not in c.source_id for c in claims)
        n = {"dev": 1_032, "dev-test": 318}[split]
        assert any(r.row is None and f"{n:,} CRLF" in r.action for r in report.repairs)
    train = by_id(clef["train"][0])
    assert train["19099"].text == (
        "Now, let's balance the budget and protect Medicare, Medicaid, education and the environment."
    )
    assert train["6221"].text == 'I don\'t know how you vote "present" on some of that.'
    assert train["21150"].text == (
        'I believe that -- I believe they\'ve moved that sign, "The buck stops here" '
        'from the Oval Office desk to "The buck stops here" on the Lincoln bedroom.'
    )
    assert by_id(clef["dev"][0])["26"].text == 'You know, I saw a movie - "Crocodile Dundee."'
    assert any("11,234 CSV-style quoted" in r.action for r in clef["train"][1].repairs)


def test_clef_backslash_debris_kept_and_noted(clef):
    claims, report = clef["dev-test"]
    ids = by_id(claims)
    assert (
        ids["37802"].text
        == 'Many of your Democrat Governors said, \\President Trump did a phenomenal job.\\""'
    )
    assert any("backslash" in n and "id 37802" in n and "id 38777" in n for n in report.notes)


@pytest.mark.parametrize("split", ["train", "dev", "dev-test"])
def test_clef_parser_agrees_with_csv_module(clef, split):
    claims, _ = clef[split]
    with open(raw_file(CLEF_FILES[split]), newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))[1:]
    expected = []
    for r in rows:
        if len(r) == 5:  # the glued line
            r = [r[0], r[1], r[2][:2]], [r[2][2:], r[3], r[4]]
        else:
            r = (r,)
        expected += [(x[0], x[1].strip(), x[2] == "Yes") for x in r if x[1] != "#NAME?"]
    assert expected == [(c.source_id, c.text, bool(c.label)) for c in claims]


def test_clef_duplicates_reported(clef):
    _, train = clef["train"]
    assert len(train.conflicts) == 6
    assert not [d for d in train.duplicates if d.kind == "id"]
    _, dev = clef["dev"]
    assert [d.source_ids for d in dev.duplicates] == [("6784", "23611")]


def test_clef_train_is_claimbuster_relabelled(clef, cb):
    """The leakage warning in the notes: same ids, same texts, Yes iff Verdict == 1."""
    cb_ids = by_id(cb[0])
    train = clef["train"][0]
    assert all(
        c.source_id in cb_ids and cb_ids[c.source_id].text == c.text and cb_ids[c.source_id].label == c.label
        for c in train
    )
    assert len(shared_texts(train, [c for c in cb[0] if c.split == "2016"])) > 2_000


def test_reports_summarise(cb, clef):
    text = clef["train"][1].summary()
    assert "read 22,501 rows, kept 22,495" in text and "line 16877" in text and "#NAME?" in text
    assert "CONFLICT" in cb[1].summary()


def test_sha256_file_and_mismatch_note(tmp_path):
    path = raw_file(CLEF_FILES["dev-test"])
    assert sha256_file(path) == KNOWN_SHA256[path.name]
    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes() + b"\r\n")
    claims, report = load_clef(copy, "dev-test", expected_sha256=KNOWN_SHA256[path.name])
    assert len(claims) == 318  # a mismatch is a note, not an error
    assert any("MISMATCH" in n for n in report.notes)


# --------------------------------------------------------------------------- splits


@pytest.fixture(scope="module")
def cb_splits(cb):
    return build_splits(CLAIMBUSTER, cb[0], seed=20240101)


@pytest.fixture(scope="module")
def clef_claims(clef):
    return clef["train"][0] + clef["dev-test"][0]


def test_claimbuster_splits(cb, cb_splits):
    cal, test = cb_splits["calibration"], cb_splits["test"]
    assert len(cal) == 1_314 and Counter(c.label for c in cal) == {0: 657, 1: 657}
    assert {c.split for c in cal} == {"2012"}
    assert {c.source_id for c in cb[0] if c.split == "2012" and c.label} <= {c.source_id for c in cal}
    assert (len(test), sum(c.label for c in test)) == (2_745, 728)
    assert cb_splits["excluded"] == [] and len(cb_splits["pool"]) == 2_487
    assert shared_texts(cal, test) == {}
    assert shared_texts(cb_splits["pool"], test) == {}


def test_clef_splits(clef_claims):
    sp = build_splits(CLEF, clef_claims, seed=20240101)
    cal, test = sp["calibration"], sp["test"]
    assert len(cal) == 2_406 and Counter(c.label for c in cal) == {0: 1_203, 1: 1_203}
    assert {c.split for c in cal} == {"train"}
    assert (len(test), sum(c.label for c in test)) == (318, 108)
    assert shared_texts(cal, test) == {}
    # train and dev-test share 3 short texts (6 train rows): set aside before sampling
    train = [c for c in clef_claims if c.split == "train"]
    overlap = shared_texts(train, test)
    assert sorted(overlap) == ["can i respond to that", "i ll give you an example", "why didn t you do it"]
    assert sorted(c.source_id for c in sp["excluded"]) == sorted(
        ["18148", "7316", "29668", "13696", "32578", "32577"]
    )
    assert len(sp["pool"]) == 22_495 - 6


def test_splits_deterministic(cb, clef_claims, cb_splits):
    def ids(sp):
        return [c.source_id for c in sp["calibration"]]

    assert ids(build_splits(CLAIMBUSTER, cb[0], seed=20240101)) == ids(cb_splits)
    assert ids(build_splits(CLAIMBUSTER, cb[0], seed=7)) != ids(cb_splits)
    a = build_splits(CLEF, clef_claims, seed=1)
    assert ids(a) == ids(build_splits(CLEF, clef_claims, seed=1))
    assert ids(a) != ids(build_splits(CLEF, clef_claims, seed=2))
    # file order is kept
    lines = [c.extra["line"] for c in cb_splits["calibration"]]
    assert lines == sorted(lines)


def test_build_splits_errors(cb, clef):
    with pytest.raises(ValueError, match="unknown dataset"):
        build_splits("fever", cb[0], seed=0)
    with pytest.raises(ValueError, match="dev-test"):
        build_splits(CLEF, clef["train"][0], seed=0)  # test file not loaded
    with pytest.raises(ValueError, match="too few"):
        build_splits(CLAIMBUSTER, cb[0], seed=0, n_per_class=700)


def test_shared_texts_normalises():
    def c(i, t):
        return Claim("x", i, t, 0, "s")

    assert normalise_text("  We DON'T know\u00a0who the rebels are!") == "we don t know who the rebels are"
    assert shared_texts([c("1", "Thank you."), c("2", "Hello")], [c("9", "thank  you")]) == {
        "thank you": (("1",), ("9",))
    }
    assert shared_texts([c("1", "...")], [c("2", "?!")]) == {}


# --------------------------------------------------------------------------- records


def test_claim_record():
    a = Claim("clef2024", "1", "t", 1, "train", {"line": 2})
    assert hash(a) == hash(Claim("clef2024", "1", "t", 1, "train", {"line": 3}))
    with pytest.raises(ValueError):
        Claim("clef2024", "1", "t", 2, "train")
    with pytest.raises(AttributeError):
        a.text = "u"  # type: ignore[misc]


def test_data_error_fields():
    e = DataError("data/x.csv", 12, "label", "must be 0 or 1, got '2'")
    assert isinstance(e, ValueError)
    assert str(e) == "data/x.csv, row 12, field 'label': must be 0 or 1, got '2'"
    assert (e.file, e.row, e.field) == ("data/x.csv", 12, "label")
    e2 = pickle.loads(pickle.dumps(e))
    assert (str(e2), e2.row, e2.field) == (str(e), 12, "label")


# --------------------------------------------------------------------------- tiny files

CLEF_HEADER = b"Sentence_id\tText\tclass_label\n"
CB_HEADER = b"Sentence_id,Text,Speaker,File_id,Verdict\n"


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_tiny_clef_repairs(tmp_path):
    data = (
        b"\xef\xbb\xbf"
        + CLEF_HEADER.replace(b"\n", b"\r\n")
        + b'1\t"Say ""hi"", now."\tYes\r\n'
        + b'2\tA\tNo3\tB\tYes4\t"C, c"\tNo\r\n'  # two glues on one line
        + b"5\t#NAME?\tNo\r\n"
        + b"6\t   \tNo\r\n"
        + b"7\t padded \tYes"  # no final newline
    )
    claims, report = load_clef(write(tmp_path, "t.tsv", data), "train")
    assert [(c.source_id, c.text, c.label, c.extra["line"]) for c in claims] == [
        ("1", 'Say "hi", now.', 1, 2),
        ("2", "A", 0, 3),
        ("3", "B", 1, 3),
        ("4", "C, c", 0, 3),
        ("7", "padded", 1, 6),
    ]
    assert report.rows_read == 7 and report.rows_kept == 5
    assert [(d.row, "#NAME?" in d.reason) for d in report.dropped] == [(4, True), (5, False)]
    actions = " | ".join(r.action for r in report.repairs)
    for needle in ("byte-order mark", "5 CRLF", "'No3'", "'Yes4'", "stripped", "unquoted 2"):
        assert needle in actions


def test_tiny_claimbuster_repairs(tmp_path):
    data = CB_HEADER + (
        b'1,"He said ""no"", twice.",A,2012-10-03.txt,1\r\n'
        b"2,#NAME?,A,2016-10-09.txt,-1\r\n"
        b'3,"multi\nline",B,1960.txt,0\r\n'
        b"4,,B,1960.txt,0\r\n"
        b"5,Same.,B,2016-10-09.txt,1\r\n"
        b"6,same,B,2016-10-09.txt,-1\r\n"
    )
    claims, report = load_claimbuster(write(tmp_path, "c.csv", data))
    assert [(c.source_id, c.text, c.label, c.split, c.extra["line"]) for c in claims] == [
        ("1", 'He said "no", twice.', 1, "2012", 2),
        ("3", "multi\nline", 0, "other", 4),
        ("5", "Same.", 1, "2016", 7),
        ("6", "same", 0, "2016", 8),
    ]
    assert [d.row for d in report.dropped] == [3, 6]
    assert [d.source_ids for d in report.conflicts] == [("5", "6")]


# --------------------------------------------------------------------------- malformed input


def assert_data_error(exc: pytest.ExceptionInfo[DataError], path: Path, row: int, field: str) -> None:
    e = exc.value
    assert (e.file, e.row, e.field) == (str(path), row, field)
    msg = str(e)
    assert str(path) in msg and f"row {row}" in msg and repr(field) in msg


CLEF_BAD = {
    "missing column": (b"Sentence_id\tText\n1\tA\n", 1, "class_label", "required column"),
    "bad label": (CLEF_HEADER + b"1\tA\tNo\n2\tB\tMaybe\n", 3, "class_label", "'Maybe'"),
    "lowercase label": (CLEF_HEADER + b"1\tA\tyes\n", 2, "class_label", "'Yes' or 'No'"),
    "non-utf8": (CLEF_HEADER + b"1\tA\tNo\n2\tcaf\xe9\tNo\n", 3, "Text", "0xe9"),
    "nul byte": (CLEF_HEADER + b"1\tA\x00B\tNo\n", 2, "Text", "NUL"),
    "too few fields": (CLEF_HEADER + b"1\tA\tNo\n2\tB\n", 3, "class_label", "expected 3 fields, got 2"),
    "too many fields": (
        CLEF_HEADER + b"1\tA\tNo\tX\n",
        2,
        "#4 (beyond the last column 'class_label')",
        "got 4",
    ),
    "glue-like but short": (
        CLEF_HEADER + b"1\tA\tNo2\tB\n",
        2,
        "#4 (beyond the last column 'class_label')",
        "got 4",
    ),
    "unclosed quote": (CLEF_HEADER + b'1\t"A\tNo\n2\tB\tNo\n', 2, "Text", "never closed"),
    "stray quote": (CLEF_HEADER + b'1\t"A"B\tNo\n', 2, "Text", "after the closing quote"),
    "bad id": (CLEF_HEADER + b"x1\tA\tNo\n", 2, "Sentence_id", "integer id"),
    "empty id": (CLEF_HEADER + b"\tA\tNo\n", 2, "Sentence_id", "integer id"),
    "empty file": (b"", 1, "Sentence_id", "empty"),
    "duplicate column": (b"Sentence_id\tText\tText\tclass_label\n", 1, "Text", "more than once"),
    "utf16 file": ("Sentence_id\tText\tclass_label\n".encode("utf-16"), 1, "header field #1", None),
}


@pytest.mark.parametrize("case", sorted(CLEF_BAD))
def test_clef_malformed_raises(tmp_path, case):
    data, row, field, needle = CLEF_BAD[case]
    path = write(tmp_path, "bad.tsv", data)
    with pytest.raises(DataError) as exc:
        load_clef(path, "train")
    if field is None:
        assert (exc.value.file, exc.value.row, exc.value.field) == (str(path), row, None)
    else:
        assert_data_error(exc, path, row, field)
    if needle:
        assert needle in str(exc.value)


CB_BAD = {
    "missing column": (b"Sentence_id,Text,File_id\n1,A,2012.txt\n", 1, "Verdict", "required column"),
    "bad verdict": (CB_HEADER + b"1,A,S,2012.txt,1\n2,B,S,2012.txt,2\n", 3, "Verdict", "got '2'"),
    "non-utf8": (CB_HEADER + b"1,A,S\xff,2012.txt,1\n", 2, "Speaker", "0xff"),
    "nul byte": (CB_HEADER + b"1,A,S,2012.txt,1\x00\n", 2, "Verdict", "NUL"),
    "too few fields": (CB_HEADER + b'1,"A, b",S,2012.txt\n', 2, "Verdict", "expected 5 fields, got 4"),
    "row after multiline": (CB_HEADER + b'1,"A\nB",S,2012.txt,1\n2,C,S,2012.txt\n', 4, "Verdict", "got 4"),
    "bad id": (CB_HEADER + b"1.5,A,S,2012.txt,1\n", 2, "Sentence_id", "integer id"),
}


@pytest.mark.parametrize("case", sorted(CB_BAD))
def test_claimbuster_malformed_raises(tmp_path, case):
    data, row, field, needle = CB_BAD[case]
    path = write(tmp_path, "bad.csv", data)
    with pytest.raises(DataError) as exc:
        load_claimbuster(path)
    assert_data_error(exc, path, row, field)
    assert needle in str(exc.value)


def test_clef_split_name_required(tmp_path):
    with pytest.raises(ValueError):
        load_clef(write(tmp_path, "t.tsv", CLEF_HEADER), "")


# --------------------------------------------------------------------------- tweets (CheckThat! 2021, 2022)


@pytest.fixture(scope="module")
def tweets() -> dict[str, tuple[list[Claim], LoadReport]]:
    out = {}
    for split, name in TWEET_FILES.items():
        path = raw_file(f"tweets/{name}")
        out[split] = load_tweets(path, split, expected_sha256=KNOWN_SHA256[name])
    return out


def test_tweet_counts_and_the_two_rounded_ids(tweets):
    counts = {s: (len(c), sum(x.label for x in c)) for s, (c, _) in tweets.items()}
    assert counts == {"ct22-train": (2_120, 445), "ct21-train": (764, 258), "ct22-dev": (195, 44),
                      "ct21-dev": (140, 60), "ct21-test": (304, 11)}
    claims, report = tweets["ct22-train"]
    assert report.rows_read == 2_122 and [d.row for d in report.dropped] == [1225, 1355]
    assert all("spreadsheet" in d.reason for d in report.dropped)
    assert all("sha256 matches" in " ".join(r.notes) for _, r in tweets.values())
    assert {c.dataset for c in claims} == {TWEETS} and all(c.source_id.isdigit() for c in claims)


@pytest.mark.parametrize("split", sorted(TWEET_FILES))
def test_tweet_parser_agrees_with_csv_module(tweets, split):
    claims, _ = tweets[split]
    with open(raw_file(f"tweets/{TWEET_FILES[split]}"), newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))[1:]
    expected = [(r[1], r[3].strip(), int(r[-1])) for r in rows if r[1].isdigit()]
    assert expected == [(c.source_id, c.text, c.label) for c in claims]


def test_tweet_splits_take_l_from_the_train_files_and_u_from_ct22_dev(tweets):
    every = [c for claims, _ in tweets.values() for c in claims]
    sp = build_splits(TWEETS, every, seed=2026)
    cal, test, pool = sp["calibration"], sp["test"], sp["pool"]
    assert (len(test), sum(c.label for c in test)) == (195, 44) and {c.split for c in test} == {"ct22-dev"}
    assert {c.split for c in pool} == {"ct22-train", "ct21-train"}
    assert len({c.source_id for c in pool}) == len(pool) == 2_637  # one row per tweet, CT22's first
    both = {c.source_id for c in tweets["ct22-train"][0]} & {c.source_id for c in tweets["ct21-train"][0]}
    assert both and all(c.split == "ct22-train" for c in pool if c.source_id in both)
    # CT21 train holds 19 tweets of CT22 dev (5 with another text): set aside by id and by text
    assert len(sp["excluded"]) == 19 and {c.source_id for c in sp["excluded"]} <= {c.source_id for c in test}
    assert not {c.source_id for c in pool} & {c.source_id for c in test} and shared_texts(pool, test) == {}
    assert len(cal) == 1_150 and Counter(c.label for c in cal) == {0: 575, 1: 575}


def test_the_tweets_are_versioned_with_the_other_datasets():
    """data.dvc tracks data/ with the tweet files in it, pushed to the in-repo remote."""
    import yaml

    from checkworthy.config import DATA_DIR
    from checkworthy.data.versioning import dvc

    claims, reports = load_dataset(TWEETS)
    assert len(reports) == len(TWEET_FILES) and len(claims) == 2_120 + 764 + 195 + 140 + 304
    for name in TWEET_FILES.values():
        assert sha256_file(DATA_DIR / "raw" / "tweets" / name) == KNOWN_SHA256[name]
    assert yaml.safe_load((REPO / "data.dvc").read_text())["outs"][0]["nfiles"] >= 12
    assert dvc("status", "--cloud", "-q", "data.dvc", check=False).returncode == 0  # the remote has it


# --------------------------------------------------------------------------- tweets in other languages


#: per dataset and split: rows in the file and check-worthy among them (the datasets README), rows
#: kept by the loader and check-worthy among them
MULTILINGUAL_COUNTS = {
    ("tweets-ar", "ct24-train"): (7_332, 2_242, 7_328, 2_241),
    ("tweets-es", "ct22-train"): (4_990, 1_903, 4_990, 1_903),
    ("tweets-es", "ct22-dev"): (2_500, 305, 2_500, 305),
    ("tweets-es", "ct22-dev-test"): (2_499, 305, 2_499, 305),
    ("tweets-nl", "ct24-train"): (995, 405, 995, 405),
    ("tweets-bg", "ct22-train"): (1_871, 378, 1_871, 378),
    ("tweets-bg", "ct22-dev"): (177, 36, 177, 36),
    ("tweets-tr", "ct22-train"): (2_417, 422, 2_416, 422),
    ("tweets-tr", "ct22-dev"): (222, 45, 222, 45),
}


def multilingual_file(name: str, split: str) -> Path:
    tweets = MULTILINGUAL_TWEETS[name]
    return raw_file(f"multilingual/{tweets.folder}/{tweets.files[split]}")


@pytest.fixture(scope="module")
def multilingual() -> dict[tuple[str, str], tuple[list[Claim], LoadReport]]:
    out = {}
    for name, tweets in MULTILINGUAL_TWEETS.items():
        for split, fname in tweets.files.items():
            out[name, split] = load_tweets(multilingual_file(name, split), split,
                                           expected_sha256=KNOWN_SHA256[fname], dataset=name)
    return out


def test_multilingual_counts_per_split_and_class_match_the_readme(multilingual):
    assert set(multilingual) == set(MULTILINGUAL_COUNTS)
    for key, (claims, report) in multilingual.items():
        with open(multilingual_file(*key), newline="", encoding="utf-8") as fh:
            labels = [r["class_label"] for r in csv.DictReader(fh, delimiter="\t")]
        positive = sum(v in ("1", "Yes") for v in labels)
        assert (len(labels), positive, report.rows_kept, sum(c.label for c in claims)) == \
            MULTILINGUAL_COUNTS[key], key
        assert report.rows_read == len(labels) and len(claims) == report.rows_kept
        assert "sha256 matches the expected value" in report.notes
        assert {c.dataset for c in claims} == {key[0]} and {c.split for c in claims} == {key[1]}


def test_multilingual_defects_are_reported(multilingual):
    def dropped(key):
        return [d.row for d in multilingual[key][1].dropped]

    assert dropped(("tweets-ar", "ct24-train")) == [5079, 5525, 5588, 7114]
    assert dropped(("tweets-tr", "ct22-train")) == [870]
    assert all("spreadsheet" in d.reason for _, r in multilingual.values() for d in r.dropped)
    stripped = {key: [r.row for r in report.repairs if "stripped" in r.action]
                for key, (_, report) in multilingual.items()}
    assert {k: v for k, v in stripped.items() if v} == {("tweets-ar", "ct24-train"): [258, 2294, 2446, 3751, 6702],
                                                         ("tweets-tr", "ct22-train"): [1381]}
    unquoted = {key: [r.action for r in report.repairs if "quoted" in r.action]
                for key, (_, report) in multilingual.items()}
    assert {k: v for k, v in unquoted.items() if v} == {
        ("tweets-es", s): [f'unquoted {n} CSV-style quoted texts (doubled quotes "" -> ")']
        for s, n in (("ct22-train", 703), ("ct22-dev", 161), ("ct22-dev-test", 159))}
    ar = multilingual["tweets-ar", "ct24-train"][1]
    assert len(ar.duplicates) == 3 and not ar.conflicts  # three "breaking news" pairs, same label
    es_dev = multilingual["tweets-es", "ct22-dev"][1]
    assert [d.source_ids for d in es_dev.conflicts] == [("1448237239482429443", "1447855939160268803")]
    assert "CONFLICT" in es_dev.summary()
    for claims, report in multilingual.values():
        assert all(c.text and c.text == c.text.strip() and "\r" not in c.text and "\n" not in c.text
                   for c in claims)
        assert all(c.source_id.isdigit() for c in claims)
        assert not [d for d in report.duplicates if d.kind == "id"]
        assert not [r for r in report.repairs if "CRLF" in r.action or "byte-order" in r.action]


@pytest.mark.parametrize("key", sorted(MULTILINGUAL_COUNTS))
def test_multilingual_parser_agrees_with_csv_module(multilingual, key):
    claims, _ = multilingual[key]
    with open(multilingual_file(*key), newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    expected = [(r["tweet_id"], r["tweet_text"].strip(), int(r["class_label"] in ("1", "Yes")))
                for r in rows if r["tweet_id"].isdigit()]
    assert expected == [(c.source_id, c.text, c.label) for c in claims]


def test_multilingual_splits_and_the_train_only_languages(multilingual):
    for name in ("tweets-es", "tweets-bg", "tweets-tr"):
        every = [c for (n, _), (claims, _) in multilingual.items() if n == name for c in claims]
        sp = build_splits(name, every, seed=2026)
        assert {c.split for c in sp["test"]} == {"ct22-dev"} and {c.split for c in sp["pool"]} == {"ct22-train"}
        n_pos = MULTILINGUAL_COUNTS[name, "ct22-train"][3]
        assert Counter(c.label for c in sp["calibration"]) == {0: n_pos, 1: n_pos}
        assert sp["excluded"] == [] and shared_texts(sp["pool"], sp["test"]) == {}
    for name in ("tweets-ar", "tweets-nl"):
        with pytest.raises(ValueError, match=f"{name}: only a train file"):
            build_splits(name, multilingual[name, "ct24-train"][0], seed=2026)


def test_tweet_labels_one_kind_a_file(tmp_path):
    header = b"tweet_id\ttweet_text\tclass_label\n"
    claims, _ = load_tweets(write(tmp_path, "ok.tsv", header + b"1\tA\tYes\n2\tB\tNo\n"), "x", dataset="tweets-xx")
    assert [(c.label, c.dataset) for c in claims] == [(1, "tweets-xx"), (0, "tweets-xx")]
    for body, line, needle in ((b"1\tA\tYes\n2\tB\t1\n", 3, "must be No or Yes"),
                               (b"1\tA\t0\n2\tB\tyes\n", 3, "must be 0 or 1"),
                               (b"1\tA\tMaybe\n", 2, "(2024)")):
        path = write(tmp_path, "bad.tsv", header + body)
        with pytest.raises(DataError) as exc:
            load_tweets(path, "x")
        assert_data_error(exc, path, line, "class_label")
        assert needle in str(exc.value)


def test_the_multilingual_tweets_are_versioned_with_the_other_datasets():
    """data.dvc tracks data/raw/multilingual (pushed to the in-repo remote); load_dataset reads it."""
    from checkworthy.config import DATA_DIR
    from checkworthy.data.versioning import dvc

    for name, tweets in MULTILINGUAL_TWEETS.items():
        claims, reports = load_dataset(name)
        assert [r.rows_kept for r in reports] == [MULTILINGUAL_COUNTS[name, s][2] for s in tweets.files]
        assert {c.dataset for c in claims} == {name}
        for fname in tweets.files.values():
            assert sha256_file(DATA_DIR / "raw" / "multilingual" / tweets.folder / fname) == KNOWN_SHA256[fname]
    with pytest.raises(ValueError, match="tweets-es"):
        load_dataset("tweets-xx")
    assert dvc("status", "--cloud", "-q", "data.dvc", check=False).returncode == 0


def test_ensure_data_pulls_a_dataset_an_older_checkout_lacks(tmp_path):
    """A checkout whose data/ predates a dataset (or has no data/) gets it from the remote."""
    import os
    import subprocess
    import sys

    from checkworthy.data.versioning import dvc_in
    from checkworthy.testing.scratch_project import git, make_dvc_repo

    repo = make_dvc_repo(tmp_path)
    raw = repo / "data" / "raw"
    for folder in RAW_FOLDERS[:3]:
        (raw / folder).mkdir(parents=True)
        (raw / folder / "a.tsv").write_text(f"{folder}\n")
    dvc_in(repo, "add", "-q", "data")
    git(repo, "commit", "-qam", "data v2")
    for folder in RAW_FOLDERS[3:]:
        (raw / folder).mkdir(parents=True)
        (raw / folder / "a.tsv").write_text(f"{folder}\n")
    dvc_in(repo, "add", "-q", "data")
    dvc_in(repo, "push", "-q")
    git(repo, "commit", "-qam", "data v3: other languages")
    git(repo, "checkout", "-q", "HEAD~1", "--", "data.dvc")
    dvc_in(repo, "checkout", "-q", "--force")
    git(repo, "checkout", "-q", "HEAD", "--", "data.dvc")
    assert not (raw / "multilingual").exists()

    def ensure() -> None:
        env = {**os.environ, "CHECKWORTHY_ROOT": str(repo)}
        subprocess.run([sys.executable, "-c", "from checkworthy.data.versioning import ensure_data; ensure_data()"],
                       env=env, check=True, capture_output=True)

    ensure()
    assert all((raw / folder / "a.tsv").read_text() == f"{folder}\n" for folder in RAW_FOLDERS)
    subprocess.run(["rm", "-rf", str(repo / "data"), str(repo / ".dvc" / "cache")], check=True)
    ensure()  # a fresh clone: no data/, no cache
    assert all((raw / folder / "a.tsv").is_file() for folder in RAW_FOLDERS)


# --------------------------------------------------------------------------- the reports word by word


def summary_lines(report: LoadReport, path: Path) -> list[str]:
    return report.summary().replace(str(path), "FILE").split("\n")


def test_tweet_report_words_every_decision(tmp_path):
    """Every repair, drop, duplicate and note of a tiny tweet file, word for word (a refactor of
    the reader must not change one)."""
    data = (b"\xef\xbb\xbf" + b"tweet_id\ttweet_text\tclass_label\ttopic\r\n"
            + b'11\t"Say ""hi"" now"\t1\tcovid\r\n' + b"\r\n" + b"1.37041E+18\tlost\t0\tcovid\r\n"
            + b"12\t  padded \t0\tcovid\r\n" + b"13\t#VALUE!\t0\tx\r\n" + b"14\tsay hi now\t0\tcovid\r\n"
            + b"11\tother\t1\tcovid\r\n" + b"15\t\t1\tx\r\n")
    path = write(tmp_path, "t.tsv", data)
    claims, report = load_tweets(path, "ct22-train", expected_sha256="0" * 64)
    assert [(c.source_id, c.text, c.label, c.split, dict(c.extra)) for c in claims] == [
        ("11", 'Say "hi" now', 1, "ct22-train", {"topic": "covid", "line": 2}),
        ("12", "padded", 0, "ct22-train", {"topic": "covid", "line": 5}),
        ("14", "say hi now", 0, "ct22-train", {"topic": "covid", "line": 7}),
        ("11", "other", 1, "ct22-train", {"topic": "covid", "line": 8}),
    ]
    sha = "84d7394d3582dfef3b68f9faee75fdfee9cb892e9b4eca4da510788f634c7b1e"
    assert summary_lines(report, path) == [
        "FILE: read 7 rows, kept 4, dropped 4, repairs 4",
        f"sha256 {sha}",
        "repairs (4):",
        "  - whole file, *: removed UTF-8 byte-order mark",
        "  - whole file, *: converted 9 CRLF line endings to LF",
        "  - line 5, Text: stripped leading/trailing whitespace",
        '  - whole file, tweet_text: unquoted 1 CSV-style quoted texts (doubled quotes "" -> ")',
        "dropped (4):",
        "  - line 3: blank line",
        "  - line 4: tweet_id '1.37041E+18' is a spreadsheet's rounding of the id: the tweet cannot be "
        "named, nor matched across files",
        "  - line 6: Text is the spreadsheet error '#VALUE!': the sentence was destroyed by a spreadsheet "
        "round-trip",
        "  - line 9: Text is empty",
        "duplicate ids (1):",
        "  - id 11 on lines [2, 8], labels [1, 1]",
        "duplicate texts (1):",
        "  - CONFLICT 'say hi now': ids ['11', '14'], labels [1, 0], splits ['ct22-train', 'ct22-train']",
        "notes (4):",
        "  - duplicate ids: 1 (rows 2); kept",
        "  - duplicate texts (normalised): 1 texts on 2 rows, 1 with conflicting labels (2 rows); all kept, "
        "none relabelled",
        "  - split ct22-train: 4 rows kept, 2 check-worthy",
        f"  - sha256 MISMATCH: expected {'0' * 64}, got {sha} (file differs from the documented release; "
        "counts may differ)",
    ]


def test_clef_report_words_every_decision(tmp_path):
    path = write(tmp_path, "c.tsv", CLEF_HEADER + b'1\t"Say ""hi"", now."\tYes\n2\tA\tNo3\tB\tYes\n'
                 b"4\t#NAME?\tNo\n5\tsaid, \\President\tNo\n6\tA.\tYes\n")
    claims, report = load_clef(path, "train")
    assert [(c.source_id, c.label, c.split, dict(c.extra)) for c in claims] == [
        ("1", 1, "train", {"line": 2}), ("2", 0, "train", {"line": 3}), ("3", 1, "train", {"line": 3}),
        ("5", 0, "train", {"line": 5}), ("6", 1, "train", {"line": 6}),
    ]
    assert summary_lines(report, path) == [
        "FILE: read 6 rows, kept 5, dropped 1, repairs 2",
        "sha256 994c580505173314e6c72a87e2aefae09a052f456764117975870f7d794ea914",
        "repairs (2):",
        "  - line 3, class_label: split glued rows: 'No3' -> label 'No' + next row starting with id '3' "
        "(missing newline)",
        '  - whole file, Text: unquoted 1 CSV-style quoted texts (1 of them with doubled quotes "" -> ")',
        "dropped (1):",
        "  - line 4: Text is the spreadsheet error '#NAME?': the sentence was destroyed by a spreadsheet "
        "round-trip; ClaimBuster crowdsourced.csv has id 4",
        "duplicate texts (1):",
        "  - CONFLICT 'a': ids ['2', '6'], labels [0, 1], splits ['train', 'train']",
        "notes (4):",
        "  - duplicate ids: 0 (rows 0); kept",
        "  - duplicate texts (normalised): 1 texts on 2 rows, 1 with conflicting labels (2 rows); all kept, "
        "none relabelled",
        "  - 1 texts contain a backslash, debris of a lost escaped quote; kept verbatim: line 5 (id 5)",
        "  - split train: 5 rows kept, 3 Yes",
    ]


def test_claimbuster_report_words_every_decision(tmp_path):
    path = write(tmp_path, "b.csv", CB_HEADER + b'1,"He said ""no"", twice.",A,2012-10-03.txt,1\n'
                 b"2,#NAME?,A,2016-10-09.txt,-1\n5,Same.,B,2016-10-09.txt, 1\n6,same,B,2016-10-09.txt,-1\n"
                 b"6,x\\y,B,1999.txt,0\n")
    claims, report = load_claimbuster(path)
    assert [(c.source_id, c.label, c.split, dict(c.extra)) for c in claims] == [
        ("1", 1, "2012", {"Speaker": "A", "File_id": "2012-10-03.txt", "Verdict": 1, "line": 2}),
        ("5", 1, "2016", {"Speaker": "B", "File_id": "2016-10-09.txt", "Verdict": 1, "line": 4}),
        ("6", 0, "2016", {"Speaker": "B", "File_id": "2016-10-09.txt", "Verdict": -1, "line": 5}),
        ("6", 0, "other", {"Speaker": "B", "File_id": "1999.txt", "Verdict": 0, "line": 6}),
    ]
    assert summary_lines(report, path) == [
        "FILE: read 5 rows, kept 4, dropped 1, repairs 0",
        "sha256 dc32c86c5a3903597de58a8fefed2bd1a8ef13b1f9dff47383b8cdf2ea6ba929",
        "dropped (1):",
        "  - line 3: Text is the spreadsheet error '#NAME?': the sentence was destroyed by a spreadsheet "
        "round-trip",
        "duplicate ids (1):",
        "  - id 6 on lines [5, 6], labels [0, 0]",
        "duplicate texts (1):",
        "  - CONFLICT 'same': ids ['5', '6'], labels [1, 0], splits ['2016', '2016']",
        "notes (7):",
        '  - 1 texts contained CSV doubled quotes (""), decoded to " by the parser (same result as '
        "Python's csv module)",
        "  - duplicate ids: 1 (rows 2); kept",
        "  - duplicate texts (normalised): 1 texts on 2 rows, 1 with conflicting labels (2 rows); all kept, "
        "none relabelled",
        "  - 1 texts contain a backslash, debris of a lost escaped quote; kept verbatim: line 6 (id 6)",
        "  - split 2012: 1 rows, 1 check-worthy; 0 rows in conflicting-label groups",
        "  - split 2016: 2 rows, 1 check-worthy; 2 rows in conflicting-label groups",
        "  - split other: 1 rows, 0 check-worthy; 0 rows in conflicting-label groups",
    ]


TWEET_HEADER = b"tweet_id\ttweet_text\tclass_label\ttopic\n"
TWEETS_BAD = {
    "no label column": (b"tweet_id\ttweet_text\ttopic\n1\tA\tx\n", "row 1, field 'class_label': no label "
                        "column (one of ['class_label', 'check_worthiness', 'claim_worthiness']); header is "
                        "['tweet_id', 'tweet_text', 'topic']"),
    "bad id": (TWEET_HEADER + b"1\tA\t0\tx\n1e5\tB\t1\tx\n",
               "row 3, field 'tweet_id': must be an integer id, got '1e5'"),
    "too few fields": (TWEET_HEADER + b"1\tA\t0\n", "row 2, field 'topic': expected 4 fields, got 3"),
    "two kinds": (TWEET_HEADER + b"1\tA\tYes\tx\n2\tB\t1\tx\n",
                  "row 3, field 'class_label': must be No or Yes (as the file's first row), got '1'"),
    "no kind": (TWEET_HEADER + b"1\tA\tyes\tx\n", "row 2, field 'class_label': must be 0 or 1 (2021, 2022) "
                "or Yes or No (2024) (as the file's first row), got 'yes'"),
}


@pytest.mark.parametrize("case", sorted(TWEETS_BAD))
def test_tweets_malformed_raise_word_for_word(tmp_path, case):
    data, message = TWEETS_BAD[case]
    path = write(tmp_path, "bad.tsv", data)
    with pytest.raises(DataError) as exc:
        load_tweets(path, "x")
    assert str(exc.value) == f"{path}, {message}"


def test_refusals_word_for_word(tmp_path):
    """An empty split name, an unknown dataset and a dataset without a test split are refused in
    these words."""
    refusals = [
        (lambda: load_tweets(write(tmp_path, "e.tsv", TWEET_HEADER), ""),
         "split must be a non-empty name such as 'ct22-train'"),
        (lambda: load_clef(write(tmp_path, "e.tsv", CLEF_HEADER), ""),
         "split must be a non-empty name such as 'train' or 'dev-test'"),
        (lambda: load_dataset("tweets-xx"), "unknown dataset 'tweets-xx' (known: claimbuster, clef2024, "
         "tweets, tweets-ar, tweets-es, tweets-nl, tweets-bg, tweets-tr)"),
        (lambda: build_splits("tweets-nl", [], 1), "tweets-nl: only a train file, no test split to calibrate "
         "for (the lab's 2024 dev and test files are not in the project); use it as labelled data"),
        (lambda: build_splits("x", [], 1), "unknown dataset 'x'; expected one of ['claimbuster', 'clef2024', "
         "'tweets', 'tweets-bg', 'tweets-es', 'tweets-tr']"),
        (lambda: build_splits(CLEF, [], 1), "clef2024: no claims with split 'train' (load that file too)"),
    ]
    for refuse, message in refusals:
        with pytest.raises(ValueError) as exc:
            refuse()
        assert str(exc.value) == message
