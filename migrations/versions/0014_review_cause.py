"""Why a claim was sent to a person: ``review_queue.cause``.

A run queues a claim for one of two causes: ``rule``, its decide-or-review rule (theta too close
to the threshold for the Learn-then-Test margin chosen on L), or ``drift``: the claim lies beyond
the labelled set's radius in a batch whose drift figure alerts (``params->'drift'``), or belongs
to a batch more than half beyond it (of another kind); L's promise does not reach it, so it is
never decided automatically, whatever its theta. The entry's ``reason`` says which in words.
Entries queued before this column are the rule's.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE review_queue ADD COLUMN cause text NOT NULL DEFAULT 'rule'
    CONSTRAINT review_queue_cause_check CHECK (cause IN ('rule', 'drift'));
COMMENT ON COLUMN review_queue.cause IS
    'rule: theta within the run''s decide-or-review margin; drift: beyond the labelled set''s radius '
    'in a batch whose drift figure alerts (params->''drift''), or in a batch mostly beyond it; never '
    'decided automatically.';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("ALTER TABLE review_queue DROP COLUMN cause;")
