"""Report analyses: ablations, calibration diagnostics and failure modes as rows.

A report is rendered only from stored rows, so that re-rendering a stored report gives the
same bytes and every figure in it can be queried without parsing text:

- ``report_analyses``: one computed analysis (k sweep, |L| sweep, temperature comparison,
  failure modes, reliability bins, score histograms) of one calibration run, with the
  parameters it was computed with. Analyses that do not depend on k (the sweeps) carry the
  ``group_key`` of the runs they cover (same claims, label set, score key, alpha, threshold),
  so one computation serves every k of that group.
- ``analysis_metrics``: the analysis's figures, one number per row. Columns that do not
  apply to an analysis are NULL (``k`` for a reliability bin, ``seed`` for a k sweep...).
  ``statistic`` is 'value' for a single evaluation and 'mean' / 'sd' / 'min' / 'max' / 'n'
  for the aggregate over seeds of the |L| sweep.
- ``failure_examples``: the claims picked as examples of fixed false positives, fixed false
  negatives, persistent errors and regressions, with their gold label, raw score, theta and
  the neighbours that moved them (a jsonb snapshot of each neighbour's label, score,
  residual, distance and text).
- ``reports.analysis_ids``: the analyses a stored report rendered, so a later re-render uses
  exactly those.

All three tables are append-only like the other evidence tables (migration 0002's trigger
function, when present); rows are added, never changed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = ("report_analyses", "analysis_metrics", "failure_examples")

UPGRADE = """
CREATE TABLE report_analyses (
    id           bigserial PRIMARY KEY,
    run_id       bigint NOT NULL REFERENCES calibration_runs,
    group_key    char(64) NOT NULL,
    analysis     text NOT NULL CHECK (analysis IN ('k_sweep', 'label_set_size', 'temperature',
                                                  'failure_modes', 'reliability', 'histogram')),
    params       jsonb NOT NULL,
    params_hash  char(64) NOT NULL,
    code_rev     text NOT NULL DEFAULT '',
    flow_run_id  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, analysis, params_hash)
);
CREATE INDEX report_analyses_group ON report_analyses (group_key, analysis, params_hash, id);
COMMENT ON TABLE report_analyses IS
    'One analysis of a calibration run for reports (k / |L| sweeps, temperature, failure modes, '
    'reliability, histograms) with its parameters; group analyses serve every run with the same group_key.';
COMMENT ON COLUMN report_analyses.group_key IS
    'sha256 of the run identity without k (claims, label set fingerprint, score key, embed model, '
    'alpha, threshold, interval): runs that differ only in k share it.';

CREATE TABLE analysis_metrics (
    analysis_id  bigint NOT NULL REFERENCES report_analyses,
    run_id       bigint NOT NULL REFERENCES calibration_runs,
    variant      text NOT NULL DEFAULT '',
    k            integer,
    n_labelled   integer,
    seed         integer,
    bin          integer,
    method       text NOT NULL,
    metric       text NOT NULL,
    class        text NOT NULL DEFAULT 'all',
    statistic    text NOT NULL DEFAULT 'value'
                 CHECK (statistic IN ('value', 'mean', 'sd', 'min', 'max', 'n')),
    value        double precision,
    UNIQUE NULLS NOT DISTINCT (analysis_id, variant, k, n_labelled, seed, bin, method, metric,
                               class, statistic)
);
CREATE INDEX analysis_metrics_run ON analysis_metrics (run_id);
COMMENT ON TABLE analysis_metrics IS
    'Figures of report analyses, one number per row; NULL columns do not apply to the analysis.';

CREATE TABLE failure_examples (
    analysis_id        bigint NOT NULL REFERENCES report_analyses,
    run_id             bigint NOT NULL REFERENCES calibration_runs,
    category           text NOT NULL CHECK (category IN ('fixed_fp', 'fixed_fn', 'persistent',
                                                         'regression')),
    rank               integer NOT NULL,
    claim_id           bigint NOT NULL REFERENCES claims,
    source_id          text NOT NULL,
    text               text NOT NULL,
    gold               smallint NOT NULL CHECK (gold IN (0, 1)),
    score              double precision NOT NULL,
    theta              double precision NOT NULL,
    ci_low             double precision NOT NULL,
    ci_high            double precision NOT NULL,
    knn_mean           double precision NOT NULL,
    baseline_decision  smallint NOT NULL,
    nnppi_decision     smallint NOT NULL,
    neighbours         jsonb NOT NULL,
    PRIMARY KEY (analysis_id, category, rank)
);
COMMENT ON TABLE failure_examples IS
    'Example claims per failure category of a run, with the neighbours (label, score, residual, '
    'distance, text; nearest first) that moved theta.';

ALTER TABLE reports ADD COLUMN analysis_ids bigint[];
COMMENT ON COLUMN reports.analysis_ids IS
    'The report_analyses this report rendered (re-renders use exactly these).';
"""

#: append-only triggers and ownership, only where migrations 0002/0003 provide the pieces
HARDEN = """
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['report_analyses', 'analysis_metrics', 'failure_examples'] LOOP
        IF EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'checkworthy_append_only') THEN
            EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW '
                           'EXECUTE FUNCTION checkworthy_append_only()', t || '_append_only', t);
            EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT '
                           'EXECUTE FUNCTION checkworthy_append_only()', t || '_no_truncate', t);
        END IF;
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'checkworthy_owner') THEN
            EXECUTE format('ALTER TABLE %I OWNER TO checkworthy_owner', t);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'stamp_flow_run_id') THEN
        CREATE TRIGGER report_analyses_stamp_flow_run BEFORE INSERT ON report_analyses
            FOR EACH ROW EXECUTE FUNCTION stamp_flow_run_id();
    END IF;
END $$;
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    op.execute(HARDEN)


def downgrade() -> None:
    op.execute("ALTER TABLE reports DROP COLUMN analysis_ids;")
    op.execute("DROP TABLE failure_examples, analysis_metrics, report_analyses;")
