"""Audit roles, append-only enforcement and audit views (filled in by the issue-7 work).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
