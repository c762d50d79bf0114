"""Importing the package changes no process state.

Every module is imported in a fresh interpreter, after the third-party libraries it uses (their
own import-time habits are not ours to test); the environment, transformers' attention and mask
registries and matplotlib's backend must be as they were. Offline settings and the embedded
scorer's attention kernel are applied when a model loads, never on import.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

from checkworthy.config import OFFLINE_ENV
from checkworthy.testing.sources import modules, source_files

SCRIPT = """
import importlib, json, os, sys
import matplotlib
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

def state():
    return {"environ": dict(os.environ), "attention": sorted(AttentionInterface._global_mapping),
            "masks": sorted(ALL_MASK_ATTENTION_FUNCTIONS._global_mapping),
            "backend": str(matplotlib.rcParams._get_backend_or_none())}

modules, libraries = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in libraries:
    importlib.import_module(name)
before = state()
for name in modules:
    importlib.import_module(name)
print(json.dumps({"before": before, "after": state()}))
"""


def libraries() -> list[str]:
    """The third-party modules the package imports at module level (imported before the snapshot)."""
    found: set[str] = set()
    for path in source_files():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module)
    return sorted(n for n in found if n.split(".")[0] not in ("checkworthy", "__future__"))


def test_importing_every_module_changes_no_process_state():
    """In an environment without the offline settings (this session's conftest made them)."""
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_ENV}
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(sorted(modules())), json.dumps(libraries())],
                         capture_output=True, text=True, check=True, timeout=600, env=env)
    states = json.loads(out.stdout.strip().splitlines()[-1])
    before, after = states["before"], states["after"]
    changed = {k: (before["environ"].get(k), after["environ"].get(k))
               for k in before["environ"].keys() | after["environ"].keys()
               if before["environ"].get(k) != after["environ"].get(k)}
    assert not changed, f"importing the package changed the environment: {changed}"
    assert after["attention"] == before["attention"] and after["masks"] == before["masks"]
    assert after["backend"] == before["backend"]
