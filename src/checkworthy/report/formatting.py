"""How the report writes numbers, times, names and CSV files, the same way in every table."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from datetime import UTC
from typing import Any

#: the three methods of every run, in column order, with their display names
METHODS = (("baseline", "Baseline"), ("knn", "KNN"), ("nnppi", "NN-PPI"))


def missing(v: float | None) -> bool:
    """No value: None or NaN."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt(v: float | None, nd: int = 3) -> str:
    """A number with ``nd`` decimals ("—" when missing, never "-0.000")."""
    if missing(v):
        return "—"
    s = f"{v:.{nd}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s


def diff(ours: float | None, paper: float | None) -> str:
    """ours − paper, signed, three decimals ("—" when either is missing)."""
    if missing(ours) or missing(paper):
        return "—"
    s = f"{ours - paper:+.3f}"
    return "+0.000" if s == "-0.000" else s


def ts(value: Any) -> str:
    """A stored timestamp in UTC, to the second."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def slug(value: str) -> str:
    """Lower-case letters and digits joined by hyphens (file names, anchors, artifact keys)."""
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")


def short(s: str, n: int) -> str:
    """Whitespace collapsed, cut to ``n`` characters with an ellipsis."""
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1].rstrip() + "…"


def csv_text(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A CSV file's text: missing values empty, floats at full precision."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow(["" if missing(v) else repr(float(v)) if isinstance(v, float) else v for v in row])
    return buf.getvalue()
