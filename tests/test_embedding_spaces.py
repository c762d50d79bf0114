"""An embedding space per lineage (migration 0022): vectors of a model have its dimension, a
Spanish lineage calibrates in USE multilingual v3, a lineage never mixes two spaces, and kNN
finds USE neighbours in SQL on both paths. Real claims (CheckThat! 2022 Spanish tweets), the real
embedders, the real store."""

from __future__ import annotations

import numpy as np
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from checkworthy.cli.main import main
from checkworthy.config import CODE_ROOT
from checkworthy.data.datasets import load_clef, load_tweets
from checkworthy.runs.embedding import auto_space, english_labels
from checkworthy.scorers.embedders import MINILM, USE_MULTILINGUAL, dimension, embed
from checkworthy.store import rows as store
from checkworthy.store.audit import table_counts
from checkworthy.store.embeddings import claim_embeddings, store_embeddings
from checkworthy.store.engine import local_settings
from checkworthy.store.knn import KnnPath, hnsw_knn_sql, key_params, nearest_labelled
from checkworthy.store.lineages import lineage_space
from checkworthy.store.rows import ScoreKey
from checkworthy.testing.claims import write_csv
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.scratch_project import fresh_database

SPANISH = ("spanish", "CT22_spanish_1A_checkworthy_train.tsv")
ARGS = ("--model", "classifier:minilm-lr", "--score-kind", "p_positive", "--k", "5", "--correction", "paper",
        "--interval", "z", "--prior", "labelled")  # the paper's path: recalibrated incrementally


def sqlstate(exc: DBAPIError) -> str | None:
    return getattr(exc.orig, "sqlstate", None)


@pytest.fixture(scope="module")
def spanish(tmp_path_factory):
    """24 balanced Spanish train tweets as L, 8 others (with labels) as U."""
    tweets, _ = load_tweets(raw_path("multilingual", *SPANISH), "ct22-train", dataset="tweets-es")
    lab = [t for t in tweets if t.label == 1][:12] + [t for t in tweets if t.label == 0][:12]
    unl = [t for t in tweets if t not in lab][:8]
    d = tmp_path_factory.mktemp("spaces")
    return (write_csv(d / "L.csv", ["id", "text", "label"], [(t.source_id, t.text, t.label) for t in lab]),
            write_csv(d / "U.csv", ["id", "text", "label"], [(t.source_id, t.text, t.label) for t in unl]), d)


def test_each_model_gives_unit_vectors_of_its_dimension():
    texts = ["El paro subió un 4% en 2021.", "Thank you all for coming."]
    for model in (MINILM, USE_MULTILINGUAL):
        v = embed(model, texts)
        assert v.dtype == np.float32 and v.shape == (2, dimension(model))
        assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    assert (dimension(MINILM), dimension(USE_MULTILINGUAL)) == (384, 512)


def test_auto_picks_minilm_for_english_labels_and_use_for_others(spanish):
    clef, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    tweets, _ = load_tweets(raw_path("multilingual", *SPANISH), "ct22-train", dataset="tweets-es")
    assert auto_space(english_labels([c.text for c in clef[:30]])) == MINILM
    assert auto_space(english_labels([t.text for t in tweets[:30]])) == USE_MULTILINGUAL
    assert auto_space(english_labels(["https://t.co/x @someone 123"])) == MINILM  # nothing detectable: English's


def test_a_vector_of_another_dimension_is_refused_by_the_database(engine):
    with engine.begin() as conn:
        (h,) = store.store_texts(conn, ["una frase para el espacio de USE"])
        store_embeddings(conn, [h], embed(USE_MULTILINGUAL, ["una frase para el espacio de USE"]),
                         USE_MULTILINGUAL)
    refused = {  # table, model, dimension -> SQLSTATE and message
        ("embeddings", USE_MULTILINGUAL, 384): ("23514", f"a {USE_MULTILINGUAL} vector has 384 dimensions, not 512"),
        ("knn_vectors", MINILM, 512): ("23514", f"a {MINILM} vector has 512 dimensions, not 384"),
        ("embeddings", "no-such-model", 384): ("23503", "embeddings_model_fkey"),
    }
    for (table, model, dim), (code, message) in refused.items():
        with engine.connect() as conn:
            with pytest.raises(DBAPIError) as info:
                conn.execute(text(f"INSERT INTO {table} (text_hash, model, embedding) "
                                  "VALUES (:h, :m, CAST(:v AS vector))"),
                             {"h": h, "m": model, "v": "[" + ",".join(["0.05"] * dim) + "]"})
            conn.rollback()
        assert sqlstate(info.value) == code and message in str(info.value)
    with engine.connect() as conn:
        got = conn.execute(text("SELECT vector_dims(embedding) FROM embeddings WHERE text_hash = :h"),
                           {"h": h}).scalars().all()
    assert got == [512]


@pytest.fixture(scope="module")
def predicted(db_url, engine, spanish):
    """``predict`` on the Spanish files (``--embedding auto``): its run row."""
    lab, unl, d = spanish
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DATABASE_URL", db_url)
        assert main(["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--out", str(d / "OUT.csv"),
                     *ARGS]) == 0
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM calibration_runs ORDER BY id DESC LIMIT 1")).mappings().one()


def test_a_spanish_predict_calibrates_in_use_and_its_lineage_records_it(use_db, spanish, predicted, capsys):
    lab, unl, d = spanish
    lineage = f"{store_dataset(lab)}:labeled"
    assert predicted["embed_model"] == USE_MULTILINGUAL
    with use_db.connect() as conn:
        assert lineage_space(conn, lineage) == USE_MULTILINGUAL
        name = conn.execute(text("SELECT name FROM label_sets WHERE id = :s"),
                            {"s": predicted["label_set_id"]}).scalar_one()
        assert name == lineage
        dims = conn.execute(text(
            """SELECT DISTINCT vector_dims(e.embedding) FROM unnest(CAST(:c AS bigint[])) u(id)
               JOIN claims c ON c.id = u.id JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :m"""),
            {"c": list(predicted["claim_ids"]), "m": USE_MULTILINGUAL}).scalars().all()
        assert dims == [512]
        first = conn.execute(text("SELECT source_id FROM claims WHERE id = :c"),
                             {"c": predicted["claim_ids"][0]}).scalar_one()
    capsys.readouterr()
    assert main(["explain", first, "--run", str(predicted["id"])]) == 0
    assert f"by {USE_MULTILINGUAL} cosine distance" in capsys.readouterr().out


def store_dataset(path) -> str:
    from checkworthy.runs.own_scores import upload_dataset

    return upload_dataset(path)


def test_another_space_for_the_lineage_is_refused_before_anything_is_written(use_db, spanish, predicted,
                                                                            capsys):
    lab, unl, d = spanish
    lineage = f"{store_dataset(lab)}:labeled"
    before = table_counts(use_db)
    capsys.readouterr()
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--out", str(d / "mixed.csv"),
                 "--embedding", MINILM, *ARGS]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "would mix embedding spaces" in err
    assert f"--embedding {MINILM}" in err and lineage in err and USE_MULTILINGUAL in err
    assert table_counts(use_db) == before and not (d / "mixed.csv").exists()
    # the lineage's own space, named or auto, is the same run again
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--out", str(d / "same.csv"),
                 "--embedding", USE_MULTILINGUAL, *ARGS]) == 0
    assert table_counts(use_db) == before
    # an unknown model is refused by name, before the store is touched
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--out", str(d / "x.csv"),
                 "--embedding", "word2vec", *ARGS]) == 2
    assert "--embedding word2vec: unknown embedding" in capsys.readouterr().err


def test_the_database_refuses_a_run_in_another_space_than_its_lineage(use_db, predicted):
    with use_db.connect() as conn:
        with pytest.raises(DBAPIError) as info:
            conn.execute(text(
                """INSERT INTO calibration_runs (run_key, target, label_set_id, label_set_fingerprint, model_id,
                   prompt_version, params_hash, score_kind, embed_model, k, alpha, threshold, params, status,
                   claim_ids, code_rev)
                   SELECT 'mixed', target, label_set_id, label_set_fingerprint, model_id, prompt_version,
                          params_hash, score_kind, :m, k, alpha, threshold, params, 'running', claim_ids, code_rev
                   FROM calibration_runs WHERE id = :r"""), {"m": MINILM, "r": predicted["id"]})
        conn.rollback()
    assert sqlstate(info.value) == "23514" and "would mix embedding spaces" in str(info.value)


def test_use_neighbours_are_found_in_sql_exactly_and_through_their_hnsw_index(use_db, predicted):
    run = predicted
    key = ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"], run["score_kind"])
    ids = list(run["claim_ids"])
    hnsw = KnnPath("hnsw", 80)
    with use_db.begin() as conn:
        exact = nearest_labelled(conn, run["label_set_id"], ids, 5, key, USE_MULTILINGUAL)
        approx = nearest_labelled(conn, run["label_set_id"], ids, 5, key, USE_MULTILINGUAL, hnsw)
        q = claim_embeddings(conn, exact.claim_ids.tolist(), USE_MULTILINGUAL)
        nb = claim_embeddings(conn, exact.neighbour_ids.ravel().tolist(), USE_MULTILINGUAL)
        params = key_params(run["label_set_id"], key, USE_MULTILINGUAL) | {
            "claim_ids": ids, "k": 5, "leave_one_out": False,
            "pool_hashes": conn.execute(text(
                """SELECT DISTINCT c.text_hash FROM label_set_items i JOIN claims c ON c.id = i.claim_id
                   WHERE i.label_set_id = :s"""), {"s": run["label_set_id"]}).scalars().all()}
        settings = {"hnsw.ef_search": "80", "hnsw.iterative_scan": "strict_order", "enable_seqscan": "off",
                    "enable_sort": "off", "plan_cache_mode": "force_custom_plan"}
        with local_settings(conn, settings):
            plan = "\n".join(conn.execute(text("EXPLAIN " + hnsw_knn_sql(512).text), params).scalars())
            minilm_plan = "\n".join(conn.execute(text("EXPLAIN " + hnsw_knn_sql(384).text),
                                                 params | {"embed_model": MINILM}).scalars())
        n_vectors = conn.execute(text("SELECT count(*) FROM knn_vectors WHERE model = :m"),
                                 {"m": USE_MULTILINGUAL}).scalar_one()
    assert len(exact.claim_ids) == len(ids) == 8 and n_vectors >= 24
    # the distances are cosine distances between the stored 512-d USE vectors
    cos = 1 - np.einsum("id,ikd->ik", q, nb.reshape(len(q), 5, 512))
    assert np.allclose(exact.distances, cos, atol=1e-5)
    # 24 labelled texts, 80 candidates: the index finds every true neighbour
    assert np.array_equal(approx.neighbour_ids, exact.neighbour_ids)
    assert np.allclose(approx.distances, exact.distances, atol=1e-6)
    # each model's search reads its own partial index
    assert "Index Scan using knn_vectors_hnsw_use_multilingual_v3 on" in plan
    assert "Index Scan using knn_vectors_hnsw on" in minilm_plan


def test_a_new_label_recalibrates_the_use_lineage_incrementally_in_its_space(use_db, spanish, predicted):
    """A label for one of U's claims versions the lineage; its calibration in force is brought up to
    date incrementally (the parent's vectors read by the binary COPY), in USE, equal to a full run."""
    from checkworthy.runs.recalibration import recalibrate_lineage, spec_from_run
    from checkworthy.store.lineages import set_head, target_claim_ids
    from checkworthy.testing.worlds import assert_equals_full

    lab, _, _ = spanish
    lineage = f"{store_dataset(lab)}:labeled"
    with use_db.begin() as conn:
        members = store.label_set_claims(conn, predicted["label_set_id"])
        new = store.create_label_set(conn, lineage, [*members, predicted["claim_ids"][0]])
        assert set_head(conn, lineage, new, "labels")
    (outcome,) = recalibrate_lineage(use_db, lineage, new)
    with use_db.connect() as conn:
        run = conn.execute(text("SELECT * FROM calibration_runs WHERE id = :r"),
                           {"r": outcome.run_id}).mappings().one()
        targets = target_claim_ids(conn, lineage)[run["target"]]
    assert (outcome.mode, outcome.parent_run_id) == ("incremental", predicted["id"])
    assert run["embed_model"] == USE_MULTILINGUAL and run["label_set_id"] == new
    assert_equals_full(use_db, spec_from_run(run, new, targets), run["id"])


def test_a_served_window_of_the_use_lineage_embeds_and_calibrates_in_use(use_db, predicted):
    """Texts submitted to the Spanish lineage's run are embedded in USE, found neighbours in USE, and
    the window's run is in the lineage's space."""
    from functools import partial

    from checkworthy.config import load_params
    from checkworthy.runs.served_run import ServedRun, matching_scorer
    from checkworthy.store.api_keys import create_key

    texts = ["El Gobierno bajó el IVA de la luz al 5% en 2021.", "Buenos días a todos, feliz lunes."]
    with use_db.begin() as conn:
        key, _ = create_key(conn, "spaces-test", "scorer")
    served = ServedRun(use_db, predicted["id"], partial(matching_scorer, load_params()))
    try:
        got = served.submit(texts, key.id, "sentences")
    finally:
        served.close()
    with use_db.connect() as conn:
        window = conn.execute(text("SELECT embed_model, status FROM calibration_runs WHERE id = :r"),
                              {"r": got.run_id}).one()
        stored = conn.execute(text("SELECT model, vector_dims(embedding) FROM embeddings WHERE text_hash = ANY(:h)"),
                              {"h": [store.sha256_text(t) for t in texts]}).all()
    assert tuple(window) == (USE_MULTILINGUAL, "complete") and set(stored) == {(USE_MULTILINGUAL, 512)}
    r = got.results[0]
    q = embed(USE_MULTILINGUAL, texts[:1])[0]
    with use_db.connect() as conn:
        vectors = claim_embeddings(conn, [n.claim_id for n in r.neighbours], USE_MULTILINGUAL)
    assert np.allclose([n.distance for n in r.neighbours], 1 - vectors @ q, atol=1e-5)


def _columns(conn) -> dict[str, str]:
    return dict(conn.execute(text(
        """SELECT c.relname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
           JOIN pg_class c ON c.oid = a.attrelid
           WHERE c.relname IN ('embeddings', 'knn_vectors') AND a.attname = 'embedding'""")).all())


def test_the_migration_goes_down_to_384_dimensions_and_back_keeping_minilm_vectors(owner_url):
    name = "checkworthy_spaces_migration"
    with fresh_database(owner_url, name) as url:
        app = create_engine(url)
        owner = make_url(owner_url).set(database=name).render_as_string(hide_password=False)
        cfg = Config(str(CODE_ROOT / "alembic.ini"))
        cfg.set_main_option("script_location", str(CODE_ROOT / "migrations"))
        cfg.set_main_option("sqlalchemy.url", owner.replace("%", "%%"))
        texts = ["Unemployment rose by 4% last year.", "El paro subió un 4% el año pasado."]
        try:
            with app.begin() as conn:
                hashes = store.store_texts(conn, texts)
                for model in (MINILM, USE_MULTILINGUAL):
                    store_embeddings(conn, hashes, embed(model, texts), model)
                minilm = conn.execute(text("SELECT text_hash, embedding::text FROM embeddings WHERE model = :m "
                                           "ORDER BY 1"), {"m": MINILM}).all()
                conn.execute(text("INSERT INTO label_sets (name, fingerprint, n_items, n_positive) "
                                  "VALUES ('before-0022', repeat('0', 64), 0, 0)"))
                assert _columns(conn) == {"embeddings": "vector", "knn_vectors": "vector"}
            command.downgrade(cfg, "0021")
            with app.connect() as conn:
                assert _columns(conn) == {"embeddings": "vector(384)", "knn_vectors": "vector(384)"}
                assert conn.execute(text("SELECT text_hash, embedding::text FROM embeddings ORDER BY 1")).all() \
                    == minilm
                assert conn.execute(text("SELECT to_regclass('embedding_models'), to_regclass('lineage_spaces')"
                                         )).one() == (None, None)
                index = conn.execute(text("SELECT indexdef FROM pg_indexes WHERE indexname = 'knn_vectors_hnsw'"
                                          )).scalar_one()
                assert "halfvec(384)" in index and "WHERE" not in index
            command.upgrade(cfg, "head")
            with app.connect() as conn:
                assert _columns(conn) == {"embeddings": "vector", "knn_vectors": "vector"}
                assert conn.execute(text("SELECT text_hash, embedding::text FROM embeddings ORDER BY 1")).all() \
                    == minilm
                assert lineage_space(conn, "before-0022") == MINILM
                indexes = dict(conn.execute(text(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'knn_vectors' "
                    "AND indexname LIKE 'knn_vectors_hnsw%'")).all())
                owners = dict(conn.execute(text(
                    "SELECT tablename, tableowner FROM pg_tables WHERE tablename IN "
                    "('embedding_models', 'lineage_spaces')")).all())
                triggers = set(conn.execute(text(
                    "SELECT tgname FROM pg_trigger WHERE tgrelid IN ('embedding_models'::regclass, "
                    "'lineage_spaces'::regclass)")).scalars())
            assert sorted(indexes) == ["knn_vectors_hnsw", "knn_vectors_hnsw_use_multilingual_v3"]
            assert "halfvec(384)" in indexes["knn_vectors_hnsw"] and MINILM in indexes["knn_vectors_hnsw"]
            assert "halfvec(512)" in indexes["knn_vectors_hnsw_use_multilingual_v3"]
            assert owners == {"embedding_models": "checkworthy_owner", "lineage_spaces": "checkworthy_owner"}
            assert {"embedding_models_append_only", "embedding_models_no_truncate", "lineage_spaces_append_only",
                    "lineage_spaces_no_truncate"} <= triggers
        finally:
            app.dispose()


def test_serve_chooses_the_model_predict_chose_for_a_lineage_not_in_english(use_db, spanish, predicted):
    """Without --model, serve looks for runs of the model predict gives such labels
    (``predict.model_other_languages``), not the English ``predict.model``."""
    import argparse

    from checkworthy.cli.serve import _selection
    from checkworthy.config import PARAMS_FILE, load_params
    from checkworthy.runs.embedding import english_counts

    lab, _, _ = spanish
    args = argparse.Namespace(any_model=False, run=None, model=None, score_kind=None, k=None, correction=None,
                              interval=None, params=str(PARAMS_FILE))
    with use_db.connect() as conn:
        _, selection = _selection(conn, args, load_params(PARAMS_FILE), f"{store_dataset(lab)}:labeled")
    assert selection.fields["model"] == "classifier:multilingual-tweets"
    assert english_counts({"en": 9, "es": 1, "und": 40}) and not english_counts({"en": 8, "es": 2})
    assert english_counts({}) and english_counts({"und": 3})
