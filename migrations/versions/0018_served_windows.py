"""Served requests are recorded in windows: one run of mode ``served`` per served run and window.

Until now each API request stored a run of its own (a burst of 500 one-text requests stored 500
runs). Now the requests calibrated with one served run within a window of time (``serving:
window_seconds``, docs/api.md) append their results, review-queue entries and ``api_requests``
rows to one run, open ('running') while its window is, and completed once, with the window's
counts and figures, by the first request after it, a change of the served run or the server's
shutdown (a window a killed server left open is closed as 'abandoned' like any run whose process
died; its rows stay). So:

- a served run may be inserted naming no claim (``claim_ids`` empty): its claims are those of the
  ``api_requests`` rows that point at it, and completing it requires a result for each of those
  with a usable score, and for no other claim (as migration 0007 requires of every run);
- ``api_requests.drift``: the request's own drift figure, the one that decided which of its
  claims drift held back (the run's ``params->'drift'`` is its whole window's, written when it
  completes);
- at most one open window per served run (``calibration_runs_one_open_window``); the server
  takes a transaction-level advisory lock of the served run before looking for it, so two
  requests at once (threads or workers) append to the same window and lose nothing.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def complete_from_results(may_name_none: str, named: str) -> str:
    """Migration 0007's trigger function, with ``may_name_none`` (a condition on NEW: the run may
    be inserted naming no claim) and ``named`` (the claims a run names, an expression on NEW)."""
    return f"""
CREATE OR REPLACE FUNCTION checkworthy_complete_from_results() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE n_results bigint; n_missing bigint; missing_claim bigint; n_extra bigint; named bigint[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.claim_ids IS NULL OR (cardinality(NEW.claim_ids) = 0 AND NOT ({may_name_none})) THEN
            RAISE EXCEPTION 'calibration run must name the claims it calibrates (claim_ids)'
                USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.status <> 'complete' OR OLD.status <> 'running' THEN
        RETURN NEW;
    END IF;
    IF NEW.claim_ids IS NULL THEN
        RAISE EXCEPTION 'calibration run % names no claims; not marked complete', OLD.id
            USING ERRCODE = 'restrict_violation', HINT = 'start a new run';
    END IF;
    named := {named};
    SELECT count(*) INTO n_results FROM calibrated_results WHERE run_id = NEW.id;
    IF n_results = 0 THEN
        RAISE EXCEPTION 'calibration run %: no results stored; not marked complete', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    SELECT count(*), min(t.id) INTO n_missing, missing_claim
    FROM (SELECT DISTINCT unnest(named) AS id) t
    JOIN claims c ON c.id = t.id
    JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = NEW.model_id
        AND p.prompt_version = NEW.prompt_version AND p.params_hash = NEW.params_hash
        AND p.score_kind = NEW.score_kind AND p.score IS NOT NULL
    LEFT JOIN calibrated_results r ON r.run_id = NEW.id AND r.claim_id = t.id
    WHERE r.claim_id IS NULL;
    IF n_missing > 0 THEN
        RAISE EXCEPTION 'calibration run %: % of its scored claims have no result (claim % first); '
            'not marked complete', OLD.id, n_missing, missing_claim USING ERRCODE = 'restrict_violation';
    END IF;
    SELECT count(*) INTO n_extra
    FROM calibrated_results r LEFT JOIN (SELECT DISTINCT unnest(named) AS id) t ON t.id = r.claim_id
    WHERE r.run_id = NEW.id AND t.id IS NULL;
    IF n_extra > 0 THEN
        RAISE EXCEPTION 'calibration run %: % results for claims it does not name; not marked complete',
            OLD.id, n_extra USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.params ? 'n_calibrated' AND n_results <> (NEW.params->>'n_calibrated')::bigint THEN
        RAISE EXCEPTION 'calibration run %: % results stored, % expected; not marked complete',
            OLD.id, n_results, NEW.params->>'n_calibrated' USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;
"""


#: a served run names its requests' claims too
SERVED_NAMED = """NEW.claim_ids || CASE WHEN NEW.mode = 'served' THEN ARRAY(
        SELECT unnest(q.claim_ids) FROM api_requests q WHERE q.run_id = NEW.id)
        ELSE CAST(ARRAY[] AS bigint[]) END"""

UPGRADE = complete_from_results("NEW.mode = 'served'", SERVED_NAMED) + """
COMMENT ON FUNCTION checkworthy_complete_from_results() IS
    'Trigger function: a run names its claims (a served run: also those of its api_requests); '
    'complete only with a result for each scored one.';
COMMENT ON COLUMN calibration_runs.claim_ids IS
    'The claims the run calibrates, fixed at insert (a served run: empty, its claims are those of the '
    'api_requests rows pointing at it); complete requires a result for each one with a usable score '
    'and for no other claim (NULL: stored before migration 0007)';
COMMENT ON COLUMN calibration_runs.mode IS
    'full; incremental (rows copied from parent_run_id); served (the API requests calibrated with the '
    'fitted calibration of parent_run_id within one window of time: open while running)';
CREATE UNIQUE INDEX calibration_runs_one_open_window ON calibration_runs (parent_run_id)
    WHERE mode = 'served' AND status = 'running';
ALTER TABLE api_requests ADD COLUMN drift jsonb;
COMMENT ON COLUMN api_requests.drift IS
    'The request''s own drift figure (its claims against the served run''s labelled set), which '
    'decided which of them drift held back; NULL when no text had a usable score, or stored before '
    'migration 0018 (then in its run''s params->''drift'')';
COMMENT ON TABLE api_requests IS
    'One request that stored claims: key, endpoint, the run it was calibrated with, the run holding '
    'its results (its window''s), its claims in input order, its drift figure.';
"""

DOWNGRADE = complete_from_results("false", "NEW.claim_ids") + """
COMMENT ON FUNCTION checkworthy_complete_from_results() IS
    'Trigger function: a run names its claims; complete only with a result for each scored one.';
COMMENT ON COLUMN calibration_runs.claim_ids IS
    'The claims the run calibrates, fixed at insert; complete requires a result for each one with a '
    'usable score and for no other claim (NULL: stored before migration 0007)';
COMMENT ON COLUMN calibration_runs.mode IS
    'full; incremental (rows copied from parent_run_id); served (an API request calibrated with '
    'the fitted calibration of parent_run_id)';
DROP INDEX calibration_runs_one_open_window;
ALTER TABLE api_requests DROP COLUMN drift;
COMMENT ON TABLE api_requests IS
    'One request that stored claims: key, endpoint, the run it was calibrated with, the run holding '
    'its results, its claims in input order.';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
