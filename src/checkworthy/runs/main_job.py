"""The main job's steps as plain functions: prepare data, embed, score, calibrate.

Each step is idempotent (it reuses what the store already holds) and takes an engine, so the
CLI and the Prefect flows call the same code. ``run_pipeline`` composes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from checkworthy.config import DATA_DIR
from checkworthy.data.datasets import (
    KNOWN_SHA256,
    Claim,
    LoadReport,
    build_splits,
    load_claimbuster,
    load_clef,
)
from checkworthy.data.versioning import ensure_data, git_rev, record_data_version
from checkworthy.runs.calibration_run import RunContext, RunSpec, run_calibration
from checkworthy.runs.scoring import score_missing
from checkworthy.scorers.base import Scorer
from checkworthy.store import rows as store
from checkworthy.store.embeddings import ensure_embeddings

Echo = Callable[[str], None]



def load_dataset(name: str) -> tuple[list[Claim], list[LoadReport]]:
    """All claims of a dataset (the files its splits need) and what loading repaired or dropped."""
    raw = DATA_DIR / "raw"
    if name == "claimbuster":
        claims, report = load_claimbuster(raw / "claimbuster" / "crowdsourced.csv",
                                          expected_sha256=KNOWN_SHA256["crowdsourced.csv"])
        return claims, [report]
    if name == "clef2024":
        out: list[Claim] = []
        reports = []
        for split, fname in (("train", "CT24_checkworthy_english_train.tsv"),
                             ("dev-test", "CT24_checkworthy_english_dev-test.tsv")):
            claims, report = load_clef(raw / "clef2024" / fname, split,
                                       expected_sha256=KNOWN_SHA256.get(fname))
            out += claims
            reports.append(report)
        return out, reports
    raise ValueError(f"unknown dataset {name!r} (known: claimbuster, clef2024)")


@dataclass
class PreparedDataset:
    """A dataset's calibration label set and test claims, as stored."""

    name: str
    label_set_id: int
    calibration_ids: list[int]
    test_ids: list[int]
    reports: list[LoadReport] = field(default_factory=list)


def prepare_dataset(
    engine: Engine, name: str, seed: int, n_per_class: int | None, data_version_id: int | None,
    limit: int | None = None, keep_corrections: bool = True,
) -> PreparedDataset:
    """Load, split and store one dataset; freeze its calibration labels as a label set.

    ``limit`` keeps only the first claims of each split (smoke runs); its label set gets its
    own name so it is never mistaken for the full one. ``keep_corrections`` (the default, on
    every path) appends a file label only when the file itself changed, so re-running the job
    never undoes a label the data team corrected (``checkworthy labels add``).
    """
    claims, reports = load_dataset(name)
    splits = build_splits(name, claims, seed, n_per_class=n_per_class)
    if limit:
        splits = {key: value[:limit] for key, value in splits.items()}

    def new(c: Claim) -> store.NewClaim:
        return store.NewClaim(c.dataset, c.split, c.source_id, c.text, c.label)

    if keep_corrections:
        from checkworthy.runs.label_updates import store_file_claims as store_claims
    else:
        store_claims = store.store_claims_with_labels
    with engine.begin() as conn:
        cal = store_claims(conn, [new(c) for c in splits["calibration"]], f"{name}:file")
        test = store_claims(conn, [new(c) for c in splits["test"]], f"{name}:file")
        set_name = f"{name}:calibration:seed={seed}" + (f":limit={limit}" if limit else "")
        ls = store.create_label_set(conn, set_name, cal, data_version_id)
    return PreparedDataset(name, ls, cal, test, reports)


def embed_claims(engine: Engine, claim_ids: Sequence[int]) -> int:
    """Embed every claim text that has no stored vector; return how many were embedded."""
    with engine.begin() as conn:
        return ensure_embeddings(conn, store.claim_text_hashes(conn, claim_ids))


def score_claims(
    engine: Engine, scorer: Scorer, claim_ids: Sequence[int], prompt: tuple[str, str, str],
    chunk_size: int = 96, echo: Echo = print, flow_run_id: str | None = None,
) -> dict[str, store.ScoreKey]:
    """Score the claims' texts that lack a score under this scorer; show progress."""
    with engine.connect() as conn:
        hashes = store.claim_text_hashes(conn, claim_ids)
    version, guidelines, template = prompt
    t0 = time.monotonic()

    def progress(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - t0, 1e-9)
        echo(f"  scored {done}/{total} texts with {scorer.spec} ({rate:.1f}/s, "
             f"~{(total - done) / max(rate, 1e-9) / 60:.1f} min left)")

    n_new, n_old, keys = score_missing(engine, scorer, hashes, version, guidelines, template,
                                       chunk_size=chunk_size, flow_run_id=flow_run_id,
                                       progress=progress)
    echo(f"  {scorer.spec}: {n_new} texts scored now, {n_old} reused from the store")
    return keys


def calibrate_dataset(
    engine: Engine, ds: PreparedDataset, key: store.ScoreKey, ks: Sequence[int], alpha: float,
    threshold: float, ctx: RunContext, interval: str = "z", correction: str = "paper",
) -> dict[int, int]:
    """One calibration run per k on the dataset's test claims; returns k -> run id.

    ``interval``/``correction``: params.yaml's ``interval`` and ``correction`` (default the
    paper's z interval and NN-PPI).
    """
    return {
        k: run_calibration(
            engine,
            RunSpec(target=f"{ds.name}:test", claim_ids=tuple(ds.test_ids),
                    label_set_id=ds.label_set_id, key=key, k=k, alpha=alpha, threshold=threshold,
                    interval_method=interval, correction=correction),
            ctx,
        )
        for k in ks
    }


@dataclass
class PipelineResult:
    """What a pipeline run produced: run ids keyed by (dataset, model spec, score kind, k)."""

    runs: dict[tuple[str, str, str, int], int]
    datasets: dict[str, PreparedDataset]
    data_version_id: int
    seconds: float


def run_pipeline(
    engine: Engine,
    params: dict[str, Any],
    scorers: Sequence[tuple[Scorer, tuple[str, str, str]]],
    echo: Echo = print,
    flow_run_id: str | None = None,
) -> PipelineResult:
    """The whole main job on ``params`` (see params.yaml) with the given scorers."""
    t0 = time.monotonic()
    ensure_data()
    with engine.begin() as conn:
        dv = record_data_version(conn)
    ctx = RunContext(flow_run_id=flow_run_id, code_rev=git_rev(), data_version_id=dv)
    prepared = {}
    for name in params["datasets"]:
        n_per_class = (params.get("sampling", {}).get(name) or {}).get("n_per_class")
        ds = prepare_dataset(engine, name, params["seed"], n_per_class, dv, params.get("limit"))
        for report in ds.reports:
            echo(report.summary())
        echo(f"{name}: calibration set {len(ds.calibration_ids)} claims, test {len(ds.test_ids)}")
        prepared[name] = ds
    all_ids = sorted({i for ds in prepared.values() for i in ds.calibration_ids + ds.test_ids})
    echo(f"embedded {embed_claims(engine, all_ids)} new texts")
    runs: dict[tuple[str, str, str, int], int] = {}
    for scorer, prompt in scorers:
        keys = score_claims(engine, scorer, all_ids, prompt,
                            chunk_size=params.get("scoring", {}).get("chunk_size", 96), echo=echo,
                            flow_run_id=flow_run_id)
        for kind, key in keys.items():
            for name, ds in prepared.items():
                by_k = calibrate_dataset(engine, ds, key, params["k"], params["alpha"],
                                         params["threshold"], ctx, interval=params.get("interval", "z"),
                                         correction=params.get("correction", "paper"))
                runs.update({(name, scorer.spec, kind, k): rid for k, rid in by_k.items()})
    return PipelineResult(runs, prepared, dv, time.monotonic() - t0)
