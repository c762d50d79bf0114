"""Each text's language, identified once by the detector that ships its model.

``text_languages`` holds one row per text (``texts`` is append-only, and a text's language is a
property of its text, so it lives beside it rather than in a column filled afterwards): the ISO
639-1 code or ``und`` (no detectable language), the detector's confidence (0 for ``und``), why a
text is ``und``, and the detector that said so (``py3langid <version>``). It is written the first
time a text is calibrated, scored over HTTP or stored from a file (``checkworthy.store.languages.
ensure_languages``); texts stored before this revision get theirs the first time a run uses them.
Append-only like the other data tables: a detector's answer for a text is never rewritten.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE text_languages (
    text_hash   char(64) PRIMARY KEY REFERENCES texts,
    language    text NOT NULL CHECK (language = 'und' OR language ~ '^[a-z]{2}$'),
    confidence  real NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
    reason      text NOT NULL DEFAULT '' CHECK ((language = 'und') = (reason <> '')),
    detector    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE text_languages IS
    'Each text''s language once: ISO 639-1 code or und (no detectable language, with the reason), '
    'the detector''s confidence and the detector.';
CREATE TRIGGER text_languages_append_only BEFORE UPDATE OR DELETE ON text_languages
    FOR EACH ROW EXECUTE FUNCTION checkworthy_append_only();
CREATE TRIGGER text_languages_no_truncate BEFORE TRUNCATE ON text_languages
    FOR EACH STATEMENT EXECUTE FUNCTION checkworthy_append_only();
ALTER TABLE text_languages OWNER TO checkworthy_owner;
GRANT SELECT ON text_languages TO checkworthy_auditor, checkworthy_pipeline;
GRANT INSERT ON text_languages TO checkworthy_pipeline;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("DROP TABLE text_languages;")
