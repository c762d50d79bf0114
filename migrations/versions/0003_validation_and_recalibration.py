"""Validation results, label-change events and incremental recalibration.

- Provenance: every table a pipeline task writes gets the Prefect flow-run id of the run that
  wrote the row. A BEFORE INSERT trigger fills ``flow_run_id`` from the transaction-local
  setting ``checkworthy.flow_run_id`` (set by ``checkworthy.store.provenance.stamped``), so the existing
  store functions need no extra parameter. ``flow_runs`` and ``flow_run_data_versions``
  attach each data version (DVC hash + git revision) to every flow run that used it.
- Label history: ``label_updates`` (one row per applied CSV, keyed by its sha256),
  ``labels.update_id``, and ``label_set_versions``: an append-only log of which label set is
  in force for each lineage (label-set name), so every version is reconstructible and a
  reverted correction points back at the old set instead of rewriting anything.
- Validation: ``validation_runs`` (one Great Expectations suite run on one label set) and
  ``validation_results`` (each expectation: success, observed value, offending claim ids).
- Targets: ``calibration_targets`` / ``target_claims`` name the claims a label-set lineage
  calibrates (the leakage check and the recalibration both need them).
- Incremental recalibration: ``calibration_runs.parent_run_id`` and ``mode``;
  ``calibrated_results.computed_in_run`` says which run computed a copied row (NULL: this run).
  The validation run that cleared a calibration is in ``calibration_runs.params->'validation_run_id'``
  (a finished run is never updated, migration 0002).
- The new tables are append-only like the other evidence tables (0002's trigger function), and
  the views ``audit_validations`` and ``audit_label_set_versions`` serve auditors.
- ``change_events``: label and guideline changes as emitted to Prefect, for audit.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

STAMPED = [
    "data_versions", "claims", "labels", "embeddings", "predictions", "label_sets",
    "calibration_runs", "reports", "label_updates", "label_set_versions", "validation_runs",
    "calibration_targets", "target_claims", "change_events",
]

UPGRADE = """
CREATE FUNCTION stamp_flow_run_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.flow_run_id IS NULL THEN
        NEW.flow_run_id := nullif(current_setting('checkworthy.flow_run_id', true), '');
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION stamp_flow_run_id() IS
    'Fills flow_run_id from the transaction-local setting checkworthy.flow_run_id.';

ALTER TABLE data_versions ADD COLUMN flow_run_id text;
ALTER TABLE claims ADD COLUMN flow_run_id text;
ALTER TABLE embeddings ADD COLUMN flow_run_id text;
ALTER TABLE label_sets ADD COLUMN flow_run_id text;

CREATE TABLE flow_runs (
    flow_run_id  text PRIMARY KEY,
    flow_name    text NOT NULL,
    deployment   text,
    parameters   jsonb NOT NULL DEFAULT '{}',
    code_rev     text NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE flow_runs IS 'Prefect flow runs that wrote to the store.';

CREATE TABLE flow_run_data_versions (
    flow_run_id      text NOT NULL REFERENCES flow_runs,
    data_version_id  bigint NOT NULL REFERENCES data_versions,
    role             text NOT NULL CHECK (role IN ('used', 'produced')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow_run_id, data_version_id, role)
);
COMMENT ON TABLE flow_run_data_versions IS
    'Which data versions (DVC hash + git rev) each flow run used or produced.';

CREATE TABLE label_updates (
    id               bigserial PRIMARY KEY,
    file_sha256      char(64) NOT NULL UNIQUE,
    path             text NOT NULL,
    source           text NOT NULL,
    status           text NOT NULL CHECK (status IN ('applied', 'rejected')),
    n_rows           integer NOT NULL,
    n_appended       integer NOT NULL,
    data_version_id  bigint REFERENCES data_versions,
    flow_run_id      text,
    created_at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE label_updates IS
    'One label file (data/labels/*.csv or checkworthy labels add), applied or rejected by '
    'validation; the same bytes are considered once.';

ALTER TABLE labels ADD COLUMN update_id bigint REFERENCES label_updates;

CREATE TABLE label_set_versions (
    id               bigserial PRIMARY KEY,
    name             text NOT NULL,
    label_set_id     bigint NOT NULL REFERENCES label_sets,
    parent_id        bigint REFERENCES label_set_versions,
    update_id        bigint REFERENCES label_updates,
    data_version_id  bigint REFERENCES data_versions,
    reason           text NOT NULL,
    flow_run_id      text,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX label_set_versions_name ON label_set_versions (name, id DESC);
COMMENT ON TABLE label_set_versions IS
    'Append-only log of the label set in force per lineage (name); the newest row is the head.';

CREATE TABLE calibration_targets (
    name            text NOT NULL,
    label_set_name  text NOT NULL,
    flow_run_id     text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, label_set_name)
);
COMMENT ON TABLE calibration_targets IS
    'A named set of claims to calibrate (target_claims) and a label-set lineage that calibrates it.';

CREATE TABLE target_claims (
    target       text NOT NULL,
    claim_id     bigint NOT NULL REFERENCES claims,
    flow_run_id  text,
    added_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target, claim_id)
);
COMMENT ON TABLE target_claims IS 'The claims of each target; a target only grows (claims arrive).';

CREATE TABLE validation_runs (
    id               bigserial PRIMARY KEY,
    label_set_name   text NOT NULL,
    label_set_id     bigint REFERENCES label_sets,
    label_update_id  bigint REFERENCES label_updates,
    subject_hash     char(64) NOT NULL,
    suite_name       text NOT NULL,
    suite_hash       char(64) NOT NULL,
    targets_hash     char(64) NOT NULL,
    success          boolean NOT NULL,
    n_rows           integer NOT NULL,
    statistics       jsonb NOT NULL DEFAULT '{}',
    gx_version       text NOT NULL DEFAULT '',
    data_version_id  bigint REFERENCES data_versions,
    flow_run_id      text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (subject_hash, suite_hash, targets_hash, label_update_id)
);
COMMENT ON TABLE validation_runs IS
    'A Great Expectations label-validation suite run on a label set (label_set_id) or on the '
    'candidate set a label update would make (label_update_id).';
COMMENT ON COLUMN validation_runs.subject_hash IS
    'sha256 of the validated rows: the same rows, suite and targets are validated once.';

CREATE TABLE validation_results (
    validation_run_id     bigint NOT NULL REFERENCES validation_runs,
    check_name            text NOT NULL,
    expectation           text NOT NULL,
    success               boolean NOT NULL,
    column_name           text,
    kwargs                jsonb NOT NULL DEFAULT '{}',
    observed              jsonb,
    unexpected_count      integer,
    unexpected_claim_ids  bigint[] NOT NULL DEFAULT '{}',
    unexpected_rows       jsonb NOT NULL DEFAULT '[]',
    PRIMARY KEY (validation_run_id, check_name)
);
COMMENT ON TABLE validation_results IS
    'One expectation of a validation run: which check, whether it passed, which rows broke it '
    '(claim ids, and dataset/id/file line for rows of a label file).';

ALTER TABLE calibration_runs
    ADD COLUMN parent_run_id bigint REFERENCES calibration_runs,
    ADD COLUMN mode text NOT NULL DEFAULT 'full' CHECK (mode IN ('full', 'incremental'));
COMMENT ON COLUMN calibration_runs.parent_run_id IS
    'The run an incremental run copied its unaffected rows from.';

ALTER TABLE calibrated_results ADD COLUMN computed_in_run bigint;
COMMENT ON COLUMN calibrated_results.computed_in_run IS
    'The run that computed this row when it was copied from an earlier run; NULL: computed by '
    'run_id itself.';

CREATE TABLE change_events (
    id               bigserial PRIMARY KEY,
    kind             text NOT NULL CHECK (kind IN ('labels', 'guidelines')),
    key              text NOT NULL,
    payload          jsonb NOT NULL,
    data_version_id  bigint REFERENCES data_versions,
    prefect_event_id text,
    flow_run_id      text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kind, key)
);
CREATE VIEW audit_validations AS
SELECT v.id AS validation_run_id, v.created_at AS validated_at, v.label_set_name, v.label_set_id,
       v.label_update_id, u.path AS label_file, u.file_sha256 AS label_file_sha256, u.status AS update_status,
       v.success AS suite_success, v.n_rows, v.suite_name, v.suite_hash, v.gx_version,
       r.check_name, r.expectation, r.success, r.column_name, r.kwargs, r.observed, r.unexpected_count,
       r.unexpected_claim_ids, r.unexpected_rows, v.flow_run_id, v.data_version_id,
       dv.dvc_hash AS data_dvc_hash, dv.git_rev AS data_git_rev
FROM validation_runs v
JOIN validation_results r ON r.validation_run_id = v.id
LEFT JOIN label_updates u ON u.id = v.label_update_id
LEFT JOIN data_versions dv ON dv.id = v.data_version_id;
COMMENT ON VIEW audit_validations IS
    'One row per (validation run, expectation): which label set or label file, which check, '
    'which rows broke it.';

CREATE VIEW audit_label_set_versions AS
SELECT v.id AS version_id, v.name AS lineage,
       row_number() OVER (PARTITION BY v.name ORDER BY v.id) AS version,
       v.label_set_id, ls.fingerprint, ls.n_items, ls.n_positive, v.reason, v.parent_id,
       v.update_id, u.path AS label_file, u.file_sha256 AS label_file_sha256, v.created_at, v.flow_run_id,
       v.data_version_id, dv.dvc_hash AS data_dvc_hash, dv.git_rev AS data_git_rev
FROM label_set_versions v
JOIN label_sets ls ON ls.id = v.label_set_id
LEFT JOIN label_updates u ON u.id = v.update_id
LEFT JOIN data_versions dv ON dv.id = v.data_version_id;
COMMENT ON VIEW audit_label_set_versions IS
    'Every version of every label-set lineage, with the label file and data version that made it.';

COMMENT ON TABLE change_events IS
    'Label and guideline changes (one per label update / guideline version) and the Prefect '
    'event emitted for each.';
"""

DOWNGRADE = """
DROP VIEW audit_validations, audit_label_set_versions;
DROP TABLE change_events;
ALTER TABLE calibrated_results DROP COLUMN computed_in_run;
ALTER TABLE calibration_runs DROP COLUMN mode, DROP COLUMN parent_run_id;
DROP TABLE validation_results, validation_runs, target_claims, calibration_targets, label_set_versions;
ALTER TABLE labels DROP COLUMN update_id;
DROP TABLE label_updates, flow_run_data_versions, flow_runs;
ALTER TABLE label_sets DROP COLUMN flow_run_id;
ALTER TABLE embeddings DROP COLUMN flow_run_id;
ALTER TABLE claims DROP COLUMN flow_run_id;
ALTER TABLE data_versions DROP COLUMN flow_run_id;
DROP FUNCTION stamp_flow_run_id() CASCADE;
"""


#: new tables whose rows are evidence: never updated or deleted (0002's trigger function)
APPEND_ONLY = (
    "flow_runs", "flow_run_data_versions", "label_updates", "label_set_versions", "calibration_targets",
    "target_claims", "validation_runs", "validation_results", "change_events",
)

APPEND_ONLY_TRIGGERS = """
DO $$
DECLARE t text;
BEGIN
    IF to_regproc('checkworthy_append_only') IS NULL THEN
        RETURN;
    END IF;
    FOREACH t IN ARRAY ARRAY[{tables}] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE OR DELETE ON %I FOR EACH ROW '
                       'EXECUTE FUNCTION checkworthy_append_only()', t || '_append_only', t);
        EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I FOR EACH STATEMENT '
                       'EXECUTE FUNCTION checkworthy_append_only()', t || '_no_truncate', t);
    END LOOP;
END $$;
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    for table in STAMPED:
        op.execute(
            f"CREATE TRIGGER {table}_stamp_flow_run BEFORE INSERT ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION stamp_flow_run_id()"
        )
    op.execute(APPEND_ONLY_TRIGGERS.replace("{tables}", ", ".join(f"'{t}'" for t in APPEND_ONLY)))


def downgrade() -> None:
    op.execute(DOWNGRADE)
