"""The package's source files by dotted module name: ``src/checkworthy/`` and the top-level
``flows/`` (installed as ``checkworthy.flows``), for the tests that read the code itself."""

from __future__ import annotations

from pathlib import Path

from checkworthy.config import CODE_ROOT

PACKAGE = CODE_ROOT / "src" / "checkworthy"
FLOWS = CODE_ROOT / "flows"


def module_name(path: Path) -> str:
    """``src/checkworthy/store/knn.py`` -> ``checkworthy.store.knn``; ``flows/tasks.py`` ->
    ``checkworthy.flows.tasks``; a package's ``__init__.py`` -> the package."""
    if path.is_relative_to(FLOWS):
        parts = ("checkworthy", "flows", *path.relative_to(FLOWS).with_suffix("").parts)
    else:
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> list[Path]:
    """Every ``.py`` file of the package, the flows included."""
    return sorted([*PACKAGE.rglob("*.py"), *FLOWS.rglob("*.py")])


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name, with its file."""
    return {module_name(p): p for p in source_files()}
