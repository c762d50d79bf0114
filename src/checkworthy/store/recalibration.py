"""What an incremental recalibration reads and writes (:mod:`checkworthy.runs.recalibration`).

The labelled pools of two label sets in one statement; the parent run's rows and its targets'
vectors as one binary COPY read block by block; a few claims' vectors in binary; the exact
distances of candidate pairs; the parent's unaffected rows copied in SQL; and the recomputed rows
written by one binary COPY built by numpy. The wire formats are decoded and encoded here, so the
caller sees only arrays.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import psycopg
from numpy.typing import ArrayLike, NDArray
from sqlalchemy import Connection, Row, text

from checkworthy.method.nnppi import NNPPIResult
from checkworthy.store.calibration_runs import RESULT_COLUMNS
from checkworthy.store.copy_records import HEADER, SIGNATURE, TRAILER, ColumnType, RecordDecoder, Records
from checkworthy.store.engine import local_settings
from checkworthy.store.knn import SCORED_AND_EMBEDDED, key_params, pair_distances
from checkworthy.store.rows import ScoreKey, bigint_array

#: the eligible labelled claims of the new and of the parent's label set in one statement: each
#: claim's score and embedding are looked up once (``since``: when it became usable as a neighbour)
POOLS_SQL = text(
    f"""
WITH items AS (
    SELECT claim_id, max(label) FILTER (WHERE label_set_id = :new) AS new_label,
           max(label) FILTER (WHERE label_set_id = :old) AS old_label
    FROM label_set_items WHERE label_set_id IN (:new, :old) GROUP BY claim_id)
SELECT i.claim_id, i.new_label, i.old_label, p.score, greatest(p.created_at, e.created_at) AS since
FROM items i
{SCORED_AND_EMBEDDED}
"""
)

#: the parent's rows as fixed-size binary records: claim id, score, the k neighbour ids, the k
#: distances (parsed with numpy; one message per row, no per-row Python objects)
PARENT_COPY = """COPY (SELECT r.claim_id, r.score, {neighbours} FROM calibrated_results r WHERE r.run_id = %s)
TO STDOUT (FORMAT BINARY)"""
#: the same with each target's vector (needed when labelled claims were added)
PARENT_VECTORS_COPY = """COPY (SELECT r.claim_id, r.score, {neighbours}, e.embedding FROM calibrated_results r
    JOIN claims c ON c.id = r.claim_id JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = %s
    WHERE r.run_id = %s) TO STDOUT (FORMAT BINARY)"""
#: concatenated ``vector_send`` images of a few claims (the labelled pool, never the targets)
VECTORS_SQL = """
SELECT string_agg(int8send(c.id) || vector_send(e.embedding), ''::bytea)
FROM claims c JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = %s
WHERE c.id = ANY(%s)"""
#: server settings while the parent's rows and vectors are read (restored afterwards): hash
#: tables in memory, and no parallel workers, which would ship every 1.5 kB vector through shared
#: memory and compete for the CPUs with the copy running alongside
PARENT_READ_SETTINGS = {"work_mem": "64MB", "max_parallel_workers_per_gather": "0"}
#: a parent with at least this share of the embeddings' rows is read by hash joins over sequential
#: scans, whatever the statistics say: right after a large parent run ``calibrated_results`` may not
#: be analysed yet, and the planner would probe the embeddings index once per target (3x slower)
HASH_JOIN_SHARE = 0.1
#: the candidate pairs are sorted with their vectors: in memory, not in a temporary file
EXACT_SETTINGS = {"work_mem": "64MB"}

#: copy some of the parent's rows unchanged into the new run (``computed_in_run``: who computed
#: them); ``run_id = p AND claim_id = ANY(...)`` is one ordered walk of the primary key over just
#: those rows, whatever the statistics (a join on ``unnest`` may hash the whole parent per call)
COPY_KEPT_SQL = text(
    f"""INSERT INTO calibrated_results ({', '.join(RESULT_COLUMNS)}, computed_in_run)
        SELECT :new, r.claim_id, r.score, r.theta, r.ci_low, r.ci_high, r.decision, r.knn_mean,
               r.neighbour_ids, r.neighbour_distances, coalesce(r.computed_in_run, r.run_id)
        FROM calibrated_results r WHERE r.run_id = :p AND r.claim_id = ANY(CAST(:keep AS bigint[]))"""
)

#: type oids of the array elements (``array_recv`` checks them): int8, float8
INT8_OID, FLOAT8_OID = 20, 701


def _driver(conn: Connection) -> psycopg.Connection[Any]:
    """psycopg's own connection under ``conn``, for what SQLAlchemy does not expose (COPY, binary
    cursors)."""
    raw = conn.connection.driver_connection
    assert raw is not None, "a connection in use has its driver's connection"
    return cast(psycopg.Connection[Any], raw)


def pools(conn: Connection, new_label_set_id: int, old_label_set_id: int, key: ScoreKey,
          embed_model: str) -> Sequence[Row[Any]]:
    """The claims eligible as neighbours under ``key`` in either label set: (claim_id, new_label,
    old_label, score, since), a label None where the claim is not in that set."""
    return conn.execute(POOLS_SQL, key_params(new_label_set_id, key, embed_model)
                        | {"new": new_label_set_id, "old": old_label_set_id}).all()


def parent_blocks(conn: Connection, parent_run_id: int, k: int, block: int,
                  embed_model: str | None = None) -> Iterator[Records]:
    """The parent run's rows (with ``embed_model``: and each target's vector), in arrival order, as
    structured arrays of up to ``block`` records: ``id``, ``score``, ``n0..`` (neighbour ids),
    ``d0..`` (distances), ``v`` (the big-endian float32 vector).

    One binary COPY of fixed-size records (k neighbours, no NULLs, one vector dimension), decoded
    by :class:`~checkworthy.store.copy_records.RecordDecoder`. The connection is busy until the
    generator is exhausted: use another one meanwhile.
    """
    cols = ", ".join([f"r.neighbour_ids[{i}]" for i in range(1, k + 1)]
                     + [f"r.neighbour_distances[{i}]" for i in range(1, k + 1)])
    sql = (PARENT_VECTORS_COPY if embed_model else PARENT_COPY).format(neighbours=cols)
    params = (embed_model, parent_run_id) if embed_model else (parent_run_id,)
    columns: list[tuple[str, ColumnType]] = [("id", "int8"), ("score", "float8")]
    columns += [(f"n{i}", "int8") for i in range(k)] + [(f"d{i}", "float8") for i in range(k)]
    columns += [("v", "vector")] if embed_model else []
    decoder = RecordDecoder(columns, "the parent run")
    settings = parent_read_settings(conn, parent_run_id) if embed_model else PARENT_READ_SETTINGS
    with (local_settings(conn, settings), _driver(conn).cursor() as cur,
          cur.copy(sql, params) as cp):
        for message in cp:
            yield from decoder.feed(message, block)
    yield from decoder.finish()


def parent_read_settings(conn: Connection, parent_run_id: int) -> dict[str, str]:
    """``PARENT_READ_SETTINGS``, and no nested loops if the parent is large against the embeddings
    (its row count is in its params; the embeddings' is the catalogue's estimate, -1 if unknown)."""
    n_parent, n_embeddings = conn.execute(
        text("""SELECT (SELECT (params->>'n_calibrated')::float8 FROM calibration_runs WHERE id = :p),
                       (SELECT reltuples FROM pg_class WHERE oid = 'embeddings'::regclass)"""),
        {"p": parent_run_id}).one()
    if n_parent is not None and n_embeddings is not None and 0 <= HASH_JOIN_SHARE * n_embeddings <= n_parent:
        return PARENT_READ_SETTINGS | {"enable_nestloop": "off"}
    return PARENT_READ_SETTINGS


def claim_vectors(conn: Connection, claim_ids: Sequence[int],
                  embed_model: str) -> tuple[NDArray[np.int64], NDArray[np.float32]]:
    """The ids of the claims with an ``embed_model`` vector and their vectors (rows, in no
    particular order), from one statement in binary."""
    if not len(claim_ids):
        return np.zeros(0, np.int64), np.zeros((0, 0), np.float32)
    with _driver(conn).cursor(binary=True) as cur:
        cur.execute(VECTORS_SQL, (embed_model, [int(i) for i in claim_ids]))
        row = cur.fetchone()
        assert row is not None, "an aggregate returns one row"
        (blob,) = row
    if not blob:
        return np.zeros(0, np.int64), np.zeros((0, 0), np.float32)
    dim = int.from_bytes(blob[8:10], "big")
    dt = np.dtype([("id", ">i8"), ("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))])
    rows = np.frombuffer(blob, dtype=dt)
    if len(blob) % dt.itemsize or (rows["dim"] != dim).any():
        raise RuntimeError("vectors of different dimensions")
    return rows["id"].astype(np.int64), rows["v"].astype(np.float32)


def exact_distances(conn: Connection, target_ids: ArrayLike, other_ids: ArrayLike,
                    embed_model: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """:func:`checkworthy.store.knn.pair_distances` of many candidate pairs, sorted in memory."""
    with local_settings(conn, EXACT_SETTINGS):
        return pair_distances(conn, target_ids, other_ids, embed_model)


def copy_kept(conn: Connection, run_id: int, parent_run_id: int, claim_ids: ArrayLike) -> None:
    """Copy these claims' rows from the parent into the new run (:data:`COPY_KEPT_SQL`)."""
    conn.execute(COPY_KEPT_SQL, {"new": run_id, "keep": bigint_array(claim_ids), "p": parent_run_id})


def _array_dtype(element: str, k: int) -> np.dtype:
    """A one-dimensional array without NULLs of k fixed-size elements, in binary COPY layout."""
    return np.dtype([("len", ">i4"), ("ndim", ">i4"), ("flags", ">i4"), ("oid", ">u4"), ("dim", ">i4"),
                     ("lbound", ">i4"), ("items", [("len", ">i4"), ("v", element)], (k,))])


def _fill_array(field: np.ndarray, oid: int, values: np.ndarray) -> None:
    """Write (n, k) ``values`` into a column of :func:`_array_dtype` records."""
    k = values.shape[1]
    field["len"] = field.dtype.itemsize - 4
    field["ndim"], field["flags"], field["oid"], field["dim"], field["lbound"] = 1, 0, oid, k, 1
    field["items"]["len"] = values.dtype.itemsize
    field["items"]["v"] = values


def copy_results(conn: Connection, run_id: int, claim_ids: NDArray[np.int64], res: NNPPIResult,
                 neighbour_ids: NDArray[np.int64], neighbour_distances: NDArray[np.float64]) -> None:
    """Bulk-insert result rows ((n, k) neighbour ids and distances) with one binary COPY built by numpy.

    Every row has the same size (k neighbours, no NULLs), so the whole stream is one structured
    array: no Python object or text formatting per row, and floats travel bit for bit.
    """
    n, k = neighbour_ids.shape
    floats = ("score", "theta", "ci_low", "ci_high")
    dt = np.dtype([("nf", ">i2"), ("l_run", ">i4"), ("run", ">i8"), ("l_id", ">i4"), ("id", ">i8")]
                  + [x for c in floats for x in ((f"l_{c}", ">i4"), (c, ">f8"))]
                  + [("l_decision", ">i4"), ("decision", "u1"), ("l_knn_mean", ">i4"), ("knn_mean", ">f8"),
                     ("nids", _array_dtype(">i8", k)), ("nds", _array_dtype(">f8", k))])
    rec = np.zeros(n, dt)
    rec["nf"] = len(RESULT_COLUMNS)
    rec["l_run"], rec["run"], rec["l_id"], rec["id"] = 8, run_id, 8, claim_ids
    for c in floats + ("knn_mean",):
        rec[f"l_{c}"], rec[c] = 8, getattr(res, c)
    rec["l_decision"], rec["decision"] = 1, np.asarray(res.decision).astype(bool)
    _fill_array(rec["nids"], INT8_OID, neighbour_ids.astype(np.int64))
    _fill_array(rec["nds"], FLOAT8_OID, neighbour_distances.astype(np.float64))
    raw = _driver(conn)
    sql = f"COPY calibrated_results ({', '.join(RESULT_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
    with raw.cursor() as cur, cur.copy(sql) as cp:
        # the header: no flags, no extension
        cp.write(SIGNATURE + bytes(HEADER - len(SIGNATURE)) + rec.tobytes() + TRAILER)
