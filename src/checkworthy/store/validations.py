"""Label validation in the store: the rows a suite run checks and the verdicts it leaves.

A suite run (:mod:`checkworthy.data.validation`) is stored once in ``validation_runs`` with one
``validation_results`` row per expectation, including the rows that broke it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection, text

from checkworthy.data.text import normalise_text
from checkworthy.data.validation import SUITE_NAME, SuiteOutcome


def label_set_rows(conn: Connection, label_set_id: int) -> list[dict[str, Any]]:
    """A stored label set as validation rows (claim_id, dataset, source_id, text, label, line=None)."""
    return [dict(r) | {"line": None} for r in conn.execute(
        text(
            """SELECT i.claim_id, c.dataset, c.source_id, t.text, i.label FROM label_set_items i
               JOIN claims c ON c.id = i.claim_id JOIN texts t ON t.text_hash = c.text_hash
               WHERE i.label_set_id = :s ORDER BY i.claim_id"""
        ),
        {"s": label_set_id},
    ).mappings()]


def target_texts(conn: Connection, label_set_name: str) -> dict[str, list[int]]:
    """Normalised texts of the held-out claims a lineage calibrates (its held-out targets: not
    the team's own claims, whose labels join it), with their claim ids: no calibration claim may
    share one."""
    rows = conn.execute(
        text(
            """SELECT tc.claim_id, t.text FROM calibration_targets ct
               JOIN target_claims tc ON tc.target = ct.name JOIN claims c ON c.id = tc.claim_id
               JOIN texts t ON t.text_hash = c.text_hash
               WHERE ct.label_set_name = :n AND ct.held_out"""
        ),
        {"n": label_set_name},
    ).all()
    out: dict[str, list[int]] = {}
    for r in rows:
        out.setdefault(normalise_text(r.text), []).append(r.claim_id)
    return out


def store_outcome(
    conn: Connection, outcome: SuiteOutcome, label_set_name: str, label_set_id: int | None,
    label_update_id: int | None, data_version_id: int | None = None,
) -> int:
    """Store a suite run and its checks once (same rows, suite and targets: same row); return its id."""
    run_id: int | None = conn.execute(
        text(
            """INSERT INTO validation_runs (label_set_name, label_set_id, label_update_id, subject_hash,
               suite_name, suite_hash, targets_hash, success, n_rows, statistics, gx_version, data_version_id)
               VALUES (:n, :ls, :u, :sh, :sn, :suh, :th, :ok, :nr, CAST(:st AS jsonb), :gv, :dv)
               ON CONFLICT (subject_hash, suite_hash, targets_hash, label_update_id) DO NOTHING
               RETURNING id"""
        ),
        {"n": label_set_name, "ls": label_set_id, "u": label_update_id, "sh": outcome.subject_hash,
         "sn": SUITE_NAME, "suh": outcome.suite_hash, "th": outcome.targets_hash, "ok": outcome.success,
         "nr": outcome.n_rows, "st": json.dumps(outcome.statistics), "gv": outcome.gx_version,
         "dv": data_version_id},
    ).scalar()
    if run_id is None:
        return cast(int, conn.execute(
            text("""SELECT id FROM validation_runs WHERE subject_hash = :sh AND suite_hash = :suh
                    AND targets_hash = :th AND label_update_id IS NOT DISTINCT FROM :u"""),
            {"sh": outcome.subject_hash, "suh": outcome.suite_hash, "th": outcome.targets_hash,
             "u": label_update_id},
        ).scalar_one())
    conn.execute(
        text(
            """INSERT INTO validation_results (validation_run_id, check_name, expectation, success,
               column_name, kwargs, observed, unexpected_count, unexpected_claim_ids, unexpected_rows)
               VALUES (:r, :c, :e, :ok, :col, CAST(:kw AS jsonb), CAST(:obs AS jsonb), :n, :ids,
               CAST(:rows AS jsonb))"""
        ),
        [{"r": run_id, "c": c.check_name, "e": c.expectation, "ok": c.success, "col": c.column,
          "kw": json.dumps(c.kwargs), "obs": json.dumps(c.observed), "n": c.unexpected_count,
          "ids": c.unexpected_claim_ids, "rows": json.dumps(c.unexpected_rows)} for c in outcome.checks],
    )
    return run_id


def run_success(conn: Connection, validation_run_id: int) -> bool:
    """Whether a stored validation run passed."""
    return cast(bool, conn.execute(text("SELECT success FROM validation_runs WHERE id = :v"),
                                   {"v": validation_run_id}).scalar_one())


def failed_checks(conn: Connection, validation_run_id: int) -> list[str]:
    """Names of the checks a stored validation run failed, sorted."""
    return list(conn.execute(
        text("SELECT check_name FROM validation_results WHERE validation_run_id = :v AND NOT success "
             "ORDER BY check_name"), {"v": validation_run_id}).scalars().all())


def failed_results(conn: Connection, validation_run_ids: Sequence[int]) -> list[Any]:
    """The failed checks of the given runs (check_name, column_name, unexpected_rows, observed)."""
    return list(conn.execute(text(
        "SELECT check_name, column_name, unexpected_rows, observed FROM validation_results "
        "WHERE validation_run_id = ANY(:v) AND NOT success ORDER BY check_name"),
        {"v": list(validation_run_ids)}))


def runs_of_update(conn: Connection, label_update_id: int) -> list[int]:
    """The validation runs of a label update, in order."""
    return list(conn.execute(text("SELECT id FROM validation_runs WHERE label_update_id = :u ORDER BY id"),
                             {"u": label_update_id}).scalars().all())


def load_results(conn: Connection, validation_run_id: int) -> dict[str, Mapping[str, Any]]:
    """A stored validation run's checks by check name."""
    return cast(dict[str, Mapping[str, Any]], {r["check_name"]: r for r in conn.execute(
        text("SELECT * FROM validation_results WHERE validation_run_id = :v"), {"v": validation_run_id}
    ).mappings()})
