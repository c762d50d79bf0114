"""The label-validation suite (Great Expectations): a frame of label rows in, a verdict out.

Why: NN-PPI trusts its calibration labels completely: a wrong, duplicated, contradictory or
leaked label moves every decision in its neighbourhood. So a label set is validated before it
is used, and a failing suite stops its calibration; the failed expectations, with the rows
that broke them, are stored (:mod:`checkworthy.store.validations`) and the previous calibration
stays in force. Nothing here reads or writes the store.

The suite (one expectation per check, names as stored in ``validation_results.check_name``):

- ``label_in_0_1``      every label is 0 or 1;
- ``text_present``      every row has a text; ``text_not_blank``: no text is only whitespace;
- ``ids_unique``        no claim (dataset + id) appears twice;
- ``one_label_per_text`` no (normalised) text carries two different labels;
- ``no_leakage``        no (normalised) text is shared with a claim the set calibrates;
- ``class_balance``     the share of label 1 lies in the configured range;
- ``row_count``         the number of rows lies in the configured bounds.

The relational checks (conflicting labels, leakage) are turned into per-row columns of the
frame before GX sees it, so that every check is an ordinary column expectation and reports
its offending rows.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from checkworthy.data.text import normalise_text
from checkworthy.settings import ValidationSection, parse_section

#: params.yaml's ``validation:`` defaults
VALIDATION = ValidationSection()

SUITE_NAME = "checkworthy-labels"
SUITE_VERSION = "1"
CHECKS = ("label_in_0_1", "text_present", "text_not_blank", "ids_unique", "one_label_per_text",
          "no_leakage", "class_balance", "row_count")


@dataclass(frozen=True)
class Bounds:
    """The suite's limits: params.yaml's ``validation:`` (:class:`checkworthy.settings.ValidationSection`,
    whose defaults are the only ones; a field given here replaces its value)."""

    min_rows: int = VALIDATION.min_rows
    max_rows: int = VALIDATION.max_rows
    min_positive_rate: float = VALIDATION.positive_rate[0]
    max_positive_rate: float = VALIDATION.positive_rate[1]

    @classmethod
    def of(cls, section: ValidationSection) -> Bounds:
        """The bounds a ``validation:`` section sets."""
        low, high = section.positive_rate
        return cls(section.min_rows, section.max_rows, low, high)

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None) -> Bounds:
        """The bounds of params.yaml's ``validation:`` section (checked; missing keys: its defaults)."""
        return cls.of(parse_section(ValidationSection, (params or {}).get("validation") or {}, "validation"))


@dataclass
class CheckResult:
    """One expectation's verdict and the rows that broke it."""

    check_name: str
    expectation: str
    success: bool
    column: str | None
    kwargs: dict[str, Any]
    observed: Any
    unexpected_count: int | None
    unexpected_rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def unexpected_claim_ids(self) -> list[int]:
        return sorted({int(r["claim_id"]) for r in self.unexpected_rows if r.get("claim_id") is not None})


@dataclass
class SuiteOutcome:
    """A suite run on a frame (not yet stored)."""

    success: bool
    checks: list[CheckResult]
    n_rows: int
    subject_hash: str
    targets_hash: str
    suite_hash: str
    statistics: dict[str, Any]
    gx_version: str = ""

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.success]


# --------------------------------------------------------------------------- the frame


def build_frame(rows: Iterable[Mapping[str, Any]], targets: Mapping[str, Sequence[int]]) -> pd.DataFrame:
    """Rows (claim_id, dataset, source_id, text, label, line) plus the derived check columns."""
    df = pd.DataFrame(list(rows), columns=["claim_id", "dataset", "source_id", "text", "label", "line"],
                      dtype=object)
    df["row_key"] = np.arange(len(df), dtype=np.int64)
    df["uid"] = df["dataset"].astype(str) + ":" + df["source_id"].astype(str)
    norm = df["text"].map(lambda t: normalise_text(t) if isinstance(t, str) else "")
    df["label_num"] = pd.to_numeric(df["label"].map(lambda v: v if v in (0, 1) else None), errors="coerce")
    valid = norm.ne("") & df["label_num"].notna()
    n_labels = df[valid].groupby(norm[valid])["label_num"].nunique()
    df["labels_for_text"] = norm.map(n_labels).fillna(1).astype(np.int64)
    df["shared_with_targets"] = norm.map(lambda t: bool(t) and t in targets).astype(bool)
    df.attrs["targets_hash"] = _hash(sorted(int(i) for ids in targets.values() for i in ids))
    return df


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


# --------------------------------------------------------------------------- the suite


@cache
def _context() -> Any:
    """One ephemeral GX context per process (GX is slow to import and to set up)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    import great_expectations as gx  # start-up: GX takes seconds to import; only when a suite runs
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    asset = ctx.data_sources.add_pandas("checkworthy").add_dataframe_asset("label_set")
    return ctx, asset.add_batch_definition_whole_dataframe("whole")


def _expectations(bounds: Bounds) -> list[tuple[str, Any]]:
    import great_expectations.expectations as gxe  # start-up: as above

    return [
        ("label_in_0_1", gxe.ExpectColumnValuesToBeInSet(column="label", value_set=[0, 1])),
        ("text_present", gxe.ExpectColumnValuesToNotBeNull(column="text")),
        ("text_not_blank", gxe.ExpectColumnValuesToNotMatchRegex(column="text", regex=r"^\s*$")),
        ("ids_unique", gxe.ExpectColumnValuesToBeUnique(column="uid")),
        ("one_label_per_text", gxe.ExpectColumnValuesToBeBetween(column="labels_for_text", min_value=0,
                                                                  max_value=1)),
        ("no_leakage", gxe.ExpectColumnValuesToBeInSet(column="shared_with_targets", value_set=[False])),
        ("class_balance", gxe.ExpectColumnMeanToBeBetween(
            column="label_num", min_value=bounds.min_positive_rate, max_value=bounds.max_positive_rate)),
        ("row_count", gxe.ExpectTableRowCountToBeBetween(
            min_value=bounds.min_rows, max_value=bounds.max_rows)),
    ]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def run_suite(frame: pd.DataFrame, bounds: Bounds) -> SuiteOutcome:
    """Run every expectation on the frame; nothing is written."""
    import great_expectations as gx  # start-up: as above

    suite_hash = _hash({"suite": SUITE_NAME, "version": SUITE_VERSION, "bounds": asdict(bounds)})
    ctx, batch_def = _context()
    named = _expectations(bounds)
    suite = gx.ExpectationSuite(name=f"{SUITE_NAME}-{suite_hash[:12]}", expectations=[e for _, e in named])
    suite = ctx.suites.add_or_update(suite)
    by_type = {}
    for check, exp in named:
        by_type[(exp.expectation_type, getattr(exp, "column", None))] = check
    result = batch_def.get_batch(batch_parameters={"dataframe": frame}).validate(
        suite, result_format={"result_format": "COMPLETE", "unexpected_index_column_names": ["row_key"]})
    keys = frame[["claim_id", "dataset", "source_id", "line"]].to_dict("records")
    checks = []
    for r in result.results:
        cfg = r.expectation_config
        column = cfg.kwargs.get("column")
        check = by_type[(cfg.type, column)]
        res = r.result or {}
        bad = [i["row_key"] for i in res.get("unexpected_index_list") or [] if isinstance(i, dict)]
        rows = [_jsonable({"row": int(k)} | keys[int(k)]) for k in bad]
        checks.append(CheckResult(
            check, cfg.type, bool(r.success), column,
            _jsonable({k: v for k, v in cfg.kwargs.items() if k not in ("column", "batch_id")}),
            _jsonable(res.get("observed_value")), res.get("unexpected_count"), rows))
    checks.sort(key=lambda c: CHECKS.index(c.check_name))
    subject = _hash(sorted(frame[["uid", "text", "label", "line"]].astype(str).itertuples(index=False)))
    targets = frame.attrs.get("targets_hash") or _hash([])
    return SuiteOutcome(bool(result.success), checks, len(frame), subject, targets, suite_hash,
                        _jsonable(dict(result.statistics)), gx.__version__)
