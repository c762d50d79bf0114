"""The review queue on the real store: a run queues what its rule sends to a person, the open queue
is exported as Label Studio tasks or CSV, a Label Studio export comes back through the label-update
path (Great Expectations, append-only labels), closes the entries it answers, and the labelled
newly arrived claims join the calibration set, so the next calibration learns from them.

Real data (CLEF 2024 claims, MiniLM embeddings, the world of :mod:`tests.test_recalibrate`); the
newly arrived claims are the world's spare labelled-later claims, registered as its incoming target.
"""

from __future__ import annotations

import csv
import json

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from checkworthy.cli.main import main
from checkworthy.data import label_studio
from checkworthy.data.validation import Bounds
from checkworthy.errors import DataError
from checkworthy.method.selective import ReviewRule, review_priority
from checkworthy.report.explanation import format_decision
from checkworthy.runs import label_updates as labels
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.recalibration import recalibrate_lineage
from checkworthy.runs.review_queue import answers_as_label_file, export_rows, write_export
from checkworthy.store import lineages
from checkworthy.store import review_queue as queue
from checkworthy.store import rows as store
from checkworthy.store.audit import explain, table_counts
from checkworthy.store.calibration_runs import load_run, result_values
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.worlds import build_world

BOUNDS = Bounds(min_rows=20)


@pytest.fixture(scope="module")
def world(engine):
    """The world plus its incoming target (the spare claims, stored without labels)."""
    w = build_world(engine, "t12-queue")
    with engine.begin() as conn:
        lineages.register_target(conn, f"{w.tag}:incoming", w.lineage, w.extra_ids)
    return w


@pytest.fixture(scope="module")
def first(engine, world):
    """A calibration of the incoming claims under the default rule (error <= 0.1, delta 0.1)."""
    w = world
    return run_calibration(engine, RunSpec(f"{w.tag}:incoming", tuple(sorted(w.extra_ids)), w.ls0, w.key, RunMethods(5)))


def test_a_run_queues_exactly_what_its_rule_sends_to_a_person(engine, world, first):
    with engine.connect() as conn:
        rule = ReviewRule.from_dict(load_run(conn, first)["params"]["review"])
        res = {r.claim_id: r.theta for r in result_values(conn, first)}
        entries = queue.entries_of_run(conn, first)
        open_ = queue.open_entries(conn, target=f"{world.tag}:incoming")
    flagged = {c for c, t in res.items() if rule.review([t])[0] == 1}
    assert flagged and {e["claim_id"] for e in entries} == flagged
    for e in entries:
        assert e["theta"] == res[e["claim_id"]]
        assert e["priority"] == pytest.approx(float(review_priority([e["theta"]], rule.threshold)[0]))
        assert e["reason"] == rule.reason(e["theta"]) and e["reason"].startswith("to a person")
    assert [e["priority"] for e in entries] == sorted((e["priority"] for e in entries), reverse=True)
    assert [o["claim_id"] for o in open_] == [e["claim_id"] for e in entries]  # one row per claim, in order
    assert {o["run_id"] for o in open_} == {first}


def test_the_queue_is_append_only_and_only_a_running_run_adds_to_it(engine, owner_engine, world, first):
    for sql in ("UPDATE review_queue SET priority = 0 WHERE run_id = :r",  # even the owner's
                "DELETE FROM review_queue WHERE run_id = :r"):
        with pytest.raises(DBAPIError, match="append-only"), owner_engine.begin() as conn:
            conn.execute(text(sql), {"r": first})
    with pytest.raises(DBAPIError, match="rows can only be added to a running run"), engine.begin() as conn:
        conn.execute(text("INSERT INTO review_queue (run_id, claim_id, theta, priority, reason) "
                          "VALUES (:r, :c, 0.5, 1, 'late')"), {"r": first, "c": world.lab_ids[0]})


def test_export_writes_label_studio_tasks_and_a_csv_to_fill_in(engine, world, first, tmp_path):
    with engine.connect() as conn:
        rows = export_rows(conn, 7, f"{world.tag}:incoming")
        with pytest.raises(ValueError, match="no claim of it was ever queued"):
            export_rows(conn, 7, "no-such:target")
    assert len(rows) == 7
    write_export(rows, tmp_path / "tasks.json", "label-studio")
    tasks = json.loads((tmp_path / "tasks.json").read_text(encoding="utf-8"))
    assert [t["data"]["claim_id"] for t in tasks] == [r["claim_id"] for r in rows]
    assert all(set(t) == {"data"} and t["data"]["text"] and t["data"]["dataset"] == world.tag for t in tasks)
    assert "$text" in label_studio.LABEL_CONFIG and f'name="{label_studio.FROM_NAME}"' in label_studio.LABEL_CONFIG
    write_export(rows, tmp_path / "queue.csv", "csv")
    with open(tmp_path / "queue.csv", newline="", encoding="utf-8") as fh:
        got = list(csv.DictReader(fh))
    assert [g["id"] for g in got] == [r["source_id"] for r in rows] and all(g["label"] == "" for g in got)


def test_a_random_export_is_a_seeded_uniform_sample_of_the_unlabelled_claims(engine, world, first):
    target = f"{world.tag}:incoming"
    with engine.connect() as conn:
        one = export_rows(conn, 8, target, "random", seed=7)
        again = export_rows(conn, 8, target, "random", seed=7)
        other = export_rows(conn, 8, target, "random", seed=8)
        everything = export_rows(conn, None, target, "random", seed=7)
        labelled = set(store.current_labels(conn, world.extra_ids))
        with pytest.raises(ValueError, match="no calibration in force"):
            export_rows(conn, 8, "no-such:target", "random")
    assert [r["claim_id"] for r in one] == [r["claim_id"] for r in again] != [r["claim_id"] for r in other]
    assert {r["claim_id"] for r in everything} == set(world.extra_ids) - labelled  # every unlabelled claim
    assert [r["claim_id"] for r in everything[:8]] == [r["claim_id"] for r in one]
    assert all(r["reason"].startswith("drawn at random") and 0 <= r["priority"] <= 1 for r in one)


def _explained(engine, claim_id: int, run_id: int) -> str:
    """What ``checkworthy explain`` prints for a claim in a run."""
    with engine.connect() as conn:
        return "\n".join(format_decision(d) for d in explain(conn, [claim_id], run_id))


def _annotated(tasks, truth, cancel_last=True):
    """What Label Studio exports after a person answered ``tasks`` (its full JSON export format)."""
    out = []
    for i, t in enumerate(tasks, 1):
        choice = "Yes" if truth[t["data"]["claim_id"]] else "No"
        ann = {"id": 100 + i, "completed_by": {"id": 3, "email": "ann@desk.example"}, "was_cancelled": False,
               "result": [{"id": f"r{i}", "from_name": "checkworthy", "to_name": "text", "type": "choices",
                           "origin": "manual", "value": {"choices": [choice]}}]}
        out.append({"id": i, "project": 1, "data": t["data"], "annotations": [ann], "predictions": []})
    if cancel_last:  # a skipped task is no answer
        out[-1]["annotations"][0]["was_cancelled"] = True
    return out


def test_answers_close_their_entries_and_the_next_calibration_learns_from_them(engine, world, first, tmp_path):
    w = world
    truth = dict(zip(w.extra_ids, (c.label for c in w.extra)))
    with engine.connect() as conn:
        rows = export_rows(conn, 11, f"{w.tag}:incoming")
    write_export(rows, tmp_path / "tasks.json", "label-studio")
    export = tmp_path / "project-1-at-2026-11-25.json"
    export.write_text(json.dumps(_annotated(json.loads((tmp_path / "tasks.json").read_text()), truth)))
    assert len(answers_as_label_file(export, tmp_path / "review.csv")) == 10
    answered = {r["claim_id"] for r in rows[:10]}
    out = labels.apply_label_file(engine, tmp_path / "review.csv", BOUNDS)
    assert out.status == "applied" and out.n_appended == 10
    with engine.connect() as conn:
        assert {a["claim_id"]: a["label"] for a in queue.answers_of_update(conn, out.update_id)} == {
            c: truth[c] for c in answered}
        history = conn.execute(text("SELECT DISTINCT source FROM labels WHERE claim_id = ANY(:c)"),
                               {"c": list(answered)}).scalars().all()
        assert history == ["label-studio:ann@desk.example"]
        still_open = {o["claim_id"] for o in queue.open_entries(conn, target=f"{w.tag}:incoming")}
        assert still_open and not still_open & answered and rows[10]["claim_id"] in still_open
        head = lineages.lineage_head(conn, w.lineage)
        assert answered <= set(store.label_set_claims(conn, head))  # newly arrived: they join the set
        assert not answered & {r["claim_id"] for r in export_rows(conn, None, f"{w.tag}:incoming", "random")}
    # explain tells an auditor the claim was queued and who answered it
    shown = _explained(engine, rows[0]["claim_id"], first)
    assert f"queue:      queued by this run (priority {rows[0]['priority']:.3f}); answered " \
           f"{truth[rows[0]['claim_id']]} by label update {out.update_id}" in shown
    unanswered = _explained(engine, rows[10]["claim_id"], first)
    assert "queue:      queued by this run" in unanswered and "not answered yet" in unanswered
    # the same export again is the same update: nothing new is written
    before = table_counts(engine)
    again = labels.apply_label_file(engine, tmp_path / "review.csv", BOUNDS)
    assert again.reused and table_counts(engine) == before
    # the lineage's next calibration uses them, queues again, and answered claims stay closed
    runs = recalibrate_lineage(engine, w.lineage, head)
    with engine.connect() as conn:
        (new,) = [r.run_id for r in runs if load_run(conn, r.run_id)["target"] == f"{w.tag}:incoming"]
        assert load_run(conn, new)["label_set_id"] == head
        open_now = queue.open_entries(conn, target=f"{w.tag}:incoming")
    assert {o["run_id"] for o in open_now} == {new} and not {o["claim_id"] for o in open_now} & answered


def test_a_labels_add_of_a_held_out_claim_closes_it_but_keeps_it_out_of_the_set(engine, world, tmp_path):
    w = world
    run = run_calibration(engine, RunSpec(w.target, tuple(sorted(w.target_ids)), w.ls0, w.key, RunMethods(5)))
    with engine.connect() as conn:
        top = queue.entries_of_run(conn, run)[0]["claim_id"]
        sid, gold = conn.execute(text("SELECT c.source_id, l.label FROM claims c JOIN current_labels l "
                                      "ON l.claim_id = c.id WHERE c.id = :c"), {"c": top}).one()
    path = tmp_path / "held-out.csv"
    path.write_text(f"id,dataset,label\n{sid},{w.tag},{gold}\n", encoding="utf-8")
    out = labels.apply_label_file(engine, path, BOUNDS)
    assert out.status == "applied"
    with engine.connect() as conn:
        assert [a["claim_id"] for a in queue.answers_of_update(conn, out.update_id)] == [top]
        assert top not in {o["claim_id"] for o in queue.open_entries(conn, target=w.target)}
        assert top not in store.label_set_claims(conn, lineages.lineage_head(conn, w.lineage))


@pytest.mark.parametrize("content, where", [
    ('[{"data": {"source_id": "a", "dataset": "d"}, "annotations": ['
     '{"result": [{"from_name": "checkworthy", "type": "choices", "value": {"choices": ["Yes"]}}]},'
     '{"result": [{"from_name": "checkworthy", "type": "choices", "value": {"choices": ["No"]}}]}]}]',
     "row 1, field 'annotations': annotators disagree"),
    ('[{"data": {"source_id": "a", "dataset": "d"}, "annotations": ['
     '{"result": [{"from_name": "checkworthy", "type": "choices", "value": {"choices": ["Maybe"]}}]}]}]',
     "row 1, field 'annotations.result.value.choices': must be Yes or No"),
    ('[{"data": {"dataset": "d"}, "annotations": ['
     '{"result": [{"from_name": "checkworthy", "type": "choices", "value": {"choices": ["No"]}}]}]}]',
     "row 1, field 'data.source_id': missing"),
    ('[{"source_id": "a", "dataset": "d", "checkworthy": "Yes"}, '
     '{"source_id": "a", "dataset": "d", "checkworthy": "No"}]', "row 2: claim 'a' of 'd' is answered twice"),
    ('[{"source_id": "a", "dataset": "d"}]', "no answered task or row"),
    ('{"tasks": []}', "not a Label Studio export"),
    ('[{"data": ', "not JSON"),
])
def test_a_bad_label_studio_export_is_refused_naming_task_and_field(tmp_path, content, where):
    path = tmp_path / "export.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=f"export.json, {where}" if where.startswith("row") else where):
        label_studio.read_answers(path)


def test_a_filled_in_csv_is_read_and_empty_labels_are_skipped(tmp_path):
    path = tmp_path / "queue.csv"
    path.write_text("id,dataset,label,text,theta\na,d,yes,x,0.4\nb,d,,y,0.5\nc,d,0,z,0.6\n", encoding="utf-8")
    got = label_studio.read_answers(path)
    assert [(a.id, a.label, a.row) for a in got] == [("a", 1, 2), ("c", 0, 4)]
    path.write_text("id,dataset,label\na,d,2\n", encoding="utf-8")
    with pytest.raises(DataError, match="queue.csv, row 2, field 'label': must be Yes or No"):
        label_studio.read_answers(path)


@pytest.mark.parametrize("argv, says", [
    (["--limit", "0"], "--limit: must be at least 1"),
    (["--format", "xml"], "--format: invalid choice"),
    (["--format", "csv"], "writes a .csv file"),
    (["--target", "no-such:target"], "no claim of it was ever queued"),
    (["--order", "random", "--target", "no-such:target"], "no calibration in force"),
    (["--order", "coverage", "--target", "no-such:target"], "no claim of it was ever queued"),
    (["--order", "sideways"], "--order: invalid choice"),
])
def test_review_export_refuses_bad_options_before_writing(use_db, first, tmp_path, capsys, argv, says):
    out = tmp_path / "tasks.json"
    assert main(["review", "export", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert says in err[-1] and not out.exists()


def test_review_export_and_a_bad_import_through_the_command_line(use_db, world, first, tmp_path, capsys):
    out = tmp_path / "tasks.json"
    assert main(["review", "export", "--limit", "3", "--target", f"{world.tag}:incoming", "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())) == 3
    assert "3 claims to label, most uncertain first" in capsys.readouterr().out
    before = table_counts(use_db)
    bad = tmp_path / "answers.txt"
    bad.write_text("x", encoding="utf-8")
    assert main(["review", "import", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {bad}: expected a Label Studio JSON export (.json) "
                                              "or a CSV (.csv)")
    assert table_counts(use_db) == before
