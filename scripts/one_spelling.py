"""One spelling for the project's words: ``neighbour``, ``labelled``, ``unlabelled`` (British).

Rewrites every word spelled ``neighbor`` or ``labeled`` (any case, inside identifiers too:
``neighbor_ids`` -> ``neighbour_ids``, ``LabeledSet`` -> ``LabelledSet``) in the code, tests,
benchmarks, docs and migrations written after the one that renames the schema's columns
(``migrations/versions/*_one_spelling.py``), except the strings users and stored data depend on,
listed below (``KEPT``). The CLI's ``--labeled``/``--unlabeled`` options get ``dest=`` the
British name (and their old metavar, so ``--help`` reads as before).

Idempotent, and independent of line numbers: run it on any tree, as often as needed::

    .venv/bin/python scripts/one_spelling.py [root]

It prints what it changed, per file. A one-off tool: delete it once applied.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path

#: kept as they are: name -> (why, pattern of the kept text)
KEPT: dict[str, tuple[str, str]] = {
    # the CLI's options (argparse dest gives the Python attribute its British name)
    "flags": ("CLI options --labeled/--unlabeled: users' scripts and docs type them",
              r"--(?:un)?labeled\b"),
    "metavars": ("the options' metavar, so --help reads as before",
                 r"""metavar=(["'])(?:UN)?LABELED\1"""),
    # files users read or write
    "csv_columns": ("OUT.csv's column `neighbors` (calibrate/predict output header)",
                    r"""(?<=["'`,])neighbors(?=["'`,])"""),
    # JSON keys stored in runs' params and predictions' params (part of params_hash and run keys)
    "params_keys": ("stored params keys: old runs stay readable, params hashes unchanged",
                    r"\b(?:labeled_sha256|unlabeled_sha256|n_unlabeled_in_labeled)\b"),
    # values stored in rows: an uploaded file's claims.split, its dataset/label-set/lineage and
    # target names (upload:<sha>:labeled / :unlabeled), on which lineages and run keys rest
    "stored_values": ("stored split and lineage/target names of uploaded files",
                      r"""(?<=:)(?:un)?labeled\b|(?<=["'])(?:un)?labeled(?=["'])"""),
    # docs/audit.md's note of the columns' names before migration 0017
    "old_columns": ("the audit docs' note of the old column names", r"`neighbor_\*`"),
    # other libraries' names, if code ever uses them
    "third_party": ("other libraries' names (scikit-learn)",
                    r"\b(?:NearestNeighbors|KNeighbors\w*|n_neighbors|kneighbors\w*|"
                    r"radius_neighbors\w*)\b"),
}
#: the HTTP API's JSON field names are already British (``neighbours``): nothing kept for them

WORD = re.compile(r"\w*(?:neighbor|labeled)\w*", re.IGNORECASE)
STEM = re.compile(r"neighbor|labeled", re.IGNORECASE)
PROTECTED = re.compile("|".join(f"(?:{pattern})" for _, pattern in KEPT.values()))
FLAG_OPTIONS = {"--labeled": "labelled", "--unlabeled": "unlabelled"}
LINE_LENGTH = 110  # pyproject's ruff line-length
RENAMING_MIGRATION = "*_one_spelling.py"


def _british(stem: str) -> str:
    """``stem`` (neighbor or labeled, any case) in British spelling, its case kept."""
    new = {"neighbor": "neighbour", "labeled": "labelled"}[stem.lower()]
    if stem.isupper():
        return new.upper()
    return new.capitalize() if stem[0].isupper() else new


def respell(text: str, changes: Counter[str]) -> str:
    """``text`` with each American word outside the kept spans respelled; counts in ``changes``."""
    kept = [m.span() for m in PROTECTED.finditer(text)]

    def one(m: re.Match[str]) -> str:
        if any(a < m.end() and m.start() < b for a, b in kept):
            return m.group(0)
        new = STEM.sub(lambda s: _british(s.group(0)), m.group(0))
        changes[f"{m.group(0)} -> {new}"] += 1
        return new

    return WORD.sub(one, text)


def _flag_calls(tree: ast.AST) -> list[tuple[ast.Call, ast.Constant]]:
    """``add_argument("--labeled"|"--unlabeled", ...)`` calls without ``dest=``, last first."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument" and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in FLAG_OPTIONS
                and not any(k.arg == "dest" for k in node.keywords)):
            found.append((node, node.args[0]))
    return sorted(found, key=lambda f: (f[1].lineno, f[1].col_offset), reverse=True)


def add_dest(text: str, changes: Counter[str]) -> str:
    """Give each ``--labeled``/``--unlabeled`` option ``dest=`` its British name (and its old
    metavar), right after the flag; a line grown past the line length is wrapped after it."""
    try:
        calls = _flag_calls(ast.parse(text))
    except SyntaxError:
        return text
    lines = text.split("\n")
    for call, flag in calls:
        row = flag.end_lineno - 1
        line = lines[row].encode()
        pos = flag.end_col_offset
        dest = FLAG_OPTIONS[flag.value]
        added = f', dest="{dest}", metavar="{flag.value[2:].upper()}"'.encode()
        head, rest = line[:pos], line[pos:]
        if len(line) + len(added) <= LINE_LENGTH or not rest.startswith(b", "):
            lines[row] = (head + added + rest).decode()
        else:  # wrap: the rest goes under the first argument, its continuation lines with it
            indent = flag.col_offset
            shift = pos + 2 - indent
            lines[row] = (head + added + b",").decode()
            moved = [" " * indent + rest[2:].decode()]
            for r in range(row + 1, call.end_lineno):
                cont = lines[r]
                spaces = len(cont) - len(cont.lstrip(" "))
                moved.append(cont[min(shift, max(spaces - indent, 0)):])
            lines[row + 1:call.end_lineno] = moved
        changes[f"add_argument({flag.value!r}) dest={dest!r}"] += 1
    return "\n".join(lines)


def targets(root: Path) -> list[Path]:
    """The files rewritten: src, tests, bench and scripts (.py), docs/*.md, README.md,
    migrations/env.py and the migrations after the renaming one (older ones are history)."""
    this = Path(__file__).resolve()
    files = [p for d in ("src", "tests", "bench", "scripts") for p in sorted((root / d).rglob("*.py"))]
    files += sorted((root / "docs").glob("*.md")) + [root / "README.md", root / "migrations" / "env.py"]
    versions = root / "migrations" / "versions"
    renaming = sorted(versions.glob(RENAMING_MIGRATION))
    if renaming:
        last = renaming[0].name.split("_")[0]
        files += [p for p in sorted(versions.glob("*.py")) if p.name.split("_")[0] > last]
    return [p for p in files if p.is_file() and p.resolve() != this]


def _grown_too_long(path: Path, old: str, new: str) -> list[str]:
    """Lines of ``new`` longer than ruff allows that ``old`` did not have (tests and migrations
    may be longer), as ``path:line``."""
    if path.suffix != ".py" or path.parts[0] in ("tests", "migrations"):
        return []
    before = set(old.split("\n"))
    return [f"{path}:{i}" for i, line in enumerate(new.split("\n"), 1)
            if len(line) > LINE_LENGTH and line not in before]


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else ".").resolve()
    total: Counter[str] = Counter()
    for path in targets(root):
        old = path.read_text(encoding="utf-8")
        changes: Counter[str] = Counter()
        new = respell(add_dest(old, changes) if path.suffix == ".py" else old, changes)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"{path.relative_to(root)}: {sum(changes.values())} changes")
            for change, n in sorted(changes.items()):
                print(f"    {n:4d}  {change}")
            for line in _grown_too_long(path.relative_to(root), old, new):
                print(f"    WRAP BY HAND: {line}")
        total += changes
    print(f"{sum(total.values())} changes in all; kept: " + "; ".join(why for why, _ in KEPT.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
