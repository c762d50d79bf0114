"""The report's "Decide or review" section: for every run, the rule chosen on L (which risk, its
bound, delta, the labelled claims it was certified on, the margin), the share of the run's claims
it decides automatically, the risk realised among them on the claims labelled when the run
finished, and how many claims it queued for a person.

From stored rows only (the labels are read as of each run's end), so a re-render is identical.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from checkworthy.method.selective import ReviewRule, realised
from checkworthy.report import plots
from checkworthy.report.document import Document, Heading, Image, Para, Table, code, esc
from checkworthy.report.formatting import fmt
from checkworthy.report.run_groups import Group
from checkworthy.store.languages import drift_status_of
from checkworthy.store.review_queue import labelled_results, queued_counts
from checkworthy.store.run_spec import RunRecord


def decide_or_review(conn: Connection, doc: Document, groups: Sequence[Group], figures: dict) -> None:
    """The table of every run's rule and outcome, and a figure of automated share and realised risk."""
    doc.add(Heading(2, "Decide or review"))
    runs = [(g, r, record, rule) for g in groups for r in g.runs
            if (rule := (record := RunRecord.of(r)).rule) is not None]
    if not runs:
        doc.add(Para("No run of this report stored a decide-or-review rule."))
        return
    queued = queued_counts(conn, [r["id"] for _, r, _, _ in runs])
    rows, cats, values, marks = [], [], [], []
    for g, r, record, certified in runs:
        res = [x for x in labelled_results(conn, r["id"]) if x.label is not None]
        share_all = record.automated_share
        status = drift_status_of(conn, [x.claim_id for x in res], [x.nearest for x in res], record.drift)
        share, risk = realised([x.theta for x in res], [x.label for x in res], certified.threshold,
                               certified.risk, certified.margin, status)
        within = "—" if risk is None else ("yes" if risk <= certified.max_risk else "**no**")
        on, none = _certified_on(certified)
        rows.append([esc(g.title), str(r["k"]), code(record.used_correction),
                     f"{certified.risk} <= {certified.max_risk:g}, delta {certified.delta:g}", on,
                     fmt(certified.margin) if certified.margin is not None else none,
                     f"{share_all:.0%}" if share_all is not None else "—", f"{len(res)}",
                     f"{share:.0%}" if res else "—", fmt(risk), within, str(queued.get(r["id"], 0))])
        if res:
            cats.append(f"{g.title}, k={r['k']}")
            values.append([share, risk])
            marks.append((len(cats) - 1, 1, float(certified.max_risk)))
    doc.add(Para("Each run chooses on L, by Learn-then-Test, how far theta must be from the threshold for "
                 "a decision to be taken without a person, so that the risk stays at or below its bound "
                 "with probability 1 - delta (docs/method.md, \"Decide or review\"), certified on the "
                 "labelled claims nearest the run's batch, each weighed by how often it is among the "
                 "batch's neighbours (\"certified on\": how many, and their effective number); with "
                 "too few labelled claims like the batch nothing is decided automatically. The claims it "
                 "sends to a person are queued (`review_queue`) for export to Label Studio "
                 "(docs/review.md, with the label benchmark `bench/bench_review_queue.py` and its "
                 "figure). Reliability diagrams of theta are in each run group's section below."))
    doc.add(Table(["runs", "k", "correction", "bound", "certified on", "margin", "automated (all claims)",
                   "labelled claims", "automated (labelled)", "realised risk", "within the bound", "queued"],
                  rows,
                  caption="Realised risk: wrong decisions among the automatic ones (error), or check-worthy "
                          "claims among the automatic dismissals (miss), on the run's claims labelled when "
                          "it finished."))
    if cats:
        path = "figures/decide-or-review.png"
        figures[path] = lambda: plots.grouped_bars(
            "Share decided automatically and realised risk among those decisions (diamond: the bound)",
            cats, ["automated share", "realised risk"], values, "share", marks)
        doc.add(Image(path, "Automated share and realised risk per run, against the bound"))


def _certified_on(certified: ReviewRule) -> tuple[str, str]:
    """The rule's "certified on" cell (all of L, or the claims nearest the batch and their effective
    number), and what its margin cell says when no margin passed."""
    on = (f"all {certified.n_labelled} labelled" if certified.n_neighbours is None
          else f"{certified.n_neighbours} nearest the batch (effective n {certified.n_effective:.0f})")
    none = "too few like the batch" if certified.too_few() else "none passed"
    return on, none
