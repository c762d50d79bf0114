#!/usr/bin/env bash
# Set up (or check) the project's environment in .venv/: torch's local CPU build first, so
# nothing later pulls the CUDA wheels; then the pinned requirements; then the package.
# Re-running is cheap: a stamp of the requirement files skips pip when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.checkworthy-requirements
want=$(cat requirements/base.txt requirements/constraints.txt requirements/dev.txt pyproject.toml \
  | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q torch==2.13.0
  .venv/bin/python -m pip install -q -r requirements/dev.txt
  .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi

# Label Studio (the data team's labelling tool; tests/test_label_studio_backend.py runs a real one)
# in a virtual environment of its own: its pins would downgrade ours (numpy, openai, pyarrow, pytz,
# redis, python-json-logger). About 2 min to install (70 s from pip's cache); skipped when its pin has
# not changed.
ls_stamp=.venv-label-studio/.checkworthy-requirements
ls_want=$(sha256sum requirements/label-studio.txt | cut -d' ' -f1)
if [ "$(cat "$ls_stamp" 2>/dev/null)" != "$ls_want" ]; then
  [ -x .venv-label-studio/bin/python ] || "$PY" -m venv .venv-label-studio
  .venv-label-studio/bin/python -m pip install -q --upgrade pip
  .venv-label-studio/bin/python -m pip install -q -r requirements/label-studio.txt
  echo "$ls_want" > "$ls_stamp"
fi

# Debian's Chromium renders the HTML report in the tests (headless); Debian's package, not a
# browser download. Best effort: without it that one test is skipped, and says so.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium >/dev/null; } || echo "setup: could not install Debian's chromium (the HTML test will skip)" >&2
fi

# tools stay offline and quiet
export DVC_NO_ANALYTICS=1 PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1
.venv/bin/dvc config --local core.analytics false >/dev/null 2>&1 || true
