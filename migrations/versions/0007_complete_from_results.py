"""A run is complete only when its results say so: ``calibration_runs.claim_ids``.

Migration 0002 refused 'complete' unless the run held ``params->>'n_calibrated'`` results, but
that count was the writer's word: a pipeline connection could leave the key out, or set it to
the number of rows inserted so far. Now every run names its target claims when it is inserted
(``claim_ids``, fixed like every column but status, finished_at and params), and moving a run
to 'complete' is refused unless

- it has at least one result;
- every claim it names that has a usable score under the run's key (a ``predictions`` row for
  its text, model, prompt version, parameters and score kind, with a score) has a result;
- no result is for a claim it does not name;
- and, as before, ``n_calibrated`` (when given) equals the number of results.

Claims without a usable score (parse failures) are the only ones a complete run may leave out,
and the database finds them from the ``predictions`` rows, not from the writer. Runs stored
before this migration keep ``claim_ids`` NULL (their results are their claims); a new run must
name at least one claim.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE calibration_runs ADD COLUMN claim_ids bigint[];
COMMENT ON COLUMN calibration_runs.claim_ids IS
    'The claims the run calibrates, fixed at insert; complete requires a result for each one with a '
    'usable score and for no other claim (NULL: stored before migration 0007)';

CREATE FUNCTION checkworthy_complete_from_results() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE n_results bigint; n_missing bigint; missing_claim bigint; n_extra bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.claim_ids IS NULL OR cardinality(NEW.claim_ids) = 0 THEN
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
    SELECT count(*) INTO n_results FROM calibrated_results WHERE run_id = NEW.id;
    IF n_results = 0 THEN
        RAISE EXCEPTION 'calibration run %: no results stored; not marked complete', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    SELECT count(*), min(t.id) INTO n_missing, missing_claim
    FROM (SELECT DISTINCT unnest(NEW.claim_ids) AS id) t
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
    FROM calibrated_results r LEFT JOIN (SELECT DISTINCT unnest(NEW.claim_ids) AS id) t ON t.id = r.claim_id
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
COMMENT ON FUNCTION checkworthy_complete_from_results() IS
    'Trigger function: a run names its claims; complete only with a result for each scored one.';
ALTER FUNCTION checkworthy_complete_from_results() OWNER TO checkworthy_owner;

CREATE TRIGGER calibration_runs_complete_from_results BEFORE INSERT OR UPDATE OF status
    ON calibration_runs FOR EACH ROW EXECUTE FUNCTION checkworthy_complete_from_results();
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TRIGGER calibration_runs_complete_from_results ON calibration_runs;"
               "DROP FUNCTION checkworthy_complete_from_results();"
               "ALTER TABLE calibration_runs DROP COLUMN claim_ids;")
