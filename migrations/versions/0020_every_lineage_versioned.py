"""Every lineage has a head, and a target says whether its labelled claims join the lineage.

- ``calibration_targets.held_out``: true for a held-out split the lineage is measured on (a
  person's label for one of its claims is gold only, never a calibration label: the main job's
  test splits); false for a team's own claims (``<dataset>:incoming``, the API's claims, the
  batches of ``predict`` and ``calibrate``: a target a run of theirs calibrated, which records
  its ``inputs``), whose labels join the lineage's labelled set. Derived again by an upgrade
  after a downgrade, which drops it.
- The targets ``predict`` and ``calibrate`` calibrated before this revision were never registered:
  each complete run of theirs (its ``params`` record its ``inputs``) registers its target, with
  the claims it calibrated, as not held out.
- A lineage that never had a version (``predict``, ``calibrate`` and ``adapt`` froze label sets
  without one) gets its newest label set, the one it calibrated with, as its first version
  (``initial``), so a label update on its claims versions it like any other.

``calibration_targets`` is append-only (0003): the back-fill of the new column disables its
trigger for the one UPDATE, inside this migration's transaction, as DDL may.

Revision ID: 0020
Revises: 0018
Create Date: 2026-11-27
"""

from alembic import op

revision = "0020"
down_revision = "0018"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE calibration_targets ADD COLUMN held_out boolean NOT NULL DEFAULT true;
COMMENT ON COLUMN calibration_targets.held_out IS
    'True: a held-out split (labels of its claims are gold only); false: the team''s own claims, '
    'whose labels join the lineage.';
ALTER TABLE calibration_targets DISABLE TRIGGER calibration_targets_append_only;
UPDATE calibration_targets t SET held_out = false
WHERE t.name LIKE '%\\:incoming' OR EXISTS (
    SELECT 1 FROM calibration_runs r JOIN label_sets ls ON ls.id = r.label_set_id
    WHERE r.target = t.name AND ls.name = t.label_set_name AND r.params ? 'inputs');
ALTER TABLE calibration_targets ENABLE TRIGGER calibration_targets_append_only;

INSERT INTO calibration_targets (name, label_set_name, held_out)
SELECT DISTINCT r.target, ls.name, false
FROM calibration_runs r JOIN label_sets ls ON ls.id = r.label_set_id
WHERE r.status = 'complete' AND r.mode <> 'served' AND r.params ? 'inputs'
ON CONFLICT DO NOTHING;
INSERT INTO target_claims (target, claim_id)
SELECT DISTINCT r.target, cr.claim_id
FROM calibration_runs r JOIN calibrated_results cr ON cr.run_id = r.id
WHERE r.status = 'complete' AND r.mode <> 'served' AND r.params ? 'inputs'
ON CONFLICT DO NOTHING;

INSERT INTO label_set_versions (name, label_set_id, reason)
SELECT DISTINCT ON (ls.name) ls.name, ls.id, 'initial'
FROM label_sets ls
WHERE NOT EXISTS (SELECT 1 FROM label_set_versions v WHERE v.name = ls.name)
ORDER BY ls.name, ls.id DESC;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE calibration_targets DROP COLUMN held_out")
