"""The approximate kNN path: labelled texts' vectors under an HNSW index.

``knn_vectors`` holds a copy of the ``embeddings`` row of every text that belongs to a label set a
run searched with ``knn: hnsw`` (filled on demand, idempotent), under pgvector's HNSW index for
cosine distance. A run searches it restricted to its own pool (the texts of its label set that
are scored under its key) with pgvector's iterative index scans. Why a table of labelled texts
rather than an index on ``embeddings``: that table also holds every claim to be decided (a million
a day), so a pool of 25,000 labelled texts would be ~2% of the index and a filtered scan would
visit ~50 times more candidates (and stop at ``hnsw.max_scan_tuples`` with fewer than k); label
sets of one lineage share most texts, so a new label-set version adds only its new texts.

Rows are only ever added (an embedding never changes for its text and model), so the table is
append-only like the others.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE knn_vectors (
    text_hash  text NOT NULL REFERENCES texts,
    model      text NOT NULL,
    embedding  vector(384) NOT NULL,
    PRIMARY KEY (text_hash, model)
);
CREATE INDEX knn_vectors_hnsw ON knn_vectors USING hnsw (embedding vector_cosine_ops)
    WITH (m = 16, ef_construction = 64);
COMMENT ON TABLE knn_vectors IS
    'Labelled texts'' embeddings under an HNSW index (cosine): the approximate kNN path (knn: hnsw).';
CREATE TRIGGER knn_vectors_append_only BEFORE UPDATE OR DELETE ON knn_vectors
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER knn_vectors_no_truncate BEFORE TRUNCATE ON knn_vectors
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
ALTER TABLE knn_vectors OWNER TO checkworthy_owner;
GRANT SELECT ON knn_vectors TO checkworthy_auditor, checkworthy_pipeline;
GRANT INSERT ON knn_vectors TO checkworthy_pipeline;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE knn_vectors;")
