"""Audit roles, append-only enforcement and audit views.

Roles (cluster-wide, NOLOGIN group roles; people and services log in as *members*, created
with passwords from the environment by ``python -m checkworthy.store.audit bootstrap``, so no
secret ever sits in a migration):

- ``checkworthy_owner``   owns every table and view and runs the migrations. The login
  that migrates (``postgres`` on the embedded server, ``POSTGRES_USER`` in docker-compose)
  is made a member.
- ``checkworthy_pipeline`` writes: SELECT + INSERT on the data tables, USAGE on their
  sequences, and UPDATE only on ``calibration_runs (status, finished_at, params)``, the one
  update the code makes. No DELETE, no TRUNCATE, no DDL, no temporary tables.
- ``checkworthy_auditor`` reads: SELECT on every table and view, nothing else (no INSERT,
  UPDATE, DELETE, TRUNCATE, no CREATE in the schema, no temporary tables).

Default privileges give the same read/append rights on tables later migrations create.

Append-only records: a BEFORE UPDATE OR DELETE row trigger and a BEFORE TRUNCATE statement
trigger raise on every table whose rows are evidence (labels, predictions, calibrated
results, metrics, reports, label sets and their items, and the texts, claims, models,
prompts, embeddings and data versions they point to). The triggers bind every role,
the owner included; a correction is a new row (a new label, a new label set, a new run).
``calibration_runs`` is guarded instead of frozen: a run is inserted as 'running', may move
once to 'complete' or 'failed' (setting ``finished_at`` and adding keys to ``params``), and
is never changed again; 'complete' is refused unless the run holds exactly
``params->>'n_calibrated'`` results. Results and metrics can only be added to a 'running'
run, so a finished run can never gain rows.

Audit views: ``audit_claim_scores``, ``audit_decisions`` (one row per run and claim),
``audit_decision_lineage`` (one row per run, claim and neighbour), ``audit_run_history``,
``audit_label_history``. See docs/audit.md for example queries. A view over validation
results belongs with the table that holds them (migration 0003).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

OWNER, PIPELINE, AUDITOR = "checkworthy_owner", "checkworthy_pipeline", "checkworthy_auditor"

#: tables whose rows never change once written
APPEND_ONLY = (
    "data_versions", "texts", "claims", "labels", "embeddings", "models", "prompt_versions",
    "predictions", "label_sets", "label_set_items", "calibrated_results", "evaluation_metrics",
    "reports",
)
#: tables the pipeline appends to (calibration_runs: plus its guarded status update)
PIPELINE_INSERT = APPEND_ONLY + ("calibration_runs",)

ROLES = f"""
DO $$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['{OWNER}', '{PIPELINE}', '{AUDITOR}'] LOOP
        BEGIN
            -- roles are cluster-wide: another database of the cluster may have made them
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created concurrently by a migration of another database
        END;
    END LOOP;
END $$;
GRANT {OWNER} TO CURRENT_USER;
"""

OWNERSHIP = f"""
DO $$
DECLARE r record;
BEGIN
    FOR r IN
        SELECT c.oid::regclass AS rel, c.relkind FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm')
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                          AND d.objid = c.oid AND d.deptype = 'e')
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO {OWNER}',
                       CASE r.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                       ELSE 'TABLE' END, r.rel);
    END LOOP;
END $$;
"""


def _database_grants(grant: bool) -> str:
    """CONNECT/TEMP only for our roles (PUBLIC gets both by default; TEMP lets anyone create)."""
    if grant:
        body = f"""
            EXECUTE format('REVOKE CONNECT, TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
            EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO {OWNER}, {PIPELINE}',
                           current_database());
            EXECUTE format('GRANT CONNECT ON DATABASE %I TO {AUDITOR}', current_database());"""
    else:
        body = f"""
            EXECUTE format('REVOKE ALL ON DATABASE %I FROM {OWNER}, {PIPELINE}, {AUDITOR}',
                           current_database());
            EXECUTE format('GRANT CONNECT, TEMPORARY ON DATABASE %I TO PUBLIC', current_database());"""
    return f"DO $$ BEGIN {body}\nEND $$;"


def _default_privileges(verb: str) -> str:
    """Rights on tables created by later migrations, whichever of the two roles creates them."""
    to = "TO" if verb == "GRANT" else "FROM"
    out = []
    for creator in ("CURRENT_USER", OWNER):
        pre = f"ALTER DEFAULT PRIVILEGES FOR ROLE {creator} IN SCHEMA public {verb}"
        out += [
            f"{pre} SELECT ON TABLES {to} {AUDITOR};",
            f"{pre} SELECT, INSERT ON TABLES {to} {PIPELINE};",
            f"{pre} USAGE, SELECT ON SEQUENCES {to} {PIPELINE};",
        ]
    return "\n".join(out)


GRANTS = f"""
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE, CREATE ON SCHEMA public TO {OWNER};
GRANT USAGE ON SCHEMA public TO {PIPELINE}, {AUDITOR};
GRANT SELECT ON ALL TABLES IN SCHEMA public TO {AUDITOR}, {PIPELINE};
GRANT INSERT ON {", ".join(PIPELINE_INSERT)} TO {PIPELINE};
GRANT UPDATE (status, finished_at, params) ON calibration_runs TO {PIPELINE};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {PIPELINE};
{_database_grants(True)}
{_default_privileges("GRANT")}
"""

TRIGGERS = """
CREATE FUNCTION checkworthy_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% on %.% refused: the table is append-only', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation',
              HINT = 'records are never changed in place: insert a new row (a new label, label set or run)';
END $$;
COMMENT ON FUNCTION checkworthy_append_only() IS
    'Trigger function: refuses UPDATE, DELETE and TRUNCATE. Attach it to any table whose rows are evidence.';

CREATE FUNCTION checkworthy_guard_run() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE n_results bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status <> 'running' OR NEW.finished_at IS NOT NULL THEN
            RAISE EXCEPTION 'calibration run must be inserted as running, got %', NEW.status
                USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP <> 'UPDATE' THEN
        RAISE EXCEPTION '% on calibration_runs refused: runs are never deleted', TG_OP
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF OLD.status <> 'running' THEN
        RAISE EXCEPTION 'calibration run % is %: a finished run is never changed', OLD.id, OLD.status
            USING ERRCODE = 'restrict_violation', HINT = 'start a new run instead';
    END IF;
    IF (to_jsonb(NEW) - ARRAY['status', 'finished_at', 'params'])
       IS DISTINCT FROM (to_jsonb(OLD) - ARRAY['status', 'finished_at', 'params']) THEN
        RAISE EXCEPTION 'calibration run %: only status, finished_at and params may change', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NOT NEW.params @> OLD.params THEN
        RAISE EXCEPTION 'calibration run %: params may only gain keys, not lose or change them', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.status = 'running' AND NEW.finished_at IS NOT NULL THEN
        RAISE EXCEPTION 'calibration run %: a running run has no finished_at', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.status <> 'running' AND NEW.finished_at IS NULL THEN
        RAISE EXCEPTION 'calibration run %: finishing a run sets finished_at', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.status = 'complete' AND NEW.params ? 'n_calibrated' THEN
        SELECT count(*) INTO n_results FROM calibrated_results WHERE run_id = NEW.id;
        IF n_results <> (NEW.params->>'n_calibrated')::bigint THEN
            RAISE EXCEPTION 'calibration run %: % results stored, % expected; not marked complete',
                OLD.id, n_results, NEW.params->>'n_calibrated' USING ERRCODE = 'restrict_violation';
        END IF;
    END IF;
    RETURN NEW;
END $$;
COMMENT ON FUNCTION checkworthy_guard_run() IS
    'Trigger function: runs are inserted running, finish once (complete/failed), then never change.';

CREATE FUNCTION checkworthy_only_running_runs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE bad record;
BEGIN
    SELECT r.id, r.status INTO bad FROM calibration_runs r
    WHERE r.id IN (SELECT DISTINCT run_id FROM new_rows) AND r.status <> 'running' LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'calibration run % is %: rows can only be added to a running run', bad.id, bad.status
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER calibration_runs_guard BEFORE INSERT OR UPDATE OR DELETE ON calibration_runs
    FOR EACH ROW EXECUTE FUNCTION checkworthy_guard_run();
CREATE TRIGGER calibration_runs_no_truncate BEFORE TRUNCATE ON calibration_runs
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER calibrated_results_running_run AFTER INSERT ON calibrated_results
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_only_running_runs();
CREATE TRIGGER evaluation_metrics_running_run AFTER INSERT ON evaluation_metrics
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_only_running_runs();
"""


def _append_only_triggers() -> str:
    out = []
    for t in APPEND_ONLY:
        out.append(
            f"CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON {t} "
            f"FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();\n"
            f"CREATE TRIGGER {t}_no_truncate BEFORE TRUNCATE ON {t} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();"
        )
    return "\n".join(out)


VIEWS = """
-- auditors look decisions up by claim: make that an index scan
CREATE INDEX calibrated_results_claim ON calibrated_results (claim_id);
CREATE INDEX label_set_items_label ON label_set_items (label_id);
CREATE INDEX claims_source_id ON claims (source_id);

CREATE VIEW audit_claim_scores AS
SELECT c.id AS claim_id, c.dataset, c.split, c.source_id, c.text_hash, t.text,
       p.id AS prediction_id, m.spec AS model, m.kind AS model_kind, m.details AS model_details,
       p.prompt_version, pv.template_version AS prompt_template_version,
       p.params, p.params_hash, p.score_kind, p.score, p.parse_status, p.raw_output, p.usage,
       p.created_at AS scored_at, p.flow_run_id
FROM claims c
JOIN texts t ON t.text_hash = c.text_hash
JOIN predictions p ON p.text_hash = c.text_hash
JOIN models m ON m.id = p.model_id
JOIN prompt_versions pv ON pv.id = p.prompt_version;
COMMENT ON VIEW audit_claim_scores IS
    'Every stored score of every claim, with model, prompt version and generation parameters.';

CREATE VIEW audit_decisions AS
SELECT r.run_id, r.claim_id, c.dataset, c.split, c.source_id, c.text_hash, t.text,
       run.model_id, m.spec AS model, run.prompt_version, run.params_hash, run.score_kind,
       p.id AS prediction_id, p.params AS score_params, p.parse_status, p.raw_output,
       p.created_at AS scored_at, p.flow_run_id AS score_flow_run_id,
       r.score,
       ls.id AS label_set_id, ls.name AS label_set_name, ls.fingerprint AS label_set_fingerprint,
       ls.n_items AS label_set_size, ls.n_positive AS label_set_positives,
       ls.created_at AS label_set_created_at,
       run.embed_model, run.k, run.alpha, run.threshold, run.interval_method,
       r.knn_mean, r.theta, r.ci_low, r.ci_high, r.decision,
       r.neighbor_ids, r.neighbor_distances,
       gold.label AS current_label, gold.id AS current_label_id,
       run.target, run.status AS run_status, run.run_key,
       run.started_at AS run_started_at, run.finished_at AS run_finished_at,
       run.flow_run_id AS run_flow_run_id, run.code_rev,
       COALESCE(run.data_version_id, ls.data_version_id) AS data_version_id,
       dv.dvc_hash AS data_dvc_hash, dv.git_rev AS data_git_rev
FROM calibrated_results r
JOIN calibration_runs run ON run.id = r.run_id
JOIN claims c ON c.id = r.claim_id
JOIN texts t ON t.text_hash = c.text_hash
JOIN models m ON m.id = run.model_id
JOIN label_sets ls ON ls.id = run.label_set_id
LEFT JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = run.model_id
     AND p.prompt_version = run.prompt_version AND p.params_hash = run.params_hash
     AND p.score_kind = run.score_kind
LEFT JOIN data_versions dv ON dv.id = COALESCE(run.data_version_id, ls.data_version_id)
LEFT JOIN LATERAL (SELECT l.id, l.label FROM labels l WHERE l.claim_id = r.claim_id
                   ORDER BY l.id DESC LIMIT 1) gold ON true;
COMMENT ON VIEW audit_decisions IS
    'One row per (run, claim): text, the score used (model, prompt version, parameters), label set, '
    'k/alpha/threshold, theta, interval, decision, and the run''s flow run, code and data versions.';

CREATE VIEW audit_decision_lineage AS
SELECT d.run_id, d.claim_id, d.dataset, d.source_id, d.text, d.model, d.prompt_version,
       d.score_params, d.score_kind, d.prediction_id, d.score,
       d.label_set_id, d.label_set_name, d.label_set_fingerprint,
       d.k, d.alpha, d.threshold, d.interval_method,
       nb.rank AS neighbor_rank, nb.neighbor_id, nc.dataset AS neighbor_dataset,
       nc.source_id AS neighbor_source_id, nt.text AS neighbor_text,
       nb.distance AS neighbor_distance,
       li.label AS neighbor_label, li.label_id AS neighbor_label_id,
       nl.source AS neighbor_label_source, nl.created_at AS neighbor_labelled_at,
       np.id AS neighbor_prediction_id, np.score AS neighbor_score,
       li.label - np.score AS neighbor_residual,
       d.knn_mean, d.theta, d.ci_low, d.ci_high, d.decision,
       d.run_status, d.run_started_at, d.run_finished_at, d.run_flow_run_id, d.code_rev,
       d.data_version_id, d.data_dvc_hash, d.data_git_rev
FROM audit_decisions d
CROSS JOIN LATERAL unnest(d.neighbor_ids, d.neighbor_distances)
     WITH ORDINALITY AS nb(neighbor_id, distance, rank)
JOIN claims nc ON nc.id = nb.neighbor_id
JOIN texts nt ON nt.text_hash = nc.text_hash
LEFT JOIN label_set_items li ON li.label_set_id = d.label_set_id AND li.claim_id = nb.neighbor_id
LEFT JOIN labels nl ON nl.id = li.label_id
LEFT JOIN predictions np ON np.text_hash = nc.text_hash AND np.model_id = d.model_id
     AND np.prompt_version = d.prompt_version AND np.params_hash = d.params_hash
     AND np.score_kind = d.score_kind;
COMMENT ON VIEW audit_decision_lineage IS
    'One row per (run, claim, neighbour): the decision of audit_decisions with each neighbour''s '
    'text, frozen label (label set item), score, residual and distance, nearest first.';

CREATE VIEW audit_run_history AS
SELECT run.id AS run_id, run.target, run.status,
       CASE
           WHEN run.status <> 'running' THEN run.status
           WHEN EXISTS (
               SELECT 1 FROM pg_locks l
               WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                 AND l.classid::bigint = (hashtextextended(run.run_key, 0) >> 32) & 4294967295
                 AND l.objid::bigint = hashtextextended(run.run_key, 0) & 4294967295)
           THEN 'running'
           ELSE 'interrupted'
       END AS effective_status,
       run.started_at, run.finished_at, run.finished_at - run.started_at AS duration,
       run.run_key, run.label_set_id, ls.name AS label_set_name,
       ls.fingerprint AS label_set_fingerprint, ls.n_items AS label_set_size,
       ls.n_positive AS label_set_positives,
       run.model_id, m.spec AS model, run.prompt_version, run.params_hash, run.score_kind,
       run.embed_model, run.k, run.alpha, run.threshold, run.interval_method, run.params,
       (SELECT count(*) FROM calibrated_results r WHERE r.run_id = run.id) AS n_results,
       (SELECT count(*) FROM calibrated_results r WHERE r.run_id = run.id AND r.decision)
           AS n_checkworthy,
       (SELECT e.value FROM evaluation_metrics e WHERE e.run_id = run.id AND e.method = 'nnppi'
          AND e.metric = 'weighted_f1' AND e.class = 'all') AS nnppi_weighted_f1,
       (SELECT array_agg(rep.id ORDER BY rep.id) FROM reports rep WHERE run.id = ANY (rep.run_ids))
           AS report_ids,
       run.flow_run_id, run.code_rev,
       COALESCE(run.data_version_id, ls.data_version_id) AS data_version_id,
       dv.dvc_hash AS data_dvc_hash, dv.git_rev AS data_git_rev
FROM calibration_runs run
JOIN label_sets ls ON ls.id = run.label_set_id
JOIN models m ON m.id = run.model_id
LEFT JOIN data_versions dv ON dv.id = COALESCE(run.data_version_id, ls.data_version_id);
COMMENT ON VIEW audit_run_history IS
    'One row per calibration run. effective_status: a run left running by a crash whose lock is '
    'no longer held shows as interrupted; its rerun is a new row with the same run_key.';

CREATE VIEW audit_label_history AS
SELECT l.id AS label_id, l.claim_id, c.dataset, c.split, c.source_id, t.text, l.label,
       lag(l.label) OVER w AS previous_label,
       row_number() OVER w AS version,
       l.id = max(l.id) OVER (PARTITION BY l.claim_id) AS is_current,
       l.source, l.created_at, l.flow_run_id,
       (SELECT array_agg(i.label_set_id ORDER BY i.label_set_id) FROM label_set_items i
        WHERE i.label_id = l.id) AS label_set_ids
FROM labels l
JOIN claims c ON c.id = l.claim_id
JOIN texts t ON t.text_hash = c.text_hash
WINDOW w AS (PARTITION BY l.claim_id ORDER BY l.id);
COMMENT ON VIEW audit_label_history IS
    'Every label ever given to a claim, oldest first (version), with the label sets that froze it.';
"""

AUDIT_VIEWS = ("audit_claim_scores", "audit_decisions", "audit_decision_lineage",
               "audit_run_history", "audit_label_history")


def upgrade() -> None:
    op.execute(ROLES)
    op.execute(TRIGGERS)
    op.execute(_append_only_triggers())
    op.execute(VIEWS)
    op.execute(OWNERSHIP)
    op.execute(
        "ALTER FUNCTION checkworthy_append_only() OWNER TO checkworthy_owner;"
        "ALTER FUNCTION checkworthy_guard_run() OWNER TO checkworthy_owner;"
        "ALTER FUNCTION checkworthy_only_running_runs() OWNER TO checkworthy_owner;"
    )
    op.execute(GRANTS)


def downgrade() -> None:
    op.execute(_default_privileges("REVOKE"))
    op.execute(_database_grants(False))
    op.execute(
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {PIPELINE}, {AUDITOR};"
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {PIPELINE};"
        f"REVOKE ALL ON SCHEMA public FROM {OWNER}, {PIPELINE}, {AUDITOR};"
    )
    op.execute("DROP VIEW " + ", ".join(reversed(AUDIT_VIEWS)) + ";")
    op.execute("DROP INDEX calibrated_results_claim, label_set_items_label, claims_source_id;")
    for t in APPEND_ONLY:
        op.execute(f"DROP TRIGGER {t}_append_only ON {t}; DROP TRIGGER {t}_no_truncate ON {t};")
    op.execute(
        "DROP TRIGGER calibration_runs_guard ON calibration_runs;"
        "DROP TRIGGER calibration_runs_no_truncate ON calibration_runs;"
        "DROP TRIGGER calibrated_results_running_run ON calibrated_results;"
        "DROP TRIGGER evaluation_metrics_running_run ON evaluation_metrics;"
        "DROP FUNCTION checkworthy_only_running_runs(), checkworthy_guard_run(),"
        " checkworthy_append_only();"
    )
    # objects go back to the migrating login; the roles stay (other databases of the cluster
    # may use them): drop them by hand with DROP OWNED / DROP ROLE if this was the last one
    op.execute(f"REASSIGN OWNED BY {OWNER} TO CURRENT_USER;")
