"""Does drift act on a batch of another kind? ``checkworthy predict`` with debate labels on tweets.

L is ClaimBuster's calibration set (the 2012 debates, params.yaml ``sampling:``); U is the
CheckThat! 2022 English dev tweets (``load_dataset("tweets")``'s test split), with their labels.
The tweets are another kind of claim and another notion of check-worthiness: the drift figure
alerts, and the command should say so, decide none of the batch automatically and withdraw the
batch's share of check-worthy claims. Each model given runs the same files (default: the
recommended one and the MiniLM logistic head).

Prints, per model, the lines ``predict`` printed about drift, review and the batch's share, then
the share decided automatically, the error among those decisions against the tweets' labels and
the share beyond the labelled set's radius, and a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_drift_tweets [SPEC=KIND ...]`` (about 45 minutes on 2 cores the
first time, for the recommended model's scores; seconds once the store holds them).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

from checkworthy.config import VAR_DIR, labelled_sizes, load_params
from checkworthy.data.datasets import CLAIMBUSTER, TWEETS, load_dataset
from checkworthy.data.splits import build_splits
from checkworthy.data.text import normalise_text
from checkworthy.runs.held_out import write_claims

WORK = VAR_DIR / "bench-drift-tweets"
MODELS = ("ensemble:minilm-lora+gemma-lora=p_positive", "classifier:minilm-lr=p_positive")
#: the lines of predict's output this bench reports
SAID = ("drift:", "share check-worthy in this batch:", "review:")


def files(seed: int, n_per_class: int | None) -> tuple[Path, Path]:
    """L (the debates' calibration set) and U (CT22 dev tweets, none with a text of L)."""
    debates, _ = load_dataset(CLAIMBUSTER)
    lab = build_splits(CLAIMBUSTER, debates, seed, n_per_class=n_per_class)["calibration"]
    tweets, _ = load_dataset(TWEETS)
    known = {normalise_text(c.text) for c in lab}
    unl = [c for c in build_splits(TWEETS, tweets, seed)["test"] if normalise_text(c.text) not in known]
    return write_claims(WORK / "debates.csv", lab), write_claims(WORK / "tweets.csv", unl)


def main() -> None:
    params = load_params()
    lab, unl = files(params["seed"], labelled_sizes(params).get(CLAIMBUSTER))
    results = {}
    for model in sys.argv[1:] or MODELS:
        spec, kind = model.split("=")
        out = WORK / f"out-{re.sub(r'[^a-z0-9]+', '-', spec)}.csv"
        out.unlink(missing_ok=True)  # predict refuses to overwrite
        command = [str(Path(sys.executable).with_name("checkworthy")), "predict", "--labeled", str(lab),
                   "--unlabeled", str(unl), "--out", str(out), "--model", spec, "--score-kind", kind]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode:
            raise SystemExit(run.stderr.strip().splitlines()[-1])
        d = pd.read_csv(unl).merge(pd.read_csv(out), on="id")
        automated = d.review == 0
        drift = next((line for line in run.stdout.splitlines() if line.startswith("drift:")), "")
        results[spec] = {
            "automated": float(automated.mean()),
            "error_automated": float((d.decision[automated] != d.label[automated]).mean()) if automated.any()
            else None,
            "beyond": float(drift.split("%")[0].removeprefix("drift: ")) / 100 if drift else 0.0,
            "true_share": float(d.label.mean()),
            "said": [line for line in run.stdout.splitlines() if line.startswith(SAID)]}
        print(f"{spec} {kind}:")
        for line in results[spec]["said"]:
            print(f"  {line}")
        r = results[spec]
        err = "-" if r["error_automated"] is None else f"{r['error_automated']:.3f}"
        print(f"  automated {r['automated']:.1%}, error among them {err}, "
              f"beyond the radius {r['beyond']:.0%}, "
              f"true share check-worthy {r['true_share']:.3f}")
    print(json.dumps({"bench": "drift_tweets", "n": len(pd.read_csv(unl)), "results": results}))


if __name__ == "__main__":
    main()
