"""Roles from the migrations: the pipeline writes, the auditor only reads, the owner migrates.

Each test logs in as a real member of a group role (the embedded server trusts its Unix
socket, so the logins need no password here), exactly as a person or service would in
production, and tries what the role must and must not be able to do.
"""

from __future__ import annotations

import csv
import re
import time

import numpy as np
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from checkworthy.cli.main import main
from checkworthy.config import ROOT
from checkworthy.errors import StoreBusy
from checkworthy.runs.own_scores import calibrate_files
from checkworthy.store import audit, lineages
from checkworthy.store.engine import APP_LOGIN, get_engine
from checkworthy.store.run_spec import RunMethods
from checkworthy.testing.claims import clef_claims

DENIED = "42501"  # insufficient_privilege
AUDITOR_LOGIN, PIPELINE_LOGIN = "cw_test_auditor", "cw_test_pipeline"


def _url_as(db_url: str, user: str) -> str:
    return make_url(db_url).set(username=user, password=None).render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def logins(owner_engine, owner_url) -> dict[str, str]:
    """A pipeline login and an auditor login, provisioned by the production code path (as the owner)."""
    with owner_engine.begin() as conn:
        audit.ensure_login(conn, PIPELINE_LOGIN, audit.PIPELINE_ROLE, None)
        audit.ensure_login(conn, AUDITOR_LOGIN, audit.AUDITOR_ROLE, None, read_only=True)
    return {"pipeline": _url_as(owner_url, PIPELINE_LOGIN), "auditor": _url_as(owner_url, AUDITOR_LOGIN)}


@pytest.fixture(scope="module")
def auditor(logins) -> Engine:
    eng = create_engine(logins["auditor"])
    yield eng
    eng.dispose()


@pytest.fixture(scope="module")
def pipeline_run(logins, tmp_path_factory):
    """`checkworthy calibrate`'s code path run entirely as the pipeline login (migration check,
    store, embeddings, kNN, run row update), on real claims."""
    claims = clef_claims()[70:160]  # embedded already by other tests of the session
    rng = np.random.default_rng(11)
    rows = [(c.source_id, c.text, round(float(np.clip(0.5 + 0.2 * c.label + rng.normal(0, 0.2), 0, 1)), 4),
             c.label) for c in claims]
    d = tmp_path_factory.mktemp("roles")
    for name, part in (("L.csv", rows[:60]), ("U.csv", rows[60:])):
        with open(d / name, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "text", "score", "label"])
            w.writerows(part)
    eng = get_engine(logins["pipeline"])  # runs the Alembic head check as the pipeline
    outcome = calibrate_files(eng, d / "L.csv", d / "U.csv", d / "OUT.csv", RunMethods(5))
    with open(d / "OUT.csv", newline="", encoding="utf-8") as fh:
        out = list(csv.DictReader(fh))
    return {"run_id": outcome.run_id, "out": out, "rows": rows, "dir": d, "engine": eng}


def _tables(conn, kinds: str = "rp") -> list[str]:
    return list(conn.execute(text(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind = ANY(:k) "
        "AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e') "
        "ORDER BY 1"), {"k": list(kinds)}).scalars())


def _denied(eng: Engine, sql: str, read_write: bool = True) -> str | None:
    """The SQLSTATE of ``sql`` as that login (None if it succeeded; then it is rolled back).

    ``read_write`` first switches the transaction to read-write, so a refusal comes from the
    privileges and not merely from the auditor's read-only default, which it could unset.
    """
    with eng.connect() as conn:
        try:
            if read_write:
                conn.execute(text("SET TRANSACTION READ WRITE"))
            conn.execute(text(sql))
        except DBAPIError as exc:
            conn.rollback()
            return getattr(exc.orig, "sqlstate", "?")
        conn.rollback()
    return None


def test_roles_exist_as_group_roles(owner_engine):
    with owner_engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles "
            "WHERE rolname LIKE 'checkworthy\\_%' ORDER BY 1")).all()
        owners = dict(conn.execute(text(
            "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
            "AND c.relkind IN ('r', 'v')")).all())
        migrator_is_owner = conn.execute(text(
            "SELECT pg_has_role(current_user, 'checkworthy_owner', 'MEMBER')")).scalar_one()
    # the three group roles, and the embedded server's application login (no privilege of its own)
    assert [tuple(r) for r in rows] == [(APP_LOGIN, True, False, False, False)] + [
        (r, False, False, False, False) for r in ("checkworthy_auditor", "checkworthy_owner", "checkworthy_pipeline")]
    for rel in ("labels", "predictions", "calibration_runs", "calibrated_results", "alembic_version",
                "current_labels", "audit_decisions", "audit_decision_lineage", "audit_run_history"):
        assert owners[rel] == "checkworthy_owner", rel
    assert migrator_is_owner


def test_auditor_reads_every_table_and_view(auditor):
    with auditor.connect() as conn:
        rels = _tables(conn, "rpv")
        assert {"audit_decisions", "audit_decision_lineage", "audit_run_history", "audit_label_history",
                "audit_claim_scores", "labels", "calibration_runs"} <= set(rels)
        for rel in rels:
            if rel == "api_keys":  # every column but the key hashes
                conn.execute(text("SELECT id, name, role, key_prefix, created_at FROM api_keys LIMIT 1")).all()
                continue
            conn.execute(text(f"SELECT * FROM {rel} LIMIT 1")).all()
        assert conn.execute(text("SHOW default_transaction_read_only")).scalar_one() == "on"


def test_auditor_cannot_read_the_api_key_hashes(auditor):
    assert _denied(auditor, "SELECT key_hash FROM api_keys", read_write=False) == "42501"


def test_auditor_cannot_write_or_create_anything(auditor, pipeline_run):
    with auditor.connect() as conn:
        tables = _tables(conn)
        views = _tables(conn, "v")
        sequences = _tables(conn, "S")
    attempts = []
    for t in tables:
        attempts += [f"INSERT INTO {t} DEFAULT VALUES", f"UPDATE {t} SET {_first_column(auditor, t)} = NULL",
                     f"DELETE FROM {t}", f"TRUNCATE {t}", f"SELECT * FROM {t} FOR UPDATE",
                     f"LOCK TABLE {t} IN EXCLUSIVE MODE", f"ALTER TABLE {t} DISABLE TRIGGER ALL",
                     f"DROP TABLE {t}", f"CREATE INDEX ON {t} ({_first_column(auditor, t)})",
                     f"COMMENT ON TABLE {t} IS 'mine'"]
    attempts += [f"CREATE OR REPLACE VIEW {v} AS SELECT 1 AS x" for v in views]
    attempts += [f"SELECT nextval('{s}')" for s in sequences]
    attempts += [
        "CREATE TABLE public.mine (x int)", "CREATE TEMP TABLE mine (x int)", "CREATE SCHEMA mine",
        "CREATE VIEW public.mine AS SELECT 1 AS x",
        "CREATE FUNCTION public.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "CREATE ROLE mine", "SET ROLE checkworthy_pipeline", "SET ROLE checkworthy_owner",
        "GRANT checkworthy_pipeline TO CURRENT_USER", "ALTER ROLE CURRENT_USER CREATEDB",
    ]
    # every attempt is refused for lack of privilege, not merely by the read-only default
    assert [(sql, code) for sql in attempts if (code := _denied(auditor, sql)) != DENIED] == []
    # views are not updatable at all (joins, DISTINCT ON): a write on one is refused as well
    assert all(_denied(auditor, f"DELETE FROM {v}") is not None for v in views)
    once = create_engine(auditor.url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with once.connect() as conn:
        conn.execute(text("SET default_transaction_read_only = off"))
        with pytest.raises(DBAPIError) as info:
            conn.execute(text("CREATE DATABASE mine"))  # cannot run inside a transaction block
    assert info.value.orig.sqlstate == DENIED
    # and by default the auditor's transactions are read-only as well
    assert _denied(auditor, "INSERT INTO labels DEFAULT VALUES", read_write=False) == "25006"


def _first_column(eng: Engine, table: str) -> str:
    with eng.connect() as conn:
        return conn.execute(text(
            "SELECT attname FROM pg_attribute WHERE attrelid = CAST(:t AS regclass) AND attnum = 1"),
            {"t": table}).scalar_one()


def test_pipeline_writes_only_what_the_code_writes(logins, pipeline_run):
    eng = pipeline_run["engine"]
    run_id = pipeline_run["run_id"]
    with eng.connect() as conn:
        assert conn.execute(text("SELECT status FROM calibration_runs WHERE id = :r"),
                            {"r": run_id}).scalar_one() == "complete"
        tables = _tables(conn)
    denied = {
        "UPDATE calibration_runs SET k = 1": DENIED,  # column-level grant: status/finished_at/params
        "UPDATE labels SET label = 1": DENIED,
        "DELETE FROM predictions": DENIED,
        "DELETE FROM calibration_runs": DENIED,
        "TRUNCATE calibrated_results": DENIED,
        "INSERT INTO alembic_version VALUES ('9999')": DENIED,
        "DROP TABLE labels": DENIED,
        "ALTER TABLE labels DISABLE TRIGGER ALL": DENIED,
        "CREATE TABLE public.mine (x int)": DENIED,
        "SET ROLE checkworthy_owner": DENIED,
        # the guard still binds where the grant allows the update: a finished run never changes
        f"UPDATE calibration_runs SET status = 'failed', finished_at = now() WHERE id = {run_id}": "23001",
    }
    for t in tables:
        if t not in {"calibration_runs", "alembic_version"}:
            denied[f"UPDATE {t} SET {_first_column(eng, t)} = {_first_column(eng, t)}"] = DENIED
            denied[f"DELETE FROM {t}"] = DENIED
    got = {sql: _denied(eng, sql) for sql in denied}
    assert got == denied
    # temporary tables are allowed to the pipeline (not to the auditor)
    assert _denied(eng, "CREATE TEMP TABLE scratch (x int)") is None


_COPY_RUN = text(
    """INSERT INTO calibration_runs (run_key, target, label_set_id, label_set_fingerprint, model_id,
       prompt_version, params_hash, score_kind, embed_model, k, alpha, threshold, params, status, claim_ids,
       code_rev)
       SELECT :key, target, label_set_id, label_set_fingerprint, model_id, prompt_version, params_hash,
              score_kind, embed_model, k, alpha, threshold, CAST(:p AS jsonb), 'running', :ids, code_rev
       FROM calibration_runs WHERE id = :old RETURNING id""")
_COPY_RESULTS = text(
    """INSERT INTO calibrated_results (run_id, claim_id, score, theta, ci_low, ci_high, decision, knn_mean,
       neighbour_ids, neighbour_distances)
       SELECT :new, claim_id, score, theta, ci_low, ci_high, decision, knn_mean, neighbour_ids, neighbour_distances
       FROM calibrated_results WHERE run_id = :old AND claim_id = ANY(:ids)""")


def test_pipeline_cannot_mark_a_partial_run_complete(pipeline_run):
    """The database decides "complete" from the run's claims and their results, not from the
    writer's ``n_calibrated``: every bypass a pipeline connection can try is refused (23001)."""
    eng, old = pipeline_run["engine"], pipeline_run["run_id"]
    with eng.connect() as conn:
        claims = conn.execute(text("SELECT claim_ids FROM calibration_runs WHERE id = :r"),
                              {"r": old}).scalar_one()
    assert len(claims) == len(pipeline_run["out"]) == 30
    finish = "UPDATE calibration_runs SET status = 'complete', finished_at = now(), params = params || "

    def attempt(name: str, ids: list[int], copied: list[int], n_calibrated: str = "{}"):
        """A run naming ``ids`` with copies of the real run's results for ``copied``, then marked
        complete with ``n_calibrated``; the SQLSTATE it fails with (None: it completed)."""
        with eng.connect() as conn:
            try:
                new = conn.execute(_COPY_RUN, {"key": f"bypass-{name}".ljust(64, "0"), "p": "{}",
                                               "ids": ids, "old": old}).scalar_one()
                conn.execute(_COPY_RESULTS, {"new": new, "old": old, "ids": copied})
                conn.execute(text(finish + f"CAST('{n_calibrated}' AS jsonb) WHERE id = :r"), {"r": new})
            except DBAPIError as err:
                conn.rollback()
                return err.orig.sqlstate
            conn.rollback()  # leave the store as it was
            return None

    assert attempt("no-claims", [], []) == "23001"
    assert attempt("zero-results", claims, []) == "23001"  # params lack n_calibrated
    assert attempt("partial", claims, claims[:10], n_calibrated='{"n_calibrated": 10}') == "23001"
    assert attempt("extra", claims[:5], claims[:6], n_calibrated='{"n_calibrated": 6}') == "23001"
    assert attempt("wrong-count", claims[:5], claims[:5], n_calibrated='{"n_calibrated": 4}') == "23001"
    # what the code does is allowed: every named claim with a score has its result
    assert attempt("whole", claims[:5], claims[:5], n_calibrated='{"n_calibrated": 5}') is None
    assert attempt("whole-no-count", claims, claims) is None


def test_auditor_sees_the_whole_lineage_of_a_decision(auditor, pipeline_run):
    """The lineage view reproduces the decision in OUT.csv from stored rows alone."""
    out = {r["id"]: r for r in pipeline_run["out"]}
    by_id = {r[0]: r for r in pipeline_run["rows"][:60]}
    sid = next(iter(out))
    with auditor.connect() as conn:
        lineage = conn.execute(text(
            "SELECT * FROM audit_decision_lineage WHERE source_id = :s AND run_id = :r "
            "ORDER BY neighbour_rank"), {"s": sid, "r": pipeline_run["run_id"]}).mappings().all()
        scores = conn.execute(text(
            "SELECT model, prompt_version, score_kind, score, params FROM audit_claim_scores "
            "WHERE source_id = :s AND model = 'file:imported'"), {"s": sid}).mappings().all()
    assert len(lineage) == 5 and [n["neighbour_rank"] for n in lineage] == [1, 2, 3, 4, 5]
    first = lineage[0]
    assert first["model"] == "file:imported" and first["prompt_version"] == "none"
    assert first["score_params"]["labeled_sha256"]  # the generation parameters behind the score
    assert first["label_set_name"].endswith(":labeled") and first["k"] == 5
    assert ";".join(n["neighbour_source_id"] for n in lineage) == out[sid]["neighbors"]
    for n in lineage:  # each neighbour's label and score are the ones of the labelled file
        assert (n["neighbour_label"], n["neighbour_score"]) == (by_id[n["neighbour_source_id"]][3],
                                                              by_id[n["neighbour_source_id"]][2])
        assert n["neighbour_distance"] >= 0
    theta = first["score"] + np.mean([n["neighbour_residual"] for n in lineage])
    assert theta == pytest.approx(first["theta"]) == pytest.approx(float(out[sid]["theta"]), abs=1e-6)
    assert first["decision"] == bool(int(out[sid]["decision"])) == (theta >= first["threshold"])
    assert first["run_status"] == "complete" and first["run_finished_at"] is not None
    assert any(s["score"] == first["score"] for s in scores)


@pytest.fixture()
def fresh_default_engine():
    """``get_engine()`` caches the engine of its first DATABASE_URL under the key None: start and
    leave this test with an empty cache so the auditor's engine is never handed to later tests."""
    get_engine.cache_clear()
    yield
    get_engine.cache_clear()


def test_auditor_runs_checkworthy_explain(logins, pipeline_run, monkeypatch, capsys, fresh_default_engine):
    sid = pipeline_run["out"][0]["id"]
    monkeypatch.setenv("DATABASE_URL", logins["auditor"])
    assert main(["explain", sid, "--run", str(pipeline_run["run_id"])]) == 0
    shown = capsys.readouterr().out
    assert f"/{sid} " in shown and "theta:" in shown and "decision:" in shown
    flag = "to a person" if pipeline_run["out"][0]["review"] == "1" else "decided automatically"
    assert f"review:     {flag} (" in shown and "Learn-then-Test" in shown
    assert pipeline_run["out"][0]["neighbors"].split(";")[0] in shown
    assert main(["explain", "no-such-claim-id"]) == 2


def test_bootstrap_provisions_logins_from_the_environment(owner_engine):
    engine = owner_engine  # provisioning logins is the owner's
    env = {"PIPELINE_DB_USER": "cw_boot_pipeline", "PIPELINE_DB_PASSWORD": "s3cret-pipeline",
           "AUDITOR_DB_USER": "cw_boot_auditor", "AUDITOR_DB_PASSWORD": "s3cret-auditor"}
    assert audit.bootstrap(engine, env) == ["cw_boot_pipeline", "cw_boot_auditor"]
    assert audit.bootstrap(engine, env) == ["cw_boot_pipeline", "cw_boot_auditor"]  # idempotent
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT r.rolname, r.rolcanlogin, r.rolsuper, r.rolpassword LIKE 'SCRAM-SHA-256$%' AS hashed, "
            "pg_has_role(r.rolname, 'checkworthy_pipeline', 'MEMBER') AS pipe, "
            "pg_has_role(r.rolname, 'checkworthy_auditor', 'MEMBER') AS aud, "
            "(SELECT setconfig FROM pg_db_role_setting s "
            " WHERE s.setrole = r.oid AND s.setdatabase = 0) AS cfg "
            "FROM pg_authid r WHERE r.rolname LIKE 'cw\\_boot\\_%' ORDER BY 1")).all()
    assert [tuple(r) for r in rows] == [
        ("cw_boot_auditor", True, False, True, False, True, ["default_transaction_read_only=on"]),
        ("cw_boot_pipeline", True, False, True, True, False, None),
    ]
    with engine.begin() as conn, pytest.raises(DBAPIError, match="migrating owner"):
        audit.ensure_login(conn, conn.execute(text("SELECT current_user")).scalar_one(),
                           audit.PIPELINE_ROLE, "x")
    assert audit.bootstrap(engine, {k: v for k, v in env.items() if "PASSWORD" not in k}) == []


def test_documented_queries_run_as_the_auditor(auditor, pipeline_run):
    """Every ```sql example in docs/audit.md is valid and needs nothing beyond the auditor's rights."""
    doc = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sql\n(.*?)```", doc, re.S)
    code = ["\n".join(ln for ln in b.splitlines() if not ln.strip().startswith("--")) for b in blocks]
    statements = [s.strip() for b in code for s in b.split(";") if s.strip()]
    assert len(statements) >= 8
    with auditor.connect() as conn:
        for sql in statements:
            conn.execute(text(sql)).all()


def test_an_auditor_holding_the_label_lock_cannot_hang_a_label_update(engine, auditor, monkeypatch):
    """The auditor may call pg_advisory_lock on the label-update key; the update then gives up
    after its lock wait with one line naming who holds it, and its transaction stays usable."""
    monkeypatch.setattr(lineages, "LOCK_WAIT", "1s")
    with auditor.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": lineages.LABELS_LOCK})
        try:
            with engine.connect() as conn, conn.begin():
                t0 = time.monotonic()
                with pytest.raises(StoreBusy, match=AUDITOR_LOGIN):
                    lineages.lock_labels(conn)
                assert time.monotonic() - t0 < 30
                assert conn.execute(text("SELECT current_setting('lock_timeout')")).scalar_one() != "1s"
                assert conn.execute(text("SELECT 1")).scalar_one() == 1
        finally:
            holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": lineages.LABELS_LOCK})
            holder.commit()
    with engine.connect() as conn, conn.begin():  # free again: taken at once
        lineages.lock_labels(conn)

