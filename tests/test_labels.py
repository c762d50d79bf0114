"""Label updates: append-only history, label-set versions, DVC data versions, reconstruction."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from checkworthy.data import versioning
from checkworthy.data.validation import Bounds
from checkworthy.errors import DataError
from checkworthy.runs import label_updates as labels
from checkworthy.store import label_updates as label_history
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.data_versions import record_data_version
from checkworthy.testing.claims import write_labels
from checkworthy.testing.scratch_project import make_dvc_repo
from checkworthy.testing.worlds import build_world

BOUNDS = Bounds(min_rows=20)






@pytest.fixture(scope="module")
def world(engine):
    return build_world(engine, "t3-labels")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_dvc_repo(tmp_path_factory.mktemp("labels"))


def source_ids(engine, ids):
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT id, source_id FROM claims WHERE id = ANY(:i)"),
                                 {"i": ids}).all())


def test_label_file_makes_a_data_version_and_a_label_set_version(engine, world, repo, tmp_path):
    w = world
    sid = source_ids(engine, w.lab_ids[:3] + w.extra_ids[:10] + w.target_ids[:2])
    with engine.connect() as conn:
        before = store.current_labels(conn, w.lab_ids[:3] + w.target_ids[:2])
        n_labels = conn.execute(text("SELECT count(*) FROM labels")).scalar_one()
    rows = ([[sid[i], w.tag, 1 - before[i], "annotator:ann"] for i in w.lab_ids[:3]]             # corrections
            + [[sid[i], w.tag, c.label, ""] for i, c in zip(w.extra_ids[:10], w.extra[:10])]      # additions
            + [[sid[i], w.tag, 1 - before[i], "annotator:bob"] for i in w.target_ids[:2]])        # gold only
    src = write_labels(tmp_path / "batch-1.csv", rows)
    hash0 = versioning.data_hash(repo)
    placed = versioning.place_in_data(src, repo)
    assert placed == repo / "data" / "labels" / "batch-1.csv"
    assert versioning.version_data(repo) != hash0
    versioning.dvc_in(repo, "status", "-c", "-q")  # the new version is in the remote
    with engine.begin() as conn:
        dv = record_data_version(conn, versioning.data_version(repo))
    out = labels.apply_label_file(engine, placed, BOUNDS, dv)
    assert out.status == "applied" and not out.reused and out.n_appended == 15
    (head1,) = out.new_heads.values()
    with engine.connect() as conn:
        assert lineages.lineage_head(conn, w.lineage) == head1
        members = set(store.label_set_claims(conn, head1))
        assert members == set(w.lab_ids) | set(w.extra_ids[:10])  # targets' gold labels stay out
        hist = label_history.label_history(conn, w.lab_ids[0])
        assert [h["label"] for h in hist] == [before[w.lab_ids[0]], 1 - before[w.lab_ids[0]]]
        assert hist[-1]["source"] == "annotator:ann" and hist[-1]["update_id"] == out.update_id
        assert label_history.label_history(conn, w.extra_ids[0])[-1]["source"] == "file:batch-1.csv"
        assert store.current_labels(conn, w.target_ids[:2]) == {i: 1 - before[i] for i in w.target_ids[:2]}
        # both versions rebuild from the append-only history
        v0 = label_history.reconstruct_label_set(conn, w.ls0)
        v1 = label_history.reconstruct_label_set(conn, head1)
        assert v0[w.lab_ids[0]] == before[w.lab_ids[0]] and v1[w.lab_ids[0]] == 1 - before[w.lab_ids[0]]
        log = lineages.version_log(conn, w.lineage)
        assert [(v["label_set_id"], v["reason"]) for v in log] == [(w.ls0, "initial"), (head1, "labels")]
        assert log[1]["dvc_hash"] == versioning.data_hash(repo) and log[1]["update_id"] == out.update_id
        assert conn.execute(text("SELECT count(*) FROM labels")).scalar_one() == n_labels + 15
    # the same bytes again: nothing new
    again = labels.apply_label_file(engine, placed, BOUNDS, dv)
    assert again.reused and again.update_id == out.update_id and again.new_heads == out.new_heads
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM labels")).scalar_one() == n_labels + 15
        assert labels.pending_label_files(conn, repo) == []


def test_reverting_a_correction_points_back_to_the_earlier_version(engine, world, tmp_path):
    w = world
    with engine.connect() as conn:
        head = lineages.lineage_head(conn, w.lineage)
        prev = lineages.version_log(conn, w.lineage)[-2]["label_set_id"]
        v_prev = label_history.reconstruct_label_set(conn, prev)
    sid = source_ids(engine, w.lab_ids[:3] + w.extra_ids[:10])
    # undo the corrections and withdraw nothing else: the same content as before plus the additions
    rows = [[sid[i], w.tag, v_prev[i], "annotator:ann"] for i in w.lab_ids[:3]]
    out = labels.apply_label_file(engine, write_labels(tmp_path / "revert.csv", rows), BOUNDS)
    (new_head,) = out.new_heads.values()
    assert out.status == "applied" and new_head != head
    with engine.connect() as conn:
        history = label_history.label_history(conn, w.lab_ids[0])
        was = v_prev[w.lab_ids[0]]
        assert [h["label"] for h in history] == [was, 1 - was, was]
        assert lineages.version_log(conn, w.lineage)[-1]["parent_id"] is not None
        # labels as they stood before the revert are still there to read
        t = history[1]["created_at"]
        assert label_history.labels_as_of(conn, [w.lab_ids[0]], t) == {w.lab_ids[0]: 1 - v_prev[w.lab_ids[0]]}


def test_rerunning_the_main_job_keeps_corrections(engine, world, tmp_path):
    """A dataset file's labels are re-appended only if the file itself changed."""
    w = world
    ids = w.lab_ids[3:5]
    sid = source_ids(engine, ids)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT c.id, c.source_id, t.text FROM claims c JOIN texts t "
                                 "USING (text_hash) WHERE c.id = ANY(:i) ORDER BY c.id"), {"i": ids}).all()
        from_file = {i: label_history.label_history(conn, i)[0]["label"] for i in ids}
    out = labels.apply_label_file(engine, write_labels(tmp_path / "fix.csv", [
        [sid[i], w.tag, 1 - from_file[i], "annotator:ann"] for i in ids]), BOUNDS)
    assert out.status == "applied"
    file_claims = [store.NewClaim(w.tag, "train", r.source_id, r.text, from_file[r.id]) for r in rows]
    with engine.begin() as conn:  # what prepare_dataset(keep_corrections=True) does on every run
        assert labels.store_file_claims(conn, file_claims, f"{w.tag}:file") == [r.id for r in rows]
        assert store.current_labels(conn, ids) == {i: 1 - from_file[i] for i in ids}  # the team's word stands


def test_bad_label_files_write_nothing(engine, world, tmp_path):
    w = world
    with engine.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM label_updates")).scalar_one()
    with pytest.raises(DataError, match="unknown claim"):
        labels.apply_label_file(engine, write_labels(tmp_path / "a.csv", [["no-such-id", w.tag, 1, ""]]), BOUNDS)
    with pytest.raises(DataError, match="row 1, field 'label': required column missing"):
        labels.apply_label_file(engine, write_labels(tmp_path / "b.csv", [["1", w.tag]], ("id", "dataset")),
                                BOUNDS)
    with pytest.raises(DataError, match="row 2, field 'label'"):  # a gold-only label must still be 0/1
        sid = source_ids(engine, w.target_ids[:1])
        labels.apply_label_file(engine, write_labels(tmp_path / "c.csv", [[sid[w.target_ids[0]], w.tag, 7, ""]]),
                                BOUNDS)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM label_updates")).scalar_one() == n
