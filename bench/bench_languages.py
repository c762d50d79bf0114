"""Every language through ``checkworthy predict``: a team's 1,000 labels, 300 claims to decide.

For each group of :func:`checkworthy.runs.multilingual_set.language_groups` (``--n-labelled``,
``--n-held-out``; Arabic, Spanish, Dutch, Bulgarian and Turkish tweets, English tweets and debates),
the team's labels L and the batch U (without its labels) go through the real predict path
(:func:`checkworthy.runs.predict.predict`, as ``checkworthy predict --labeled L --unlabeled U``
runs it, params.yaml's defaults: the model is ``predict.model`` for English labels and
``predict.model_other_languages`` for the others) on a scratch embedded store. On U's labels:
positive-class F1 and weighted F1 of the decisions, ROC AUC of theta, the share decided
automatically (not sent to a person) and the error among those decisions; the model's own F1 at 0.5
and the claims per second its scoring takes (U scored again by a freshly loaded scorer, the load
and a first call timed apart, on ``OMP_NUM_THREADS`` threads, default 2), per wall-second and per
CPU-second of the process (the machine is shared: wall time says as much about the neighbours).
Beside it the reference on the same L: char n-gram TF-IDF (2-5) + class-balanced logistic
regression, F1 at 0.5, weighted F1 and AUC.
With ``--adapt``, each group's lineage is then adapted (``checkworthy adapt --labeled L``: a
non-English lineage's TF-IDF and USE stack over the shared model, cross-fitted, or what
``--trainer`` names; models in a scratch folder, not versioned) and predicted again: a row
``<group>-adapted`` with the lineage's champion.
Then, for each non-English language, "no labels of its own": L is the other four languages' L
only, U the same: F1 of the decisions and whether they were withheld (the share automated).

The multilingual model must not have seen any claim of U, nor of L: predict calibrates on L's
scores, and a model that learnt L scores it in-sample (over-confident: measured with a model trained
without U only, the decide-or-review rule automated every Bulgarian claim and erred on 23% of them).
A team's own labels are not in our training data either. ``--write-excluded CSV`` writes every
group's L and U (``group,part,id,text``), the file its trainer excludes
(``checkworthy train-classifier --method multilingual --exclude-texts CSV``).

Prints the tables (the mean over the five languages and their spread) and a JSON line. Run from the
repository root: ``.venv/bin/python -m bench.bench_languages [GROUP ...] [--no-transfer]
[--model SPEC]`` (``--model``: as ``checkworthy predict --model``, e.g. the multilingual model on
English tweets).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import get_args

import numpy as np
import yaml

from checkworthy.config import PARAMS_FILE, VAR_DIR, quiet_offline_env
from checkworthy.data.language import unreadable
from checkworthy.data.records import Claim
from checkworthy.method.metrics import classification_report, roc_auc
from checkworthy.runs.multilingual_set import Group, language_groups
from checkworthy.runs.predict import PredictRequest, Recommended, artefact_root, predict
from checkworthy.scorers.registry import configured_scorer
from checkworthy.settings import Prior, Trainer, load_settings
from checkworthy.store.engine import embedded_url, get_engine


@dataclass(frozen=True)
class Figures:
    """One run of predict on one group's U."""

    group: str
    model: str
    n_labelled: int
    n_held_out: int
    f1: float
    weighted_f1: float
    auc_theta: float
    automated: float
    error_automated: float | None
    model_f1_at_half: float
    claims_per_s: float
    claims_per_cpu_s: float
    load_s: float
    predict_s: float


@dataclass(frozen=True)
class Reference:
    """TF-IDF + logistic regression on the same L."""

    f1: float
    weighted_f1: float
    auc: float


def write_claims(path: Path, claims: list[Claim], labels: bool) -> None:
    """``id,text[,label]`` of ``claims``."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", *(["label"] if labels else [])])
        for c in claims:
            w.writerow([c.source_id, c.text, *([c.label] if labels else [])])


def write_excluded(path: Path, gs: list[Group]) -> None:
    """Every group's L and U as ``group,part,id,text`` (what the multilingual trainer excludes)."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["group", "part", "id", "text"])
        for g in gs:
            w.writerows([g.name, part, c.source_id, c.text]
                        for part, claims in (("L", g.labelled), ("U", g.held_out)) for c in claims)


def run_predict(name: str, labelled: list[Claim], held_out: list[Claim], work: Path,
                model: str | None = None, params: Path | None = None, prior: str | None = None) -> Figures:
    """``checkworthy predict`` of ``held_out`` against ``labelled`` (with ``--model model`` when
    given, params.yaml or ``params``); its decisions scored on U's labels, and the model's speed on U."""
    settings = load_settings(params) if params else load_settings()
    rec = Recommended.of(settings.predict, model=model, prior=prior)
    lab, unl, out = work / f"{name}-L.csv", work / f"{name}-U.csv", work / f"{name}-OUT.csv"
    write_claims(lab, labelled, labels=True)
    write_claims(unl, held_out, labels=False)
    t0 = time.perf_counter()
    done = predict(PredictRequest(lab, unl, out, model_given=model is not None), settings, rec)
    predict_s = time.perf_counter() - t0
    with out.open(newline="", encoding="utf-8") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    y = np.array([c.label for c in held_out])
    got = [rows[c.source_id] for c in held_out]
    decided = np.array([r["decision"] != "" for r in got])
    decision = np.array([int(r["decision"]) if r["decision"] else 0 for r in got])
    theta = np.array([float(r["theta"]) if r["theta"] else 0.5 for r in got])
    score = np.array([float(r["score"]) if r["score"] else 0.5 for r in got])
    automated = decided & np.array([r["review"] != "1" for r in got])
    report = classification_report(y, decision)
    t1 = time.perf_counter()
    adapted = artefact_root(settings.adapt.root)  # a lineage's adapted champion lives there
    artefact = done.rec.model.removeprefix("classifier:").partition("@")[0]
    scorer, _ = configured_scorer(settings.params, done.rec.model,
                                  **({"root": str(adapted)} if (adapted / artefact).is_dir() else {}))
    load_s = time.perf_counter() - t1
    scorer.score([c.text for c in held_out[:4]])  # the first call loads USE or the encoder
    t2, c2 = time.perf_counter(), time.process_time()
    scorer.score([c.text for c in held_out])
    speed = len(held_out) / (time.perf_counter() - t2), len(held_out) / (time.process_time() - c2)
    return Figures(name, done.rec.model, len(labelled), len(held_out), report["f1_1"], report["weighted_f1"],
                   roc_auc(y, theta), float(automated.mean()),
                   float((decision[automated] != y[automated]).mean()) if automated.any() else None,
                   classification_report(y, (score >= 0.5).astype(int))["f1_1"], *speed, load_s, predict_s)


def scratch_params(work: Path, trainer: str) -> Path:
    """params.yaml with ``adapt.root`` in ``work`` (adapted models never land in models/) and
    ``adapt.trainer``."""
    params = yaml.safe_load(PARAMS_FILE.read_text())
    params["adapt"] |= {"root": str(work / "models"), "trainer": trainer}
    path = work / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def run_adapt(name: str, work: Path, params: Path) -> str:
    """``checkworthy adapt --labeled`` the group's L (as :func:`run_predict` wrote it; not
    versioned); its last line, the champion it leaves."""
    import contextlib
    import io

    from checkworthy.cli.main import main as cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli(["adapt", "--labeled", str(work / f"{name}-L.csv"), "--params", str(params), "--no-dvc"])
    if code != 0:
        raise SystemExit(f"adapt of {name} exited {code}: {out.getvalue()}")
    return out.getvalue().strip().splitlines()[-1]


def reference(labelled: list[Claim], held_out: list[Claim]) -> Reference:
    """Char n-gram TF-IDF + class-balanced logistic regression on L, at 0.5 on U."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=2,
                                          sublinear_tf=True),
                          LogisticRegression(max_iter=2000, class_weight="balanced"))
    model.fit([c.text for c in labelled], [c.label for c in labelled])
    p = model.predict_proba([c.text for c in held_out])[:, 1]
    y = np.array([c.label for c in held_out])
    report = classification_report(y, (p >= 0.5).astype(int))
    return Reference(report["f1_1"], report["weighted_f1"], roc_auc(y, p))


def readable(gs: list[Group]) -> list[Group]:
    """The groups without the claims predict refuses as unreadable (homographs: a word typed with
    another script's look-alike letters, 24 Bulgarian tweets of the shared data), as a team would
    send them once retyped; how many each group loses is printed."""
    out = []
    for g in gs:
        lab = [c for c in g.labelled if unreadable(c.text) is None]
        held = [c for c in g.held_out if unreadable(c.text) is None]
        if len(lab) < len(g.labelled) or len(held) < len(g.held_out):
            print(f"{g.name}: {len(g.labelled) - len(lab)} of L and {len(g.held_out) - len(held)} of U "
                  "left out as unreadable (data.language.unreadable)")
        out.append(replace(g, labelled=lab, held_out=held))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="*", metavar="GROUP", help="groups to run (default: all)")
    parser.add_argument("--n-labelled", type=int, default=1000, help="|L| a group (default 1000)")
    parser.add_argument("--n-held-out", type=int, default=300, help="|U| a group (default 300)")
    parser.add_argument("--no-transfer", action="store_true", help="skip the 'no labels of its own' runs")
    parser.add_argument("--model", help="predict --model: this model for every group chosen instead of "
                                        "params.yaml's choice")
    parser.add_argument("--prior", choices=get_args(Prior),
                        help="predict --prior for every run (default: predict.prior)")
    parser.add_argument("--trainer", choices=get_args(Trainer), default="auto",
                        help="with --adapt: adapt.trainer (default auto)")
    parser.add_argument("--adapt", action="store_true",
                        help="then `checkworthy adapt` on each group's L (models in a scratch folder) and "
                             "predict again: the lineage's own model's figures")
    parser.add_argument("--write-excluded", type=Path, metavar="CSV",
                        help="write every group's L and U (group,part,id,text) for the trainer to exclude, "
                             "and stop")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    gs = readable(language_groups(args.n_labelled, args.n_held_out))
    if args.write_excluded:
        write_excluded(args.write_excluded, gs)
        print(f"{sum(len(g.labelled) + len(g.held_out) for g in gs)} claims -> {args.write_excluded}")
        return
    quiet_offline_env()
    url = embedded_url(VAR_DIR / f"pg-bench-languages-{os.getpid()}", "bench", cleanup_mode="delete")
    get_engine(url)
    os.environ["DATABASE_URL"] = url
    chosen = [g for g in gs if not args.groups or g.name in args.groups]
    others = [g for g in gs if g.language != "en"]
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        params = scratch_params(work, args.trainer) if args.adapt else None
        for g in chosen:
            fig = run_predict(g.name, g.labelled, g.held_out, work, args.model, params, args.prior)
            ref = reference(g.labelled, g.held_out)
            rows.append({**asdict(fig), "reference": asdict(ref)})
            print(json.dumps(rows[-1]), flush=True)
            if params is not None:
                adapted = run_adapt(g.name, work, params)
                fig = run_predict(g.name, g.labelled, g.held_out, work, args.model, params, args.prior)
                rows.append({**asdict(replace(fig, group=f"{g.name}-adapted")), "reference": asdict(ref),
                             "adapt": adapted})
                print(json.dumps(rows[-1]), flush=True)
        transfer: list[dict[str, object]] = []
        for g in (x for x in chosen if x.language != "en" and not args.no_transfer):
            lab = [c for h in others if h.name != g.name for c in h.labelled]
            fig = run_predict(f"{g.name}-no-own", lab, g.held_out, work, args.model, prior=args.prior)
            transfer.append(asdict(fig))
            print(json.dumps(transfer[-1]), flush=True)
    print_tables(rows, transfer)


def print_tables(rows: list[dict[str, object]], transfer: list[dict[str, object]]) -> None:
    """The per-group table, the five languages' mean and spread, the transfer table, a JSON line."""
    print(f"\n{'group':<11} {'model':<32} {'F1':>6} {'wF1':>6} {'AUC':>6} {'auto':>5} {'err':>6} "
          f"{'J F1':>6} {'c/s':>6} | {'TF-IDF F1':>9} {'wF1':>6} {'AUC':>6}")
    for r in rows:
        ref = r["reference"]
        assert isinstance(ref, dict)
        err = "-" if r["error_automated"] is None else f"{r['error_automated']:.3f}"
        print(f"{r['group']:<11} {r['model']:<32} {r['f1']:>6.3f} {r['weighted_f1']:>6.3f} "
              f"{r['auc_theta']:>6.3f} {r['automated']:>5.2f} {err:>6} {r['model_f1_at_half']:>6.3f} "
              f"{r['claims_per_s']:>6.0f} | "
              f"{ref['f1']:>9.3f} {ref['weighted_f1']:>6.3f} {ref['auc']:>6.3f}")
    five = [r for r in rows if not str(r["group"]).startswith("en-")]
    summary: dict[str, object] = {}
    if five:
        f1 = np.array([float(str(r["f1"])) for r in five])
        ref_f1 = np.array([float(r["reference"]["f1"]) for r in five])  # type: ignore[index]
        summary = {"n_languages": len(five), "mean_f1": round(float(f1.mean()), 4),
                   "spread_f1": round(float(f1.max() - f1.min()), 4),
                   "mean_reference_f1": round(float(ref_f1.mean()), 4),
                   "languages_above_reference": int((f1 > ref_f1).sum())}
        print(f"\n{len(five)} languages: mean F1 {f1.mean():.3f} (min {f1.min():.3f}, max {f1.max():.3f}); "
              f"TF-IDF on L {ref_f1.mean():.3f}; above TF-IDF in {(f1 > ref_f1).sum()} of {len(five)}")
    if transfer:
        print(f"\nno labels of its own (L = the other languages' L)\n{'group':<20} {'n L':>5} {'F1':>6} "
              f"{'AUC':>6} {'automated':>9} {'err':>6}")
        for t in transfer:
            err = "-" if t["error_automated"] is None else f"{t['error_automated']:.3f}"
            print(f"{t['group']:<20} {t['n_labelled']:>5} {t['f1']:>6.3f} {t['auc_theta']:>6.3f} "
                  f"{t['automated']:>9.2f} {err:>6}")
    print(json.dumps({"bench": "languages", "groups": rows, "no_labels_of_its_own": transfer,
                      "summary": summary, "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
