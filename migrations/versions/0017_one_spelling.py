"""One spelling in the schema: ``neighbour``, as everywhere else in the project.

``calibrated_results.neighbor_ids`` and ``neighbor_distances`` become ``neighbour_ids`` and
``neighbour_distances``; the audit views that expose them follow: ``audit_decisions``
(``neighbour_ids``, ``neighbour_distances``) and ``audit_decision_lineage`` (``neighbour_rank``,
``neighbour_id``, ``neighbour_dataset``, ... ``neighbour_labelled_at``, ``neighbour_residual``).

A view keeps its output column names when a table column is renamed, so the views' columns are
renamed too (``ALTER VIEW ... RENAME COLUMN``), and ``audit_decision_lineage`` is replaced in
place (``CREATE OR REPLACE VIEW``, same columns) so that its stored definition names the unnest
alias in the same spelling. Both keep each view's identity: owner (``checkworthy_owner``),
grants (auditor and pipeline SELECT), comments and the dependency between the two views stay
as 0002 made them; no trigger or function names these columns.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

#: calibrated_results' columns, old name -> new name
TABLE_COLUMNS = {"neighbor_ids": "neighbour_ids", "neighbor_distances": "neighbour_distances"}
#: each view's columns, old name -> new name
VIEW_COLUMNS = {
    "audit_decisions": TABLE_COLUMNS,
    "audit_decision_lineage": {
        f"neighbor_{c}": f"neighbour_{c}"
        for c in ("rank", "id", "dataset", "source_id", "text", "distance", "label", "label_id",
                  "label_source", "labelled_at", "prediction_id", "score", "residual")
    },
}

#: audit_decision_lineage as 0002 made it, its neighbour columns spelled ``{nb}``
LINEAGE = """
CREATE OR REPLACE VIEW audit_decision_lineage AS
SELECT d.run_id, d.claim_id, d.dataset, d.source_id, d.text, d.model, d.prompt_version,
       d.score_params, d.score_kind, d.prediction_id, d.score,
       d.label_set_id, d.label_set_name, d.label_set_fingerprint,
       d.k, d.alpha, d.threshold, d.interval_method,
       nb.rank AS {nb}_rank, nb.{nb}_id, nc.dataset AS {nb}_dataset,
       nc.source_id AS {nb}_source_id, nt.text AS {nb}_text,
       nb.distance AS {nb}_distance,
       li.label AS {nb}_label, li.label_id AS {nb}_label_id,
       nl.source AS {nb}_label_source, nl.created_at AS {nb}_labelled_at,
       np.id AS {nb}_prediction_id, np.score AS {nb}_score,
       li.label - np.score AS {nb}_residual,
       d.knn_mean, d.theta, d.ci_low, d.ci_high, d.decision,
       d.run_status, d.run_started_at, d.run_finished_at, d.run_flow_run_id, d.code_rev,
       d.data_version_id, d.data_dvc_hash, d.data_git_rev
FROM audit_decisions d
CROSS JOIN LATERAL unnest(d.{nb}_ids, d.{nb}_distances)
     WITH ORDINALITY AS nb({nb}_id, distance, rank)
JOIN claims nc ON nc.id = nb.{nb}_id
JOIN texts nt ON nt.text_hash = nc.text_hash
LEFT JOIN label_set_items li ON li.label_set_id = d.label_set_id AND li.claim_id = nb.{nb}_id
LEFT JOIN labels nl ON nl.id = li.label_id
LEFT JOIN predictions np ON np.text_hash = nc.text_hash AND np.model_id = d.model_id
     AND np.prompt_version = d.prompt_version AND np.params_hash = d.params_hash
     AND np.score_kind = d.score_kind;
"""


def _renames(forward: bool) -> str:
    """The ALTER statements renaming the table's and the views' columns, one way or back."""
    out = []
    for relation, columns in [("TABLE calibrated_results", TABLE_COLUMNS)] + [
            (f"VIEW {view}", columns) for view, columns in VIEW_COLUMNS.items()]:
        for old, new in columns.items():
            a, b = (old, new) if forward else (new, old)
            out.append(f"ALTER {relation} RENAME COLUMN {a} TO {b};")
    return "\n".join(out)


def upgrade() -> None:
    op.execute(_renames(forward=True))
    op.execute(LINEAGE.format(nb="neighbour"))


def downgrade() -> None:
    op.execute(_renames(forward=False))
    op.execute(LINEAGE.format(nb="neighbor"))
