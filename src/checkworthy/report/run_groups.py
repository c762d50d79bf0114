"""The runs a report covers, grouped: runs that differ only in k (the same
:func:`checkworthy.runs.analyses.group_key`: same target claims, label set, score key, alpha,
threshold, interval) form a group, to which the report gives one section; the analyses that do not
depend on k (the k and |L| sweeps) are computed once per group.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkworthy.report.document import code, esc
from checkworthy.report.formatting import missing, short, slug

#: score kinds in words (the report never names a score by its parameters hash)
SCORE_WORDS = {"verbalised": "verbalised score", "token_prob": "token probability",
               "p_positive": "classifier probability", "paper_c": "classifier confidence (the paper's c)",
               "imported": "imported score"}
#: run fields that can tell two groups of one dataset, model and score kind apart, in words
_RUN_FIELDS = (("target", "target {}"), ("label_set_name", "label set {}"), ("alpha", "alpha {}"),
               ("threshold", "threshold {}"), ("interval_method", "interval {}"),
               ("embed_model", "embedding {}"))


def temperature_words(t: Any) -> str:
    """A sampling temperature in the report's prose ("T = 0.8")."""
    return "T = default" if t is None else f"T = {float(t):g}"


def setting_words(score_kind: str, score_params: Mapping[str, Any], with_temperature: bool = True) -> str:
    """A score setting in words: "verbalised score, T = 0.8", "token probability"."""
    words = SCORE_WORDS.get(score_kind, f"{score_kind} score")
    if with_temperature and "temperature" in score_params:
        return f"{words}, {temperature_words(score_params['temperature'])}"
    return words


@dataclass
class Group:
    """Runs that differ only in k, in report order, with the section's title and file-name slug.

    ``setting`` names the score in words; ``twins`` are groups whose runs differ from these only
    in the sampling temperature and have identical figures (shown once, as this group).
    """

    key: str
    runs: list[dict[str, Any]]
    slug: str = ""
    title: str = ""
    setting: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    twins: list[Group] = field(default_factory=list)

    @property
    def run0(self) -> dict[str, Any]:
        return self.runs[0]

    def run_at(self, k: int) -> dict[str, Any] | None:
        """The group's run with this k, if any."""
        return next((r for r in self.runs if r["k"] == k), None)

    def members(self) -> list[Group]:
        """The group and its twins, highest temperature first."""
        return sorted((self, *self.twins), key=lambda g: -float(g.params.get("temperature") or 0))

    def runs_at(self, k: int) -> list[dict[str, Any]]:
        """The runs with this k of the group and its twins (the same figures)."""
        return [r for g in self.members() for r in g.runs if r["k"] == k]

    def run_ids(self, i: int) -> str:
        """The id of the i-th run and of its twins' i-th runs ("12" or "12, 15")."""
        return ", ".join(str(g.runs[i]["id"]) for g in self.members())


def group_runs(runs: Sequence[dict[str, Any]], score_params: Mapping[int, Mapping[str, Any]] | None = None,
               metrics: Mapping[int, Mapping] | None = None) -> list[Group]:
    """The runs' groups in order of first appearance, twins folded into the first of them.

    Titles name the dataset, the model and the score setting in words, and what else tells two
    groups apart; slugs (file names) stay unique over every group, twins included.
    """
    order: dict[str, Group] = {}
    for r in runs:
        order.setdefault(r["group_key"], Group(r["group_key"], [])).runs.append(r)
    groups = list(order.values())
    for g in groups:
        g.params = dict((score_params or {}).get(g.run0["id"], {}))
        g.setting = setting_words(g.run0["score_kind"], g.params)
    for g in groups:
        same = _alike(g, groups)
        g.slug = slug(f"{g.run0['dataset']}--{g.run0['model_spec']}--{g.run0['score_kind']}")
        if same:
            g.slug += "--" + slug(" ".join(_differences(g, same, with_temperature=True)))
    shown: list[Group] = []
    for g in groups:
        first = next((s for s in shown if _twins(s, g, metrics or {})), None)
        if first is None:
            shown.append(g)
        else:
            first.twins.append(g)
    for g in shown:
        r = g.run0
        if g.twins:
            g.setting = setting_words(r["score_kind"], g.params, with_temperature=False)
        same = [o for o in _alike(g, shown) if o.setting == g.setting]
        extra = ", ".join(_differences(g, same, with_temperature=False))
        g.title = f"{r['dataset']} — {r['model_spec']}, {g.setting}" + (f" [{extra}]" if extra else "")
    return shown


def _alike(g: Group, groups: Sequence[Group]) -> list[Group]:
    """The other groups of the same dataset, model and score kind."""
    def key(x: Group) -> tuple[str, str, str]:
        return x.run0["dataset"], x.run0["model_spec"], x.run0["score_kind"]

    return [o for o in groups if o is not g and key(o) == key(g)]


def _differences(g: Group, others: Sequence[Group], with_temperature: bool) -> list[str]:
    """What tells ``g`` apart from ``others`` in words (a run field, a generation parameter)."""
    if not others:
        return []
    r = g.run0
    words = [fmt.format(r[f]) for f, fmt in _RUN_FIELDS if any(o.run0[f] != r[f] for o in others)]
    keys = sorted({k for o in others for k in g.params.keys() | o.params.keys()
                   if g.params.get(k) != o.params.get(k)})
    for k in keys:
        if k == "temperature":
            if with_temperature:
                words.append(temperature_words(g.params.get(k)))
        else:
            words.append(f"{k} {short(json.dumps(g.params.get(k), sort_keys=True), 24)}")
    return words or [f"runs {g.run_ids(0)}"]  # nothing else tells them apart


def _twins(a: Group, b: Group, metrics: Mapping[int, Mapping]) -> bool:
    """Runs of ``b`` differ from ``a``'s only in the sampling temperature and have the same figures."""
    ra, rb = a.run0, b.run0
    fields = ("target", "label_set_fingerprint", "model_id", "prompt_version", "score_kind", "embed_model",
              "alpha", "threshold", "interval_method", "claims_hash")
    if any(ra[f] != rb[f] for f in fields) or "temperature" not in a.params or "temperature" not in b.params:
        return False
    if {k: v for k, v in a.params.items() if k != "temperature"} != \
            {k: v for k, v in b.params.items() if k != "temperature"}:
        return False
    if [r["k"] for r in a.runs] != [r["k"] for r in b.runs]:
        return False
    return all(_same_figures(metrics.get(x["id"]), metrics.get(y["id"])) for x, y in zip(a.runs, b.runs))


def _same_figures(a: Mapping | None, b: Mapping | None) -> bool:
    """The same stored metrics, value for value (missing equals missing)."""
    if not a or not b or a.keys() != b.keys():
        return False
    return all(a[key] == b[key] or (missing(a[key]) and missing(b[key])) for key in a)


def twin_note(g: Group) -> str:
    """The sentence (inline Markdown) that says why a group's twins are not shown: the same figures
    at every k."""
    temps = " and ".join(temperature_words(x.params.get("temperature")) for x in g.members())
    runs = "; ".join(", ".join(str(r["id"]) for r in x.runs) for x in g.members())
    why = ("the token probability is read from the model's next-token distribution before anything is "
           "sampled, so the sampling temperature does not move it" if g.run0["score_kind"] == "token_prob"
           else "the sampling temperature did not change these scores")
    return (f"{esc(g.run0['dataset'])}, {code(g.run0['model_spec'])}, {g.setting}: {temps} give identical "
            f"figures at every k (runs {runs}): {why}. They are shown once.")
