"""The binary COPY decoder (:mod:`checkworthy.store.copy_records`) against psycopg's own binary copy
with pgvector's loader: the same rows, bit for bit, on the real server."""

from __future__ import annotations

import numpy as np
import pytest
from pgvector.psycopg.vector import register_vector_info
from psycopg.types import TypeInfo
from sqlalchemy import text

from checkworthy.store.copy_records import RecordDecoder

COLUMNS = [("id", "int8"), ("score", "float8"), ("n0", "int8"), ("d0", "float8"), ("n1", "int8"),
           ("d1", "float8"), ("v", "vector")]
COPY = "COPY (SELECT id, score, n0, d0, n1, d1, v FROM copy_rows ORDER BY id) TO STDOUT (FORMAT BINARY)"
#: the extremes of each type: the smallest and largest bigint, -0, infinities, a subnormal double
SPECIAL = """INSERT INTO copy_rows VALUES
    (-9223372036854775808, '-0', 9223372036854775807, 'Infinity', 0, '5e-324', '[-0, 1e-30, 3.4e38]'),
    (9223372036854775807, '-Infinity', -1, '0.1', 1, '1.7976931348623157e308', '[1, -1, 0.333333]')"""


def decoded(cur, block: int) -> np.ndarray:
    """Every record of :data:`COPY`, through the decoder in blocks of ``block``."""
    decoder, blocks = RecordDecoder(COLUMNS, "the test table"), []
    with cur.copy(COPY) as cp:
        for message in cp:
            blocks += decoder.feed(message, block)
    blocks += decoder.finish()
    assert all(len(b) == block for b in blocks[:-1])
    return np.concatenate(blocks) if blocks else np.zeros(0)


def psycopg_rows(raw, cur) -> list[tuple]:
    """The same COPY through psycopg's binary copy, pgvector's loader registered on this cursor."""
    register_vector_info(cur, TypeInfo.fetch(raw, "vector"))
    with cur.copy(COPY) as cp:
        cp.set_types(["int8", "float8", "int8", "float8", "int8", "float8", "vector"])
        return list(cp.rows())


def bits(values, dtype: str) -> np.ndarray:
    """The values' bytes, as native integers of their width."""
    return np.asarray(values).astype(dtype).view(f"u{np.dtype(dtype).itemsize}")


def test_records_equal_psycopgs_binary_copy_bit_for_bit(engine):
    with engine.connect() as conn:
        conn.execute(text("CREATE TEMP TABLE copy_rows (id bigint, score float8, n0 bigint, d0 float8, "
                          "n1 bigint, d1 float8, v vector)"))
        conn.execute(text("SELECT setseed(0.3)"))
        conn.execute(text(
            """INSERT INTO copy_rows SELECT i, random() - 0.5, (random() * 1e18)::bigint, random() * 2,
                      -i, ln(i), ARRAY[random() - 0.5, (random() - 0.5) * 1e-20, random() * 1e20]::vector
               FROM generate_series(1, 5000) AS i"""))
        conn.execute(text(SPECIAL))
        raw = conn.connection.driver_connection
        with raw.cursor() as cur:
            ours = decoded(cur, block=1000)
        with raw.cursor() as cur:
            theirs = psycopg_rows(raw, cur)
        conn.rollback()
    assert len(ours) == len(theirs) == 5002 and ours["v"].shape == (5002, 3)
    for i, (name, kind) in enumerate(COLUMNS[:-1]):
        dtype = "i8" if kind == "int8" else "f8"
        assert (bits(ours[name], dtype) == bits([r[i] for r in theirs], dtype)).all(), name
    vectors = np.stack([r[-1].to_numpy() for r in theirs])
    assert (bits(ours["v"], "f4") == bits(vectors, "f4")).all()
    assert ours["id"][0] == -(2**63) and np.signbit(ours["score"][0]) and ours["d0"][0] == np.inf


def test_no_rows_give_no_block_and_a_null_is_refused(engine):
    with engine.connect() as conn:
        conn.execute(text("CREATE TEMP TABLE copy_rows (id bigint, score float8, n0 bigint, d0 float8, "
                          "n1 bigint, d1 float8, v vector)"))
        raw = conn.connection.driver_connection
        with raw.cursor() as cur:
            assert len(decoded(cur, block=10)) == 0
        conn.execute(text("INSERT INTO copy_rows VALUES (1, 0.5, 2, 0.1, 3, 0.2, '[1,2]'), "
                          "(2, NULL, 2, 0.1, 3, 0.2, '[1,2]')"))
        with raw.cursor() as cur, pytest.raises(RuntimeError, match="the test table's rows have NULLs"):
            decoded(cur, block=10)
        conn.rollback()
