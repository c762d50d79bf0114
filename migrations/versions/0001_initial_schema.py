"""Initial schema: claims, labels, embeddings, models, prompts, predictions, runs, results.

Texts are stored once (keyed by the sha256 of the text) so that an embedding or a score is
computed once per distinct text, whichever datasets share it. Labels are appended, never
overwritten: the current label of a claim is its newest row.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UPGRADE = """
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE data_versions (
    id          bigserial PRIMARY KEY,
    dvc_hash    text NOT NULL,
    git_rev     text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (dvc_hash, git_rev)
);
COMMENT ON TABLE data_versions IS 'A version of data/ (the md5 in data.dvc) at a git revision.';

CREATE TABLE texts (
    text_hash   char(64) PRIMARY KEY,
    text        text NOT NULL CHECK (btrim(text) <> ''),
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE texts IS 'Each distinct claim text once; text_hash = sha256 of the UTF-8 text.';

CREATE TABLE claims (
    id          bigserial PRIMARY KEY,
    dataset     text NOT NULL,
    split       text NOT NULL,
    source_id   text NOT NULL,
    text_hash   char(64) NOT NULL REFERENCES texts,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (dataset, source_id)
);
CREATE INDEX claims_text_hash ON claims (text_hash);

CREATE TABLE labels (
    id          bigserial PRIMARY KEY,
    claim_id    bigint NOT NULL REFERENCES claims,
    label       smallint NOT NULL CHECK (label IN (0, 1)),
    source      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    flow_run_id text
);
CREATE INDEX labels_claim ON labels (claim_id, id DESC);
COMMENT ON TABLE labels IS 'Append-only label history; the current label is the newest row per claim.';

CREATE VIEW current_labels AS
SELECT DISTINCT ON (claim_id) claim_id, label, id AS label_id, source, created_at
FROM labels ORDER BY claim_id, id DESC;

CREATE TABLE embeddings (
    text_hash   char(64) NOT NULL REFERENCES texts,
    model       text NOT NULL,
    embedding   vector(384) NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (text_hash, model)
);

CREATE TABLE models (
    id          bigserial PRIMARY KEY,
    spec        text NOT NULL UNIQUE,
    kind        text NOT NULL,
    details     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE prompt_versions (
    id               text PRIMARY KEY,
    guidelines       text NOT NULL,
    template_version text NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now()
);
INSERT INTO prompt_versions (id, guidelines, template_version)
VALUES ('none', '', 'scores that use no prompt (imported, classifier)');

CREATE TABLE predictions (
    id              bigserial PRIMARY KEY,
    text_hash       char(64) NOT NULL REFERENCES texts,
    model_id        bigint NOT NULL REFERENCES models,
    prompt_version  text NOT NULL REFERENCES prompt_versions,
    params          jsonb NOT NULL,
    params_hash     char(64) NOT NULL,
    score_kind      text NOT NULL,
    score           double precision CHECK (score >= 0 AND score <= 1),
    raw_output      text NOT NULL,
    parse_status    text NOT NULL,
    usage           jsonb NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    flow_run_id     text,
    CHECK ((parse_status = 'ok') = (score IS NOT NULL)),
    UNIQUE (text_hash, model_id, prompt_version, params_hash, score_kind)
);
COMMENT ON TABLE predictions IS 'One score per text, model, prompt version, generation parameters and score kind; a parse failure keeps its raw output and has no score.';

CREATE TABLE label_sets (
    id               bigserial PRIMARY KEY,
    name             text NOT NULL,
    fingerprint      char(64) NOT NULL,
    n_items          integer NOT NULL,
    n_positive       integer NOT NULL,
    data_version_id  bigint REFERENCES data_versions,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (name, fingerprint)
);
COMMENT ON COLUMN label_sets.fingerprint IS 'sha256 over the sorted (text_hash, label) pairs: the same labelled set always has the same fingerprint.';

CREATE TABLE label_set_items (
    label_set_id  bigint NOT NULL REFERENCES label_sets,
    claim_id      bigint NOT NULL REFERENCES claims,
    label_id      bigint NOT NULL REFERENCES labels,
    label         smallint NOT NULL CHECK (label IN (0, 1)),
    PRIMARY KEY (label_set_id, claim_id)
);

CREATE TABLE calibration_runs (
    id                bigserial PRIMARY KEY,
    run_key           char(64) NOT NULL,
    target            text NOT NULL,
    label_set_id      bigint NOT NULL REFERENCES label_sets,
    label_set_fingerprint char(64) NOT NULL,
    model_id          bigint NOT NULL REFERENCES models,
    prompt_version    text NOT NULL REFERENCES prompt_versions,
    params_hash       char(64) NOT NULL,
    score_kind        text NOT NULL,
    embed_model       text NOT NULL,
    k                 integer NOT NULL CHECK (k > 0),
    alpha             double precision NOT NULL CHECK (alpha > 0 AND alpha < 1),
    threshold         double precision NOT NULL,
    interval_method   text NOT NULL DEFAULT 'z',
    params            jsonb NOT NULL DEFAULT '{}',
    status            text NOT NULL CHECK (status IN ('running', 'complete', 'failed')),
    started_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    flow_run_id       text,
    code_rev          text NOT NULL DEFAULT '',
    data_version_id   bigint REFERENCES data_versions
);
CREATE UNIQUE INDEX calibration_runs_one_complete ON calibration_runs (run_key) WHERE status = 'complete';
COMMENT ON COLUMN calibration_runs.run_key IS 'sha256 of every input of the run; a complete run with the same key is reused, not recomputed.';

CREATE TABLE calibrated_results (
    run_id             bigint NOT NULL REFERENCES calibration_runs,
    claim_id           bigint NOT NULL REFERENCES claims,
    score              double precision NOT NULL,
    theta              double precision NOT NULL,
    ci_low             double precision NOT NULL,
    ci_high            double precision NOT NULL,
    decision           boolean NOT NULL,
    knn_mean           double precision NOT NULL,
    neighbor_ids       bigint[] NOT NULL,
    neighbor_distances double precision[] NOT NULL,
    PRIMARY KEY (run_id, claim_id)
);

CREATE TABLE evaluation_metrics (
    run_id     bigint NOT NULL REFERENCES calibration_runs,
    method     text NOT NULL,
    metric     text NOT NULL,
    class      text NOT NULL DEFAULT 'all',
    value      double precision,
    PRIMARY KEY (run_id, method, metric, class)
);
COMMENT ON TABLE evaluation_metrics IS 'Metrics as rows: method in (baseline, knn, nnppi), class in (0, 1, all).';

CREATE TABLE reports (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL,
    run_ids     bigint[] NOT NULL,
    markdown    text NOT NULL,
    path        text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    flow_run_id text
);
"""

DOWNGRADE = """
DROP TABLE reports, evaluation_metrics, calibrated_results, calibration_runs, label_set_items,
    label_sets, predictions, prompt_versions, models, embeddings;
DROP VIEW current_labels;
DROP TABLE labels, claims, texts, data_versions;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
