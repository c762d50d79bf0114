"""Why a label file was refused: ``label_updates.reason``.

A label file that names an unknown claim, a stored claim with another text, or a label outside
{0, 1} on a claim of no lineage is refused before it is versioned; the file is moved to
``data/labels/rejected/`` and its update row (status 'rejected') says why, so the watch
deployment never picks it up again and later files still apply. Rows of earlier updates keep
NULL (their reasons are their validation results).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE label_updates ADD COLUMN reason text")
    op.execute("COMMENT ON COLUMN label_updates.reason IS "
               "'Why the file was refused before validation (NULL: applied, or judged by the suite)'")


def downgrade() -> None:
    op.execute("ALTER TABLE label_updates DROP COLUMN reason")
