"""Calibrations in force per kNN path: an exact run and an HNSW run of the same calibration are two.

``calibrations_in_force`` (0008) took the newest complete run of each calibration without telling
the kNN path apart, so an HNSW run could hide the exact run it runs beside (and the review queue
of that run). The path (``params->'knn'->>'path'``, exact where a run records none) and the HNSW
``ef_search`` now belong to what makes a calibration, as they do for the recalibration that
continues a run.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

VIEW = """
CREATE OR REPLACE VIEW calibrations_in_force AS
SELECT id AS run_id, target FROM (
    SELECT r.id, r.target,
           row_number() OVER (
               PARTITION BY ls.name, r.target, r.model_id, r.prompt_version, r.params_hash, r.score_kind,
                            r.embed_model, r.k, r.alpha, r.threshold, r.interval_method,
                            coalesce(r.params->>'correction', 'paper'){knn} ORDER BY r.id DESC) AS n,
           rank() OVER (PARTITION BY ls.name, r.target, r.model_id, r.score_kind
                        ORDER BY pv.created_at DESC) AS prompt_rank
    FROM calibration_runs r JOIN prompt_versions pv ON pv.id = r.prompt_version
    JOIN label_sets ls ON ls.id = r.label_set_id
    WHERE r.status = 'complete') x
WHERE n = 1 AND prompt_rank = 1;
COMMENT ON VIEW calibrations_in_force IS
    'The newest complete run of each calibration (label-set lineage, target, score key, k, alpha, '
    'threshold, interval, correction{what}) under the newest prompt of its model and score kind.';
"""
KNN = ",\n                            coalesce(r.params->'knn'->>'path', 'exact'), r.params->'knn'->>'ef_search'"


def upgrade() -> None:
    op.execute(VIEW.format(knn=KNN, what=", kNN path and ef_search"))


def downgrade() -> None:
    op.execute(VIEW.format(knn="", what=""))
