"""One spelling, British (neighbour, labelled, unlabelled), in the schema and the package's names.

The American spellings are written here with a character class (``neighbo[r]``, ``label[e]d``)
so that no text of this file is itself spelled that way. Kept as users and stored data know them,
and so outside these checks: the CLI's ``--labeled``/``--unlabeled`` options, OUT.csv's
``neighbors`` column, the keys stored in runs' params (``labeled_sha256``, ...) and the names of
uploaded files' claims (``upload:<sha>:labeled``), all strings, not names.
"""

from __future__ import annotations

import ast
import re

from alembic import command
from alembic.config import Config
from sqlalchemy import text

from checkworthy.config import CODE_ROOT
from checkworthy.testing.sources import source_files

AMERICAN = r"neighbo[r]|label[e]d"
#: other libraries' names, used as they are spelled
THIRD_PARTY = r"NearestNeighbo[r]s|KNeighbo[r]s\w*|n_neighbo[r]s|kneighbo[r]s\w*|radius_neighbo[r]s\w*"
#: the tables and views whose columns migration 0017 renamed
RENAMED = ("calibrated_results", "audit_decisions", "audit_decision_lineage")


def _names(node: ast.AST) -> list[str]:
    """The names a node binds or reads: variables, attributes, parameters, keywords, functions,
    classes, imports."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.arg | ast.keyword):
        return [node.arg] if node.arg else []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.ExceptHandler):
        return [node.name or ""]
    if isinstance(node, ast.Global | ast.Nonlocal):
        return list(node.names)
    return []


def test_the_package_names_things_in_one_spelling():
    american, third_party = re.compile(AMERICAN, re.IGNORECASE), re.compile(THIRD_PARTY)
    found = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found += [f"{path.relative_to(CODE_ROOT)}:{getattr(node, 'lineno', '?')}: {name}"
                      for name in _names(node) if american.search(name) and not third_party.fullmatch(name)]
    assert found == []


def _spelled(conn, pattern: str) -> list[tuple[str, str]]:
    """(table or view, column) of the schema whose column name matches ``pattern``."""
    return conn.execute(text(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND column_name ~* :p ORDER BY 1, 2"), {"p": pattern}).all()


def test_the_schema_spells_neighbour_and_labelled_one_way(engine):
    with engine.connect() as conn:
        assert _spelled(conn, AMERICAN) == []
        views = conn.execute(text("SELECT viewname FROM pg_views WHERE schemaname = current_schema() "
                                  "AND definition ~* :p"), {"p": AMERICAN}).scalars().all()
        assert views == []
        british = {(t, c) for t, c in _spelled(conn, "neighbour")}
    assert {("calibrated_results", "neighbour_ids"), ("audit_decisions", "neighbour_distances"),
            ("audit_decision_lineage", "neighbour_rank"),
            ("audit_decision_lineage", "neighbour_labelled_at")} <= british


def _identity(engine) -> list[tuple]:
    """What a rename must keep of the renamed relations: owner, grants, comment, triggers."""
    with engine.connect() as conn:
        return conn.execute(text(
            """SELECT c.relname, pg_get_userbyid(c.relowner), c.relacl::text,
                      obj_description(c.oid, 'pg_class'),
                      (SELECT array_agg(t.tgname::text ORDER BY t.tgname) FROM pg_trigger t
                       WHERE t.tgrelid = c.oid)
               FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
                 AND c.relname = ANY (:r) ORDER BY 1"""), {"r": list(RENAMED)}).all()


def test_the_renaming_migration_goes_back_and_forth_keeping_owner_grants_and_triggers(engine, owner_url):
    cfg = Config(str(CODE_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(CODE_ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", owner_url.replace("%", "%%"))  # the owner migrates
    before = _identity(engine)
    assert len(before) == len(RENAMED)
    command.downgrade(cfg, "0016")
    try:
        assert _identity(engine) == before
        with engine.connect() as conn:
            assert {t for t, _ in _spelled(conn, "neighbo[r]_")} == set(RENAMED)
            conn.execute(text("SELECT * FROM audit_decision_lineage LIMIT 1")).all()
    finally:
        command.upgrade(cfg, "head")
    assert _identity(engine) == before
    with engine.connect() as conn:
        assert _spelled(conn, AMERICAN) == []
        conn.execute(text("SELECT * FROM audit_decision_lineage LIMIT 1")).all()
