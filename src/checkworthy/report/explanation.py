"""A stored decision as text: the lineage from a claim's text to its calibrated decision.

Behind ``checkworthy explain``; the decisions come from :func:`checkworthy.store.audit.explain`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkworthy.method.selective import ReviewRule
from checkworthy.store.audit import Decision
from checkworthy.store.run_spec import RunRecord


def _f(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _short(value: str, width: int = 70) -> str:
    value = " ".join(value.split())
    return value if len(value) <= width else value[: width - 1] + "…"


def language_line(lang: Mapping[str, Any]) -> str:
    """The claim's stored language: its code and the detector's confidence, or ``und`` and why."""
    said = (f"{lang['reason']}" if lang["language"] == "und"
            else f"confidence {lang['confidence']:.2f}")
    return f"  language:   {lang['language']} ({said}; {lang['detector']})"


def _threshold(d: Decision) -> str:
    """The threshold the run decided at (:meth:`RunRecord.threshold_on_theta`: the batch's prior or
    the F1 cut moves it off the run's own)."""
    own = d.row["threshold"]
    moved = RunRecord(prior=d.prior).threshold_on_theta(own)
    return str(own) if moved == own else f"{moved:.4g} (the run's {own}, moved by its prior)"


def format_decision(d: Decision) -> str:
    """A human-readable lineage: text -> score -> label set -> neighbours -> theta -> run."""
    r = d.row
    verdict = "check-worthy" if r["decision"] else "not check-worthy"
    lines = [
        f"claim {r['dataset']}/{r['source_id']} (claim id {r['claim_id']}) in run {r['run_id']} "
        f"[{r['run_status']}]",
        f"  text:       {_short(r['text'], 100)}",
        *([language_line(d.language)] if d.language else []),
        f"  score:      {_f(r['score'])} = {r['score_kind']} of {r['model']}, prompt {r['prompt_version']}, "
        f"params {dict(r['score_params'] or {})} (prediction {r['prediction_id']}, "
        f"raw {_short(r['raw_output'] or '', 40)!r})",
        f"  label set:  {r['label_set_name']} #{r['label_set_id']} ({r['label_set_size']} items, "
        f"{r['label_set_positives']} positive, fingerprint {r['label_set_fingerprint'][:12]})",
        f"  neighbours: k={r['k']} by {r['embed_model']} cosine distance",
        f"    {'#':>2} {'distance':>8} {'label':>5} {'score':>6} {'residual':>8}  source id / text",
    ]
    for n in d.neighbours:
        lines.append(
            f"    {n['neighbour_rank']:>2} {_f(n['neighbour_distance']):>8} {n['neighbour_label']!s:>5} "
            f"{_f(n['neighbour_score']):>6} {_f(n['neighbour_residual']):>8}  "
            f"{n['neighbour_source_id']}: {_short(n['neighbour_text'], 60)}"
        )
    lines += [
        f"  theta:      {_f(r['theta'])} = score {_f(r['score'])} + mean residual "
        f"{_f(r['theta'] - r['score'])}; {100 * (1 - r['alpha']):.0f}% interval "
        f"[{_f(r['ci_low'])}, {_f(r['ci_high'])}] ({r['interval_method']})",
        f"  decision:   {verdict} (theta {'>=' if r['decision'] else '<'} threshold {_threshold(d)})",
        f"  run:        started {r['run_started_at']}, finished {r['run_finished_at']}, flow run "
        f"{r['run_flow_run_id'] or '-'}, code {r['code_rev'] or '-'}, data version "
        f"{r['data_version_id'] or '-'} ({r['data_dvc_hash'] or '-'})",
    ]
    if d.queued:  # the reason stored with its entry (the rule's, or drift's)
        lines.append(f"  review:     {d.queued['reason']}")
    elif d.review:
        lines.append(f"  review:     {ReviewRule.from_dict(d.review).reason(r['theta'])}")
    if d.queued or d.answers:
        queued = (f"queued by this run (priority {_f(d.queued['priority'], 3)})" if d.queued
                  else "not queued by this run")
        answered = "; ".join(f"answered {a['label']} by label update {a['update_id']} "
                             f"({a['created_at']:%Y-%m-%d %H:%M})" for a in d.answers) or "not answered yet"
        lines.append(f"  queue:      {queued}; {answered}")
    if r["current_label"] is not None:
        lines.append(f"  gold label: {r['current_label']} (label id {r['current_label_id']})")
    return "\n".join(lines)
