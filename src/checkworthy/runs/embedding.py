"""Sentence embeddings of stored texts: the texts without a vector are embedded here (model
inference, in the runs layer) and their vectors handed to :mod:`checkworthy.store.embeddings`,
which only stores and reads them. Each distinct text is embedded once per model.

Also which space a new lineage calibrates in (:func:`auto_space`): MiniLM for English labels,
Universal Sentence Encoder multilingual otherwise (docs/method.md, "A lineage's embedding space").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from sqlalchemy import Connection

from checkworthy.config import EMBED_MODEL
from checkworthy.data.language import UND, detect
from checkworthy.scorers.embedders import MINILM, USE_MULTILINGUAL, embed
from checkworthy.store.embeddings import missing_texts, store_embeddings

#: ``--embedding auto``: MiniLM when at least this share of the labelled claims in a detectable
#: language are English (MiniLM is an English model; USE multilingual v3 is far better on the
#: others, docs/method.md "Multilingual embeddings"), else USE multilingual v3
ENGLISH_SHARE = 0.9
#: the option's value that chooses by the labels' languages
AUTO = "auto"


def ensure_embeddings(
    conn: Connection, text_hashes: Sequence[str], model: str = EMBED_MODEL, batch_size: int = 256
) -> int:
    """Embed with ``model`` (loaded on first use) and store every text in ``text_hashes`` that has
    no ``model`` vector yet; return how many."""
    missing = missing_texts(conn, text_hashes, model)
    for start in range(0, len(missing), batch_size):
        chunk = missing[start : start + batch_size]
        store_embeddings(conn, [row.text_hash for row in chunk], embed(model, [row.text for row in chunk]),
                         model)
    return len(missing)


def english_labels(labelled_texts: Sequence[str]) -> bool:
    """Whether a team's labelled texts are English: at least :data:`ENGLISH_SHARE` of those in a
    detectable language (:func:`checkworthy.data.language.detect`, the detector whose answers the
    store keeps), or none detectable. It chooses a new lineage's space (:func:`auto_space`) and
    predict's model; a caller decides it once and passes the answer to both."""
    return english_counts(Counter(d.code for d in detect(labelled_texts)))


def english_counts(languages: Mapping[str, int]) -> bool:
    """:func:`english_labels` from the count of labelled claims in each language (``und`` ignored),
    as the store keeps them (:func:`checkworthy.store.languages.label_set_languages`)."""
    known = sum(n for code, n in languages.items() if code != UND)
    return not known or languages.get("en", 0) >= ENGLISH_SHARE * known


def auto_space(english: bool) -> str:
    """The space ``auto`` picks for a new lineage: MiniLM when its labels are ``english``
    (:func:`english_labels`, decided once by the caller), else USE multilingual v3."""
    return MINILM if english else USE_MULTILINGUAL
