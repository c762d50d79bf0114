"""A run whose process died is closed: ``calibration_runs.status`` 'abandoned'.

A run is inserted 'running' by a process that holds its run key's advisory lock until the run
is complete or failed. Killed (or cut off from the server, or the server killed), that process
can say nothing more, so the run stayed 'running' for ever, with no finish time and no results;
the audit view only showed it as 'interrupted'. Now the next calibration to start (and the
scheduled watch flow) takes the lock of every running run's key it can: a key nobody holds
has no live process, and its running runs move to 'abandoned', with ``finished_at`` and
``params->'abandoned'`` (``reason``, ``noticed_by``). Like 'failed', an abandoned run is
finished: never changed again, never complete, so no view, report or server takes it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE calibration_runs DROP CONSTRAINT calibration_runs_status_check;
ALTER TABLE calibration_runs ADD CONSTRAINT calibration_runs_status_check
    CHECK (status IN ('running', 'complete', 'failed', 'abandoned'));
ALTER TABLE calibration_runs ADD CONSTRAINT calibration_runs_abandoned_says_why
    CHECK (status <> 'abandoned' OR params->'abandoned' ? 'reason');
COMMENT ON VIEW audit_run_history IS
    'One row per calibration run. effective_status: a run left running by a crash whose lock is '
    'no longer held shows as interrupted until the next calibration or the watch flow marks it '
    'abandoned (params->''abandoned'' says why); its rerun is a new row with the same run_key.';
"""

DOWNGRADE = """
ALTER TABLE calibration_runs DROP CONSTRAINT calibration_runs_abandoned_says_why;
ALTER TABLE calibration_runs DROP CONSTRAINT calibration_runs_status_check;
-- abandoned runs may exist and are never changed: the old check binds new rows only
ALTER TABLE calibration_runs ADD CONSTRAINT calibration_runs_status_check
    CHECK (status IN ('running', 'complete', 'failed')) NOT VALID;
COMMENT ON VIEW audit_run_history IS
    'One row per calibration run. effective_status: a run left running by a crash whose lock is '
    'no longer held shows as interrupted; its rerun is a new row with the same run_key.';
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
