"""How each dataset's files are laid out: a small typed description per format, read by
:func:`checkworthy.data.dataset_reader.read_claims`.

A description names the delimiter and required columns, the id, text and label columns, the
label values, where a row's split comes from, which known defects the format has (glued rows,
spreadsheet-rounded ids) and how its report words what was found.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = ["CLAIMBUSTER_SCHEMA", "CLEF_SCHEMA", "TWEETS_SCHEMA", "DatasetSchema", "LabelRule",
           "QuoteReport", "SplitRule", "claimbuster_split"]


@dataclass(frozen=True)
class LabelRule:
    """The label column and its values."""

    columns: tuple[str, ...]  # the file's label column: the first of these its header holds
    kinds: tuple[Mapping[str, int], ...]  # value -> label; several kinds: one a file, set by its first row
    expected: str  # the values, as an error names them
    strip: bool = True  # whitespace around the value is ignored
    keep_original: bool = False  # the value, as an integer, stays in ``extra`` (ClaimBuster's Verdict)
    glued: re.Pattern[str] | None = None  # a label glued to the next row's id (missing newline)


@dataclass(frozen=True)
class SplitRule:
    """A split read from a column of each row (instead of one split given for the whole file)."""

    column: str
    of: Callable[[str], str]
    names: tuple[str, ...]  # the splits, in the order the report counts them


class QuoteReport(Enum):
    """How the report words the CSV-style quoted texts the parser decoded."""

    DOUBLED_NOTE = "doubled-note"  # a note counting texts with doubled quotes, always
    UNQUOTED_AND_DOUBLED = "unquoted-and-doubled"  # a repair counting unquoted and doubled, if any
    UNQUOTED = "unquoted"  # a repair counting unquoted texts, if any


@dataclass(frozen=True)
class DatasetSchema:
    """One file format: what a reader requires, checks, repairs, drops and reports."""

    delimiter: str
    required: tuple[str, ...]  # columns the header must hold (the first is named for an empty file)
    id_column: str
    text_column: str
    label: LabelRule
    quotes: QuoteReport
    split: SplitRule | None = None  # None: the caller names the file's split
    split_example: str = ""  # split names an empty split's error suggests
    positive: str = "check-worthy"  # how the split note counts label 1
    rounded_ids: bool = False  # an id a spreadsheet rounded to a float drops its row
    lost_text_hint: str = ""  # where a destroyed text survives (``{id}``: the row's id)
    note_backslashes: bool = False  # texts holding a backslash are noted


def claimbuster_split(file_id: str) -> str:
    """ClaimBuster partition by debate year: ``"2012"``, ``"2016"`` or ``"other"``."""
    for year in ("2012", "2016"):
        if file_id.startswith(year):
            return year
    return "other"


#: ClaimBuster ``crowdsourced.csv``: check-worthy iff ``Verdict`` is 1 (-1 non-factual and 0
#: unimportant factual both 0); the split is the debate year of ``File_id``
CLAIMBUSTER_SCHEMA = DatasetSchema(
    delimiter=",",
    required=("Sentence_id", "Text", "File_id", "Verdict"),
    id_column="Sentence_id",
    text_column="Text",
    label=LabelRule(("Verdict",), ({"-1": 0, "0": 0, "1": 1},), "-1, 0 or 1", keep_original=True),
    quotes=QuoteReport.DOUBLED_NOTE,
    split=SplitRule("File_id", claimbuster_split, ("2012", "2016", "other")),
    note_backslashes=True,
)

#: CLEF 2024 CheckThat! Task 1 English TSV: check-worthy iff ``class_label`` is ``Yes``
CLEF_SCHEMA = DatasetSchema(
    delimiter="\t",
    required=("Sentence_id", "Text", "class_label"),
    id_column="Sentence_id",
    text_column="Text",
    label=LabelRule(("class_label",), ({"Yes": 1, "No": 0},), "'Yes' or 'No'", strip=False,
                    glued=re.compile(r"(Yes|No)(\d+)")),
    quotes=QuoteReport.UNQUOTED_AND_DOUBLED,
    split_example="'train' or 'dev-test'",
    positive="Yes",
    lost_text_hint="; ClaimBuster crowdsourced.csv has id {id}",
    note_backslashes=True,
)

#: CheckThat! tweets (2021, 2022 Task 1A; 2024 Task 1), any language: the label column is
#: CT22's and CT24's, CT21's or CT21 dev's; its values 0/1 (2021, 2022) or Yes/No (2024)
TWEETS_SCHEMA = DatasetSchema(
    delimiter="\t",
    required=("tweet_id", "tweet_text"),
    id_column="tweet_id",
    text_column="tweet_text",
    label=LabelRule(("class_label", "check_worthiness", "claim_worthiness"),
                    ({"0": 0, "1": 1}, {"No": 0, "Yes": 1}), "0 or 1 (2021, 2022) or Yes or No (2024)"),
    quotes=QuoteReport.UNQUOTED,
    split_example="'ct22-train'",
    rounded_ids=True,
)
