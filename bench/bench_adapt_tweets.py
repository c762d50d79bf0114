"""A new kind of claim: COVID-19 tweets, predicted with today's model and after ``checkworthy adapt``.

Setting: the CheckThat! 2021/2022 English tweets (Task 1A). L is the tweets' calibration set
(:func:`checkworthy.data.splits.build_splits`: every check-worthy tweet of CT22 and CT21 train
and as many others, none sharing a text or tweet id with U); U is CT22 dev. Three commands, as a
data team runs them, each a real ``checkworthy`` process on the project's store:

1. ``predict --labeled L.csv --unlabeled U.csv`` with params.yaml's recommended model;
2. ``adapt --labeled L.csv`` (timed; ``--no-dvc``, the artefact under ``var/``, so the
   project's models and DVC remote stay as they are);
3. ``predict`` again: the lineage's champion now scores L (out of fold) and U.

Prints each predict's positive-class F1 and ROC AUC of theta on U, adapt's wall and CPU time
(where other jobs share the cores, CPU time over the cores' count is what it takes alone) and its
promotion figures, and a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_adapt_tweets [--per-class N]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

from checkworthy.config import PARAMS_FILE, VAR_DIR, load_params
from checkworthy.data.datasets import TWEETS, load_dataset
from checkworthy.data.splits import build_splits
from checkworthy.method.metrics import classification_report, roc_auc
from checkworthy.method.sampling import balanced_sample

CLI = [sys.executable, "-m", "checkworthy.cli.main"]


def write_claims(path: Path, claims: list, label: bool = True) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label"] if label else ["id", "text"])
        for c in claims:
            w.writerow([c.source_id, c.text, c.label] if label else [c.source_id, c.text])


def figures(out: Path, truth: dict[str, int]) -> dict[str, float]:
    """Positive-class F1 of the decisions and ROC AUC of theta on U."""
    with out.open(encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["theta"]]
    y = [truth[r["id"]] for r in rows]
    rep = classification_report(y, [int(r["decision"]) for r in rows])
    return {"f1_positive": rep["f1_1"], "roc_auc_theta": roc_auc(y, [float(r["theta"]) for r in rows]),
            "roc_auc_score": roc_auc(y, [float(r["score"]) for r in rows]), "n": len(rows),
            "review_share": sum(int(r["review"]) for r in rows) / len(rows)}


def run(args: list[str]) -> tuple[str, float, float]:
    """A ``checkworthy`` command's stdout, wall time and CPU time (user + system: what it would
    take on cores of its own, where other jobs share them)."""
    t0, c0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(CLI + args, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(args[:1])} failed ({done.returncode}): {done.stderr[-2000:]}")
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done.stdout, time.monotonic() - t0, c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--per-class", type=int, help="L: a balanced sample of this many a class (default: all)")
    ap.add_argument("--folder", default=str(VAR_DIR / "adapt-tweets"))
    ap.add_argument("--model", help="today's model (default: params.yaml predict.model), e.g. "
                                    "classifier:minilm-lora, the member adapt continues from")
    ap.add_argument("--folds", type=int, help="adapt --folds (default: params.yaml adapt.folds)")
    ap.add_argument("--epochs", type=int, help="adapt --epochs (default: params.yaml adapt.epochs)")
    opts = ap.parse_args()
    folder = Path(opts.folder)
    folder.mkdir(parents=True, exist_ok=True)
    seed = load_params(PARAMS_FILE)["seed"]
    splits = build_splits(TWEETS, load_dataset(TWEETS)[0], seed)
    lab, unl = splits["calibration"], splits["test"]
    if opts.per_class:
        lab = [lab[i] for i in balanced_sample([c.label for c in lab], opts.per_class, seed=seed)]
    write_claims(folder / "L.csv", lab)
    write_claims(folder / "U.csv", unl)
    params = folder / "params.yaml"
    base = load_params(PARAMS_FILE)
    override = {"extends": str(PARAMS_FILE.resolve()),
                "adapt": base["adapt"] | {"root": str(folder / "models")}}
    if opts.model:  # today's model: what predict uses first and what adapt's challenger must beat
        override["predict"] = base["predict"] | {"model": opts.model, "score_kind": "p_positive"}
    params.write_text(yaml.safe_dump(override))
    truth = {c.source_id: c.label for c in unl}
    common = ["--labeled", str(folder / "L.csv"), "--unlabeled", str(folder / "U.csv"),
              "--params", str(params)]
    print(f"L: {len(lab)} tweets ({sum(c.label for c in lab)} check-worthy); U: {len(unl)} "
          f"({sum(c.label for c in unl)} check-worthy)", flush=True)
    out, secs, _ = run(["predict", *common, "--out", str(folder / "before.csv")])
    before = figures(folder / "before.csv", truth)
    print(f"predict, today's model ({secs:.0f} s): {before}", flush=True)
    extra = [*(["--folds", str(opts.folds)] if opts.folds else []),
             *(["--epochs", str(opts.epochs)] if opts.epochs else [])]
    adapt_out, adapt_secs, adapt_cpu = run(["adapt", "--labeled", str(folder / "L.csv"),
                                            "--params", str(params), "--no-dvc", *extra])
    print(adapt_out)
    print(f"adapt: {adapt_secs:.0f} s wall, {adapt_cpu:.0f} s of CPU", flush=True)
    out, secs, _ = run(["predict", *common, "--out", str(folder / "after.csv")])
    print(out)
    after = figures(folder / "after.csv", truth)
    print(f"predict, the lineage's champion ({secs:.0f} s): {after}")
    print(json.dumps({"n_labelled": len(lab), "before": before, "after": after,
                      "adapt_seconds": round(adapt_secs, 1), "adapt_cpu_seconds": round(adapt_cpu, 1)}))


if __name__ == "__main__":
    main()
