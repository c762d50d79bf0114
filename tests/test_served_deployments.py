"""A schedule and an event trigger start real runs on a real Prefect server (docs/operations.md,
"A scheduled run actually runs", automated).

A ``prefect server start`` subprocess (SQLite in its own PREFECT_HOME, short service loops) and a
second subprocess serving the project's deployments (``python -m checkworthy.flows.deploy``, the watch interval
shortened) work on a scratch project (``CHECKWORTHY_ROOT``: a git + DVC repository with the raw
CLEF files and its own DVC remote; imported scores; a fresh database on the session's Postgres, so
that the label file and the guidelines baseline of ``watch`` reach no other test's lineages).
After the main job's flow made the first calibrations, a label file dropped into ``data/labels/``
must be applied by a ``watch-changes`` run the *schedule* created, and its event
``checkworthy.labels.updated`` must make the *automation* of ``on-label-change`` create a
``recalibrate`` run that stores incremental calibration runs equal to a full recomputation.
Nothing is mocked: real Prefect, DVC, MiniLM, Postgres, Great Expectations. On failure the flow
runs and the output of both subprocesses are printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from checkworthy.data import versioning
from checkworthy.store import lineages
from checkworthy.testing.scratch_project import (
    first_calibrations,
    free_port,
    fresh_database,
    make_scratch_project,
    md5_of,
    project_env,
    pushed_files,
    write_label_file,
)
from checkworthy.testing.worlds import assert_incremental_equals_full

SEED = 4004  # a lineage of its own: clef2024:calibration:seed=4004
WATCH_INTERVAL = 10  # seconds between scheduled watch-changes runs (each takes about as long)
#: two runs at a time: the triggered recalibrate run need not queue behind late watch runs (the
#: deployments' own concurrency limits still keep each deployment to one run at a time)
SERVE_LIMIT = 2
DEADLINE = 480  # seconds for the label file to be applied and recalibrated (2 busy cores)


class Proc:
    """A subprocess in its own process group, its output in files (shown when a test fails)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], cwd: Path, logs: Path):
        self.name = name
        self.out, self.err = logs / f"{name}.stdout.log", logs / f"{name}.stderr.log"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.popen = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=err,
                                          stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        """SIGTERM to its process group, then SIGKILL; then SIGKILL to any descendant that left the
        group (the runner starts each flow run in a session of its own)."""
        family = descendants(self.popen.pid)
        pgid = self.popen.pid  # start_new_session: the group is ours, led by this process
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.popen.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # whatever of the group outlived its leader
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid, started in family:
            if _start_time(pid) == started:  # still the process we started, not a reused pid
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def tail(self, n: int = 12_000) -> str:
        parts = []
        for path in (self.out, self.err):
            body = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"----- {self.name} {path.name.split('.')[-2]} (last {n} chars) -----\n{body[-n:]}")
        return "\n".join(parts)


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()  # the fields after "pid (comm)"


def _start_time(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields else None  # field 22 of proc(5): start time since boot


def descendants(root: int) -> set[tuple[int, str]]:
    """Every living descendant of ``root`` as (pid, start time), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))):
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if (started := _start_time(child)) is not None:
                out.add((child, started))
                todo.append(child)
    return out


def wait_healthy(api: str, server: Proc, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"prefect server exited with {server.popen.returncode}\n{server.tail()}")
        try:
            if httpx.get(f"{api}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"prefect server not healthy after {timeout} s\n{server.tail()}")


class Api:
    """The few REST calls the test needs (the server's own API, as the UI uses it)."""

    def __init__(self, url: str):
        self.http = httpx.Client(base_url=url, timeout=90)

    def flow_runs(self, flow: str | None = None) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"sort": "EXPECTED_START_TIME_ASC", "limit": 200}
        if flow:
            body["flows"] = {"name": {"any_": [flow]}}
        return self.http.post("/flow_runs/filter", json=body).raise_for_status().json()

    def flow_run(self, run_id: str) -> dict[str, Any]:
        return self.http.get(f"/flow_runs/{run_id}").raise_for_status().json()

    def task_run(self, run_id: str) -> dict[str, Any]:
        return self.http.get(f"/task_runs/{run_id}").raise_for_status().json()

    def has_event(self, event_id: str) -> bool:
        got = self.http.post("/events/filter", json={"filter": {"event": {"prefix": ["checkworthy."]}},
                                                     "limit": 50}).raise_for_status().json()
        return event_id in {e["id"] for e in got.get("events", [])}

    def deployment(self, deployment_id: str) -> dict[str, Any]:
        return self.http.get(f"/deployments/{deployment_id}").raise_for_status().json()

    def summary(self) -> str:
        """Every flow run that started, oldest first: the table docs/operations.md shows."""
        names = {}
        lines = []
        runs = [r for r in self.flow_runs() if r["start_time"]]  # not the runs scheduled ahead
        for r in sorted(runs, key=lambda r: r["start_time"]):
            if r["flow_id"] not in names:
                names[r["flow_id"]] = self.http.get(f"/flows/{r['flow_id']}").json().get("name")
            by = r.get("created_by") or {}
            lines.append(f"{r['start_time'][11:19]} {r['name']:24} "
                         f"{names[r['flow_id']]:20} {r['state_type']:10} created_by {by.get('type')} "
                         f"{by.get('display_value')}")
        return "\n".join(lines)


@pytest.fixture(scope="module")
def served(tmp_path_factory, owner_url):
    """Postgres database, scratch project, Prefect server, first calibrations, served deployments."""
    tmp = tmp_path_factory.mktemp("served")
    logs = tmp / "logs"
    logs.mkdir()
    procs: list[Proc] = []
    with fresh_database(owner_url, f"checkworthy_served_{os.getpid()}") as url:
        engine = create_engine(url)
        try:
            project = make_scratch_project(tmp, url, SEED, raw_data=True, compare=False)
            port = free_port()
            api = f"http://127.0.0.1:{port}/api"
            server_env = project_env(project, url, tmp / "prefect-server", **{
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                "PREFECT_SERVER_UI_ENABLED": "false",
                "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
                "PREFECT_SERVER_SERVICES_LATE_RUNS_LOOP_SECONDS": "5",
                "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "true",
                "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": "1",
                # SQLite on two busy cores: a writer waits for the lock rather than failing
                "PREFECT_SERVER_DATABASE_TIMEOUT": "60",
            })
            server = Proc("server", [str(Path(sys.executable).parent / "prefect"), "server", "start",
                                     "--host", "127.0.0.1", "--port", str(port)],
                          server_env, tmp, logs)
            procs.append(server)
            t0 = time.monotonic()
            wait_healthy(api, server)
            t1 = time.monotonic()
            env = project_env(project, url, tmp / "prefect-client", PREFECT_API_URL=api)
            first_calibrations(project, env)
            print(f"server healthy in {t1 - t0:.0f} s, first calibrations in {time.monotonic() - t1:.0f} s")
            serve_env = env | {
                "CHECKWORTHY_WATCH_INTERVAL": str(WATCH_INTERVAL),
                "CHECKWORTHY_NEW_CLAIMS_INTERVAL": str(7 * 86400),
                "CHECKWORTHY_PIPELINE_CRON": "0 2 1 1 *",  # not today: the test is about watch
                "CHECKWORTHY_SERVE_LIMIT": str(SERVE_LIMIT),
                "PREFECT_RUNNER_POLL_FREQUENCY": "2",
            }
            serve = Proc("serve", [sys.executable, "-m", "checkworthy.flows.deploy"], serve_env,
                         project["repo"], logs)
            procs.append(serve)
        except BaseException:
            print("\n".join(p.tail() for p in procs))  # shown with the setup error
            for p in reversed(procs):
                p.stop()
            engine.dispose()
            raise
        client = Api(api)
        try:
            yield {"project": project, "api": client, "engine": engine, "procs": procs}
        finally:
            for p in reversed(procs):
                p.stop()
            client.http.close()
            engine.dispose()


def diagnostics(served: dict[str, Any]) -> str:
    try:
        runs = served["api"].summary()
    except Exception as exc:  # noqa: BLE001 - the server may be the thing that failed
        runs = f"(flow runs unavailable: {exc!r})"
    return f"\n===== flow runs =====\n{runs}\n" + "\n".join(p.tail() for p in served["procs"])


def _completed(runs: list[dict[str, Any]], by: str) -> list[dict[str, Any]]:
    return [r for r in runs if r["state_type"] == "COMPLETED" and (r.get("created_by") or {}).get("type") == by]


def wait_for(what: str, check, served: dict[str, Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in served["procs"]:
            assert p.alive(), f"{p.name} exited with {p.popen.returncode}"
        try:
            got = check()
        except httpx.TimeoutException:  # the server stalls while SQLite is busy; ask again
            got = None
        if got:
            return got
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_schedule_and_event_trigger_start_runs_on_a_real_server(served):
    try:
        _scenario(served)
    except BaseException:
        print(diagnostics(served))
        raise


def _scenario(served: dict[str, Any]) -> None:
    api, engine, project = served["api"], served["engine"], served["project"]
    repo, lineage = project["repo"], project["lineage"]
    with engine.connect() as conn:
        first = {r.k: r.id for r in conn.execute(text(
            "SELECT id, k FROM calibration_runs WHERE mode = 'full' AND status = 'complete'"))}
    assert sorted(first) == [3, 5]

    # the schedule alone starts watch-changes runs; the first one records the guidelines baseline (a
    # data version of its own, no event). The file is dropped after it, so no DVC write of another
    # run overlaps the triggered recalibration.
    wait_for("a scheduled watch-changes run to complete",
             lambda: _completed(api.flow_runs("watch-changes"), "SCHEDULE"), served, 240)
    hash0 = versioning.data_hash(repo)
    t_drop = time.time()
    drop = write_label_file(engine, lineage, repo / "data" / "labels" / "update-1.csv")

    def applied():
        with engine.connect() as conn:
            return conn.execute(text("SELECT * FROM label_updates WHERE path LIKE :p"),
                                {"p": "%/data/labels/update-1.csv"}).mappings().first()

    def recalibrated():
        runs = [r for r in _completed(api.flow_runs("recalibrate"), "AUTOMATION")]
        if not runs:
            return None
        with engine.connect() as conn:
            n = conn.execute(text("SELECT count(*) FROM calibration_runs WHERE flow_run_id = ANY(:f)"),
                             {"f": [r["id"] for r in runs]}).scalar()
        return runs if n else None

    upd = wait_for("the label file to be applied", applied, served, DEADLINE)
    assert upd["status"] == "applied" and upd["n_appended"] == len(drop["new"]) + len(drop["flips"])
    (recal,) = wait_for("a recalibrate run created by the automation", recalibrated, served, DEADLINE)
    print(f"label file applied and recalibrated {time.time() - t_drop:.0f} s after it was dropped")

    # --- the watch run that applied the file was created by the schedule
    with engine.connect() as conn:
        log = lineages.version_log(conn, lineage)
        head1 = log[-1]["label_set_id"]
        assert [v["label_set_id"] for v in log][-2:] == [drop["head"], head1] and head1 != drop["head"]
        assert log[-1]["update_id"] == upd["id"]
        dv = conn.execute(text("SELECT * FROM data_versions WHERE id = :i"),
                          {"i": upd["data_version_id"]}).mappings().one()
    # a new DVC data version of the scratch project holding the file, recorded in Postgres and pushed
    # to the project's remote
    assert dv["dvc_hash"] == versioning.data_hash(repo) != hash0 and log[-1]["dvc_hash"] == dv["dvc_hash"]
    placed = repo / "data" / "labels" / "update-1.csv"
    assert pushed_files(project, dv["dvc_hash"])["labels/update-1.csv"] == md5_of(placed)
    versioning.dvc_in(repo, "status", "-c", "-q")
    label_run = api.flow_run(log[-1]["flow_run_id"])  # the label-update run that wrote the new head
    assert label_run["state_type"] == "COMPLETED" and label_run["parent_task_run_id"]
    watch_run = api.flow_run(api.task_run(label_run["parent_task_run_id"])["flow_run_id"])
    assert watch_run["state_type"] == "COMPLETED"
    assert watch_run["created_by"]["type"] == "SCHEDULE"
    assert api.deployment(watch_run["deployment_id"])["name"] == "watch"

    # --- the recalibrate run was created by the automation of on-label-change
    assert (recal["created_by"]["type"], recal["created_by"]["display_value"]) == ("AUTOMATION", "labels updated")
    assert api.deployment(recal["deployment_id"])["name"] == "on-label-change"
    assert recal["parameters"].get("reason") == "labels"
    assert recal["expected_start_time"] >= watch_run["expected_start_time"]
    with engine.connect() as conn:
        change = conn.execute(text("SELECT * FROM change_events WHERE kind = 'labels' AND key = :k"),
                              {"k": str(upd["id"])}).mappings().one()
    assert wait_for("the event on the server", lambda: api.has_event(change["prefect_event_id"]), served, 60)
    assert api.flow_runs("rescore") == []  # the guidelines baseline the first watch recorded triggers nothing
    with engine.connect() as conn:
        runs = conn.execute(text("SELECT * FROM calibration_runs WHERE flow_run_id = :f ORDER BY k"),
                            {"f": recal["id"]}).mappings().all()
        flipped = set(conn.execute(
            text("SELECT id FROM claims WHERE dataset = 'clef2024' AND source_id = ANY(:s)"),
            {"s": drop["flips"]}).scalars())
        targets = lineages.target_claim_ids(conn, lineage)["clef2024:test"]
    assert [r["k"] for r in runs] == [3, 5]
    for run in runs:
        assert_incremental_equals_full(engine, run["id"], first[run["k"]], head1, targets, flipped)
    print(api.summary())  # the table of docs/operations.md (shown with pytest -rP)
