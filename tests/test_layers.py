"""The package's layers import only downwards, and its modules form no import cycle.

The import graph is read with ``ast`` from the source (every import, also those inside
functions), so a cycle hidden in a function body counts as much as one at the top.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from checkworthy.config import CODE_ROOT as ROOT
from checkworthy.testing.sources import FLOWS, PACKAGE, module_name, source_files

#: bottom to top; a module may import its own layer and the layers below it, never above. ``testing``
#: (fake model servers, datasets and scratch projects for the tests and benchmarks) sits on top: it
#: may use any layer, and no module of the package may depend on it
LAYERS = ["foundation", "method", "data", "scorers", "store", "runs", "report", "flows", "serve", "cli",
          "testing"]
#: modules at the package root: settings and exceptions every layer may use
FOUNDATION = {"checkworthy", "checkworthy.config", "checkworthy.errors", "checkworthy.settings"}
#: where an import inside a function may name a checkworthy module (start-up time of the command line)
LAZY_ALLOWED = {"cli"}


def layer_of(module: str) -> str:
    if module in FOUNDATION:
        return "foundation"
    layer = module.split(".")[1]
    if layer not in LAYERS:
        raise AssertionError(f"{module} is in no layer; put it in one of {LAYERS[1:]}")
    return layer


def resolve(module: str, node: ast.ImportFrom | ast.Import, is_package: bool) -> list[str]:
    """The checkworthy modules an import statement names (a name imported from a package counts
    as its submodule when one exists)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "checkworthy"]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    if base.split(".")[0] != "checkworthy":
        return []
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in MODULES else base)
    return out


def graph() -> dict[str, list[tuple[str, int, bool]]]:
    """module -> [(imported module, line, inside a function)]"""
    edges: dict[str, list[tuple[str, int, bool]]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nested = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                  for n in ast.walk(f) if n is not f}
        edges[name] = [
            (target, node.lineno, id(node) in nested)
            for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
            for target in resolve(name, node, path.name == "__init__.py") if target != name
        ]
    return edges


SOURCES = source_files()
MODULES = {module_name(p): p for p in SOURCES}
EDGES = graph()


def test_every_module_sits_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_imports_only_go_downwards():
    upward = [
        f"{MODULES[src].relative_to(ROOT)}:{line}: {src} ({layer_of(src)}) imports "
        f"{dst} ({layer_of(dst)})"
        for src, targets in EDGES.items() for dst, line, _ in targets
        if LAYERS.index(layer_of(dst)) > LAYERS.index(layer_of(src))
    ]
    assert not upward, "imports from a lower layer into a higher one:\n" + "\n".join(upward)


def test_serve_imports_no_flow():
    """The API and the Label Studio backend announce through a port (``serve/ports.py``) that the
    command line fills with the flows' implementation, so serving needs no Prefect to import."""
    found = [f"{MODULES[src].relative_to(ROOT)}:{line}: {dst}" for src, targets in EDGES.items()
             if layer_of(src) == "serve" for dst, line, _ in targets if layer_of(dst) == "flows"]
    assert not found, "serve imports a flow module:\n" + "\n".join(found)


def test_the_store_runs_no_model():
    """The store stores and reads; model inference (embedding texts, scoring them) happens above it,
    so the store imports nothing from a scorer but its value types (``scorers/base.py``)."""
    found = [f"{MODULES[src].relative_to(ROOT)}:{line}: {dst}" for src, targets in EDGES.items()
             if layer_of(src) == "store" for dst, line, _ in targets
             if layer_of(dst) == "scorers" and dst != "checkworthy.scorers.base"]
    assert not found, "the store imports a model:\n" + "\n".join(found)


def test_no_import_cycles():
    """Tarjan's strongly connected components over the module graph: every component is one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _, _ in EDGES.get(v, []):
            if w not in MODULES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in MODULES:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def deferred_on_purpose(path: Path, line: int) -> bool:
    """An import statement whose first line says ``# start-up: <heavy library>``: it defers a
    module that loads torch, transformers or a model client until a spec names it."""
    return "# start-up:" in path.read_text(encoding="utf-8").splitlines()[line - 1]


def test_package_imports_sit_at_the_top():
    """A checkworthy import inside a function hides a dependency (and often a cycle); only the
    command line defers them, so that ``checkworthy --help`` starts without Prefect or torch, and
    the scorer registry, marked, so that a backend's heavy library loads only when it is used."""
    hidden = [f"{MODULES[src].relative_to(ROOT)}:{line}: {dst}"
              for src, targets in EDGES.items() for dst, line, lazy in targets
              if lazy and layer_of(src) not in LAZY_ALLOWED and not deferred_on_purpose(MODULES[src], line)]
    assert not hidden, "checkworthy imports inside functions:\n" + "\n".join(hidden)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sys_path_edits(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
            raise AssertionError(f"{path.relative_to(ROOT)}:{node.lineno} uses sys.path")


def test_dvc_stages_name_code_that_exists():
    """Every stage of dvc.yaml runs a module of the package and depends on paths that exist, so a
    moved module cannot silently drop out of what ``dvc repro`` watches."""
    import yaml

    root = ROOT
    stages = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    for name, stage in stages.items():
        module = stage["cmd"].split("python -m ", 1)[1].split()[0]
        assert module in MODULES, f"dvc.yaml {name}: no module {module}"
        for dep in stage["deps"]:
            assert dep.startswith("metrics/") or (root / dep).exists(), f"dvc.yaml {name}: no {dep}"


def test_readme_layout_matches_the_tree():
    """The README's layout table has a row per layer naming each of its modules, and no other."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `src/checkworthy/([a-z_]*)/?` \|(.*)\|$", table, re.M))
    rows["flows"] = re.search(r"^\| `flows/` [^|]*\|(.*)\|$", table, re.M).group(1)
    for layer in LAYERS:
        folder = "" if layer == "foundation" else layer
        assert folder in rows, f"README layout: no row for src/checkworthy/{folder}"
        named = set(re.findall(r"`([a-z_]+)\.py`", rows[folder]))
        where = FLOWS if layer == "flows" else PACKAGE / folder
        present = {p.stem for p in where.glob("*.py") if p.stem != "__init__"}
        assert named == present, f"README layout, {folder or 'package root'}/: missing " \
            f"{sorted(present - named)}, not in the tree {sorted(named - present)}"


def test_the_flows_are_top_level_and_every_package_is_installed():
    """The flows live in the top-level flows/ (the design card's tree), not under src/; pyproject
    names every package, so a new subpackage cannot be left out of the wheel."""
    import tomllib

    assert not (PACKAGE / "flows").exists() and (FLOWS / "__init__.py").is_file()
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert tool["package-dir"] == {"": "src", "checkworthy.flows": "flows"}
    packages = {module_name(p.parent / "__init__.py") for p in SOURCES if p.name == "__init__.py"}
    assert set(tool["packages"]) == packages


def test_the_readme_leads_with_what_a_team_does():
    """The README tells one story: set-up, then what a team does (predict, serve and label, adapt),
    then the paper's reproduction and the reference sections."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    heads = re.findall(r"^## (.+)$", readme, re.M)
    assert heads[:5] == ["Two commands", "Predict on your own claims (the recommended path)",
                         "Serve, label, and let calibration follow",
                         "A new kind of claim: from the first batch to a promoted model",
                         "The paper's reproduction: the main job"]
    first_screen = readme.split("\n## ", 1)[0]
    for step in ("predict", "serve", "label", "adapt"):
        assert f"**{step}**" in first_screen, step


def test_no_function_takes_more_than_seven_parameters():
    """Seven parameters at most (self and cls aside): what travels together is one object (a run's
    spec, a training's options). Only the store's row writers (``insert_*``, ``store_*``) take one
    argument a column."""
    many = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            a = node.args
            n = len([x for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")])
            writer = layer_of(name) == "store" and node.name.startswith(("insert_", "store_"))
            if n > 7 and not writer:
                many.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n}")
    assert not many, "functions over 7 parameters:\n" + "\n".join(many)


@pytest.mark.parametrize("folder", ["tests", "bench"])
def test_tests_and_benchmarks_share_helpers_through_the_package(folder: str):
    """Neither a test nor a benchmark imports a test module: what they share is in
    ``checkworthy.testing``, so ``python bench/<name>.py`` runs from a plain checkout."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] == "tests"]
    assert not found, "imports of test modules:\n" + "\n".join(found)
