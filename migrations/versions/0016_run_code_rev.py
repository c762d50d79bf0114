"""A calibration run names the code that made it: ``calibration_runs.code_rev`` is never blank.

Every path that inserts a run (the flows, ``calibrate``, ``predict``, a recalibration started by
hand, a served request) records the code revision, which is never blank
(:func:`checkworthy.data.versioning.git_rev`: the git revision, ``$CHECKWORTHY_CODE_REV``, or the
package version marked ``-no-git``). The database now refuses a run without one. Runs are
append-only, so rows stored blank before this check are kept as they are: the constraint is
``NOT VALID`` (binding every row inserted from now on, not those already stored).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE calibration_runs ADD CONSTRAINT calibration_runs_code_rev_given
    CHECK (code_rev IS NOT NULL AND code_rev <> '') NOT VALID;
"""

DOWNGRADE = """
ALTER TABLE calibration_runs DROP CONSTRAINT calibration_runs_code_rev_given;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
