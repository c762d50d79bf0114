"""``checkworthy score`` and ``checkworthy train-classifier``.

``score`` runs any model spec over a CSV ``id,text`` and writes ``id,score,status,raw`` (plus
``score_<kind>,status_<kind>`` for each further score kind the model yields). The texts and scores
go through the same store and :func:`checkworthy.runs.scoring.score_missing` as the main job, so the
cache key (model, prompt version, parameter hash, kind) is the same: a claim scored by the pipeline
is not rescored here and vice versa, and an interrupted run resumes. Model options come from
params.yaml (the ``scoring`` section, then the matching ``models`` entry, as the flows build them)
overridden by ``--opt KEY=VALUE``.

``train-classifier`` trains the leakage-free classifier artefact (``scorers.classifier``) and prints
its F1 on the test splits it excluded.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Engine, text

from checkworthy.data.user_csv import id_and_text, read_rows
from checkworthy.store import rows as store

#: integer usage fields summed for the cost report (OpenAI and Ollama names)
TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens",
                "prompt_eval_count", "eval_count")


# --------------------------------------------------------------------------- input


def read_input(path: Path) -> list[tuple[str, str]]:
    """``(id, text)`` rows of a CSV with ``id`` and ``text`` columns (others ignored).

    Raises :class:`DataError` (file, line, field) on a missing column, empty or duplicate id,
    empty text, NUL or non-UTF-8 bytes, malformed CSV (see :mod:`checkworthy.data.user_csv`).
    """
    name = str(path)
    _, records = read_rows(path, ["id", "text"])
    rows: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for line, rec in records:
        rows.append(id_and_text(name, line, rec, seen))
    return rows


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are read as YAML scalars (``0.1`` -> float, ``true`` -> bool)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--opt expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return out


def model_options(spec: str, params_path: Path | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """Options as the pipeline builds them (``scoring``, then the matching ``models`` entry), then
    ``--opt`` overrides: same options, same parameter hash, same cache key."""
    options: dict[str, Any] = {}
    if params_path is not None and params_path.exists():
        params = yaml.safe_load(params_path.read_text(encoding="utf-8")) or {}
        options |= params.get("scoring") or {}
        for entry in params.get("models") or []:
            if entry.get("spec") == spec:
                options |= {k: v for k, v in entry.items() if k != "spec"}
    return options | overrides


# --------------------------------------------------------------------------- scoring


@dataclass
class ScoreSummary:
    """What ``score_csv`` did."""

    n_rows: int
    n_texts: int
    n_new: int
    n_reused: int
    kind: str
    statuses: Counter[str] = field(default_factory=Counter)
    tokens: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def store_texts(engine: Engine, texts: Sequence[str]) -> list[str]:
    """Store each distinct text once (like the pipeline's claims, without a dataset); return hashes."""
    hashes = [store.sha256_text(t) for t in texts]
    unique = dict(zip(hashes, texts))
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO texts (text_hash, text) VALUES (:h, :t) ON CONFLICT DO NOTHING"),
                     [{"h": h, "t": t} for h, t in unique.items()])
    return hashes


def fetch_predictions(engine: Engine, keys: dict[str, store.ScoreKey], hashes: Sequence[str]
                      ) -> dict[tuple[str, str], Any]:
    """Stored predictions ``(text_hash, kind) -> row`` under the run's keys."""
    out: dict[tuple[str, str], Any] = {}
    with engine.connect() as conn:
        for kind, key in keys.items():
            rows = conn.execute(
                text("""SELECT text_hash, score, parse_status, raw_output, usage FROM predictions
                        WHERE model_id = :m AND prompt_version = :pv AND params_hash = :ph
                          AND score_kind = :k AND text_hash = ANY(:h)"""),
                {"m": key.model_id, "pv": key.prompt_version, "ph": key.params_hash, "k": kind,
                 "h": sorted(set(hashes))}).all()
            out.update({(r.text_hash.strip(), kind): r for r in rows})
    return out


def _fmt(score: float | None) -> str:
    return "" if score is None or not math.isfinite(score) else repr(float(score))


def write_out(out: Path, rows: Sequence[tuple[str, str]], hashes: Sequence[str], kinds: Sequence[str],
              primary: str, preds: dict[tuple[str, str], Any]) -> None:
    """Write OUT atomically: ``id,score,status,raw`` for the primary kind, then the other kinds."""
    others = [k for k in kinds if k != primary]
    header = ["id", "score", "status", "raw"] + [f"{p}_{k}" for k in others for p in ("score", "status")]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for (cid, _), h in zip(rows, hashes):
            p = preds[(h, primary)]
            line = [cid, _fmt(p.score), p.parse_status, p.raw_output]
            for k in others:
                q = preds[(h, k)]
                line += [_fmt(q.score), q.parse_status]
            writer.writerow(line)
    tmp.replace(out)


def score_csv(
    engine: Engine,
    scorer: Any,
    prompt: tuple[str, str, str],
    rows: Sequence[tuple[str, str]],
    out: Path,
    kind: str | None = None,
    chunk_size: int = 64,
    echo: Callable[[str], None] = print,
) -> ScoreSummary:
    """Score ``rows`` (id, text) with ``scorer``, store the scores, write ``out``."""
    from checkworthy.runs.scoring import score_missing

    primary = kind or scorer.score_kinds[0]
    if primary not in scorer.score_kinds:
        have = ", ".join(scorer.score_kinds)
        raise ValueError(f"{scorer.spec} has no score kind {primary!r} (it has {have})")
    t0 = time.monotonic()
    scorer.params()  # reaches the model service (if any) before anything is written
    hashes = store_texts(engine, [t for _, t in rows])

    def progress(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - t0, 1e-9)
        echo(f"  scored {done}/{total} texts with {scorer.spec} ({rate:.1f}/s)")

    n_new, n_old, keys = score_missing(engine, scorer, hashes, *prompt, chunk_size=chunk_size,
                                       progress=progress)
    preds = fetch_predictions(engine, keys, hashes)
    missing = [h for h in hashes for k in scorer.score_kinds if (h, k) not in preds]
    if missing:
        raise RuntimeError(f"{len(missing)} predictions are missing from the store after scoring")
    write_out(out, rows, hashes, scorer.score_kinds, primary, preds)
    summary = ScoreSummary(len(rows), len(set(hashes)), n_new, n_old, primary,
                           seconds=time.monotonic() - t0)
    summary.statuses.update(preds[(h, primary)].parse_status for h in hashes)
    for h in set(hashes):
        usage = preds[(h, primary)].usage or {}
        for name in TOKEN_FIELDS:
            if isinstance(usage.get(name), int):
                summary.tokens[name] = summary.tokens.get(name, 0) + usage[name]
    return summary


# --------------------------------------------------------------------------- commands


def add_score_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="model spec: embedded:gemma3-270m, ollama:gemma3:1b, "
                   "openai:<deployment>, classifier:<name>[@version], file:<path>")
    p.add_argument("--input", required=True, help="CSV with columns id,text")
    p.add_argument("--out", required=True, help="CSV to write: id,score,status,raw[,...]")
    p.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="model option, e.g. temperature=0.1, mode=raw, concurrency=8 (repeatable)")
    p.add_argument("--params", default="params.yaml", help="params.yaml whose model options apply")
    p.add_argument("--kind", help="score kind written to the score column (default: the model's first)")
    p.add_argument("--chunk-size", type=int, default=64, help="texts per stored chunk")


def run_score(args: argparse.Namespace, engine_factory: Callable[[], Engine]) -> int:
    """``checkworthy score``: validate input and model first, then start the store and score."""
    from checkworthy.scorers.registry import make_scorer

    rows = read_input(Path(args.input))
    options = model_options(args.model, Path(args.params) if args.params else None, parse_options(args.opt))
    scorer, prompt = make_scorer(args.model, **options)
    summary = score_csv(engine_factory(), scorer, prompt, rows, Path(args.out), kind=args.kind,
                        chunk_size=args.chunk_size)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items()))
    print(f"{summary.n_rows} rows ({summary.n_texts} distinct texts): {summary.n_new} scored now, "
          f"{summary.n_reused} reused from the store, in {summary.seconds:.1f} s -> {args.out}")
    print(f"{summary.kind}: {statuses}")
    if summary.tokens:
        print("tokens: " + ", ".join(f"{k} {v:,}" for k, v in summary.tokens.items()))
    return 0


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    from checkworthy.scorers.classifier import DEFAULT_EXCLUDE

    p.add_argument("--name", required=True, help="artefact name (models/classifier/<name>/)")
    p.add_argument("--exclude", default=",".join(DEFAULT_EXCLUDE),
                   help="groups whose texts never enter training: dataset:split or dataset:calibration "
                        "(default: both test splits and both calibration sets)")
    p.add_argument("--seed", type=int, help="seed of the calibration samples (default: params.yaml)")
    p.add_argument("--C", dest="c", type=float, help="fixed inverse regularisation (default: chosen by CV)")
    p.add_argument("--root", help="artefact root (default: models/classifier)")


def run_train(args: argparse.Namespace) -> int:
    """``checkworthy train-classifier``: train, save, print the test F1."""
    from checkworthy.scorers import classifier

    exclude = [g.strip() for g in args.exclude.split(",") if g.strip()]
    art = classifier.train(args.name, exclude=exclude, seed=args.seed, c=args.c,
                           root=Path(args.root) if args.root else classifier.ARTEFACT_ROOT, echo=print)
    print(f"classifier:{art.name}@{art.version} (C={art.manifest['hyperparameters']['C']})")
    print(f"{'test split':<20} {'n':>5} {'weighted F1':>12} {'F1 c0':>7} {'F1 c1':>7} {'paper_c F1':>11}")
    for split, m in art.manifest["metrics"].items():
        if "refused" in m:
            print(f"{split:<20} not evaluated: {m['refused']}")
            continue
        r = m["p_positive>=0.5"]
        print(f"{split:<20} {m['n']:>5} {r['weighted_f1']:>12.3f} {r['f1_0']:>7.3f} {r['f1_1']:>7.3f} "
              f"{m['paper_c>=0.5']['weighted_f1']:>11.3f}")
    return 0
