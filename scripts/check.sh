#!/usr/bin/env bash
# The checks CI runs (.ci/run, the README's test command): ruff, then mypy (configured in
# pyproject.toml: strict for method/ and store/), then pytest with any arguments given. A finding
# stops it before the tests; pytest's own output and exit code close the run.
set -euo pipefail
cd "$(dirname "$0")/.."

.venv/bin/ruff check src flows tests migrations bench scripts
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
