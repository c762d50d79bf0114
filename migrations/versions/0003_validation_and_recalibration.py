"""Validation results, label-change events and incremental recalibration (issue-3 work).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
