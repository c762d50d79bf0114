"""Why a stored claim got its decisions: the lineage ``checkworthy explain`` prints, as JSON.

Annotations are evaluated (no ``from __future__ import annotations``): FastAPI reads the route
signature.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder

from checkworthy.report.explanation import format_decision
from checkworthy.serve.inputs import BIGINT_MAX, ascii_id, check_param
from checkworthy.serve.keys import ReaderKey
from checkworthy.serve.refusals import ApiError
from checkworthy.serve.schemas import ERRORS, ErrorOut
from checkworthy.serve.state import Api
from checkworthy.store.audit import explain, find_claims

router = APIRouter()


@router.get("/claims/{claim}/explanation", responses=ERRORS | {404: {"model": ErrorOut}}, tags=["audit"])
def explanation(claim: str, key: ReaderKey, api: Api, dataset: Annotated[str | None, Query()] = None,
                run: Annotated[int | None, Query(ge=1, le=BIGINT_MAX)] = None) -> dict[str, Any]:
    """Why a stored claim got its decisions (source id, or ``id:<claim id>``): the lineage
    ``checkworthy explain`` prints, as JSON, with that text beside it."""
    check_param(claim, "claim")
    if dataset is not None:
        check_param(dataset, "dataset")
    if claim.startswith("id:") and ascii_id(claim[3:]) is None:
        raise ApiError(422, "invalid", f"id:<claim id> needs a number from 1 to {BIGINT_MAX}", "claim")
    with api.engine.connect() as conn:
        ids = find_claims(conn, claim, dataset)
        decisions = explain(conn, ids, run) if ids else []
    if not decisions:
        raise ApiError(404, "not_found", f"no calibrated decision for claim {claim!r}", "claim")
    return {"claim": claim, "decisions": [jsonable_encoder(
        dict(d.row) | {"neighbours": [dict(n) for n in d.neighbours], "review_rule": d.review,
                       "queued": None if d.queued is None else dict(d.queued),
                       "answers": [dict(a) for a in d.answers], "explanation": format_decision(d)})
        for d in decisions]}
