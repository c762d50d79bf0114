"""Score a CSV of claims ``id,text`` with any scorer (``checkworthy score``) and write
``id,score,status,raw`` (plus ``score_<kind>,status_<kind>`` for each further score kind).

The texts and scores go through the same store and :func:`checkworthy.runs.scoring.score_missing`
as the main job, so the cache key (model, prompt version, parameter hash, kind) is the same: a
claim scored by the pipeline is not rescored here and vice versa, and an interrupted run resumes.
"""

from __future__ import annotations

import csv
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from checkworthy.data.outputs import atomic_text
from checkworthy.data.user_csv import id_and_text, read_rows
from checkworthy.errors import OutputUnwritable
from checkworthy.runs.scoring import score_missing
from checkworthy.store import rows as store

#: integer usage fields summed for the cost report (OpenAI and Ollama names)
TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens",
                "prompt_eval_count", "eval_count")


def read_input(path: Path) -> list[tuple[str, str]]:
    """``(id, text)`` rows of a CSV with ``id`` and ``text`` columns (others ignored).

    Raises :class:`DataError` (file, line, field) on a missing column, empty or duplicate id,
    empty text, NUL or non-UTF-8 bytes, malformed CSV (see :mod:`checkworthy.data.user_csv`).
    """
    name = str(path)
    _, records = read_rows(path, ["id", "text"])
    rows: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for line, rec in records:
        rows.append(id_and_text(name, line, rec, seen))
    return rows


@dataclass
class ScoreSummary:
    """What ``score_csv`` did."""

    n_rows: int
    n_texts: int
    n_new: int
    n_reused: int
    kind: str
    statuses: Counter[str] = field(default_factory=Counter)
    tokens: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _fmt(score: float | None) -> str:
    return "" if score is None or not math.isfinite(score) else repr(float(score))


def write_out(out: Path, rows: Sequence[tuple[str, str]], hashes: Sequence[str], kinds: Sequence[str],
              primary: str, preds: dict[tuple[str, str], Any]) -> None:
    """Write OUT atomically: ``id,score,status,raw`` for the primary kind, then the other kinds."""
    others = [k for k in kinds if k != primary]
    header = ["id", "score", "status", "raw"] + [f"{p}_{k}" for k in others for p in ("score", "status")]
    with atomic_text(out) as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for (cid, _), h in zip(rows, hashes):
            p = preds[(h, primary)]
            line = [cid, _fmt(p.score), p.parse_status, p.raw_output]
            for k in others:
                q = preds[(h, k)]
                line += [_fmt(q.score), q.parse_status]
            writer.writerow(line)


@dataclass(frozen=True)
class ScoreOptions:
    """The score kind written to the score column (None: the model's first) and the texts a stored
    chunk holds. Checked when made."""

    kind: str | None = None
    chunk_size: int = 64

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {self.chunk_size}")


def score_csv(
    engine: Engine,
    scorer: Any,
    prompt: tuple[str, str, str],
    rows: Sequence[tuple[str, str]],
    out: Path,
    options: ScoreOptions = ScoreOptions(),
    echo: Callable[[str], None] = print,
) -> ScoreSummary:
    """Score ``rows`` (id, text) with ``scorer`` as ``options`` say, store the scores, write ``out``."""
    primary = options.kind or scorer.score_kinds[0]
    if primary not in scorer.score_kinds:
        have = ", ".join(scorer.score_kinds)
        raise ValueError(f"{scorer.spec} has no score kind {primary!r} (it has {have})")
    t0 = time.monotonic()
    scorer.params()  # reaches the model service (if any) before anything is written
    with engine.begin() as conn:
        hashes = store.store_texts(conn, [t for _, t in rows])

    def progress(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - t0, 1e-9)
        echo(f"  scored {done}/{total} texts with {scorer.spec} ({rate:.1f}/s)")

    n_new, n_old, keys = score_missing(engine, scorer, hashes, prompt, chunk_size=options.chunk_size,
                                       progress=progress)
    with engine.connect() as conn:
        preds = store.stored_predictions(conn, keys, hashes)
    missing = [h for h in hashes for k in scorer.score_kinds if (h, k) not in preds]
    if missing:
        raise RuntimeError(f"{len(missing)} predictions are missing from the store after scoring")
    try:
        write_out(out, rows, hashes, scorer.score_kinds, primary, preds)
    except OutputUnwritable as exc:
        raise OutputUnwritable(out, exc.cause, "the scores are stored: the same command again writes "
                               "them without scoring") from exc.cause
    summary = ScoreSummary(len(rows), len(set(hashes)), n_new, n_old, primary,
                           seconds=time.monotonic() - t0)
    summary.statuses.update(preds[(h, primary)].parse_status for h in hashes)
    for h in set(hashes):
        usage = preds[(h, primary)].usage or {}
        for name in TOKEN_FIELDS:
            if isinstance(usage.get(name), int):
                summary.tokens[name] = summary.tokens.get(name, 0) + usage[name]
    return summary
