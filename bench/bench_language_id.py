"""Which library identifies a claim's language: accuracy per language, texts/s and memory.

The sample: N (default 300) texts drawn at random (seed 2026) from each of the CheckThat! train
files of the six languages the project holds, English tweets (CT22 train), English debate
sentences (CLEF 2024 train) and the Arabic, Spanish, Dutch, Bulgarian and Turkish tweets (CT24 or
CT22 train). Only train files: no dev-test or test split takes part in the choice. A text counts as
right when the detector names its file's language (a tweet of another language in a file counts
as wrong, for every candidate alike; ``und`` counts as wrong).

The candidates read each text as :func:`checkworthy.data.language.words_of` gives it, one text a
call on one thread, over the whole library's languages (a desk cannot know which languages will
come): ``py3langid`` (140 languages, probabilities normalised), ``lingua-low`` and ``lingua-high``
(``lingua-language-detector``, 75 languages, low-accuracy mode and the default high-accuracy
mode, models preloaded), and ``checkworthy`` (:func:`checkworthy.data.language.detect`, the
chosen one behind the project's ``und`` rules). Each runs in a process of its own, so that its
memory (peak resident set size less the process's before the library loads) is its own.

Prints a table per language, the load time, texts/s and memory, and a JSON line. Run from the
repository root: ``.venv/bin/python -m bench.bench_language_id [--n 300] [CANDIDATE ...]`` (about a
minute on 2 shared cores).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil

from checkworthy.config import VAR_DIR
from checkworthy.data.datasets import (
    MULTILINGUAL_TWEETS,
    TWEET_FILES,
    TWEETS,
    load_clef,
    load_tweets,
)
from checkworthy.data.language import detect, words_of
from checkworthy.testing.datasets import raw_path

CANDIDATES = ("py3langid", "lingua-low", "lingua-high", "checkworthy")
SEED = 2026
WORK = VAR_DIR / "bench-language-id"


def groups() -> dict[str, tuple[str, list[str]]]:
    """Each group's language (ISO 639-1) and texts: the train files only."""
    out = {"en-tweets": ("en", [c.text for c in load_tweets(raw_path("tweets", TWEET_FILES["ct22-train"]),
                                                            "ct22-train")[0]]),
           "en-debates": ("en", [c.text for c in load_clef(
               raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")[0]])}
    for name, tweets in MULTILINGUAL_TWEETS.items():
        split = next(s for s in tweets.files if s.endswith("-train"))
        path = raw_path("multilingual", tweets.folder, tweets.files[split])
        out[name.removeprefix(f"{TWEETS}-") + "-tweets"] = (tweets.language,
                                                            [c.text for c in load_tweets(path, split)[0]])
    return out


def sample(n: int) -> list[dict[str, str]]:
    """``n`` texts a group, drawn at random (the same every run)."""
    rng = random.Random(SEED)
    return [{"group": g, "language": lang, "text": t}
            for g, (lang, texts) in groups().items() for t in rng.sample(texts, min(n, len(texts)))]


def detector(name: str) -> Callable[[list[str]], list[str]]:
    """The candidate's detector: texts in, ISO 639-1 codes (or ``und``) out."""
    if name == "py3langid":
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return lambda texts: [ident.classify(words_of(t))[0] for t in texts]
    if name.startswith("lingua"):
        from lingua import LanguageDetectorBuilder

        builder = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models()
        lingua = (builder.with_low_accuracy_mode() if name == "lingua-low" else builder).build()

        def codes(texts: list[str]) -> list[str]:
            found = [lingua.detect_language_of(words_of(t)) for t in texts]
            return [lang.iso_code_639_1.name.lower() if lang else "und" for lang in found]
        return codes
    return lambda texts: [d.code for d in detect(texts)]


def one(name: str, path: Path) -> dict[str, object]:
    """Run one candidate over the sample in this process: its codes, timings and memory."""
    rows = json.loads(path.read_text(encoding="utf-8"))
    texts = [r["text"] for r in rows]
    before = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    run = detector(name)
    run(texts[:1])  # whatever loads on first use
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    codes = run(texts)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"codes": codes, "load_s": load_s, "texts_per_s": len(texts) / seconds,
            "memory_mb": (peak - before) / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="*", metavar="CANDIDATE",
                        help=f"which to run (default: all of {', '.join(CANDIDATES)})")
    parser.add_argument("--n", type=int, default=300, help="texts a group (default 300)")
    parser.add_argument("--one", choices=CANDIDATES, help=argparse.SUPPRESS)  # a child's candidate
    args = parser.parse_args()
    if unknown := sorted(set(args.candidates) - set(CANDIDATES)):
        parser.error(f"unknown candidate {unknown[0]!r} (known: {', '.join(CANDIDATES)})")
    path = WORK / f"sample-{args.n}.json"
    if args.one:
        print(json.dumps(one(args.one, path)))
        return
    candidates = args.candidates or CANDIDATES
    if any(c.startswith("lingua") for c in candidates) and importlib.util.find_spec("lingua") is None:
        raise SystemExit("the lingua candidates need lingua-language-detector (not a project requirement: "
                         "only this comparison uses it): pip install lingua-language-detector==2.1.1")
    rows = sample(args.n)
    WORK.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    group_names = list(dict.fromkeys(r["group"] for r in rows))
    results: dict[str, dict[str, object]] = {}
    for name in candidates:
        child = subprocess.run([sys.executable, "-m", "bench.bench_language_id", "--n", str(args.n),
                                "--one", name], capture_output=True, text=True)
        if child.returncode:
            raise SystemExit(f"{name}: {child.stderr.strip().splitlines()[-1]}")
        got = json.loads(child.stdout.strip().splitlines()[-1])
        codes = got.pop("codes")
        right = Counter(r["group"] for r, c in zip(rows, codes) if c == r["language"])
        size = Counter(r["group"] for r in rows)
        got["accuracy"] = {g: right[g] / size[g] for g in group_names}
        got["accuracy_all"] = sum(right.values()) / len(rows)
        got["und"] = sum(c == "und" for c in codes) / len(rows)
        got["accuracy_detected"] = sum(right.values()) / max(1, sum(c != "und" for c in codes))
        got["confusions"] = Counter(f"{r['language']}->{c}" for r, c in zip(rows, codes)
                                    if c != r["language"]).most_common(6)
        results[name] = got
    print(f"{len(rows):,} texts, {args.n} a group (train files only), one thread")
    print(f"{'':>12} " + " ".join(f"{g:>11}" for g in group_names) + f" {'all':>6} {'und':>5} "
          f"{'texts/s':>8} {'load s':>6} {'MB':>5}")
    for name, r in results.items():
        acc = r["accuracy"]
        assert isinstance(acc, dict)
        print(f"{name:>12} " + " ".join(f"{acc[g]:>11.3f}" for g in group_names)
              + f" {r['accuracy_all']:>6.3f} {r['und']:>5.3f} {r['texts_per_s']:>8.0f} {r['load_s']:>6.1f} "
              f"{r['memory_mb']:>5.0f}")
    for name, r in results.items():
        print(f"{name}: accuracy where it names a language {r['accuracy_detected']:.3f}; "
              f"most frequent errors {r['confusions']}")
    print(json.dumps({"bench": "language_id", "n_per_group": args.n, "seed": SEED,
                      "results": results}))


if __name__ == "__main__":
    main()
