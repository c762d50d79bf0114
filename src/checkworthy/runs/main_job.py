"""The main job's steps as plain functions: prepare a dataset, embed, score.

Each step is idempotent (it reuses what the store already holds) and takes an engine; the tasks
of :mod:`checkworthy.flows.tasks` wrap them, and the ``checkworthy-pipeline`` flow composes them
with validation, calibration and the report (``checkworthy run`` runs that flow).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import Connection, Engine

from checkworthy.config import model_name
from checkworthy.data.datasets import load_dataset
from checkworthy.data.records import Claim, LoadReport
from checkworthy.data.splits import build_splits
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.runs.label_updates import store_file_claims
from checkworthy.runs.scoring import rate_progress, score_missing_alongside
from checkworthy.scorers.base import Scorer
from checkworthy.scorers.embedders import MINILM
from checkworthy.scorers.registry import PromptInfo, configured_scorer, model_entry
from checkworthy.store import rows as store
from checkworthy.store.lineages import lineage_space

Echo = Callable[[str], None]


@dataclass
class PreparedDataset:
    """A dataset's calibration label set and test claims, as stored."""

    name: str
    label_set_id: int
    test_ids: list[int]
    reports: list[LoadReport] = field(default_factory=list)


def prepare_dataset(
    engine: Engine, name: str, seed: int, n_per_class: int | None, data_version_id: int | None,
    limit: int | None = None,
) -> PreparedDataset:
    """Load, split and store one dataset; freeze its calibration labels as a label set.

    ``limit`` keeps only the first claims of each split (smoke runs); its label set gets its
    own name so it is never mistaken for the full one. A file label is appended only when the
    file itself changed, so re-running the job never undoes a label the data team corrected
    (``checkworthy labels add``).
    """
    claims, reports = load_dataset(name)
    splits = build_splits(name, claims, seed, n_per_class=n_per_class)
    if limit:
        splits = {key: value[:limit] for key, value in splits.items()}

    def new(c: Claim) -> store.NewClaim:
        return store.NewClaim(c.dataset, c.split, c.source_id, c.text, c.label)

    with engine.begin() as conn:
        cal = store_file_claims(conn, [new(c) for c in splits["calibration"]], f"{name}:file")
        test = store_file_claims(conn, [new(c) for c in splits["test"]], f"{name}:file")
        set_name = f"{name}:calibration:seed={seed}" + (f":limit={limit}" if limit else "")
        ls = store.create_label_set(conn, set_name, cal, data_version_id)
    return PreparedDataset(name, ls, test, reports)


def text_chunks(conn: Connection, claim_ids: Sequence[int], size: int) -> list[list[str]]:
    """The claims' distinct text hashes, sorted, in chunks of ``size``: fixed by the texts alone,
    so a fan-out over any number of workers scores each text in the same batch."""
    hashes = sorted(set(store.claim_text_hashes(conn, claim_ids)))
    return [hashes[i: i + size] for i in range(0, len(hashes), size)]


def embed_texts(engine: Engine, text_hashes: Sequence[str]) -> int:
    """Embed the texts that have no stored vector, in one transaction; return how many."""
    with engine.begin() as conn:
        return ensure_embeddings(conn, text_hashes)


@cache
def _scorer(spec: str, options: str, guidelines: str | None) -> tuple[Scorer, PromptInfo]:
    return configured_scorer(json.loads(options), spec, **({"guidelines": guidelines} if guidelines else {}))


def worker_scorer(params: Mapping[str, Any], spec: str, guidelines: str | None = None,
                  ) -> tuple[Scorer, PromptInfo]:
    """The configured scorer of ``spec``, built once per process (a Dask worker loads its model
    once, not once per chunk)."""
    return _scorer(spec, json.dumps(params, sort_keys=True, default=str), guidelines)


def embed_claims(engine: Engine, claim_ids: Sequence[int], lineage: str | None = None) -> int:
    """Embed every claim text that has no stored vector in ``lineage``'s space (MiniLM where it
    has none recorded, or none is named); return how many were embedded."""
    with engine.begin() as conn:
        model = (lineage_space(conn, lineage) if lineage else None) or MINILM
        return ensure_embeddings(conn, store.claim_text_hashes(conn, claim_ids), model)


def score_claims(
    engine: Engine, scorers: Sequence[Scorer], claim_ids: Sequence[int], prompt: tuple[str, str, str],
    chunk_size: int = 96, echo: Echo = print, flow_run_id: str | None = None,
) -> dict[str, store.ScoreKey]:
    """Score the claims' texts that lack a score under the first scorer; show progress. The others
    (those that share its forward passes: :func:`sharing_passes`) are scored in the same passes,
    their scores stored under their own keys; the keys returned are the first scorer's."""
    scorer, *alongside = scorers
    with engine.connect() as conn:
        hashes = store.claim_text_hashes(conn, claim_ids)
    names = " and ".join([scorer.spec, *(f"{s.spec} ({_sampling(s)})" for s in alongside)])
    progress = rate_progress(echo, lambda done, total: f"  scored {done}/{total} texts with {names}")
    passes = score_missing_alongside(engine, scorers, hashes, prompt, chunk_size=chunk_size,
                                     flow_run_id=flow_run_id, progress=progress)
    for s, (n_new, n_old, _) in zip(scorers, passes, strict=True):
        echo(f"  {s.spec}{f' ({_sampling(s)})' if s is not scorer else ''}: {n_new} texts scored now, "
             f"{n_old} reused from the store")
    return passes[0][2]


def sharing_passes(scorer: Scorer, others: Sequence[Scorer]) -> list[Scorer]:
    """The ``others`` that ``scorer`` can score in its own forward passes (they differ from it only
    in how they sample: the paper's temperature and the ablation's)."""
    shares = getattr(scorer, "shares_passes", None)
    return [o for o in others if shares is not None and shares(o)]


def later_of_its_spec(params: Mapping[str, Any], name: str) -> list[str]:
    """The names of the ``models:`` entries after ``name`` that have its spec: those its scorer may
    score in its own forward passes (:func:`sharing_passes` decides), so that their own pass, later,
    finds their scores stored."""
    names = [model_name(m) for m in params["models"]]
    spec = model_entry(params, name)["spec"]
    after = names[names.index(name) + 1:] if name in names else []
    return [n for n in after if model_entry(params, n)["spec"] == spec]


def _sampling(scorer: Scorer) -> str:
    params = scorer.params()
    return f"T={params['temperature']}" if "temperature" in params else "its own options"
