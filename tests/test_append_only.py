"""Append-only records, enforced by the database (migration 0002), not only by the code.

The refusals are tried as the superuser that owns the test cluster (``owner_engine``): the
triggers bind every role, so a bug, a hurried script or a psql session cannot rewrite evidence
either. The application logs in as a pipeline member (``engine``, exactly as ``checkworthy``
connects to the embedded server), which cannot even switch the triggers off.
A correction is a new row (a new label, a new label set, a new run).
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from checkworthy.runs.calibration_run import run_calibration
from checkworthy.scorers.base import OK, Score
from checkworthy.store import rows as store
from checkworthy.store.engine import APP_LOGIN
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.worlds import Scenario, build_scenario

RESTRICT = "23001"  # restrict_violation: what the append-only triggers raise
DENIED = "42501"  # insufficient_privilege








def sqlstate(exc: DBAPIError) -> str | None:
    return getattr(exc.orig, "sqlstate", None)


def refused(engine: Engine, sql: str, params: dict | None = None) -> DBAPIError:
    """Run ``sql`` in its own transaction, expect the database to refuse it, roll back."""
    with engine.connect() as conn:
        with pytest.raises(DBAPIError) as info:
            conn.execute(text(sql), params or {})
        conn.rollback()
    return info.value


@pytest.fixture(scope="module")
def complete(engine) -> tuple[Scenario, int]:
    """A complete run with results and metrics, and a stored report naming it."""
    sc = build_scenario(engine, "append-only")
    run_id = run_calibration(engine, sc.spec())
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO data_versions (dvc_hash, git_rev) VALUES ('append-only', 'x') "
                          "ON CONFLICT DO NOTHING"))
        conn.execute(text("INSERT INTO reports (name, run_ids, markdown) VALUES ('append-only', :r, '# r')"),
                     {"r": [run_id]})
    return sc, run_id


#: protected table -> a WHERE clause selecting rows of the ``complete`` fixture
PROTECTED = {
    "labels": "claim_id = ANY(:lab)",
    "label_set_items": "label_set_id = :ls",
    "label_sets": "id = :ls",
    "predictions": "model_id = :model",
    "calibrated_results": "run_id = :run",
    "evaluation_metrics": "run_id = :run",
    "reports": ":run = ANY(run_ids)",
    "texts": "text_hash IN (SELECT text_hash FROM claims WHERE id = ANY(:lab))",
    "claims": "id = ANY(:lab)",
    "embeddings": "text_hash IN (SELECT text_hash FROM claims WHERE id = ANY(:lab))",
    "models": "id = :model",
    "prompt_versions": "id = 'none'",
    "data_versions": "dvc_hash = 'append-only'",
}


def _where_params(sc: Scenario, run_id: int) -> dict:
    return {"lab": sc.lab_ids, "ls": sc.label_set_id, "model": sc.key.model_id, "run": run_id}


@pytest.mark.parametrize("table", sorted(PROTECTED))
def test_protected_rows_cannot_be_updated_deleted_or_truncated(owner_engine, complete, table):
    sc, run_id = complete
    engine = owner_engine  # the triggers bind even the owner
    where, params = PROTECTED[table], _where_params(sc, run_id)
    with engine.connect() as conn:
        before = conn.execute(text(f"SELECT count(*) FROM {table} WHERE {where}"), params).scalar_one()
    assert before > 0, f"fixture holds no {table} rows"
    # a no-op SET still counts as an update: rows are never rewritten, not even identically
    col = "created_at" if table not in {"label_set_items", "calibrated_results", "evaluation_metrics"} \
        else {"label_set_items": "label", "calibrated_results": "theta", "evaluation_metrics": "value"}[table]
    for sql in (f"UPDATE {table} SET {col} = {col} WHERE {where}",
                f"DELETE FROM {table} WHERE {where}",
                f"TRUNCATE {table} CASCADE"):
        err = refused(engine, sql, params)
        assert sqlstate(err) == RESTRICT, (sql, err)
        assert "append-only" in str(err.orig) or "never" in str(err.orig)
    with engine.connect() as conn:
        after = conn.execute(text(f"SELECT count(*) FROM {table} WHERE {where}"), params).scalar_one()
    assert after == before


def test_a_correction_is_a_new_label_and_a_new_label_set(engine, complete):
    sc, run_id = complete
    claim = sc.lab_ids[0]
    with engine.begin() as conn:
        old = store.current_labels(conn, [claim])[claim]
        old_items = conn.execute(text("SELECT claim_id, label_id, label FROM label_set_items "
                                      "WHERE label_set_id = :s ORDER BY claim_id"),
                                 {"s": sc.label_set_id}).all()
        assert store.append_labels(conn, [claim], [1 - old], "test:correction") == 1
        new_set = store.create_label_set(conn, f"{sc.name}:L", sc.lab_ids)
    assert new_set != sc.label_set_id
    with engine.connect() as conn:
        history = conn.execute(
            text("SELECT label, previous_label, version, is_current, source, label_set_ids "
                 "FROM audit_label_history WHERE claim_id = :c ORDER BY version"), {"c": claim}).all()
        items_after = conn.execute(text("SELECT claim_id, label_id, label FROM label_set_items "
                                        "WHERE label_set_id = :s ORDER BY claim_id"),
                                   {"s": sc.label_set_id}).all()
        run = conn.execute(text("SELECT status, label_set_id FROM calibration_runs WHERE id = :r"),
                           {"r": run_id}).one()
    assert [(h.label, h.previous_label, h.version, h.is_current) for h in history] == [
        (old, None, 1, False), (1 - old, old, 2, True)]
    assert history[0].label_set_ids == [sc.label_set_id]
    assert history[1].label_set_ids == [new_set]
    assert items_after == old_items  # the old label set still says what the run used
    assert tuple(run) == ("complete", sc.label_set_id)


def test_a_finished_run_never_changes(owner_engine, complete):
    sc, run_id = complete
    engine = owner_engine  # the guard binds even the owner
    for sql in ("UPDATE calibration_runs SET status = 'running', finished_at = NULL WHERE id = :r",
                "UPDATE calibration_runs SET status = 'failed' WHERE id = :r",
                "UPDATE calibration_runs SET params = params || '{\"note\": 1}' WHERE id = :r",
                "DELETE FROM calibration_runs WHERE id = :r",
                "TRUNCATE calibration_runs CASCADE"):
        assert sqlstate(refused(engine, sql, {"r": run_id})) == RESTRICT, sql
    # nothing can be added to it either: results and metrics belong to running runs
    with engine.connect() as conn:
        other = conn.execute(text("SELECT claim_id FROM calibrated_results WHERE run_id = :r LIMIT 1"),
                             {"r": run_id}).scalar_one()
    sql = ("INSERT INTO calibrated_results SELECT :r, c.id, 0.5, 0.5, 0, 1, true, 0.5, '{}', '{}' "
           "FROM claims c WHERE c.id = ANY(:lab) AND c.id <> :o LIMIT 1")
    assert sqlstate(refused(engine, sql, {"r": run_id, "lab": sc.lab_ids, "o": other})) == RESTRICT
    sql = "INSERT INTO evaluation_metrics VALUES (:r, 'nnppi', 'invented', 'all', 1.0)"
    assert sqlstate(refused(engine, sql, {"r": run_id})) == RESTRICT


def _insert_running(engine: Engine, sc: Scenario, key: str) -> int:
    with engine.begin() as conn:
        return conn.execute(text(
            """INSERT INTO calibration_runs (run_key, target, label_set_id, label_set_fingerprint,
               model_id, prompt_version, params_hash, score_kind, embed_model, k, alpha, threshold,
               params, status, claim_ids, code_rev)
               SELECT :key, 'guard-test', :ls, fingerprint, :m, 'none', :ph, 'imported', 'x', 3, 0.05,
                      0.5, '{"n_claims": 2}', 'running', :ids, 'test' FROM label_sets WHERE id = :ls RETURNING id"""),
            {"key": key, "ls": sc.label_set_id, "m": sc.key.model_id, "ph": sc.key.params_hash,
             "ids": [int(i) for i in sc.unl_ids[:2]]},
        ).scalar_one()


def test_a_running_run_may_only_finish(engine, owner_engine, complete):
    """The one update the code makes is allowed to the application; every other change to a run
    is refused, even to the owner (whose privileges would allow it)."""
    sc, _ = complete
    run = _insert_running(engine, sc, "guard-" + "0" * 58)
    p = {"r": run}
    for sql in ("UPDATE calibration_runs SET k = 4 WHERE id = :r",
                "UPDATE calibration_runs SET code_rev = 'other' WHERE id = :r",
                "UPDATE calibration_runs SET params = '{}' WHERE id = :r",
                "UPDATE calibration_runs SET params = '{\"n_claims\": 3}' WHERE id = :r",
                "UPDATE calibration_runs SET status = 'complete' WHERE id = :r",  # no finished_at
                # complete with fewer results than it says it calibrated
                "UPDATE calibration_runs SET status = 'complete', finished_at = now(), "
                "params = params || '{\"n_calibrated\": 2}' WHERE id = :r"):
        assert sqlstate(refused(owner_engine, sql, p)) == RESTRICT, sql
    with engine.begin() as conn:  # a progress note while running is fine: params gain a key
        conn.execute(text("UPDATE calibration_runs SET params = params || '{\"phase\": 1}' WHERE id = :r"), p)
        conn.execute(text("UPDATE calibration_runs SET status = 'failed', finished_at = now() "
                          "WHERE id = :r"), p)
    assert sqlstate(refused(engine, "UPDATE calibration_runs SET status = 'complete' WHERE id = :r", p)) \
        == RESTRICT
    # and a run cannot be born finished
    sql = ("INSERT INTO calibration_runs (run_key, target, label_set_id, label_set_fingerprint, model_id, "
           "prompt_version, params_hash, score_kind, embed_model, k, alpha, threshold, status, finished_at, "
           "code_rev) SELECT run_key, target, label_set_id, label_set_fingerprint, model_id, prompt_version, "
           "params_hash, score_kind, embed_model, k, alpha, threshold, 'complete', now(), code_rev "
           "FROM calibration_runs WHERE id = :r")
    assert sqlstate(refused(engine, sql, p)) == RESTRICT


def test_a_failed_calibration_is_marked_failed_and_stays_so(engine, complete):
    """The code's other update (running -> failed) works under the guard; the retry is a new run."""
    sc, _ = complete
    # one claim with a score but no embedding: compute() raises inside run_calibration
    text_ = "A claim that was scored but never embedded, 2026."
    with engine.begin() as conn:
        (cid,) = store.upsert_claims(conn, [store.NewClaim("append-only-noemb", "U", "x1", text_)])
        store.insert_predictions(conn, sc.key.model_id, "none", {"source": sc.name},
                                 [(store.sha256_text(text_), {"imported": Score(0.7, OK, "0.7")})])
    spec = RunSpec("append-only-noemb", (cid,), sc.label_set_id, sc.key, RunMethods(3))
    for _ in range(2):
        with pytest.raises(ValueError, match="no embedding"):
            run_calibration(engine, spec)
    with engine.connect() as conn:
        runs = conn.execute(text("SELECT status, finished_at IS NOT NULL AS done, "
                                 "(SELECT count(*) FROM calibrated_results r WHERE r.run_id = c.id) AS n "
                                 "FROM calibration_runs c WHERE target = 'append-only-noemb' "
                                 "ORDER BY id")).all()
        hist = conn.execute(text("SELECT effective_status FROM audit_run_history "
                                 "WHERE target = 'append-only-noemb'")).scalars().all()
    assert [tuple(r) for r in runs] == [("failed", True, 0), ("failed", True, 0)]
    assert hist == ["failed", "failed"]


def test_report_and_metrics_rows_are_what_the_run_stored(engine, complete):
    """Sanity: the fixture's rows exist and the views show them (guards the parametrised test)."""
    sc, run_id = complete
    with engine.connect() as conn:
        h = conn.execute(text("SELECT * FROM audit_run_history WHERE run_id = :r"),
                         {"r": run_id}).mappings().one()
    assert h["effective_status"] == "complete"
    assert h["n_results"] == len(sc.unl_ids) == json.loads(json.dumps(h["params"]))["n_calibrated"]
    assert h["nnppi_weighted_f1"] is not None and h["report_ids"]


def test_every_table_is_append_only_in_the_database(engine):
    """The catalogue: each table a migration creates has a row trigger against UPDATE/DELETE and a
    statement trigger against TRUNCATE, except the run table (guarded: a running run may finish) and
    Alembic's own bookkeeping."""
    exempt = {"alembic_version", "calibration_runs"}
    with engine.connect() as conn:
        tables = set(conn.execute(text(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars()) - exempt
        guarded = conn.execute(text(
            """SELECT c.relname, t.tgtype FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
               JOIN pg_proc p ON p.oid = t.tgfoid
               WHERE p.proname = 'checkworthy_append_only' AND NOT t.tgisinternal""")).all()
    # tgtype bits: 1 row-level, 8 delete, 16 update, 32 truncate
    rows = {name for name, kind in guarded if kind & 1 and kind & 8 and kind & 16}
    truncates = {name for name, kind in guarded if kind & 32}
    assert tables and not tables - rows, f"UPDATE/DELETE allowed on {sorted(tables - rows)}"
    assert not tables - truncates, f"TRUNCATE allowed on {sorted(tables - truncates)}"


def test_the_application_cannot_switch_the_triggers_off(engine, owner_engine, complete):
    """``checkworthy`` logs in as a member of the pipeline role, not as the superuser: the
    replication role that would silence the triggers is refused to it, and so is the rewrite it
    would let through. As the superuser the same statements go through (rolled back here), which
    is why the application never connects as the owner."""
    sc, run_id = complete  # written by the application: its normal work goes through
    with engine.connect() as conn:
        who = conn.execute(text(
            "SELECT current_user, rolsuper, pg_has_role(current_user, 'checkworthy_pipeline', 'MEMBER'), "
            "pg_has_role(current_user, 'checkworthy_owner', 'MEMBER') FROM pg_roles "
            "WHERE rolname = current_user")).one()
    assert tuple(who) == (APP_LOGIN, False, True, False)
    params = _where_params(sc, run_id)
    rewrites = ("DELETE FROM calibrated_results WHERE run_id = :run",
                "UPDATE labels SET label = 1 - label WHERE claim_id = ANY(:lab)")
    for sql in rewrites:
        with engine.connect() as conn:
            for bypass in ("SET session_replication_role = replica",
                           "SELECT set_config('session_replication_role', 'replica', false)"):
                with pytest.raises(DBAPIError) as info:
                    conn.execute(text(bypass))
                assert sqlstate(info.value) == DENIED, bypass
                conn.rollback()
            with pytest.raises(DBAPIError) as info:
                conn.execute(text(sql), params)
            assert sqlstate(info.value) == DENIED, sql
            conn.rollback()
    with owner_engine.connect() as conn:  # the threat is real: the superuser's bypass works
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        assert [conn.execute(text(sql), params).rowcount > 0 for sql in rewrites] == [True, True]
        conn.rollback()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM calibrated_results WHERE run_id = :run"),
                            params).scalar_one() == len(sc.unl_ids)
