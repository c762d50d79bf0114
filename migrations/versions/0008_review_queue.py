"""The review queue: claims a person should decide, ranked by how much their label would help.

- ``review_queue``: each calibration run appends, while it is running, one entry per claim its
  decide-or-review rule sends to a person (``params->'review'``), with the claim's theta, its
  priority (1 at the threshold, 0 at the farthest theta: how uncertain the decision is, so how
  much a label would help) and the reason in words. Entries are never changed.
- ``review_answers``: a person's answer closes every entry of its claim. It is written in the
  transaction that appends the label (``labels add``, ``review import``), naming the label update.
- ``calibrations_in_force``: the newest complete run of each calibration (per label-set lineage),
  under the newest prompt.
- ``review_open``: what is still to be decided: entries of the runs in force whose claim has no
  answer, one row per claim (its most uncertain entry).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE review_queue (
    id          bigserial PRIMARY KEY,
    run_id      bigint NOT NULL REFERENCES calibration_runs,
    claim_id    bigint NOT NULL REFERENCES claims,
    theta       double precision NOT NULL,
    priority    double precision NOT NULL CHECK (priority BETWEEN 0 AND 1),
    reason      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, claim_id)
);
CREATE INDEX review_queue_claim ON review_queue (claim_id);
COMMENT ON TABLE review_queue IS
    'Append-only: the claims each calibration run sends to a person, with theta, priority and reason.';

CREATE TABLE review_answers (
    id          bigserial PRIMARY KEY,
    claim_id    bigint NOT NULL REFERENCES claims,
    label       smallint NOT NULL CHECK (label IN (0, 1)),
    update_id   bigint NOT NULL REFERENCES label_updates,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (claim_id, update_id)
);
COMMENT ON TABLE review_answers IS
    'Append-only: a person''s label for a queued claim, from the label update that brought it; '
    'it closes every queue entry of the claim.';

CREATE TRIGGER review_queue_running_run AFTER INSERT ON review_queue
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_only_running_runs();

CREATE VIEW calibrations_in_force AS
SELECT id AS run_id, target FROM (
    SELECT r.id, r.target,
           row_number() OVER (
               PARTITION BY ls.name, r.target, r.model_id, r.prompt_version, r.params_hash, r.score_kind,
                            r.embed_model, r.k, r.alpha, r.threshold, r.interval_method,
                            coalesce(r.params->>'correction', 'paper') ORDER BY r.id DESC) AS n,
           rank() OVER (PARTITION BY ls.name, r.target, r.model_id, r.score_kind
                        ORDER BY pv.created_at DESC) AS prompt_rank
    FROM calibration_runs r JOIN prompt_versions pv ON pv.id = r.prompt_version
    JOIN label_sets ls ON ls.id = r.label_set_id
    WHERE r.status = 'complete') x
WHERE n = 1 AND prompt_rank = 1;
COMMENT ON VIEW calibrations_in_force IS
    'The newest complete run of each calibration (label-set lineage, target, score key, k, alpha, '
    'threshold, interval, correction) under the newest prompt of its model and score kind.';

CREATE VIEW review_open AS
SELECT DISTINCT ON (q.claim_id) q.id AS entry_id, q.run_id, r.target, q.claim_id, c.dataset,
       c.source_id, t.text, q.theta, q.priority, q.reason, q.created_at
FROM review_queue q
JOIN calibrations_in_force f ON f.run_id = q.run_id
JOIN calibration_runs r ON r.id = q.run_id
JOIN claims c ON c.id = q.claim_id
JOIN texts t ON t.text_hash = c.text_hash
WHERE NOT EXISTS (SELECT 1 FROM review_answers a WHERE a.claim_id = q.claim_id)
ORDER BY q.claim_id, q.priority DESC, q.id DESC;
COMMENT ON VIEW review_open IS
    'Claims still to be decided by a person: one row per claim, from the runs in force, unanswered.';
"""

APPEND_ONLY = """
CREATE TRIGGER review_queue_append_only BEFORE UPDATE OR DELETE ON review_queue
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER review_queue_no_truncate BEFORE TRUNCATE ON review_queue
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER review_answers_append_only BEFORE UPDATE OR DELETE ON review_answers
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER review_answers_no_truncate BEFORE TRUNCATE ON review_answers
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
ALTER TABLE review_queue OWNER TO checkworthy_owner;
ALTER TABLE review_answers OWNER TO checkworthy_owner;
ALTER VIEW review_open OWNER TO checkworthy_owner;
ALTER VIEW calibrations_in_force OWNER TO checkworthy_owner;
GRANT SELECT ON review_queue, review_answers, review_open, calibrations_in_force
    TO checkworthy_auditor, checkworthy_pipeline;
GRANT INSERT ON review_queue, review_answers TO checkworthy_pipeline;
GRANT USAGE, SELECT ON SEQUENCE review_queue_id_seq, review_answers_id_seq TO checkworthy_pipeline;
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    op.execute(APPEND_ONLY)


def downgrade() -> None:
    op.execute("DROP VIEW review_open; DROP VIEW calibrations_in_force; DROP TABLE review_answers; "
               "DROP TABLE review_queue;")
