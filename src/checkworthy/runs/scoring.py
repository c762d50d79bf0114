"""Score the texts that have no stored score yet, with any scorer, and store the results.

Scores are committed chunk by chunk: if the model runtime dies mid-way, the finished
chunks are kept and a rerun scores only the rest. A text is never scored twice for the
same model, prompt version and parameters (the store's unique key). An ensemble's members are
scored (or found) first, each under its own key, and the ensemble's score joins theirs. Scorers that
differ only in how they sample (the paper's temperature and the ablation's) are scored together,
each forward pass run once for all (:func:`score_missing_alongside`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Engine

from checkworthy.scorers.base import Score, Scorer
from checkworthy.scorers.registry import NO_PROMPT, PromptInfo, make_scorer
from checkworthy.store import rows as store

Progress = Callable[[int, int], None]


def rate_progress(echo: Callable[[str], None], label: Callable[[int, int], str]) -> Progress:
    """A :data:`Progress` that echoes ``label(done, total)`` with the rate since it was made and the
    time left at that rate: the line long work prints (the scoring passes, the method comparisons)."""
    t0 = time.monotonic()

    def progress(done: int, total: int) -> None:
        rate = done / max(time.monotonic() - t0, 1e-9)
        echo(f"{label(done, total)} ({rate:.1f}/s, ~{(total - done) / max(rate, 1e-9) / 60:.1f} min left)")

    return progress


def score_missing(
    engine: Engine,
    scorer: Scorer,
    text_hashes: Sequence[str],
    prompt: PromptInfo = NO_PROMPT,
    chunk_size: int = 64,
    flow_run_id: str | None = None,
    progress: Progress | None = None,
) -> tuple[int, int, dict[str, store.ScoreKey]]:
    """Score every text lacking a prediction under ``prompt`` (version, guidelines, template;
    ``NO_PROMPT`` for a scorer that reads none).

    Returns (scored now, already stored, the stored key of each score kind).
    """
    prompt_version, prompt_guidelines, prompt_template = prompt
    params = scorer.params()
    with engine.begin() as conn:
        model_id = store.ensure_model(conn, scorer.spec, scorer.spec.split(":", 1)[0], params)
        if prompt_version != "none":
            store.ensure_prompt_version(conn, prompt_version, prompt_guidelines, prompt_template)
        todo = store.unscored_texts(conn, text_hashes, model_id, prompt_version,
                                    store.params_hash(params), scorer.score_kinds)
    members = getattr(scorer, "members", None)  # an ensemble: its members' own stored scores
    member_keys = [score_missing(engine, m, [h for h, _ in todo], prompt, chunk_size, flow_run_id,
                                 progress)[2]["p_positive"]
                   for m in members or ()]
    total = len(todo)
    done = 0
    for start in range(0, total, chunk_size):
        chunk = todo[start : start + chunk_size]
        if members:
            with engine.connect() as conn:
                stored = [store.stored_predictions(conn, {"p_positive": k}, [h for h, _ in chunk])
                          for k in member_keys]
            outputs = scorer.combine([[Score(r.score, r.parse_status, r.raw_output) for r in
                                       (rows[(h, "p_positive")] for h, _ in chunk)] for rows in stored])
        else:
            outputs = scorer.score([t for _, t in chunk])
        with engine.begin() as conn:
            store.insert_predictions(conn, model_id, prompt_version, params,
                                     [(h, out) for (h, _), out in zip(chunk, outputs)], flow_run_id)
        done += len(chunk)
        if progress:
            progress(done, total)
    keys = {kind: store.ScoreKey(model_id, prompt_version, store.params_hash(params), kind)
            for kind in scorer.score_kinds}
    return total, len(set(text_hashes)) - total, keys


def score_missing_alongside(
    engine: Engine,
    scorers: Sequence[Any],
    text_hashes: Sequence[str],
    prompt: PromptInfo = NO_PROMPT,
    chunk_size: int = 64,
    flow_run_id: str | None = None,
    progress: Progress | None = None,
) -> list[tuple[int, int, dict[str, store.ScoreKey]]]:
    """:func:`score_missing` for several scorers whose first one runs the forward passes of all
    (``scorers[0].score_alongside``; each other ``shares_passes`` with it): the texts none of them
    has scored are scored once for all, in the chunks the first alone would use, so each stores
    exactly the scores it would store alone; what only some of them lack is scored by each alone.

    Returns what :func:`score_missing` returns, one per scorer.
    """
    lead, others = scorers[0], list(scorers[1:])
    if not others:
        return [score_missing(engine, lead, text_hashes, prompt, chunk_size, flow_run_id, progress)]
    prompt_version, prompt_guidelines, prompt_template = prompt
    todos, model_ids = [], []
    with engine.begin() as conn:
        if prompt_version != "none":
            store.ensure_prompt_version(conn, prompt_version, prompt_guidelines, prompt_template)
        for scorer in scorers:
            params = scorer.params()
            model_ids.append(store.ensure_model(conn, scorer.spec, scorer.spec.split(":", 1)[0], params))
            todos.append(store.unscored_texts(conn, text_hashes, model_ids[-1], prompt_version,
                                              store.params_hash(params), scorer.score_kinds))
    missing_in_others = set.intersection(*(set(t) for t in todos[1:]))
    common = [pair for pair in todos[0] if pair in missing_in_others]
    for start in range(0, len(common), chunk_size):
        chunk = common[start : start + chunk_size]
        outputs = lead.score_alongside([t for _, t in chunk], others)
        with engine.begin() as conn:
            for scorer, model_id, out in zip(scorers, model_ids, outputs, strict=True):
                store.insert_predictions(conn, model_id, prompt_version, scorer.params(),
                                         [(h, o) for (h, _), o in zip(chunk, out, strict=True)], flow_run_id)
        if progress:
            progress(start + len(chunk), len(todos[0]))
    done = []
    for scorer, todo in zip(scorers, todos, strict=True):
        rest = score_missing(engine, scorer, text_hashes, prompt, chunk_size, flow_run_id,
                             progress if scorer is lead else None)
        done.append((len(todo), len(set(text_hashes)) - len(todo), rest[2]))
    return done


def stored_scores(engine: Engine, scorer: Scorer, texts: Sequence[str], kind: str,
                  prompt: PromptInfo = NO_PROMPT, progress: Progress | None = None) -> list[float | None]:
    """``kind`` scores of ``texts``, in order: stored ones read back, the rest scored and stored
    first (as ``checkworthy score`` does); None where the scorer failed on a text."""
    with engine.begin() as conn:
        hashes = store.store_texts(conn, list(texts))
    _, _, keys = score_missing(engine, scorer, hashes, prompt, progress=progress)
    with engine.connect() as conn:
        preds = store.stored_predictions(conn, {kind: keys[kind]}, hashes)
    return [preds[(h, kind)].score for h in hashes]


def teacher_probabilities(engine: Engine, teacher: str, texts: Sequence[str],
                          echo: Callable[[str], None] = lambda _: None) -> NDArray[np.float64]:
    """The ``teacher`` model's P(check-worthy) of each text, through the store (scores it holds are
    read back, the rest scored and kept), for distillation; refused where it failed on any text."""
    scorer, prompt = make_scorer(teacher)
    if "p_positive" not in scorer.score_kinds:
        raise ValueError(f"--teacher {teacher}: gives no p_positive (a trained classifier or ensemble does)")
    p = stored_scores(engine, scorer, texts, "p_positive", prompt,
                      progress=lambda done, total: echo(f"  teacher: {done}/{total} texts scored"))
    failed = sum(x is None for x in p)
    if failed:
        raise ValueError(f"--teacher {teacher}: no score for {failed} training texts")
    return np.asarray(p, dtype=np.float64)
