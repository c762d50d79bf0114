"""The main job's first run, stage by stage, each beside its FLOP ceiling.

Runs ``checkworthy run`` as a newcomer's first run does, in a temporary folder: a new embedded
Postgres (an empty store: every text embedded and scored), a new Prefect home, and with ``--cold``
an empty model cache (the ONNX exports and Gemma's de-quantised weights built again, as on a fresh
clone). Then it reads the flow run's task runs back from Prefect and prints each stage (tasks of
one name in a row, the score tasks by model), its seconds, the distinct texts it computes, its
floating-point operations and its ceiling at this machine's fp32 matrix-product peak
(:mod:`checkworthy.testing.flops`), then the seconds to the first table and to the end. Set-up
(``scripts/setup.sh``) is not timed here. Prints a table and a JSON line. Run from the repository
root: ``.venv/bin/python -m bench.bench_main_job [--cold] [--limit N]`` (the whole job: about half
an hour on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from checkworthy.config import PARAMS_FILE, labelled_sizes, load_params, model_name, quiet_offline_env
from checkworthy.data.datasets import load_dataset
from checkworthy.data.splits import build_splits
from checkworthy.runs.main_job import sharing_passes
from checkworthy.scorers.registry import configured_scorer
from checkworthy.scorers.sentence_encoder import embed
from checkworthy.testing.flops import pass_flops, peak_flops

FLOW = "checkworthy-pipeline"
SAMPLE = 200  # texts a pass's FLOP a text is counted on


def job_texts(params: Mapping[str, Any], limit: int | None) -> list[str]:
    """The distinct texts the job embeds and scores: each dataset's calibration and test claims."""
    found: dict[str, None] = {}
    for name in params["datasets"]:
        claims, _ = load_dataset(name)
        splits = build_splits(name, claims, params["seed"], n_per_class=labelled_sizes(params).get(name))
        for part in ("calibration", "test"):
            found.update(dict.fromkeys(c.text for c in splits[part][:limit or None]))
    return list(found)


def stage_flops(params: Mapping[str, Any], texts: Sequence[str]) -> dict[str, float]:
    """Floating-point operations a text of each stage that runs a model: ``embed`` and ``score
    <entry>`` for every ``models:`` entry, counting only the passes no earlier stage made (an
    ensemble's member scored before, or a sampling made in an earlier entry's passes, is read from
    the store)."""
    sample, bases = list(texts[:SAMPLE]), {}
    flops, made = {"embed": pass_flops(embed, sample, bases)}, []
    for entry in params["models"]:
        scorer, _ = configured_scorer(dict(params), model_name(entry))
        members = getattr(scorer, "members", [scorer])
        new = [m for m in members
               if not any(m.params() == s.params() or sharing_passes(s, [m]) for s in made)]
        flops[f"score {model_name(entry)}"] = sum(pass_flops(m, sample, bases) for m in new)
        made += members
    return flops


def task_runs() -> dict[str, Any]:
    """The latest main-job flow run and its task runs (name, start, end, state), from the Prefect
    API this process is set up for (run in the child, where PREFECT_HOME is the bench's)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[FLOW])),
                                     sort=FlowRunSort.START_TIME_DESC, limit=1)
        if not runs:
            return {"flow_run": None, "tasks": []}
        run = runs[0]
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
    return {"flow_run": {"start": run.start_time.isoformat(), "end": run.end_time.isoformat(),
                         "state": run.state_type.value},
            "tasks": [{"name": t.name, "start": t.start_time.isoformat(), "end": t.end_time.isoformat(),
                       "state": t.state_type.value} for t in tasks if t.start_time and t.end_time]}


def stages(tasks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive task runs of one stage merged (a task's default run name ends in ``-xyz``;
    a score task's run is named for its model): name, start, end, tasks, seconds."""
    out: list[dict[str, Any]] = []
    for t in sorted(tasks, key=lambda t: t["start"]):
        name = t["name"] if t["name"].startswith("score ") else t["name"].rsplit("-", 1)[0]
        start, end = datetime.fromisoformat(t["start"]), datetime.fromisoformat(t["end"])
        if out and out[-1]["name"] == name:
            out[-1]["end"], out[-1]["tasks"] = end, out[-1]["tasks"] + 1
        else:
            out.append({"name": name, "start": start, "end": end, "tasks": 1})
    for s in out:
        s["seconds"] = (s["end"] - s["start"]).total_seconds()
    return out


def run_job(work: Path, cold: bool, limit: int | None, params: Path) -> tuple[float, dict[str, Any]]:
    """``checkworthy run`` in ``work`` (its own store, Prefect home and, ``cold``, model cache);
    its wall seconds and the flow run's task runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "DATABASE_URL")}
    env |= {"CHECKWORTHY_VAR": str(work / "var"), "PREFECT_HOME": str(work / "prefect")}
    if cold:
        env["CHECKWORTHY_CACHE_DIR"] = str(work / "cache")
    cli = Path(sys.executable).parent / "checkworthy"
    command = [str(cli), "run", "--params", str(params), "--name", "bench-main-job",
               "--reports-dir", str(work / "reports"), *(["--limit", str(limit)] if limit else [])]
    t0 = time.monotonic()
    subprocess.run(command, env=env, check=True)
    wall = time.monotonic() - t0
    dump = subprocess.run([sys.executable, "-m", "bench.bench_main_job", "--task-runs"], env=env, check=True,
                          capture_output=True, text=True)
    return wall, json.loads(dump.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cold", action="store_true",
                    help="an empty model cache too (a fresh clone's first run)")
    ap.add_argument("--limit", type=int, help="the first N claims of each split (a smoke run)")
    ap.add_argument("--params", default=str(PARAMS_FILE), help="params file (default: the project's)")
    ap.add_argument("--task-runs", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.task_runs:
        print(json.dumps(task_runs()))
        return
    quiet_offline_env()
    params = load_params(Path(args.params))
    texts = job_texts(params, args.limit)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-main-job-") as tmp:
        wall, found = run_job(Path(tmp), args.cold, args.limit, Path(args.params).resolve())
    flops, peak = stage_flops(params, texts), peak_flops()
    start = datetime.fromisoformat(found["flow_run"]["start"])
    rows = stages(found["tasks"])
    print(f"load average {load:.2f} before; {len(texts):,} distinct texts; "
          f"{'cold' if args.cold else 'warm'} model cache; fp32 matrix-product peak {peak / 1e9:.0f} GFLOP/s")
    print("| stage | tasks | seconds | ends at (s) | texts | GFLOP a text | ceiling (s) |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for s in rows:
        f = flops.pop(s["name"], None)  # a stage's model work is done once: a later embed finds it stored
        s["ends_at"] = (s["end"] - start).total_seconds()
        s["ceiling_seconds"] = None if f is None else len(texts) * f / peak
        print(f"| {s['name']} | {s['tasks']} | {s['seconds']:.0f} | {s['ends_at']:.0f} | "
              + ("| | |" if f is None else f"{len(texts):,} | {f / 1e9:.2f} | {s['ceiling_seconds']:.0f} |"))
    first = next((s["ends_at"] for s in rows if s["name"] == "first-table"), None)
    flow_seconds = (datetime.fromisoformat(found["flow_run"]["end"]) - start).total_seconds()
    print(f"first table after {first:.0f} s of the flow; the flow {flow_seconds:.0f} s; "
          f"`checkworthy run` {wall:.0f} s wall (start-up included)")
    print(json.dumps({"bench": "main_job", "cold": args.cold, "limit": args.limit, "texts": len(texts),
                      "peak_gflops": peak / 1e9, "load_before": load, "first_table_s": first,
                      "flow_s": flow_seconds, "wall_s": wall, "state": found["flow_run"]["state"],
                      "stages": [{k: v for k, v in s.items() if k not in ("start", "end")} for s in rows]}))


if __name__ == "__main__":
    main()
