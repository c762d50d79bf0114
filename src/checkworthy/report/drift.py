"""Drift for people: the one line that says a batch drifted and what to do (printed by ``predict``
and ``calibrate``, logged, emitted and left as an artifact by the flows, answered by the API and
exposed in its metrics), and the report's "Drift" section: for every run, how many of its claims
lie farther from the labelled set than L's own claims do (``params->'drift'``,
:mod:`checkworthy.method.drift`), and the figure run after run. From stored figures only."""

from __future__ import annotations

from collections.abc import Sequence

from checkworthy.method.drift import Drift, another_kind
from checkworthy.report import plots
from checkworthy.report.document import Document, Heading, Image, Para, Table, esc
from checkworthy.report.formatting import fmt
from checkworthy.report.run_groups import Group
from checkworthy.store.run_spec import RunRecord

#: what a person should do about a drifting batch
DRIFT_ADVICE = ("label some of those beyond it (`checkworthy review export`) so that the labelled set "
                "covers claims like them")


def language_part(figure: Drift | None) -> str | None:
    """What a drift figure says of languages (None when its claims are all in L's): how many claims
    are in each language the labelled set has none of, and that a person decides them."""
    if figure is None or not figure.languages:
        return None
    new = figure.languages
    counts = [f"{n} claim{'s' if n != 1 else ''} in {lang}" if i == 0 else f"{n} in {lang}"
              for i, (lang, n) in enumerate(new)]
    what = "a language" if len(new) == 1 else "languages"
    whom = "them" if figure.n_new_language != 1 else "it"
    return (f"{', '.join(counts)}, {what} the labelled set has none of: a person decides {whom}; label "
            "some of them so that the labelled set covers the language")


def drift_line(figure: Drift | None, subject: str = "this batch") -> str | None:
    """One line for a drift figure that alerts or names languages L has none of (None otherwise):
    what share of ``subject`` lies beyond the labelled set's radius, against what is expected,
    what was done (:func:`checkworthy.method.drift.drift_status`) and what to do; and how many of
    its claims are in languages the labelled set has none of (:func:`language_part`)."""
    languages = language_part(figure)
    if figure is None or not figure.alert:
        return None if languages is None else f"drift: {languages}"
    done = ("most of it is of another kind, so none of its claims is decided automatically"
            if another_kind(figure) else "those claims go to a person, never decided automatically")
    line = (f"drift: {figure.share:.0%} of {subject} ({figure.n_beyond} of {figure.n} claims) lies "
            f"beyond the labelled set's radius (expected <= {figure.expected:.0%}, tolerated "
            f"{figure.tolerance:.0%}, p = {figure.p_value:.2g}): {done}; {DRIFT_ADVICE}")
    return line if languages is None else f"{line}; and {languages}"


def drift_section(doc: Document, groups: Sequence[Group], figures: dict) -> None:
    """One row per run with a drift figure, and the share beyond the radius against the expected one."""
    doc.add(Heading(2, "Drift"))
    runs = sorted(((g, r, d) for g in groups for r in g.runs if (d := RunRecord.of(r).drift) is not None),
                  key=lambda x: x[1]["id"])
    if not runs:
        doc.add(Para("No run of this report stored a drift figure."))
        return
    rows: list[list[str]] = []
    series: dict[str, list[tuple[int, float, bool]]] = {}
    for g, r, d in runs:
        rows.append([str(r["id"]), esc(r["target"]), esc(g.title), str(r["k"]), fmt(d.radius),
                     f"{d.n_beyond} of {d.n}", f"{d.share:.1%}", f"{d.expected:.0%}",
                     f"{d.tolerance:.0%}",
                     f"{d.p_value:.2g}", "**drift**" if d.alert else "no"])
        series.setdefault(r["target"], []).append((r["id"], d.share, d.alert))
    doc.add(Para("A claim's distance to its nearest labelled claim, against the same distance of each "
                 "labelled claim to its nearest other one: the radius is the split-conformal 95% "
                 "quantile of L's, so at most 5% of claims like L's lie beyond it. A run is flagged "
                 "when its share beyond is significantly above the tolerated one (exact binomial test, "
                 "p <= 0.01); NN-PPI's neighbours then say little about its claims, and the flows emit "
                 "`checkworthy.drift.detected`."))
    header = ["run", "target", "runs", "k", "radius", "beyond", "share", "expected", "tolerated", "p",
              "drift"]
    doc.add(Table(header, rows))
    path = "figures/drift.png"
    expected = float(runs[0][2].expected)
    figures[path] = lambda: plots.drift_over_time("Claims beyond the labelled set's radius, run after run",
                                                  series, expected)
    doc.add(Image(path, "Share of each run's claims beyond the labelled set's radius"))
