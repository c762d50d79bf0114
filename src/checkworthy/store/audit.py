"""Audit queries: a claim's decisions from the audit views, and provisioning of login roles.

Auditors mostly query the ``audit_*`` views directly (docs/audit.md); :func:`explain` is the
same lineage as a data structure, behind ``checkworthy explain`` (the text is written by
:mod:`checkworthy.report.explanation`).

The migrations create three NOLOGIN group roles (owner, pipeline, auditor) and never hold a
secret. :func:`bootstrap` (``python -m checkworthy.store.audit bootstrap``), run as the owner when
the production stack starts, migrates and then creates or updates the *login* roles that are
members of the pipeline and auditor groups, with passwords taken from the environment.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, RowMapping, text

from checkworthy.config import quiet_offline_env
from checkworthy.method.decision_cut import PriorDecision
from checkworthy.store.engine import PIPELINE_ROLE, database_url, ensure_login, get_engine

AUDITOR_ROLE = "checkworthy_auditor"

#: (group role, env var with the login name, default login name, env var with its password)
LOGINS: tuple[tuple[str, str, str, str], ...] = (
    (PIPELINE_ROLE, "PIPELINE_DB_USER", "pipeline", "PIPELINE_DB_PASSWORD"),
    (AUDITOR_ROLE, "AUDITOR_DB_USER", "auditor", "AUDITOR_DB_PASSWORD"),
)


@dataclass
class Decision:
    """One (run, claim) decision with its neighbours, as the audit views give it."""

    row: RowMapping
    neighbours: list[RowMapping] = field(default_factory=list)
    #: the run's decide-or-review rule (``calibration_runs.params->'review'``), None for older runs
    review: Mapping[str, Any] | None = None
    #: what the run decided at when not at its own threshold for L's prior
    #: (``calibration_runs.params->'prior'``), None otherwise
    prior: PriorDecision | None = None
    #: the run's review-queue entry for the claim (priority, reason, cause), None when it queued none
    queued: RowMapping | None = None
    #: people's answers for the claim (label, label update, when), oldest first
    answers: list[RowMapping] = field(default_factory=list)
    #: the claim's stored language (language, confidence, reason, detector), None when none is stored
    language: Mapping[str, Any] | None = None


def find_claims(conn: Connection, claim: str, dataset: str | None = None) -> list[int]:
    """Claim ids for ``claim``: a source id (optionally within ``dataset``) or ``id:<claim id>``."""
    if claim.startswith("id:"):
        return list(conn.execute(text("SELECT id FROM claims WHERE id = :i"),
                                 {"i": int(claim[3:])}).scalars())
    return list(
        conn.execute(
            text("SELECT id FROM claims WHERE source_id = :s AND (CAST(:d AS text) IS NULL OR dataset = :d) "
                 "ORDER BY id"),
            {"s": claim, "d": dataset},
        ).scalars()
    )


def explain(conn: Connection, claim_ids: Sequence[int], run_id: int | None = None) -> list[Decision]:
    """Every stored decision on ``claim_ids`` (newest run first), each with its neighbours."""
    rows = conn.execute(
        text("SELECT * FROM audit_decisions WHERE claim_id = ANY(:c) "
             "AND (CAST(:r AS bigint) IS NULL OR run_id = :r) ORDER BY run_id DESC, claim_id"),
        {"c": list(map(int, claim_ids)), "r": run_id},
    ).mappings().all()
    out = [Decision(r) for r in rows]
    if not out:
        return out
    run_ids = sorted({d.row["run_id"] for d in out})
    nbrs = conn.execute(
        text("SELECT * FROM audit_decision_lineage WHERE claim_id = ANY(:c) AND run_id = ANY(:r) "
             "ORDER BY run_id, claim_id, neighbour_rank"),
        {"c": list(map(int, claim_ids)), "r": run_ids},
    ).mappings().all()
    by_key = {(d.row["run_id"], d.row["claim_id"]): d for d in out}
    for n in nbrs:
        by_key[(n["run_id"], n["claim_id"])].neighbours.append(n)
    rules = {i: (review, prior and PriorDecision.from_dict(prior)) for i, review, prior in conn.execute(
        text("SELECT id, params->'review', params->'prior' FROM calibration_runs WHERE id = ANY(:r)"),
        {"r": run_ids}).tuples()}
    queued = {(q["run_id"], q["claim_id"]): q for q in conn.execute(
        text("SELECT run_id, claim_id, priority, reason, cause FROM review_queue WHERE claim_id = ANY(:c) "
             "AND run_id = ANY(:r)"),
        {"c": list(map(int, claim_ids)), "r": run_ids}).mappings()}
    answers: dict[int, list[RowMapping]] = {}
    for a in conn.execute(text("SELECT claim_id, label, update_id, created_at FROM review_answers "
                               "WHERE claim_id = ANY(:c) ORDER BY id"),
                          {"c": list(map(int, claim_ids))}).mappings():
        answers.setdefault(a["claim_id"], []).append(a)
    languages = {r["claim_id"]: dict(r) for r in conn.execute(
        text("SELECT c.id AS claim_id, l.language, l.confidence, l.reason, l.detector FROM claims c "
             "JOIN text_languages l ON l.text_hash = c.text_hash WHERE c.id = ANY(:c)"),
        {"c": list(map(int, claim_ids))}).mappings()}
    for d in out:
        d.language = languages.get(d.row["claim_id"])
        d.review, d.prior = rules.get(d.row["run_id"], (None, None))
        d.queued = queued.get((d.row["run_id"], d.row["claim_id"]))
        d.answers = answers.get(d.row["claim_id"], [])
    return out


# ---------------------------------------------------------------------------- login roles


def bootstrap(engine: Engine, env: Mapping[str, str] | None = None) -> list[str]:
    """Provision the login roles named in ``env``; return the logins made or updated.

    A login is provisioned when its password variable is set; production sets both.
    """
    env = os.environ if env is None else env
    done = []
    with engine.begin() as conn:
        for group, user_var, default_user, password_var in LOGINS:
            password = env.get(password_var)
            if not password:
                continue
            user = env.get(user_var) or default_user
            ensure_login(conn, user, group, password, read_only=group == AUDITOR_ROLE)
            done.append(user)
    return done


def main(argv: list[str] | None = None) -> int:
    """``python -m checkworthy.store.audit bootstrap``: migrate as the owner, then provision logins."""
    quiet_offline_env()
    p = argparse.ArgumentParser(prog="python -m checkworthy.store.audit", description=main.__doc__)
    p.add_argument("command", choices=["bootstrap"])
    p.parse_args(argv)
    engine = get_engine(database_url(owner=True))  # migrates to head
    users = bootstrap(engine)
    print(f"migrated; login roles provisioned: {', '.join(users) or 'none'}")
    engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())


#: tables that record an attempt itself (a label file's update, its validation, the data version
#: it was judged on, the flow run): a refused label update writes these, and only these
ATTEMPT_RECORDS = ("label_updates", "validation_runs", "validation_results", "data_versions", "flow_runs",
                   "flow_run_data_versions", "change_events")


def table_counts(engine: Engine, ignore: Sequence[str] = ()) -> dict[str, int]:
    """Row counts of every table of the schema but ``ignore``: what a command wrote, or that a
    refused one wrote nothing."""
    with engine.connect() as conn:
        tables = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                   "ORDER BY tablename")).scalars().all()
        return {t: conn.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one()
                for t in tables if t not in ignore}
