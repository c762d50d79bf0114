"""Bring your own scores: calibrate a CSV of scored claims against a CSV of labelled ones.

``L`` has columns ``id,text,score,label``; ``U`` has ``id,text,score`` and may have ``label``.
:mod:`checkworthy.runs.predict` reads the same files without the score column and shares the
rest of the path (store, run, output, metrics).
Both files are validated completely before anything is written, and every problem names
the file, the line (the header is line 1) and the field. The claims then go through the same
store, embeddings and SQL kNN as the main job.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine

from checkworthy.data.hashing import sha256_file
from checkworthy.data.outputs import atomic_text
from checkworthy.data.user_csv import id_and_text, parse_decimal, read_rows
from checkworthy.errors import DataError, OutputUnwritable, UsageError
from checkworthy.method import metrics
from checkworthy.method.decision_cut import PriorDecision
from checkworthy.method.drift import Drift
from checkworthy.runs.calibration import queued_claims
from checkworthy.runs.calibration_run import RunOutcome, run_or_reuse
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.scorers.base import OK, Score
from checkworthy.scorers.embedders import MINILM
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_results, load_run
from checkworthy.store.languages import claim_languages, ensure_languages
from checkworthy.store.lineages import ensure_head, record_space, register_target
from checkworthy.store.review_queue import entries_of_run
from checkworthy.store.run_spec import RunContext, RunMethods, RunRecord, RunSpec

OUT_COLUMNS = ["id", "score", "theta", "ci_low", "ci_high", "decision", "knn_mean", "neighbors", "review",
               "language"]


@dataclass(frozen=True)
class Row:
    """One validated input row."""

    line: int
    id: str
    text: str
    score: float | None
    label: int | None


def read_scored_csv(path: Path, label_required: bool, scored: bool = True) -> list[Row]:
    """Read and validate a claims CSV (with a score column unless ``scored`` is False); raise
    :class:`DataError` at the first problem."""
    required = ["id", "text"] + (["score"] if scored else []) + (["label"] if label_required else [])
    header, records = read_rows(path, required, allowed=["label"])
    seen: dict[str, int] = {}
    return [_row(str(path), line, rec, seen, "label" in header, scored) for line, rec in records]


def _row(name: str, line: int, rec: dict[str, str], seen: dict[str, int], has_label: bool,
         scored: bool) -> Row:
    cid, txt = id_and_text(name, line, rec, seen)
    score = parse_decimal(rec["score"]) if scored else None
    if scored and score is None:
        raise DataError(name, line, "score", f"not a plain decimal number: {rec['score']!r}")
    if score is not None and (not math.isfinite(score) or not 0.0 <= score <= 1.0):
        raise DataError(name, line, "score", f"must be in [0, 1], got {rec['score']!r}")
    label = None
    if has_label:
        value = rec["label"].strip()
        if value not in ("0", "1"):
            raise DataError(name, line, "label", f"must be 0 or 1, got {rec['label']!r}")
        label = int(value)
    return Row(line, cid, txt, score, label)


def read_scored_files(labelled: Path, unlabelled: Path, k: int) -> tuple[list[Row], list[Row]]:
    """``calibrate``'s two files, each validated and then together (ids, scores, k); raise
    :class:`DataError` at the first problem."""
    lab = read_scored_csv(labelled, label_required=True)
    unl = read_scored_csv(unlabelled, label_required=False)
    check_distinct_ids(labelled, lab, unlabelled, unl)
    _check_consistent_scores([(labelled, lab), (unlabelled, unl)])
    check_k(labelled, lab, k)
    return lab, unl


def check_distinct_ids(labelled: Path, lab: list[Row], unlabelled: Path, unl: list[Row]) -> None:
    """An id names one claim: the output's ids and neighbour lists name L's and U's claims by id,
    so an id in both files would mix them up (the same text under two ids is allowed)."""
    lines = {r.id: r.line for r in lab}
    for r in unl:
        if r.id in lines:
            raise DataError(unlabelled, r.line, "id", f"{r.id!r} is also the id of {labelled} row "
                            f"{lines[r.id]}; give the two files' claims different ids")


def _check_consistent_scores(files: Sequence[tuple[Path, list[Row]]]) -> None:
    """The same text given two different scores is contradictory input."""
    first: dict[str, tuple[str, int, float | None]] = {}
    for path, rows in files:
        for r in rows:
            prev = first.setdefault(r.text, (str(path), r.line, r.score))
            if prev[2] != r.score:
                raise DataError(path, r.line, "score",
                                f"the same text has score {prev[2]} at {prev[0]} line {prev[1]}")


@dataclass
class CalibrateOutcome:
    """What ``checkworthy calibrate`` produced."""

    run_id: int
    n_rows: int
    metrics: dict[str, dict[str, float]] | None
    #: U's rows whose text is also in L (line numbers): each one's nearest labelled neighbour is
    #: its own labelled copy, at distance 0; kept, as a lookup of a label a person already gave
    in_labelled: list[int] = field(default_factory=list)
    #: the batch's share of check-worthy claims (:mod:`checkworthy.method.prevalence`), when the
    #: run computed it
    prevalence: dict[str, Any] | None = None
    #: what the run decided at when not at its own threshold for L's prior
    prior: PriorDecision | None = None
    #: what the ``auto`` correction chose on L, with each candidate's cross-validated figure
    auto_choice: dict[str, Any] | None = None
    #: the decide-or-review rule chosen on L (:mod:`checkworthy.method.selective`) and how many of
    #: U's claims go to a person, of them how many for drift (the batch drifted from L)
    review: dict[str, Any] | None = None
    n_review: int | None = None
    n_drift: int | None = None
    #: the batch's drift figure (:mod:`checkworthy.method.drift`)
    drift: Drift | None = None
    #: NN-PPI's metrics on U's claims of each language, when U has labels in more than one
    by_language: dict[str, dict[str, float]] | None = None


def calibrate_files(engine: Engine, labelled: Path, unlabelled: Path, out: Path, methods: RunMethods,
                    model: str = "file:imported", lineage: str | None = None) -> CalibrateOutcome:
    """Validate both files, store them (L in ``lineage``, default :func:`labelled_lineage`),
    calibrate U against L in SQL by ``methods`` (their defaults: the paper's NN-PPI) and write
    ``out``."""
    lab, unl = read_scored_files(labelled, unlabelled, methods.k)
    files = store_files(engine, UserFile.of(labelled), lab, UserFile.of(unlabelled), unl, lineage)
    with engine.begin() as conn:
        model_id = store.ensure_model(conn, model, "file")
        store.insert_predictions(
            conn, model_id, "none", files.params,
            [(store.sha256_text(r.text), {"imported": Score(r.score, OK, repr(r.score))})
             for r in lab + unl],
        )
    key = store.ScoreKey(model_id, "none", store.params_hash(files.params), "imported")
    return calibrate_stored(engine, files, key, methods, out)


def check_k(labelled: Path, lab: list[Row], k: int) -> None:
    """k neighbours need at least k labelled rows."""
    if k > len(lab):
        raise DataError(labelled, None, None, f"k={k} exceeds the {len(lab)} labelled rows")


@dataclass(frozen=True)
class StoredFiles:
    """L and U stored as claims (with their labels, embeddings and L's label set)."""

    lab: list[Row]
    unl: list[Row]
    params: dict[str, str]
    u_ids: list[int]
    label_set_id: int
    target: str
    #: the sha256 of each text of L then U, in file order (the store's key of a text)
    text_hashes: list[str]
    #: the lineage's embedding space: the model every text was embedded with, and the run's
    embed_model: str = MINILM


@dataclass(frozen=True)
class UserFile:
    """A user's input file and its content's sha256, read once: the digest names the dataset its
    claims are stored as, L's lineage and the run's inputs, so each is computed from one read."""

    path: Path
    sha256: str

    @classmethod
    def of(cls, path: Path) -> UserFile:
        return cls(path, sha256_file(path))

    @property
    def dataset(self) -> str:
        """The dataset the file is stored as: named by its hash, so the same file is the same dataset."""
        return f"upload:{self.sha256[:16]}"

    @property
    def lineage(self) -> str:
        """The lineage (label-set name) of a labelled file: ``predict``, ``calibrate`` and ``adapt``
        of the same file share it, and so its models."""
        return f"{self.dataset}:labeled"


def upload_dataset(path: Path) -> str:
    """The dataset a user's file is stored as (:attr:`UserFile.dataset`)."""
    return UserFile.of(path).dataset


def labelled_lineage(labelled: Path) -> str:
    """The lineage of a labelled file (:attr:`UserFile.lineage`)."""
    return UserFile.of(labelled).lineage


def store_labelled(conn: Connection, labelled: Path | UserFile, lab: list[Row],
                   lineage: str | None = None) -> int:
    """Store a labelled file's claims and labels, freeze them as a label set of ``lineage``
    (default: the file's own, :attr:`UserFile.lineage`) and version the lineage with it
    (:func:`checkworthy.store.lineages.ensure_head`); return the label set in force."""
    file = labelled if isinstance(labelled, UserFile) else UserFile.of(labelled)
    l_ids = store.store_claims_with_labels(
        conn, [store.NewClaim(file.dataset, "labeled", r.id, r.text, r.label) for r in lab],
        f"file:{file.path}")
    return ensure_head(conn, store.create_label_set(conn, lineage or file.lineage, l_ids))


def store_files(
    engine: Engine, labelled: UserFile, lab: list[Row], unlabelled: UserFile, unl: list[Row],
    lineage: str | None = None, embed_model: str | None = None,
) -> StoredFiles:
    """Store both files' claims and labels (idempotent: datasets are named by the files' hashes),
    version ``lineage`` (default: L's own) with L (:func:`store_labelled`), embed their texts in
    the lineage's space (``embed_model`` for a new lineage, default MiniLM; a lineage's recorded
    space otherwise: an ``embed_model`` other than it is refused and nothing is stored) and
    register U as a target of the lineage whose labels join it (the team's own batch), in one
    transaction. A named lineage's target names it too: a run is keyed by its labels' content, not
    their lineage, so the run of the same files under another lineage is not reused for it."""
    params = {"labeled_sha256": labelled.sha256, "unlabeled_sha256": unlabelled.sha256}
    ds_u, name = unlabelled.dataset, lineage or labelled.lineage
    with engine.begin() as conn:
        ls = store_labelled(conn, labelled, lab, lineage)
        space = record_space(conn, name, embed_model or MINILM)
        if embed_model not in (None, space):
            raise UsageError(f"--embedding {embed_model}: lineage {name} is in {space}; calibrating it in "
                             f"{embed_model} would mix embedding spaces")
        u_ids = store.store_claims_with_labels(
            conn, [store.NewClaim(ds_u, "unlabeled", r.id, r.text, r.label) for r in unl],
            f"file:{unlabelled.path}")
        hashes = [store.sha256_text(r.text) for r in lab + unl]
        ensure_embeddings(conn, hashes, space)
        ensure_languages(conn, hashes)
        target = f"{ds_u}:unlabeled" if lineage is None else f"{lineage}:{ds_u}:unlabeled"
        register_target(conn, target, name, u_ids, held_out=False)
    return StoredFiles(lab, unl, params, u_ids, ls, target, hashes, space)


@dataclass(frozen=True)
class ResultRow:
    """One claim's result as OUT and the metrics read it (a ``calibrated_results`` row's values)."""

    score: float
    theta: float
    ci_low: float
    ci_high: float
    decision: bool
    knn_mean: float
    neighbour_ids: tuple[int, ...]


@dataclass(frozen=True)
class RunResults:
    """A run's results by claim id, its record, and the claims it queued for a person, each with
    its cause (``drift`` or ``rule``)."""

    run_id: int
    rows: dict[int, ResultRow]
    record: RunRecord
    queued: dict[int, str]


def run_results(conn: Connection, run: RunOutcome, langs: Mapping[int, str]) -> RunResults:
    """The run's results and the claims it queued: the outcome it computed and stored (``langs``:
    each claim's stored language, which drift's review flags read), or a reused run's, read from
    the store. The record is the stored one either way: what is printed of it (the ``auto``
    figures, the drift figure's languages) follows the order the store keeps its JSON in."""
    record = RunRecord.of(load_run(conn, run.run_id))
    out = run.computed
    if out is None or out.neighbours is None:
        rows = {int(r["claim_id"]): ResultRow(r["score"], r["theta"], r["ci_low"], r["ci_high"],
                                              r["decision"], r["knn_mean"], tuple(r["neighbour_ids"]))
                for r in load_results(conn, run.run_id)}
        return RunResults(run.run_id, rows, record,
                          {int(e["claim_id"]): e["cause"] for e in entries_of_run(conn, run.run_id)})
    res, nids = out.result, out.neighbours.neighbour_ids
    rows = {int(c): ResultRow(float(res.score[i]), float(res.theta[i]), float(res.ci_low[i]),
                              float(res.ci_high[i]), bool(res.decision[i]), float(res.knn_mean[i]),
                              tuple(int(n) for n in nids[i]))
            for i, c in enumerate(out.claim_ids)}
    return RunResults(run.run_id, rows, record, queued_claims(out, langs))


def calibrate_stored(engine: Engine, files: StoredFiles, key: store.ScoreKey, methods: RunMethods,
                     out: Path) -> CalibrateOutcome:
    """Calibrate the stored U against L under ``key`` by ``methods`` in the lineage's embedding
    space, write ``out``, and measure if U has labels. A fresh run's results are the outcome it
    computed; a reused run's, the store's."""
    unl, u_ids = files.unl, files.u_ids
    methods = replace(methods, embed_model=files.embed_model)
    labelled_texts = {r.text for r in files.lab}
    in_labelled = [r.line for r in unl if r.text in labelled_texts]
    spec = RunSpec.of(files.target, u_ids, files.label_set_id, key, methods)
    run = run_or_reuse(engine, spec, RunContext(extra={"n_unlabeled_in_labeled": len(in_labelled),
                                                       "inputs": files.params}))
    with engine.connect() as conn:
        stored_langs = claim_languages(conn, u_ids)
        got = run_results(conn, run, stored_langs)
        names = store.claim_source_ids(conn, [n for r in got.rows.values() for n in r.neighbour_ids])
    langs = [stored_langs.get(i, "") for i in u_ids]
    record = got.record
    rule = record.review or {}
    flags = {cid: int(cid in got.queued) for cid in got.rows} if rule else {}
    try:
        _write_out(out, unl, u_ids, got.rows, names, flags, langs)
    except OutputUnwritable as exc:
        raise OutputUnwritable(out, exc.cause, f"run {run.run_id} is stored: the same command again "
                               "writes it without recomputing") from exc.cause
    measured, by_language = _measure(unl, [got.rows.get(i) for i in u_ids], methods.threshold, langs)
    return CalibrateOutcome(run.run_id, len(unl), measured, in_labelled, record.prevalence,
                            record.prior, record.auto_choice, rule or None,
                            sum(flags.values()) if flags else None,
                            sum(c == "drift" for c in got.queued.values()) if flags else None,
                            record.drift, by_language)


def _measure(unl: list[Row], found: list[ResultRow | None], threshold: float, langs: list[str]
             ) -> tuple[dict[str, dict[str, float]] | None, dict[str, dict[str, float]] | None]:
    """The baseline's, kNN's and NN-PPI's metrics on U (``found``: each row's result) and NN-PPI's
    by language, when every row of U has a label and a result; else None for both."""
    res = [r for r in found if r is not None]
    if not all(r.label is not None for r in unl) or len(res) < len(found):
        return None, None
    y = np.array([r.label for r in unl])
    got = {
        "baseline": metrics.classification_report(y, [int(r.score >= threshold) for r in res]),
        "knn": metrics.classification_report(y, [int(r.knn_mean >= threshold) for r in res]),
        "nnppi": metrics.classification_report(y, [int(r.decision) for r in res]),
    }
    got["nnppi"].update({f"coverage_{c}": v for c, v in metrics.interval_coverage(
        y, [r.ci_low for r in res], [r.ci_high for r in res]).items()})
    got["baseline"]["roc_auc"] = metrics.roc_auc(y, [r.score for r in res])
    got["nnppi"]["roc_auc"] = metrics.roc_auc(y, [r.theta for r in res])
    got["nnppi"]["share_positive"] = float(y.mean())
    return got, metrics_by_language(y, [int(r.decision) for r in res], langs)


def metrics_by_language(y: np.ndarray, decisions: list[int], langs: list[str]
                        ) -> dict[str, dict[str, float]] | None:
    """NN-PPI's decisions scored on each language's claims (``langs``: each claim's, in the order
    of ``y``), with each language's claim count; None when U is in one language only."""
    if len(set(langs)) < 2:
        return None
    pred, codes = np.asarray(decisions), np.asarray(langs)
    return {lang: metrics.classification_report(y[codes == lang], pred[codes == lang])
            | {"n": float(np.sum(codes == lang))} for lang in sorted(set(langs))}


def _write_out(out: Path, rows: list[Row], ids: list[int], results: Mapping[int, ResultRow],
               names: dict[int, str], review: dict[int, int], langs: list[str]) -> None:
    """One output row per input row of U, in input order (duplicates of a text included), with
    its language (``langs``, in the same order); a claim without a usable score has empty fields."""
    with atomic_text(out) as fh:
        w = csv.writer(fh)
        w.writerow(OUT_COLUMNS)
        for row, cid, lang in zip(rows, ids, langs):
            r = results.get(cid)
            if r is None:  # its score failed to parse: no decision, said by the empty fields
                w.writerow([row.id, "", "", "", "", "", "", "", 1, lang])  # no score: a person decides
                continue
            w.writerow([row.id, f"{r.score:.6g}", f"{r.theta:.6f}", f"{r.ci_low:.6f}",
                        f"{r.ci_high:.6f}", int(r.decision), f"{r.knn_mean:.6f}",
                        ";".join(names[n] for n in r.neighbour_ids), review.get(cid, ""), lang])
