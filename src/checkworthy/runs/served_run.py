"""Calibrate texts submitted over HTTP with a stored run, and store them like any other claim.

A :class:`ServedRun` is a complete calibration run made ready for new texts: its model with the
same prompt version and generation parameters (refused otherwise), its label set, and what the run
fitted on L (the ``auto`` choice it recorded, the correction and predictor, the decide-or-review
rule), fitted once when the server loads the run. A submission

1. stores the texts and their MiniLM vectors, and scores those the model has not scored yet
   (content-addressed: a repeated text is never scored twice);
2. in one transaction stores each text as a claim of the lineage's dataset (split ``api``, source
   id ``api:<request uid>:<position>``, in the target ``<dataset>:incoming``, so a person's label
   for it joins the lineage like any newly arrived claim), finds its neighbours with the same SQL
   kNN, applies the fitted calibration, and appends its results and review-queue entries to the
   served run's open *window* (a run of mode ``served``, parent: the served run), with the
   request's row and its drift figure. When the request's batch drifts from L, the claims drift
   holds back go to a person whatever their theta.

A window records the requests of one served run for ``window_seconds`` (params.yaml ``serving:``,
:data:`checkworthy.config.WINDOW_SECONDS` by default) from its first: a burst of 500 one-text
requests is one run, not 500. It stays 'running' while open, its params holding only what is
fixed when it opens; the first request after it, :meth:`ServedRun.close` (another run served
from now on, or the server shutting down) completes it with its counts, its automated share and
its drift figure over the whole window. Requests (threads, worker processes) take the served run's
window lock in turn, in the transaction that stores them; each server holds a shared hold on the
open window's run key, so that the abandoned-runs check leaves it to them while one lives, and
closes it as abandoned (its rows kept) once none does.

The answer equals what a batch run of the same spec would give those claims (``compute``).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from checkworthy.config import WINDOW_SECONDS, model_name
from checkworthy.data.versioning import git_rev
from checkworthy.method import nnppi
from checkworthy.method.drift import FAR, NEW_LANGUAGE, Drift, drift, drift_status, with_languages
from checkworthy.runs.calibration import (
    CalibrationOutcome,
    batch_neighbours,
    calibrate,
    fit,
    store_rows,
)
from checkworthy.runs.calibration_run import ensure_run_languages
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.runs.recalibration import spec_from_run
from checkworthy.runs.scoring import score_missing
from checkworthy.scorers.base import Scorer
from checkworthy.scorers.registry import PromptInfo, make_scorer, model_options
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import (
    insert_run,
    load_run,
    share_run_key,
    unshare_run_key,
)
from checkworthy.store.embeddings import claim_embeddings
from checkworthy.store.knn import Neighbours
from checkworthy.store.languages import (
    claim_languages,
    ensure_languages,
    label_set_languages,
    languages_of,
)
from checkworthy.store.run_spec import RunContext, RunRecord, run_key
from checkworthy.store.served_runs import (
    complete_window,
    insert_request,
    is_running,
    lineage_dataset,
    lock_windows,
    open_window,
    window_counts,
)

SPLIT = "api"
#: (model spec, params hash, prompt version) -> the scorer giving those scores, with its prompt
ScorerSource = Callable[[str, str, str], tuple[Scorer, PromptInfo]]


def matching_scorer(params: Mapping[str, Any], spec: str, params_hash: str, prompt_version: str,
                    ) -> tuple[Scorer, PromptInfo]:
    """The scorer of ``spec`` configured as params.yaml configures it that gives scores under
    ``params_hash`` and ``prompt_version``: each ``models:`` entry of the spec in turn (its options
    over ``scoring:``), then ``scoring:`` alone. ValueError when none does (the run's scores came
    from settings params.yaml no longer has, or an older guidelines file)."""
    entries = [model_name(e) for e in params.get("models") or [] if e.get("spec") == spec]
    tried = []
    for options in [model_options(params, e) for e in entries] + [dict(params.get("scoring") or {})]:
        scorer, prompt = make_scorer(spec, **options)
        if store.params_hash(scorer.params()) == params_hash and prompt[0] == prompt_version:
            return scorer, prompt
        tried.append(f"{prompt[0]}/{store.params_hash(scorer.params())[:12]}")
    raise ValueError(f"params.yaml configures no {spec} that gives the run's scores (prompt version/"
                     f"parameters {prompt_version}/{params_hash[:12]}; configured: {', '.join(tried)})")


@dataclass(frozen=True)
class Neighbour:
    """A labelled neighbour of a submitted text."""

    claim_id: int
    source_id: str
    distance: float


@dataclass(frozen=True)
class SentenceResult:
    """One submitted text: its claim, the model's score, theta, interval, decision and review flag
    (all None when the model gave no usable score: a person decides)."""

    position: int
    text: str
    claim_id: int
    source_id: str
    score: float | None = None
    theta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    decision: int | None = None
    review: bool = True
    reason: str | None = None
    neighbours: list[Neighbour] = field(default_factory=list)
    #: beyond L's radius in a batch that drifted, or in a language L has none of: a person
    #: decides, whatever theta says
    far: bool = False
    #: its language (ISO 639-1, or ``und``: none detectable; :mod:`checkworthy.data.language`)
    language: str | None = None


@dataclass(frozen=True)
class Submission:
    """What a request stored and answered."""

    request_uid: uuid.UUID
    #: the window's run holding the results (None: no text had a usable score)
    run_id: int | None
    results: list[SentenceResult]
    #: the request's own drift figure (also stored in its ``api_requests`` row)
    drift: Drift | None


class ServedRun:
    """A complete run, loaded and fitted once, that calibrates submitted texts (thread-safe)."""

    def __init__(self, engine: Engine, run_id: int, scorers: ScorerSource,
                 window_seconds: float = WINDOW_SECONDS) -> None:
        """Load run ``run_id``; ``scorers(model spec, params hash, prompt version)`` gives its
        scorer; requests are recorded in windows of ``window_seconds``."""
        self.engine, self.run_id, self.window_seconds = engine, run_id, window_seconds
        self._score_lock = threading.Lock()
        #: the connection holding the shared hold on the open window's run key, and that key
        self._hold_lock = threading.Lock()
        self._holder: Connection | None = None
        self._held: str | None = None
        self._closed = False
        with engine.connect() as conn:
            self.run = dict(load_run(conn, run_id))
            if self.run["status"] != "complete":
                raise ValueError(f"run {run_id} is {self.run['status']}, not complete")
            self.lineage = lineages.label_set_name(conn, self.run["label_set_id"])
            self.dataset = lineage_dataset(conn, self.run["label_set_id"])
            self.model = store.model_spec(conn, self.run["model_id"])
            self.scorer, self.prompt = scorers(self.model, self.run["params_hash"],
                                               self.run["prompt_version"])
            self._check_scorer()
            self.spec = spec_from_run(self.run, self.run["label_set_id"], ())
            #: what the run recorded: its rule, the prior it decided for, what ``auto`` chose
            self.record = RunRecord.of(self.run)
            self.rule = self.record.rule
            self.threshold = self.record.threshold_on_theta(self.run["threshold"])
            #: the run's calibration fitted on L once (the choice ``auto`` recorded, not made again)
            self.fitted = fit(conn, self.spec, self.record.chosen)
        with engine.begin() as conn:
            ensure_run_languages(conn, self.spec)
            #: the languages of L's claims: a submitted claim in another is held back for a person
            self.languages = frozenset(label_set_languages(conn, self.run["label_set_id"]))
        self.code_rev = git_rev()

    def _check_scorer(self) -> None:
        """The scorer must give the run's scores: same model, score kind, prompt, parameters."""
        run, s = self.run, self.scorer
        wrong = []
        if s.spec != self.model:
            wrong.append(f"model {s.spec} (the run's: {self.model})")
        if run["score_kind"] not in s.score_kinds:
            wrong.append(f"score kinds {', '.join(s.score_kinds)} (the run's: {run['score_kind']})")
        if self.prompt[0] != run["prompt_version"]:
            wrong.append(f"prompt version {self.prompt[0]} (the run's: {run['prompt_version']})")
        if store.params_hash(s.params()) != run["params_hash"]:
            wrong.append("generation parameters other than the run's")
        if wrong:
            raise ValueError(f"run {self.run_id} cannot be served with this scorer: " + "; ".join(wrong))

    @property
    def _review(self) -> dict[str, Any] | None:
        """The run's rule as it recorded it (None: it has none), for its windows to record."""
        return self.record.review if self.rule is not None else None

    @property
    def provenance(self) -> dict[str, Any]:
        """Where an answer comes from: the run and its model, prompt, label set and code."""
        r = self.run
        return {"run_id": self.run_id, "lineage": self.lineage, "target": r["target"],
                "label_set_id": r["label_set_id"], "label_set_fingerprint": r["label_set_fingerprint"],
                "model": self.model, "score_kind": r["score_kind"], "prompt_version": r["prompt_version"],
                "params_hash": r["params_hash"], "embed_model": r["embed_model"], "k": r["k"],
                "alpha": r["alpha"], "threshold": self.threshold, "interval": r["interval_method"],
                "correction": self.spec.methods.correction, "run_code_rev": r["code_rev"],
                "code_rev": self.code_rev}

    def calibrate(self, conn: Connection, claim_ids: Sequence[int],
                  ) -> tuple[nnppi.NNPPIResult, Neighbours] | None:
        """The served run's calibration of stored, scored, embedded claims (no writes); None when
        none has a usable score. Rows follow the claims with a score, in claim id order."""
        spec = self.spec
        scores = store.claim_scores(conn, claim_ids, spec.key.model_id, spec.key.prompt_version,
                                    spec.key.params_hash, spec.key.score_kind)
        usable = sorted(i for i in claim_ids if scores.get(i) is not None)
        if not usable:
            return None
        try:
            nb = batch_neighbours(conn, self.fitted, usable)
        except ValueError:
            raise RuntimeError("a submitted text has no embedding") from None
        c = np.array([scores[int(i)] for i in nb.claim_ids], dtype=float)
        emb = claim_embeddings(conn, nb.claim_ids.tolist(), spec.methods.embed_model) \
            if self.fitted.needs_embeddings() else None
        return calibrate(self.fitted, nb, c, emb, self.threshold)

    def calibrate_stored(self, claim_ids: Sequence[int]) -> tuple[nnppi.NNPPIResult, Neighbours] | None:
        """:meth:`calibrate` for stored claims (Label Studio's tasks): their vectors and scores are
        stored first where missing (content-addressed, as for a submission); nothing else is written."""
        with self.engine.begin() as conn:
            hashes = store.claim_text_hashes(conn, claim_ids)
            ensure_embeddings(conn, hashes, self.spec.methods.embed_model)
            ensure_languages(conn, hashes)
        with self._score_lock:
            score_missing(self.engine, self.scorer, hashes, self.prompt)
        with self.engine.connect() as conn:
            return self.calibrate(conn, claim_ids)

    def submit(self, texts: Sequence[str], key_id: int, endpoint: str) -> Submission:
        """Store, score, embed and calibrate ``texts`` (already validated); see the module."""
        hashes = [store.sha256_text(t) for t in texts]
        with self.engine.begin() as conn:
            store.store_texts(conn, list(dict.fromkeys(texts)))
            ensure_embeddings(conn, hashes, self.spec.methods.embed_model)
            ensure_languages(conn, hashes)
        with self._score_lock:  # one model, one batch at a time (the model is not thread-safe)
            score_missing(self.engine, self.scorer, hashes, self.prompt)
        uid = uuid.uuid4()
        with self.engine.begin() as conn:
            claims = [store.NewClaim(self.dataset, SPLIT, f"api:{uid}:{i}", t) for i, t in enumerate(texts)]
            ids = store.upsert_claims(conn, claims)
            lineages.register_target(conn, f"{self.dataset}{lineages.INCOMING}", self.lineage, ids)
            got = self.calibrate(conn, ids)
            langs = claim_languages(conn, ids)
            run_id, figure, row, flags, reasons, names = None, None, {}, None, None, {}
            if got is not None:
                res, nb = got
                row = {int(c): i for i, c in enumerate(nb.claim_ids)}
                claim_langs = [langs.get(int(c)) for c in nb.claim_ids]
                figure = with_languages(drift(self.fitted.pool.loo_nearest, nb.distances[:, 0]),
                                        claim_langs, self.languages)
                status = drift_status(nb.distances[:, 0], figure, claim_langs)
                if self.rule is not None:
                    flags = self.rule.review(res.theta, status) == 1
                    reasons = self.rule.reasons(res.theta, status)
                run_id = self._append(conn, CalibrationOutcome(
                    nb.claim_ids, res, nb.distances[:, 0], RunRecord(review=self._review, drift=figure), nb))
                names = store.claim_source_ids(conn, [int(n) for n in nb.neighbour_ids.ravel()])
            insert_request(conn, uid, key_id, endpoint, self.run_id, run_id, ids, figure)
        if self._closed:  # closed while this request was being stored: its window is closed too
            self.close()
        results = []
        for i, (t, cid, c) in enumerate(zip(texts, ids, claims)):
            j = row.get(cid)  # its row in res and nb (None: no usable score, so no row)
            if j is None:
                results.append(SentenceResult(i, t, cid, c.source_id, language=langs.get(cid),
                                              reason="no usable score from the model: a person decides"))
                continue
            results.append(SentenceResult(
                i, t, cid, c.source_id, score=float(res.score[j]), theta=float(res.theta[j]),
                ci_low=float(res.ci_low[j]), ci_high=float(res.ci_high[j]), decision=int(res.decision[j]),
                review=bool(flags[j]) if flags is not None else False,
                reason=reasons[j] if reasons is not None else None,
                neighbours=[Neighbour(int(n), names[int(n)], float(d))
                            for n, d in zip(nb.neighbour_ids[j], nb.distances[j])],
                far=bool(status[j] in (FAR, NEW_LANGUAGE)), language=langs.get(cid)))
        return Submission(uid, run_id, results, figure)

    def _append(self, conn: Connection, out: CalibrationOutcome) -> int:
        """Append a request's outcome (its results and the queue entries of the run's rule and its
        drift figure) to the open window's run, which the first request after the window completes
        before opening the next; return that run's id."""
        lock_windows(conn, self.run_id)
        run_id = self._window(conn)
        store_rows(conn, run_id, out)
        return run_id

    def _window(self, conn: Connection) -> int:
        """The open window's run, or a new one when none is open or its time is over (then it is
        completed first); called holding the window lock."""
        w = open_window(conn, self.run_id, self.window_seconds)
        if w is not None and not w.over:
            self._hold(w.run_key)  # before reading its status again: then nobody abandons it
            if is_running(conn, w.run_id):
                return w.run_id
        elif w is not None:
            self._complete(conn, w.run_id)
        spec = replace(self.spec, target=f"api:window:{uuid.uuid4()}", claim_ids=())
        fp = self.run["label_set_fingerprint"]
        key = run_key(spec, fp)
        self._hold(key)
        record = RunRecord(correction=spec.methods.correction, review=self._review, extra={
            "served_run_id": self.run_id, "window_seconds": self.window_seconds})
        return insert_run(conn, spec, key, fp, record.to_json(), RunContext(code_rev=self.code_rev),
                          self.run_id, "served")

    def _complete(self, conn: Connection, run_id: int) -> None:
        """Complete a window's run with what it holds: its requests, claims and results, the
        automated share of its results and its drift figure over all of them, naming its claims in
        languages L has none of as each request's figure does (each request's own figure is in its
        ``api_requests`` row)."""
        got = window_counts(conn, run_id)
        nearest = np.asarray(got.nearest, dtype=float)
        review = self._review
        if review is not None:
            review = dict(review) | {"automated_share": 1 - got.n_queued / len(nearest)}
        figure = with_languages(drift(self.fitted.pool.loo_nearest, nearest),
                                languages_of(conn, got.claim_ids), self.languages)
        record = RunRecord(
            n_claims=got.n_claims, n_calibrated=len(nearest), n_without_score=got.n_claims - len(nearest),
            drift=figure, review=review, extra={"n_requests": got.n_requests})
        complete_window(conn, run_id, record.to_json())

    def _hold(self, key: str) -> None:
        """Hold the shared hold on run key ``key`` (on a connection of this object's own), and let
        go of the one held before: a live server's open window is never taken for abandoned. A
        connection the database dropped is replaced."""
        with self._hold_lock:
            if self._held == key:
                return
            if self._holder is None or self._holder.invalidated or self._holder.closed:
                self._holder, self._held = self.engine.connect(), None
            try:
                share_run_key(self._holder, key)
            except DBAPIError:
                self._holder.invalidate()  # its session is gone, and every hold with it
                self._holder, self._held = self.engine.connect(), None
                share_run_key(self._holder, key)
            if self._held is not None:
                unshare_run_key(self._holder, self._held)
            self._held = key

    def close(self) -> None:
        """Complete the open window (the server shuts down, or serves another run from now on)
        and let go of its hold; a request still being stored closes its window when it is."""
        self._closed = True
        with self.engine.begin() as conn:
            lock_windows(conn, self.run_id)
            w = open_window(conn, self.run_id, self.window_seconds)
            if w is not None:
                self._complete(conn, w.run_id)
        with self._hold_lock:
            if self._holder is not None:
                self._holder.invalidate()  # its session ends, and its hold with it
            self._holder, self._held = None, None
