"""Request and response bodies of the API (pydantic; FastAPI derives the OpenAPI document).

Responses follow ClaimBuster's shape where it fits: ``results`` is a list of ``{text, index,
score}`` objects, ``score`` a 0-1 check-worthiness; here it is theta clipped to [0, 1], and every
other figure (the model's score, unclipped theta, interval, decision, review flag, neighbours)
sits beside it, with the run the answer came from.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr


class TextIn(BaseModel):
    """One text, scored as one claim (``/score/text``) or split into sentences (``/score/paragraph``)."""

    model_config = ConfigDict(extra="forbid")
    text: StrictStr


class SentencesIn(BaseModel):
    """A batch of sentences, each scored as a claim."""

    model_config = ConfigDict(extra="forbid")
    sentences: list[StrictStr]


class NeighbourOut(BaseModel):
    claim_id: int
    source_id: str
    distance: float = Field(description="cosine distance of the MiniLM vectors")


class SentenceOut(BaseModel):
    text: str
    index: int = Field(description="position in the request")
    score: float | None = Field(description="check-worthiness in [0, 1]: theta clipped (ClaimBuster's field)")
    model_score: float | None = Field(description="the model's own score, before calibration")
    theta: float | None = Field(description="the calibrated estimate (NN-PPI or the run's correction)")
    ci_low: float | None
    ci_high: float | None
    decision: int | None = Field(description="1: check-worthy (theta >= the run's threshold)")
    review: bool = Field(description="true: a person should decide (the run's decide-or-review rule, or "
                                     "drift: see far)")
    reason: str | None
    far: bool = Field(description="true: beyond the labelled set's radius in a batch that drifted from it, "
                                  "or in a language none of the labelled claims is in (a person decides "
                                  "it, whatever theta says)")
    language: str | None = Field(description="the text's language: ISO 639-1 code, or 'und' where none is "
                                             "detectable (docs/data.md, \"Languages\")")
    claim_id: int
    source_id: str = Field(description="the stored claim's id, for `checkworthy explain` and /claims/{id}")
    neighbours: list[NeighbourOut]


class ScoreOut(BaseModel):
    version: str = "checkworthy-1"
    request_id: str
    run_id: int | None = Field(description="the run holding this request's results (mode 'served')")
    served_run: dict[str, Any] = Field(description="the calibration run the answer came from, its model, "
                                                   "prompt, label set and code versions")
    drift: dict[str, Any] | None
    drift_notice: str | None = Field(description="when the batch drifted from the labelled set: the share "
                                                 "beyond its radius, or its claims in languages the labelled "
                                                 "set has none of, what was done and what to do, in a line")
    results: list[SentenceOut]


class ErrorOut(BaseModel):
    error: dict[str, Any]


#: the refusals the routes document, each one :class:`ErrorOut`
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorOut} for code in (401, 403, 413, 422, 503)}
