"""Every stored figure of a calibration, pinned to the last digit: the results, the run's params,
its metrics and its review queue, for full runs under several methods, an incremental
recalibration, and ``predict`` with a cheap scorer, against fixtures under ``tests/golden/``.

A fixture is the stored state as JSON (floats round-trip exactly); claim and run ids are replaced
by the claims' source ids. The runs are stored in a fresh database of their own: in the session's,
a vector another test stored first for the same text (embeddings are keyed by text and model)
would move the neighbours. To capture a
fixture anew (only when a change of figures is intended): ``PIN_CAPTURE=1 pytest`` this file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine

from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.own_scores import UserFile
from checkworthy.runs.predict import Recommended, predict_files, read_files
from checkworthy.runs.recalibration import recalibrate
from checkworthy.scorers.registry import NO_PROMPT
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_results, load_run
from checkworthy.store.metrics import load_metrics
from checkworthy.store.review_queue import entries_of_run
from checkworthy.store.run_spec import RunContext, RunMethods, RunSpec
from checkworthy.testing.claims import clef_claims, write_csv
from checkworthy.testing.scorers import SlowHashScorer
from checkworthy.testing.scratch_project import fresh_database
from checkworthy.testing.worlds import Scenario, build_scenario

GOLDEN = Path(__file__).parent / "golden"

#: (name, RunSpec options) of the full runs pinned
METHODS: list[tuple[str, dict[str, Any]]] = [
    ("paper", {}),
    ("paper-hnsw", {"knn": "hnsw"}),
    ("cv-t", {"correction": "cv", "interval_method": "t"}),
    ("ppi-conformal-split", {"correction": "ppi++", "interval_method": "conformal-split"}),
    ("head-mondrian-batch", {"correction": "head+nnppi", "interval_method": "mondrian", "prior": "batch"}),
    ("auto-t-pred", {"correction": "auto", "interval_method": "t-pred", "review_risk": "miss"}),
    ("platt-mondrian-local", {"correction": "platt", "interval_method": "mondrian-local", "max_risk": 0.2}),
]


def stored(engine: Engine, run_id: int) -> dict[str, Any]:
    """A run's stored figures with every claim id as its source id and run ids left out."""
    with engine.connect() as conn:
        run = load_run(conn, run_id)
        rows = load_results(conn, run_id)
        ids = {int(r["claim_id"]) for r in rows} | {int(n) for r in rows for n in r["neighbour_ids"]}
        name = store.claim_source_ids(conn, sorted(ids))
        metrics = load_metrics(conn, run_id)
        queue = entries_of_run(conn, run_id)
    return {
        "run": {c: run[c] for c in ("status", "mode", "k", "alpha", "threshold", "interval_method",
                                    "embed_model", "score_kind")} | {"params": run["params"]},
        "results": {name[int(r["claim_id"])]: {
            "score": r["score"], "theta": r["theta"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
            "decision": r["decision"], "knn_mean": r["knn_mean"],
            "neighbours": [name[int(n)] for n in r["neighbour_ids"]],
            "distances": list(r["neighbour_distances"]), "copied": r["computed_in_run"] is not None}
            for r in rows},
        "metrics": {"|".join(k): v for k, v in sorted(metrics.items())},
        "queue": [{"claim": name[int(e["claim_id"])], "theta": e["theta"], "priority": e["priority"],
                   "reason": e["reason"], "cause": e["cause"]} for e in queue],
    }


def check(name: str, got: dict[str, Any]) -> None:
    """``got`` equals the fixture ``name`` exactly (after a JSON round trip: floats by repr)."""
    path = GOLDEN / f"calibration_{name}.json"
    text = json.dumps(got, sort_keys=True, indent=1, default=str)
    if os.environ.get("PIN_CAPTURE"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    want = json.loads(path.read_text(encoding="utf-8"))
    now = json.loads(text)
    for part in want:
        assert now[part] == want[part], f"{name}: {part} differs from {path.name}"
    assert now == want


@pytest.fixture(scope="module")
def pinned(owner_url) -> Iterator[Engine]:
    """A fresh database: the figures depend on nothing another test stored."""
    with fresh_database(owner_url, f"checkworthy_pinned_{os.getpid()}") as url:
        engine = create_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
def scenario(pinned) -> Scenario:
    return build_scenario(pinned, "pinned", n_lab=50, n_unl=20, offset=0, seed=5)


@pytest.mark.parametrize(("name", "options"), METHODS, ids=[m[0] for m in METHODS])
def test_full_run_figures_are_pinned(pinned, scenario, name, options):
    run_id = run_calibration(pinned, scenario.spec(5, **options), RunContext(extra={"pinned": name}))
    check(name, stored(pinned, run_id))


def test_incremental_recalibration_figures_are_pinned(pinned):
    engine = pinned
    s = build_scenario(engine, "pinned-recal", n_lab=50, n_unl=20, offset=100, seed=6)
    with engine.begin() as conn:
        base = store.create_label_set(conn, f"{s.name}:L", s.lab_ids[:44])
    parent = run_calibration(engine, RunSpec(f"{s.name}:U", tuple(s.unl_ids), base, s.key, RunMethods(5)))
    with engine.begin() as conn:
        flip = s.lab_ids[3:5]
        cur = store.current_labels(conn, flip)
        store.append_labels(conn, flip, [1 - cur[i] for i in flip], "pinned:correction")
        new = store.create_label_set(conn, f"{s.name}:L", s.lab_ids[1:])
    out = recalibrate(engine, RunSpec(f"{s.name}:U", tuple(s.unl_ids), new, s.key, RunMethods(5)), parent_run_id=parent)
    assert out.mode == "incremental"
    check("incremental", stored(engine, out.run_id) | {"recomputed": len(out.recomputed)})


@pytest.mark.parametrize("prior", ["labelled", "batch"])
def test_predict_figures_are_pinned(pinned, tmp_path, prior):
    claims = clef_claims()[200:260]
    lab = write_csv(tmp_path / "L.csv", ["id", "text", "label"],
                    [(c.source_id, c.text, c.label) for c in claims[:40]])
    unl = write_csv(tmp_path / "U.csv", ["id", "text", "label"],
                    [(c.source_id, c.text, c.label) for c in claims[40:]])
    rec = Recommended(model="pinned:hash", score_kind="verbalised", k=5, prior=prior)
    rows = read_files(lab, unl, rec.k)
    got = predict_files(pinned, (UserFile.of(lab), UserFile.of(unl)), rows, tmp_path / "OUT.csv", rec,
                        (SlowHashScorer("pinned:hash"), NO_PROMPT))
    out = (tmp_path / "OUT.csv").read_text(encoding="utf-8")
    check(f"predict_{prior}", stored(pinned, got.run_id) | {"out": out})
