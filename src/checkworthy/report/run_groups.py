"""The runs a report covers: loaded with their inputs, keyed by what they share, and grouped.

Runs that differ only in k form a group (same target claims, label set, score key, alpha,
threshold, interval): the report gives each group one section and the analyses that do not
depend on k (the k and |L| sweeps) are computed once per group.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from checkworthy.report.formatting import slug
from checkworthy.store.analyses import runs_with_inputs
from checkworthy.store.rows import sha256_text


def json_hash(value: Any) -> str:
    """sha256 of a value's sorted-key JSON (group keys, analysis parameters)."""
    return sha256_text(json.dumps(value, sort_keys=True, default=str))


def group_key(run: Mapping[str, Any]) -> str:
    """sha256 of a run's identity without k: runs sharing it differ only in k."""
    return json_hash({f: run[f] for f in (
        "target", "label_set_fingerprint", "model_id", "prompt_version", "params_hash", "score_kind",
        "embed_model", "alpha", "threshold", "interval_method", "claims_hash")})


def load_runs(conn: Connection, run_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The runs with everything a report names about their inputs, in report order, each with its
    ``dataset`` and ``group_key``."""
    runs = runs_with_inputs(conn, run_ids)
    for r in runs:
        r["dataset"] = r["target"].split(":")[0]
        r["group_key"] = group_key(r)
    return runs


def temperature_label(t: Any) -> str:
    """How the report names a sampling temperature ("T=0.1", "T=default")."""
    return "T=default" if t is None else f"T={float(t):g}"


@dataclass
class Group:
    """Runs that differ only in k, in report order, with the section's title and file-name slug."""

    key: str
    runs: list[dict[str, Any]]
    slug: str = ""
    title: str = ""

    @property
    def run0(self) -> dict[str, Any]:
        return self.runs[0]


def group_runs(runs: Sequence[dict[str, Any]]) -> list[Group]:
    """The runs' groups in order of first appearance; titles name what tells two groups apart."""
    order: dict[str, Group] = {}
    for r in runs:
        order.setdefault(r["group_key"], Group(r["group_key"], [])).runs.append(r)
    groups = list(order.values())
    base = [(g.run0["dataset"], g.run0["model_spec"], g.run0["score_kind"]) for g in groups]
    for g, b in zip(groups, base):
        r = g.run0
        g.title = f"{r['dataset']} — {r['model_spec']} ({r['score_kind']} score)"
        g.slug = slug(f"{r['dataset']}--{r['model_spec']}--{r['score_kind']}")
        if base.count(b) > 1:  # same dataset, model and kind twice: name what differs
            extra = f"parameters {r['params_hash'][:8]}, label set {r['label_set_id']}, {r['target']}"
            g.title += f" [{extra}]"
            g.slug += f"--{r['params_hash'][:8]}-ls{r['label_set_id']}-{slug(r['target'])}"
    return groups
