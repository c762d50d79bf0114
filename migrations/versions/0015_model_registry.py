"""The model registry: each lineage's trained models, their figures, and who is champion.

- ``model_versions``: one row per model a lineage may use (a model spec, e.g. an adapted
  classifier ``classifier:<name>@<version>`` or the project's recommended model), with the label
  set it was trained on (its fingerprint and counts), the code revision, the artefact (folder, DVC
  file and hash) and its cross-validated figures on the lineage's labels. Never changed.
- ``model_decisions``: every change of a version's status (``champion``, ``challenger``,
  ``retired``), by the promotion rule or by a person, with the figures it was decided on (the
  paired bootstrap of the positive-class F1 difference against the champion it was compared
  with). Never changed: a version's status is its newest decision.
- ``model_registry``: each version with its current status.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE model_versions (
    id                bigserial PRIMARY KEY,
    lineage           text NOT NULL,
    spec              text NOT NULL,
    label_set_id      bigint REFERENCES label_sets,
    label_fingerprint text,
    n_labels          integer,
    n_positive        integer,
    code_rev          text NOT NULL DEFAULT '',
    artefact          jsonb NOT NULL DEFAULT '{}',
    metrics           jsonb NOT NULL DEFAULT '{}',
    training          jsonb NOT NULL DEFAULT '{}',
    created_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (lineage, spec)
);
COMMENT ON TABLE model_versions IS
    'Append-only: a model a lineage may use, the labels it was trained on (fingerprint), code '
    'revision, artefact and cross-validated figures on the lineage''s labels.';

CREATE TABLE model_decisions (
    id           bigserial PRIMARY KEY,
    version_id   bigint NOT NULL REFERENCES model_versions,
    status       text NOT NULL CHECK (status IN ('champion', 'challenger', 'retired')),
    compared_with bigint REFERENCES model_versions,
    decided_by   text NOT NULL CHECK (decided_by IN ('rule', 'person')),
    reason       text NOT NULL,
    figures      jsonb NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX model_decisions_version ON model_decisions (version_id, id);
COMMENT ON TABLE model_decisions IS
    'Append-only: each status change of a model version, by the promotion rule or a person, with '
    'the figures it was decided on; a version''s status is its newest decision.';

CREATE VIEW model_registry AS
SELECT v.*, d.status, d.decided_by, d.reason, d.created_at AS decided_at
FROM model_versions v
JOIN LATERAL (SELECT status, decided_by, reason, created_at FROM model_decisions
              WHERE version_id = v.id ORDER BY id DESC LIMIT 1) d ON true;
COMMENT ON VIEW model_registry IS 'Each model version with its current status (its newest decision).';

CREATE TRIGGER model_versions_append_only BEFORE UPDATE OR DELETE ON model_versions
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER model_versions_no_truncate BEFORE TRUNCATE ON model_versions
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER model_decisions_append_only BEFORE UPDATE OR DELETE ON model_decisions
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER model_decisions_no_truncate BEFORE TRUNCATE ON model_decisions
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
ALTER TABLE model_versions OWNER TO checkworthy_owner;
ALTER TABLE model_decisions OWNER TO checkworthy_owner;
ALTER VIEW model_registry OWNER TO checkworthy_owner;
GRANT SELECT ON model_versions, model_decisions, model_registry TO checkworthy_auditor, checkworthy_pipeline;
GRANT INSERT ON model_versions, model_decisions TO checkworthy_pipeline;
GRANT USAGE, SELECT ON SEQUENCE model_versions_id_seq, model_decisions_id_seq TO checkworthy_pipeline;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP VIEW model_registry; DROP TABLE model_decisions; DROP TABLE model_versions;")
