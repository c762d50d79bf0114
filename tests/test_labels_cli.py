"""``checkworthy labels add FILE`` end to end through the real console script (docs/operations.md,
"Label updates").

The script runs as a subprocess on a scratch project (``CHECKWORTHY_ROOT``: git + DVC repository
with the raw CLEF files and its own DVC remote; ``CHECKWORTHY_PARAMS``: imported scores, k in
{3, 5}; ``DATABASE_URL``: a fresh database on the session's Postgres) after the main job's flow
made the first calibrations, with Prefect's ephemeral API as an operator gets it. Nothing is
mocked: real DVC, Great Expectations, MiniLM, Postgres, Prefect.
"""

from __future__ import annotations

import csv
import os
import re

import pytest
from sqlalchemy import create_engine, text

from checkworthy.data import versioning
from checkworthy.store import label_updates as label_history
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.audit import ATTEMPT_RECORDS, table_counts
from checkworthy.testing.scratch_project import (
    first_calibrations,
    fresh_database,
    make_scratch_project,
    md5_of,
    project_env,
    pushed_files,
    run_cli,
    write_label_file,
)
from checkworthy.testing.worlds import assert_incremental_equals_full

SEED = 5005  # a lineage of its own: clef2024:calibration:seed=5005


@pytest.fixture(scope="module")
def project(tmp_path_factory, owner_url):
    """The scratch project with its first calibrations, and the environment of its CLI."""
    tmp = tmp_path_factory.mktemp("labels-cli")
    with fresh_database(owner_url, f"checkworthy_labels_cli_{os.getpid()}") as url:
        engine = create_engine(url)
        try:
            proj = make_scratch_project(tmp, url, SEED, raw_data=True, compare=False)
            env = project_env(proj, url, tmp / "prefect-home")
            first_calibrations(proj, env)
            with engine.connect() as conn:
                first = {r.k: r.id for r in conn.execute(text(
                    "SELECT id, k FROM calibration_runs WHERE mode = 'full' AND status = 'complete'"))}
            assert sorted(first) == [3, 5]
            yield proj | {"engine": engine, "env": env, "first": first}
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
def added(project):
    """``checkworthy labels add corrections.csv`` (16 new labels, 2 corrections), run once."""
    engine, repo = project["engine"], project["repo"]
    path = project["tmp"] / "corrections.csv"
    drop = write_label_file(engine, project["lineage"], path)
    before = {"hash": versioning.data_hash(repo), "data.dvc": (repo / "data.dvc").read_text()}
    done = run_cli(["labels", "add", str(path)], project["env"], repo)
    print(done.stdout, done.stderr)
    return {"done": done, "path": path, "drop": drop, "before": before}


def test_labels_add_versions_applies_and_recalibrates_incrementally(project, added):
    engine, repo, lineage = project["engine"], project["repo"], project["lineage"]
    done, drop = added["done"], added["drop"]
    assert done.returncode == 0, done.stderr
    n_rows = len(drop["new"]) + len(drop["flips"])

    # the file is a new data version: copied under data/labels/, data.dvc moved, pushed to the remote
    placed = repo / "data" / "labels" / added["path"].name
    assert placed.read_bytes() == added["path"].read_bytes()
    assert (repo / "data.dvc").read_text() != added["before"]["data.dvc"]
    new_hash = versioning.data_hash(repo)
    assert new_hash != added["before"]["hash"]
    assert pushed_files(project, new_hash)["labels/corrections.csv"] == md5_of(added["path"])
    versioning.dvc_in(repo, "status", "-c", "-q")  # nothing missing from the scratch remote
    with engine.connect() as conn:
        upd = conn.execute(text("SELECT * FROM label_updates ORDER BY id DESC LIMIT 1")).mappings().one()
        dv = conn.execute(text("SELECT * FROM data_versions WHERE id = :i"),
                          {"i": upd["data_version_id"]}).mappings().one()
        log = lineages.version_log(conn, lineage)
        runs = conn.execute(text("SELECT * FROM calibration_runs WHERE label_set_id = :s ORDER BY k"),
                            {"s": log[-1]["label_set_id"]}).mappings().all()
    assert (upd["status"], upd["n_rows"], upd["n_appended"]) == ("applied", n_rows, n_rows)
    assert upd["path"] == str(placed)
    assert dv["dvc_hash"] == new_hash

    # a new label-set version, its head the update's, on the new data version
    head0, head1 = drop["head"], log[-1]["label_set_id"]
    assert [v["label_set_id"] for v in log] == [head0, head1] and head1 != head0
    assert (log[-1]["reason"], log[-1]["update_id"], log[-1]["dvc_hash"]) == ("labels", upd["id"], new_hash)
    with engine.connect() as conn:
        members = set(store.label_set_claims(conn, head1))
        new_ids = {r.source_id: r.id for r in conn.execute(
            text("SELECT id, source_id FROM claims WHERE dataset = 'clef2024' AND source_id = ANY(:s)"),
            {"s": [c.source_id for c in drop["new"]] + drop["flips"]})}
        current = dict(store.current_labels(conn, list(new_ids.values())))
        old_labels = label_history.reconstruct_label_set(conn, head0)
    assert members == set(store_members(engine, head0)) | {new_ids[c.source_id] for c in drop["new"]}
    assert all(current[new_ids[c.source_id]] == c.label for c in drop["new"])
    flipped = {new_ids[s] for s in drop["flips"]}
    assert all(current[i] == 1 - old_labels[i] for i in flipped)  # the corrections are in force

    # what it printed: the file, the new version, the incremental runs
    out = done.stdout
    assert f"{placed}: applied, {n_rows} labels appended, data version {dv['id']}" in out, out
    assert f"{lineage}: new label set version {head1}" in out, out
    printed = {int(m[1]): (m[2], int(m[3]), int(m[4])) for m in re.finditer(
        r"^  run (\d+): (\w+), (\d+) claims recomputed, (\d+) copied$", out, re.M)}
    assert sorted(printed) == [r["id"] for r in runs] and len(runs) == 2

    # the incremental runs equal a full recomputation and recompute exactly the affected claims
    with engine.connect() as conn:
        targets = lineages.target_claim_ids(conn, lineage)["clef2024:test"]
    for run in runs:
        n_recomputed, n = assert_incremental_equals_full(engine, run["id"], project["first"][run["k"]], head1,
                                                         targets, flipped)
        assert printed[run["id"]] == ("incremental", n_recomputed, n - n_recomputed)


def store_members(engine, label_set_id: int) -> list[int]:
    with engine.connect() as conn:
        return store.label_set_claims(conn, label_set_id)


def test_labels_versions_lists_the_new_version(project, added):
    assert added["done"].returncode == 0
    with project["engine"].connect() as conn:
        log = lineages.version_log(conn, project["lineage"])
    done = run_cli(["labels", "versions"], project["env"], project["repo"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == project["lineage"], done.stdout
    assert re.fullmatch(rf"  v1: label set {log[0]['label_set_id']} \(80 claims, 40 positive\) initial, .*",
                        lines[1]), done.stdout
    assert re.fullmatch(rf"  v2: label set {log[1]['label_set_id']} \(96 claims, \d+ positive\) labels, "
                        rf".*, data {log[1]['dvc_hash']}", lines[2]), done.stdout
    assert len(lines) == 3


def test_labels_add_rejects_a_label_outside_0_1_and_applies_nothing(project, added):
    """A label 2 goes to the validation suite like every label value: the whole file is rejected
    (recorded, with the failing line), no label, label-set version or calibration is written."""
    engine, repo, lineage = project["engine"], project["repo"], project["lineage"]
    assert added["done"].returncode == 0
    good = added["drop"]["new"][:2]
    path = project["tmp"] / "bad-label.csv"
    path.write_text("id,dataset,label\n" + f"{good[0].source_id},clef2024,{1 - good[0].label}\n"
                    + f"{good[1].source_id},clef2024,2\n", encoding="utf-8")
    with engine.connect() as conn:
        head = lineages.lineage_head(conn, lineage)
        n_runs = conn.execute(text("SELECT count(*) FROM calibration_runs")).scalar_one()
    before = table_counts(engine, ignore=ATTEMPT_RECORDS)

    done = run_cli(["labels", "add", str(path)], project["env"], repo)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert f"{repo / 'data' / 'labels' / path.name}: rejected, 0 labels appended" in out, out
    assert "failed label_in_0_1 (field 'label'): line 3" in out, out
    assert table_counts(engine, ignore=ATTEMPT_RECORDS) == before  # no claim, label, label set, calibration or result
    with engine.connect() as conn:
        assert lineages.lineage_head(conn, lineage) == head
        assert conn.execute(text("SELECT count(*) FROM calibration_runs")).scalar_one() == n_runs
        upd = conn.execute(text("SELECT * FROM label_updates ORDER BY id DESC LIMIT 1")).mappings().one()
        failed = conn.execute(text("SELECT check_name, unexpected_rows FROM validation_results r "
                                   "JOIN validation_runs v ON v.id = r.validation_run_id "
                                   "WHERE v.label_update_id = :u AND NOT r.success"), {"u": upd["id"]}).all()
    assert (upd["status"], upd["n_appended"]) == ("rejected", 0)  # the rejection is on record (audit)
    assert [(f.check_name, [r["line"] for r in f.unexpected_rows]) for f in failed] == [("label_in_0_1", [3])]
    # like a file the watch flow refuses, its copy does not stay among data/labels/
    rejected = repo / "data" / "labels" / "rejected" / path.name
    assert f"  moved to {rejected}: data/labels/ keeps applied files only" in out, out
    assert not (repo / "data" / "labels" / path.name).exists()
    assert rejected.read_bytes() == path.read_bytes()


def test_labels_add_of_a_refused_file_in_data_labels_sets_it_aside(project, added):
    """A file already in data/labels/ that the checks refuse (an unknown claim) gets what the watch
    flow gives it: one line naming file, row and field, its reason on record, moved to rejected/."""
    engine, repo = project["engine"], project["repo"]
    assert added["done"].returncode == 0
    path = repo / "data" / "labels" / "unknown-claim.csv"
    path.write_text("id,dataset,label\nno-such-id,clef2024,1\n", encoding="utf-8")
    rejected = repo / "data" / "labels" / "rejected" / path.name
    before = table_counts(engine, ignore=ATTEMPT_RECORDS)
    done = run_cli(["labels", "add", str(path)], project["env"], repo)
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip()
    assert line.startswith(f"error: {path}, row 2, field 'id': ") and "no-such-id" in line, line
    assert line.endswith(f"; moved to {rejected}") and len(done.stderr.strip().splitlines()) == 1, line
    assert not path.exists() and rejected.exists()
    assert table_counts(engine, ignore=ATTEMPT_RECORDS) == before
    with engine.connect() as conn:
        upd = conn.execute(text("SELECT status, reason FROM label_updates WHERE path = :p"),
                           {"p": str(path)}).one()
    assert upd.status == "rejected" and "no-such-id" in upd.reason


def test_labels_add_refuses_a_malformed_file_before_anything(project, added):
    """A structural error (an empty id) stops the script before Prefect, DVC or the store start:
    the message names file, row and field, and nothing is written anywhere."""
    engine, repo = project["engine"], project["repo"]
    path = project["tmp"] / "malformed.csv"
    path.write_text("id,dataset,label\n101,clef2024,1\n,clef2024,0\n", encoding="utf-8")
    before = table_counts(engine), (repo / "data.dvc").read_text(), sorted((repo / "data" / "labels").iterdir())
    done = run_cli(["labels", "add", str(path)], project["env"], repo)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {path}, row 3, field 'id': empty id", done.stderr
    assert "Traceback" not in done.stderr
    assert (table_counts(engine), (repo / "data.dvc").read_text(),
            sorted((repo / "data" / "labels").iterdir())) == before


def test_review_export_and_import_through_the_console_script(project, added):
    """The data team's loop: the top of the open queue as a CSV, filled in, imported: versioned by DVC
    under data/labels/, validated, and the entries it answers closed (held-out claims stay gold)."""
    engine, repo, tmp = project["engine"], project["repo"], project["tmp"]
    out = tmp / "queue.csv"
    done = run_cli(["review", "export", "--format", "csv", "--limit", "4", "--out", str(out)], project["env"], repo)
    assert done.returncode == 0, done.stderr
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 and all(r["reason"].startswith("to a person") for r in rows)
    with engine.connect() as conn:
        gold = dict(conn.execute(text(
            "SELECT c.source_id, l.label FROM claims c JOIN current_labels l ON l.claim_id = c.id "
            "WHERE c.source_id = ANY(:s)"), {"s": [r["id"] for r in rows]}).all())
        n_answers = conn.execute(text("SELECT count(*) FROM review_answers")).scalar_one()
    for r in rows[:3]:  # the fourth left blank: not answered yet
        r["label"] = "Yes" if gold[r["id"]] else "No"
    filled = tmp / "queue-filled.csv"
    with open(filled, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    done = run_cli(["review", "import", str(filled)], project["env"], repo)
    assert done.returncode == 0, done.stderr
    assert "3 answers" in done.stdout and "review queue: 3 claims answered" in done.stdout
    assert (repo / "data" / "labels" / "review-queue-filled.csv").exists()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM review_answers")).scalar_one() == n_answers + 3
        still = {r.source_id for r in conn.execute(text("SELECT source_id FROM review_open"))}
    assert not still & {r["id"] for r in rows[:3]} and rows[3]["id"] in still
