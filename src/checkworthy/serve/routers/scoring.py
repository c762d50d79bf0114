"""Score submitted texts: one text, ClaimBuster's text in the path, a batch of sentences, a
paragraph split into sentences. Each answer is calibrated with the run in force, counted in the
metrics, and a drifting batch announces its drift (:class:`~checkworthy.serve.ports.EventSink`).

Annotations are evaluated (no ``from __future__ import annotations``): FastAPI reads the route
signatures.
"""

from typing import Any

from fastapi import APIRouter

from checkworthy.data.sentences import split_sentences
from checkworthy.report.drift import drift_line
from checkworthy.runs.served_run import ServedRun, Submission
from checkworthy.serve.inputs import check_param, check_texts
from checkworthy.serve.keys import ScorerKey
from checkworthy.serve.refusals import ApiError
from checkworthy.serve.schemas import ERRORS, NeighbourOut, ScoreOut, SentenceOut, SentencesIn, TextIn
from checkworthy.serve.state import Api, ApiState
from checkworthy.store.api_keys import ApiKey

router = APIRouter()


def sentence_out(r: Any) -> SentenceOut:
    score = None if r.theta is None else min(1.0, max(0.0, r.theta))
    return SentenceOut(text=r.text, index=r.position, score=score, model_score=r.score, theta=r.theta,
                       ci_low=r.ci_low, ci_high=r.ci_high, decision=r.decision, review=r.review,
                       reason=r.reason, far=r.far, language=r.language, claim_id=r.claim_id,
                       source_id=r.source_id,
                       neighbours=[NeighbourOut(claim_id=n.claim_id, source_id=n.source_id,
                                                distance=n.distance) for n in r.neighbours])


def answer(api: ApiState, texts: list[str], key: ApiKey, endpoint: str) -> ScoreOut:
    """The checked ``texts`` calibrated with the run in force and stored as ``key``'s submission."""
    served: ServedRun = api.current.get()
    sub: Submission = served.submit(texts, key.id, endpoint)
    notice = drift_line(sub.drift)
    api.metrics.record(endpoint, sub, notice)
    if notice and sub.run_id is not None and sub.drift is not None:
        api.events.drift_detected(sub.run_id, f"api:{sub.request_uid}", sub.drift, notice)
    return ScoreOut(request_id=str(sub.request_uid), run_id=sub.run_id, served_run=served.provenance,
                    drift=None if sub.drift is None else sub.drift.as_dict(), drift_notice=notice,
                    results=[sentence_out(r) for r in sub.results])


@router.post("/score/text", response_model=ScoreOut, responses=ERRORS, tags=["score"])
def score_text(body: TextIn, key: ScorerKey, api: Api) -> ScoreOut:
    """Score one text as one claim."""
    return answer(api, check_texts([body.text], api.limits, "text"), key, "text")


@router.get("/score/text/{input_text}", response_model=ScoreOut, responses=ERRORS, tags=["score"])
def score_text_path(input_text: str, key: ScorerKey, api: Api) -> ScoreOut:
    """ClaimBuster's form: the text in the path."""
    return answer(api, check_texts([input_text], api.limits, "input_text"), key, "text")


@router.post("/score/sentences", response_model=ScoreOut, responses=ERRORS, tags=["score"])
def score_sentences(body: SentencesIn, key: ScorerKey, api: Api) -> ScoreOut:
    """Score a batch of sentences, each as a claim (at most ``max_batch``)."""
    return answer(api, check_texts(body.sentences, api.limits, "sentences"), key, "sentences")


@router.post("/score/paragraph", response_model=ScoreOut, responses=ERRORS, tags=["score"])
def score_paragraph(body: TextIn, key: ScorerKey, api: Api) -> ScoreOut:
    """Split a paragraph into sentences (pysbd, rule-based) and score each as a claim."""
    limits = api.limits
    if not check_param(body.text, "text").strip():
        raise ApiError(422, "empty", "empty text", "text")
    if len(body.text) > limits.max_chars * limits.max_batch:
        raise ApiError(422, "too_long", f"{len(body.text)} characters; at most "
                       f"{limits.max_chars * limits.max_batch}", "text")
    return answer(api, check_texts(split_sentences(body.text), limits, "text"), key, "paragraph")
