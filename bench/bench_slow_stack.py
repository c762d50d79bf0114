"""What a lineage's stack with a slower model costs: ``adapt --slow-model`` timed as one pipeline.

For each group named (default: Spanish tweets) of
:func:`checkworthy.runs.multilingual_set.language_groups`, the stack ``adapt`` trains on the team's
labels L with the slower model (default: the multilingual Gemma LoRA), then the batch U scored
through its scorer (USE, TF-IDF, the shared model, and the slower model on the claims in the band)
at each share of L the band is fixed to: claims/s on U (wall and per CPU second), the share of U
sent, and the slower model's ceiling (its FLOPs on the claims sent at this machine's fp32
matrix-product peak, :mod:`checkworthy.testing.flops`). Speed only: the versioned
``gemma-lora-ml`` learnt every group's L, so its stack's accuracy here would flatter it (the
accuracy is ``bench.bench_gemma_multilingual``'s "band", from the scores of a run without L).
Prints a table and a JSON line. Run from the repository root (no Postgres needed):
``.venv/bin/python -m bench.bench_slow_stack [GROUP ...] [--shares 0.05 0.1 0.2 1]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from checkworthy.config import load_params
from checkworthy.method.cascade import band_half_width, in_band
from checkworthy.runs.adapt import AdaptSettings, distinct_labels, train_stack
from checkworthy.runs.multilingual_set import language_groups
from checkworthy.runs.predict import Recommended
from checkworthy.scorers.embedders import USE_MULTILINGUAL, embed
from checkworthy.scorers.lineage_stack import LineageStackScorer
from checkworthy.testing.flops import base_flops, peak_flops


def cpu_flags() -> str:
    """The SIMD extensions that bound a CPU pass (AVX-512 BF16/VNNI, AMX) as /proc/cpuinfo lists them."""
    flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), [])
    wanted = ("avx512_bf16", "avx512_vnni", "amx", "avx2", "avx512f")
    return " ".join(f for f in flags if f.startswith(wanted))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="*", default=["es-tweets"], metavar="GROUP")
    ap.add_argument("--slow-model", default="classifier:gemma-lora-ml")
    ap.add_argument("--shares", nargs="+", type=float, default=[0.05, 0.1, 0.2, 1.0])
    args = ap.parse_args()
    if not all(0 < s <= 1 for s in args.shares):
        ap.error(f"--shares: each must lie above 0 and at most 1, got {args.shares}")
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    peak = peak_flops()
    params = load_params()
    shared = Recommended.from_params(params).model_other_languages
    groups = {g.name: g for g in language_groups()}
    unknown = sorted(set(args.groups) - set(groups))
    if unknown:
        ap.error(f"no group {', '.join(unknown)} (groups: {', '.join(groups)})")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.groups:
            g = groups[name]
            lab = distinct_labels(name, 0, [(c.text, c.label) for c in g.labelled])
            s = replace(AdaptSettings.from_params(params), root=tmp, slow_model=args.slow_model,
                        slow_share=1.0)
            t0 = time.perf_counter()
            folder, _ = train_stack(lab, shared, s, int(params.get("seed", 0)), print)
            train_s = time.perf_counter() - t0
            scorer = LineageStackScorer(f"{folder.parent.name}@{folder.name}", root=tmp)
            model = scorer.model
            assert model.slow is not None
            slow = model.slow
            cheap_l = replace(model, slow=None).predict_proba(lab.texts, embed(USE_MULTILINGUAL, lab.texts))
            texts = [c.text for c in g.held_out]
            cheap_u = replace(model, slow=None).predict_proba(texts, embed(USE_MULTILINGUAL, texts))
            scorer.score(texts[:4])  # the first call loads USE and the slower model's session
            flops = base_flops(slow.model.base, texts)
            for share in [0.0, *args.shares]:
                width = band_half_width(cheap_l, share) if share else -1.0
                model.slow = replace(slow, half_width=width)
                t1, c1 = time.perf_counter(), time.process_time()
                scorer.score(texts)
                wall, cpu = time.perf_counter() - t1, time.process_time() - c1
                sent = float(in_band(cheap_u, width).mean())
                rows.append({"group": name, "share_of_L": share, "sent_of_U": sent,
                             "claims_per_s": round(len(texts) / wall, 1),
                             "slow_ceiling_claims_per_s": round(peak / (sent * flops), 1) if sent else None,
                             "claims_per_cpu_s": round(len(texts) / cpu, 1), "n": len(texts),
                             "train_s": round(train_s, 1)})
                print(json.dumps(rows[-1]), flush=True)
    print(f"CPU flags: {cpu_flags()}; fp32 matrix-product peak {peak / 1e9:.0f} GFLOP/s; OMP_NUM_THREADS="
          f"{os.environ['OMP_NUM_THREADS']}; load average {os.getloadavg()[0]:.1f}")
    print("| group | band: share of L | share of U sent | claims/s | claims per CPU-s | the slower model's "
          "ceiling at the peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['group']} | {r['share_of_L']:.0%} | {r['sent_of_U']:.0%} | {r['claims_per_s']:g} | "
              f"{r['claims_per_cpu_s']:g} | {r['slow_ceiling_claims_per_s'] or '-'} |")
    print(json.dumps({"bench": "slow_stack", "slow_model": args.slow_model, "cpu_flags": cpu_flags(),
                      "peak_gflop_s": round(peak / 1e9, 1), "rows": rows}))


if __name__ == "__main__":
    main()
