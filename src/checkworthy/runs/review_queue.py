"""The review queue's two ends: a finished calibration queues the claims its decide-or-review rule
sends to a person; ``checkworthy review export`` writes the top of the open queue as Label Studio
tasks or CSV, and ``checkworthy review import`` (or Label Studio's webhook, through the ML
backend) turns the answers into a label file that goes through ``labels add`` (which closes the
entries it answers).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sqlalchemy import Connection

from checkworthy.data import label_studio
from checkworthy.data.label_files import REQUIRED
from checkworthy.data.outputs import atomic_text
from checkworthy.method.coverage import coverage_order
from checkworthy.method.drift import CALM
from checkworthy.method.selective import ReviewRule, review_priority
from checkworthy.store import review_queue as queue
from checkworthy.store.calibration_runs import run_embed_models
from checkworthy.store.embeddings import claim_embeddings
from checkworthy.store.languages import claim_languages

#: the CSV export's columns: a label file's (fill ``label``) and what the reviewer should know
CSV_COLUMNS = (*REQUIRED, "text", "theta", "priority", "reason", "run_id", "target", "language")


def queue_run(conn: Connection, run_id: int, review: Mapping[str, Any], claim_ids: Sequence[int],
              theta: ArrayLike, status: ArrayLike | None = None) -> int:
    """Append the run's claims (its results' ids and theta) that its rule (``params->'review'``)
    sends to a person, and those drift holds back (``status``: :func:`checkworthy.method.drift.
    drift_status`), with their priority, reason and cause; return how many. Called while the run
    is running."""
    rule = ReviewRule.from_dict(review)
    theta = np.asarray(theta, dtype=float)
    drift = np.full(theta.shape, CALM) if status is None else np.asarray(status)
    flagged = review_flags(review, theta, drift)
    ids = [int(c) for c, f in zip(claim_ids, flagged) if f]
    theta, drift = theta[flagged], drift[flagged]
    return queue.insert_entries(conn, run_id, ids, theta, review_priority(theta, rule.threshold),
                                rule.reasons(theta, drift), np.where(drift != CALM, "drift", "rule").tolist())


def review_flags(review: Mapping[str, Any], theta: ArrayLike, status: ArrayLike) -> NDArray[np.bool_]:
    """Which claims (``theta``, with their drift ``status``) the rule (``params->'review'``) sends
    to a person, rule and drift together: the claims :func:`queue_run` queues."""
    return cast(NDArray[np.bool_], ReviewRule.from_dict(review).review(
        np.asarray(theta, dtype=float), np.asarray(status)) == 1)


def export_rows(conn: Connection, limit: int | None, target: str | None, order: str = "uncertain",
                seed: int = 0) -> list[Mapping[str, Any]]:
    """:func:`entries_to_export`, each with its claim's stored ``language`` (None where none is)."""
    rows = entries_to_export(conn, limit, target, order, seed)
    langs = claim_languages(conn, [int(r["claim_id"]) for r in rows])
    return [dict(r) | {"language": langs.get(int(r["claim_id"]))} for r in rows]


def entries_to_export(conn: Connection, limit: int | None, target: str | None, order: str = "uncertain",
                      seed: int = 0) -> list[Mapping[str, Any]]:
    """What to label next. ``uncertain``: the top of the open queue, the decisions a person must
    take, most uncertain first. ``random``: a uniform, seeded sample of the unlabelled claims the
    calibrations decide; labels exchangeable with the stream, the ones that let the calibration
    and its decide-or-review rule improve (``bench/bench_review_queue.py``). ``coverage``: the
    open queue with the claims queued for drift (beyond the labelled set's radius) first, in
    greedy k-center order over their stored embeddings (seeded), so the first labels spread over
    the new region, then the others most uncertain first (``bench/bench_cold_start.py``). An
    unknown ``target`` is refused."""
    if order == "random":
        known = queue.calibrated_targets(conn)
        if target is not None and target not in known:
            raise ValueError(f"--target {target!r}: no calibration in force "
                             f"(targets: {', '.join(known) or 'none'})")
        return [dict(r) | {"priority": float(review_priority([r["theta"]], r["threshold"])[0]),
                           "reason": f"drawn at random from the unlabelled claims of {r['target']} "
                                     f"(seed {seed}): a label exchangeable with the stream, for calibration"}
                for r in queue.unlabelled_sample(conn, limit, target, seed)]
    if target is not None and target not in (queued := queue.targets_with_entries(conn)):
        known = ", ".join(queued) or "none yet"
        raise ValueError(f"--target {target!r}: no claim of it was ever queued (targets: {known})")
    if order == "uncertain":
        return queue.open_entries(conn, limit, target)
    rows = queue.open_entries(conn, None, target)
    ids = [r["claim_id"] for r in rows]
    drift = queue.open_drift_claims(conn, ids)
    beyond = np.array([c in drift for c in ids], dtype=bool)
    vectors = (space_vectors(conn, ids, [r["run_id"] for r in rows]) if beyond.any()
               else np.zeros((len(ids), 1)))
    picked = coverage_order(vectors, beyond, [r["priority"] for r in rows], seed)
    return [rows[i] for i in picked[:limit]]


def space_vectors(conn: Connection, claim_ids: Sequence[int], run_ids: Sequence[int]) -> NDArray[np.float64]:
    """Each claim's vector in the space of the run that queued it (``run_ids``, row by row). Claims
    of runs in different spaces sit in orthogonal blocks (one block of columns per model, zeros
    elsewhere): vectors of two models are not comparable, so each space is a region of its own,
    at cosine distance 1 from the others."""
    spaces = run_embed_models(conn, run_ids)
    models = sorted({spaces[int(r)] for r in run_ids})
    blocks = []
    for model in models:
        rows = [i for i, r in enumerate(run_ids) if spaces[int(r)] == model]
        blocks.append((rows, claim_embeddings(conn, [claim_ids[i] for i in rows], model)))
    out = np.zeros((len(claim_ids), sum(v.shape[1] for _, v in blocks)))
    col = 0
    for rows, v in blocks:
        out[rows, col: col + v.shape[1]] = v
        col += v.shape[1]
    return out


def write_export(rows: Sequence[Mapping[str, Any]], out: Path, fmt: str) -> None:
    """Write the entries as Label Studio tasks (JSON) or as a CSV to fill in (``label`` empty)."""
    with atomic_text(out) as fh:
        if fmt == "label-studio":
            fh.write(json.dumps(label_studio.tasks(rows), indent=1, ensure_ascii=False) + "\n")
        else:
            w = csv.DictWriter(fh, CSV_COLUMNS)
            w.writeheader()
            for r in rows:
                w.writerow({"id": r["source_id"], "dataset": r["dataset"], "label": "", "text": r["text"],
                            "theta": f"{r['theta']:.6f}", "priority": f"{r['priority']:.6f}",
                            "reason": r["reason"], "run_id": r["run_id"], "target": r["target"],
                            "language": r.get("language") or ""})


def answers_as_label_file(path: Path, out: Path) -> list[label_studio.Answer]:
    """Write the answers in ``path`` (a Label Studio JSON export, or a CSV with ``id,dataset,label``)
    as a label file at ``out`` (line ``i + 2`` holds answer ``i``); return the answers. Bad answers
    raise :class:`~checkworthy.errors.DataError` naming the file, task or line, and field."""
    answers = label_studio.read_answers(path)
    write_label_file(answers, out)
    return answers


def write_label_file(answers: Sequence[label_studio.Answer], out: Path) -> None:
    """The answers as a label file for ``labels add`` (``id,dataset,label,source``, in order): the
    same answers give the same bytes, so the same update."""
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow((*REQUIRED, "source"))
        w.writerows((a.id, a.dataset, a.label, a.source) for a in answers)
