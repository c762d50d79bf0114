"""A binary ``COPY ... TO STDOUT`` of fixed-size records, decoded by numpy block by block.

Where every row has the same size (``bigint`` and ``double precision`` columns without NULLs, at
most one ``vector`` column of one dimension), a block of the stream is one structured array: no
Python object per row. psycopg's own binary copy (``Copy.rows()``, pgvector's loader for the
vector) gives the same values bit for bit (the tests compare them) but makes a tuple, two floats
and a vector object per row: on 20,000 rows of a parent run it took 2 to 2.5 times as long.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

#: the column types a record may hold, and their big-endian layout on the wire
ColumnType = Literal["int8", "float8", "vector"]
SCALARS = {"int8": ">i8", "float8": ">f8"}
#: the stream's signature, then its flags (4 bytes) and header extension's length (4 bytes)
SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
HEADER = len(SIGNATURE) + 8
#: the trailer: a field count of -1
TRAILER = b"\xff\xff"
#: a block of records (fields as :func:`record_dtype` names them)
Records = np.ndarray[Any, np.dtype[np.void]]


def record_dtype(columns: Sequence[tuple[str, ColumnType]], dim: int = 0) -> np.dtype[np.void]:
    """One record's layout: its field count ``nf``, then per column its length ``l_<name>`` and
    value ``<name>``; a vector is ``dim`` (and ``unused``), then ``<name>``, ``dim`` float32."""
    fields: list[tuple[str, str] | tuple[str, str, tuple[int]]] = [("nf", ">i2")]
    for name, kind in columns:
        fields.append((f"l_{name}", ">i4"))
        if kind == "vector":
            fields += [("dim", ">i2"), ("unused", ">i2"), (name, ">f4", (dim,))]
        else:
            fields.append((name, SCALARS[kind]))
    return np.dtype(fields)


@dataclass
class RecordDecoder:
    """The stream's bytes in, blocks of records out (``what``: the stream, for error messages).
    The record layout is fixed by the first record (its vector's dimension)."""

    columns: Sequence[tuple[str, ColumnType]]
    what: str
    buf: bytearray = field(default_factory=bytearray)
    dtype: np.dtype[np.void] | None = None

    def feed(self, data: bytes | bytearray | memoryview, block: int) -> Iterator[Records]:
        """Add ``data``; the next ``block`` records whenever that many have arrived."""
        self.buf += data
        if self.dtype is None:
            self.dtype = self._start(final=False)
            if self.dtype is None:
                return
        while len(self.buf) >= block * self.dtype.itemsize:
            yield self._take(block)

    def finish(self) -> Iterator[Records]:
        """The records left at the end of the stream, after checking its trailer."""
        if self.dtype is None:
            self.dtype = self._start(final=True)
        assert self.dtype is not None
        n, rest = divmod(len(self.buf) - len(TRAILER), self.dtype.itemsize)
        if rest or not self.buf.endswith(TRAILER):
            raise RuntimeError(f"{self.what}'s rows have NULLs or another size")
        if n:
            yield self._take(n)

    def _start(self, final: bool) -> np.dtype[np.void] | None:
        """Strip the header and fix the record layout (the vector's dimension is in the first
        record); None while too few bytes have arrived to do so."""
        buf = self.buf
        head = HEADER + int.from_bytes(buf[HEADER - 4:HEADER], "big") if len(buf) >= HEADER else None
        if head is None or len(buf) < head:
            if final:
                raise RuntimeError(f"unexpected COPY stream of {self.what}")
            return None
        if not buf.startswith(SIGNATURE):
            raise RuntimeError(f"unexpected COPY stream of {self.what}")
        dt = record_dtype(self.columns)
        if dt.fields is not None and "dim" in dt.fields:
            at = head + dt.fields["dim"][1]
            if len(buf) >= at + 2:
                dt = record_dtype(self.columns, int.from_bytes(buf[at:at + 2], "big"))
            elif not final:
                return None
        del buf[:head]
        return dt

    def _take(self, n: int) -> Records:
        """The first ``n`` records of the buffer, checked; the buffer keeps the rest."""
        assert self.dtype is not None
        rows = np.frombuffer(self.buf, dtype=self.dtype, count=n)  # a view: nothing copied
        self.buf = self.buf[n * self.dtype.itemsize:]
        for name, kind in self.columns:
            size = 4 + 4 * rows[name].shape[1] if kind == "vector" else 8
            if (rows[f"l_{name}"] != size).any():
                raise RuntimeError(f"{self.what}'s rows have NULLs or another size")
        if (rows["nf"] != len(self.columns)).any():
            raise RuntimeError(f"{self.what}'s rows have NULLs or another size")
        vectors = [name for name, kind in self.columns if kind == "vector"]
        if vectors and (rows["dim"] != rows[vectors[0]].shape[1]).any():
            raise RuntimeError(f"{self.what}'s vectors are of different dimensions")
        return rows
