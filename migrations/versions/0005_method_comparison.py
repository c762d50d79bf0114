"""Method comparison tables: every interval, correction and calibrator on a run's inputs.

A comparison recomputes, from a stored calibration run's inputs (its label set, score key,
target claims, k, alpha and threshold), every interval method, every point correction, the
cross-validated choice and the standard score calibrators, and stores one number per row:

- ``method_comparisons``: one computation for one run, with the options it was computed with
  (``params``, hashed in ``params_hash``) and what it fitted or chose (``params->'info'``:
  the CV choice, lambda, kappa, Platt and temperature coefficients...). The same options for
  the same run are computed once (unique), so re-running ``checkworthy compare`` reuses it.
- ``method_comparison``: its figures. ``family`` is the kind of method ('interval',
  'sets', 'correction', 'cv', 'calibrator'), ``method`` its registry name, ``k`` the number
  of neighbours it used (NULL for methods that use none), ``metric`` e.g. 'coverage',
  'mean_width', 'weighted_f1', 'f1', and ``class`` '0', '1' or 'all'. A value that does not
  exist (an empty class, an infinite mean width) is NULL or +/-Infinity, never a guess.
- ``reports.comparison_ids``: the comparisons a stored report rendered, so a re-render shows
  exactly those (NULL: the report has no "Methods compared" section; reports stored before
  this migration keep re-rendering byte for byte).

Both tables are append-only like the other evidence tables (migration 0002's trigger
function, when present); ownership and the flow-run stamp follow migration 0004. Read and
append rights come from 0002's default privileges; they are granted again explicitly here
so the tables do not depend on who ran the migration.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TABLES = ("method_comparisons", "method_comparison")

UPGRADE = """
CREATE TABLE method_comparisons (
    id           bigserial PRIMARY KEY,
    run_id       bigint NOT NULL REFERENCES calibration_runs,
    params       jsonb NOT NULL,
    params_hash  char(64) NOT NULL,
    code_rev     text NOT NULL DEFAULT '',
    flow_run_id  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, params_hash)
);
COMMENT ON TABLE method_comparisons IS
    'One comparison of every interval, correction and calibrator on a calibration run''s inputs, '
    'with its options and, under params->info, what was fitted or chosen on the labelled set.';

CREATE TABLE method_comparison (
    comparison_id  bigint NOT NULL REFERENCES method_comparisons,
    run_id         bigint NOT NULL REFERENCES calibration_runs,
    family         text NOT NULL,
    method         text NOT NULL,
    k              integer,
    metric         text NOT NULL,
    class          text NOT NULL DEFAULT 'all' CHECK (class IN ('all', '0', '1')),
    value          double precision,
    UNIQUE NULLS NOT DISTINCT (comparison_id, family, method, k, metric, class)
);
CREATE INDEX method_comparison_run ON method_comparison (run_id);
COMMENT ON TABLE method_comparison IS
    'Figures of a method comparison, one number per row: coverage and width of intervals, '
    'F1 of corrections and calibrators, on the run''s target claims.';

ALTER TABLE reports ADD COLUMN comparison_ids bigint[];
COMMENT ON COLUMN reports.comparison_ids IS
    'The method_comparisons this report rendered (re-renders use exactly these; NULL: none).';
"""

#: append-only triggers, ownership, grants and the flow-run stamp, where 0002/0003 provide them
HARDEN = """
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['method_comparisons', 'method_comparison'] LOOP
        IF EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'checkworthy_append_only') THEN
            EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW '
                           'EXECUTE FUNCTION checkworthy_append_only()', t || '_append_only', t);
            EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT '
                           'EXECUTE FUNCTION checkworthy_append_only()', t || '_no_truncate', t);
        END IF;
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'checkworthy_owner') THEN
            EXECUTE format('ALTER TABLE %I OWNER TO checkworthy_owner', t);
        END IF;
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'checkworthy_pipeline') THEN
            EXECUTE format('GRANT SELECT, INSERT ON %I TO checkworthy_pipeline', t);
        END IF;
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'checkworthy_auditor') THEN
            EXECUTE format('GRANT SELECT ON %I TO checkworthy_auditor', t);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'checkworthy_pipeline') THEN
        GRANT USAGE, SELECT ON SEQUENCE method_comparisons_id_seq TO checkworthy_pipeline;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'stamp_flow_run_id') THEN
        CREATE TRIGGER method_comparisons_stamp_flow_run BEFORE INSERT ON method_comparisons
            FOR EACH ROW EXECUTE FUNCTION stamp_flow_run_id();
    END IF;
END $$;
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    op.execute(HARDEN)


def downgrade() -> None:
    op.execute("ALTER TABLE reports DROP COLUMN comparison_ids;")
    op.execute("DROP TABLE method_comparison, method_comparisons;")
