"""The HTTP API: keys, their revocations, and one row per request that stored claims.

- ``api_keys``: a key's name, role (``scorer`` submits texts and reads explanations, ``auditor``
  only reads) and the sha256 of the secret (the secret itself is shown once and never stored).
- ``api_key_revocations``: a key is revoked by adding a row here (the key row never changes); the
  server looks the key up on every request, so revocation is immediate.
- ``api_requests``: what a request stored: its key, endpoint, the run it was calibrated with
  (``served_run_id``) and the run that holds its results (``run_id``, NULL when no text had a
  usable score), and its claims in input order.
- ``calibration_runs.mode`` gains ``served``: a request's own run, whose parent is the served run.

All three tables are append-only. The pipeline group inserts; the auditor group reads everything
but the key hashes.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE api_keys (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9._-]{1,64}$'),
    role        text NOT NULL CHECK (role IN ('scorer', 'auditor')),
    key_prefix  text NOT NULL,
    key_hash    text NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE api_keys IS
    'API keys: name, role, the first characters of the key (to recognise it) and the sha256 of the key.';

CREATE TABLE api_key_revocations (
    key_id      bigint PRIMARY KEY REFERENCES api_keys,
    revoked_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE api_key_revocations IS 'A key listed here is refused from the moment the row exists.';

CREATE TABLE api_requests (
    id             bigserial PRIMARY KEY,
    request_uid    uuid NOT NULL UNIQUE,
    key_id         bigint NOT NULL REFERENCES api_keys,
    endpoint       text NOT NULL,
    served_run_id  bigint NOT NULL REFERENCES calibration_runs,
    run_id         bigint REFERENCES calibration_runs,
    claim_ids      bigint[] NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_requests_run ON api_requests (run_id);
COMMENT ON TABLE api_requests IS
    'One request that stored claims: key, endpoint, the run it was calibrated with, the run holding '
    'its results, its claims in input order.';

ALTER TABLE calibration_runs DROP CONSTRAINT calibration_runs_mode_check;
ALTER TABLE calibration_runs ADD CONSTRAINT calibration_runs_mode_check
    CHECK (mode IN ('full', 'incremental', 'served'));
COMMENT ON COLUMN calibration_runs.mode IS
    'full; incremental (rows copied from parent_run_id); served (an API request calibrated with '
    'the fitted calibration of parent_run_id)';
"""

APPEND_ONLY = """
CREATE TRIGGER api_keys_append_only BEFORE UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER api_keys_no_truncate BEFORE TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER api_key_revocations_append_only BEFORE UPDATE OR DELETE ON api_key_revocations
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER api_key_revocations_no_truncate BEFORE TRUNCATE ON api_key_revocations
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER api_requests_append_only BEFORE UPDATE OR DELETE ON api_requests
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER api_requests_no_truncate BEFORE TRUNCATE ON api_requests
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
ALTER TABLE api_keys OWNER TO checkworthy_owner;
ALTER TABLE api_key_revocations OWNER TO checkworthy_owner;
ALTER TABLE api_requests OWNER TO checkworthy_owner;
GRANT SELECT ON api_keys, api_key_revocations, api_requests TO checkworthy_pipeline;
REVOKE SELECT ON api_keys FROM checkworthy_auditor;
GRANT SELECT (id, name, role, key_prefix, created_at) ON api_keys TO checkworthy_auditor;
GRANT SELECT ON api_key_revocations, api_requests TO checkworthy_auditor;
GRANT INSERT ON api_keys, api_key_revocations, api_requests TO checkworthy_pipeline;
GRANT USAGE, SELECT ON SEQUENCE api_keys_id_seq, api_requests_id_seq TO checkworthy_pipeline;
"""


def upgrade() -> None:
    op.execute(UPGRADE)
    op.execute(APPEND_ONLY)


def downgrade() -> None:
    op.execute("ALTER TABLE calibration_runs DROP CONSTRAINT calibration_runs_mode_check; "
               "ALTER TABLE calibration_runs ADD CONSTRAINT calibration_runs_mode_check "
               "CHECK (mode IN ('full', 'incremental')); "
               "DROP TABLE api_requests; DROP TABLE api_key_revocations; DROP TABLE api_keys;")
