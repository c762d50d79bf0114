"""Would a labelled set drawn at its pool's share of check-worthy claims make theta a probability
of the events? The recommended path with L at the pool's share against L balanced, same size.

L is class-balanced by design (the paper's), so theta is a probability under a 50% prior while the
held-out events are 23-34% check-worthy. A data team that labels a random sample of its stream
gets an L at the stream's share instead. This bench builds that L from the balanced one without
new labels (every negative kept, positives drawn down to the share of the pool L was sampled from:
ClaimBuster's 2012 debates, CLEF 2024 train), and beside it a balanced L of the same size, so that
only the prior differs. Each goes through ``checkworthy predict`` with the defaults on every
held-out event of ``checkworthy evaluate``; nothing here chooses a default.

Prints positive-class and weighted F1, the expected calibration error of theta, the share decided
automatically and the error among those, per event and for ClaimBuster 2016 pooled, with a JSON
line. Run from the repository root: ``.venv/bin/python -m bench.bench_labelled_prior`` (about 5
minutes once the store holds the recommended model's scores, e.g. after ``checkworthy evaluate``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from checkworthy.config import VAR_DIR, labelled_sizes, load_params
from checkworthy.data.datasets import load_dataset
from checkworthy.data.splits import build_splits
from checkworthy.runs.held_out import figures as event_figures
from checkworthy.runs.held_out import held_out_events, write_claims

WORK = VAR_DIR / "bench-labelled-prior"
POOLED = "ClaimBuster 2016 pooled"
#: the two labelled sets, by the suffix of their files
KINDS = {"pool's share": "share", "balanced": "balanced"}


def pool_share(dataset: str, seed: int) -> float:
    """The share of check-worthy claims in the pool the dataset's L is drawn from."""
    claims, _ = load_dataset(dataset)
    pool = build_splits(dataset, claims, seed)["pool"]
    return sum(c.label for c in pool) / len(pool)


def labelled_files(path: Path, share: float, seed: int) -> dict[str, Path]:
    """From the balanced L at ``path``: L at ``share`` (every negative, positives drawn down) and a
    balanced L of the same size."""
    lab = pd.read_csv(path)
    neg, pos = lab[lab.label == 0], lab[lab.label == 1]
    at_share = pd.concat([neg, pos.sample(round(len(neg) * share / (1 - share)), random_state=seed)])
    n = len(at_share)
    balanced = pd.concat([neg.sample(n // 2, random_state=seed), pos.sample(n - n // 2, random_state=seed)])
    out = {}
    for kind, frame in zip(KINDS, (at_share, balanced), strict=True):
        out[kind] = path.with_name(f"{path.stem}-{KINDS[kind]}.csv")
        frame.sort_index().to_csv(out[kind], index=False)
    return out


def figures(d: pd.DataFrame) -> dict[str, float | None]:
    """The held-out evaluation's figures of theta and the decisions, and the share decided
    automatically (OUT's ``review`` column) with the error among those."""
    y, decision = d.label.to_numpy(), d.decision.to_numpy().astype(int)
    automated = d.review.to_numpy() == 0
    error = float((decision[automated] != y[automated]).mean()) if automated.any() else None
    return event_figures(y, d.theta.to_numpy(), decision) | {
        "automated": float(automated.mean()), "error_automated": error}


def main() -> None:
    params = load_params()
    seed = params["seed"]
    labelled, events = held_out_events(seed, labelled_sizes(params))
    WORK.mkdir(parents=True, exist_ok=True)
    files = {ds: labelled_files(write_claims(WORK / f"{ds}-labelled.csv", claims), pool_share(ds, seed), seed)
             for ds, claims in labelled.items()}
    results: dict[str, dict[str, dict[str, float | None]]] = {}
    for kind, suffix in KINDS.items():
        joined = {}
        for event in events:
            u_file = write_claims(WORK / f"{event.name.replace(' ', '_')}.csv", event.claims)
            out = u_file.with_name(f"{u_file.stem}-{suffix}-out.csv")
            out.unlink(missing_ok=True)  # predict refuses to overwrite
            command = [str(Path(sys.executable).with_name("checkworthy")), "predict", "--labeled",
                       str(files[event.dataset][kind]), "--unlabeled", str(u_file), "--out", str(out)]
            run = subprocess.run(command, capture_output=True, text=True)
            if run.returncode:
                raise SystemExit(run.stderr.strip().splitlines()[-1])
            joined[event.name] = pd.read_csv(u_file).merge(pd.read_csv(out), on="id")
        joined[POOLED] = pd.concat([d for name, d in joined.items() if name.startswith("ClaimBuster")])
        results[kind] = {name: figures(d) for name, d in joined.items()}
    sizes = {ds: {k: len(pd.read_csv(f)) for k, f in fs.items()} for ds, fs in files.items()}
    print(f"L sizes: {sizes}")
    print("| L | event | share | F1 c1 | weighted F1 | ECE | automated | error among them |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|")
    for kind, by_event in results.items():
        for name, f in by_event.items():
            err = "-" if f["error_automated"] is None else f"{f['error_automated']:.3f}"
            print(f"| {kind} | {name} | {f['share_positive']:.3f} | {f['f1_1']:.3f} | "
                  f"{f['weighted_f1']:.3f} | {f['ece']:.3f} | {f['automated']:.0%} | {err} |")
    print(json.dumps({"bench": "labelled_prior", "sizes": sizes, "results": results}))


if __name__ == "__main__":
    main()
