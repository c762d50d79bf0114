"""Label Studio's ML backend protocol over a lineage's run in force (``checkworthy label-studio-backend``).

Label Studio calls ``POST /setup`` when the backend is connected (and before each prediction),
``POST /predict`` for tasks without a prediction of the current model version, and ``POST
/webhook`` with every project event (the webhook it creates for the backend). Here:

- ``/predict`` calibrates each task's stored claim with the run in force (:class:`CurrentRun`, as
  the API does) and answers the decision as a pre-annotation with ``score`` = 1 - review priority,
  so Label Studio's "prediction score, ascending" order (and its uncertainty sampling) puts the
  most uncertain claims first; ``model_version`` names the run (a new run in force is a new
  version: Label Studio asks again for tasks without a prediction of it).
- ``/webhook``: an ``ANNOTATION_CREATED`` or ``ANNOTATION_UPDATED`` becomes a label file that goes
  through the label-update flow, exactly as ``checkworthy review import`` (DVC, the Great
  Expectations gate, append-only labels, queue entries closed, recalibration, the event
  ``checkworthy.labels.updated`` that the adapt deployment reacts to). It is checked before
  anything is written and answered at once (Label Studio waits a second for a webhook); the
  update runs after the answer, one at a time. An annotation of another project, of a task
  whose claim the lineage neither holds nor calibrates, or with a bad choice is refused with one
  JSON line; the same annotation again is the same label file, so the same update: nothing new.
- ``/webhook`` needs the shared secret (:data:`WEBHOOK_SECRET_ENV`) in the header
  :data:`WEBHOOK_SECRET_HEADER`, which the project's webhook in Label Studio sends (a webhook's
  custom headers); it is checked before the body is read, so a forged call is refused (401) and
  nothing is written. Every body is read within ``max_body`` bytes (Content-Length or chunked),
  and strings the store cannot hold (NUL, lone surrogates) are refused (422).

The official ``label-studio-ml`` package is not used: its PyPI release (1.0.9, 2023) pins Flask
1.1.2, Jinja2 3.0.3 and Werkzeug 2.0.2, which clash with our stack; the routes are few.
"""

import hmac
import logging
import tempfile
import threading
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import BackgroundTasks, Body, FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy import Engine
from starlette.datastructures import Headers
from starlette.types import Scope

from checkworthy.config import PARAMS_FILE, ROOT
from checkworthy.data import label_studio
from checkworthy.data.datasets import sha256_file
from checkworthy.data.label_files import read_label_csv
from checkworthy.errors import DataError
from checkworthy.flows.pipeline import label_update_flow
from checkworthy.method.selective import review_priority
from checkworthy.runs.label_updates import check_label_file
from checkworthy.runs.review_queue import write_label_file
from checkworthy.runs.served_run import ServedRun
from checkworthy.serve.app import ApiError, Check, Guard, ascii_id, check_strings, json_errors
from checkworthy.serve.served import CurrentRun, Selection
from checkworthy.store.label_updates import find_update, stored_claims
from checkworthy.store.lineages import claims_of_lineage

log = logging.getLogger("checkworthy.label_studio")
ANNOTATION_ACTIONS = ("ANNOTATION_CREATED", "ANNOTATION_UPDATED")
WEBHOOK_SECRET_ENV = "CHECKWORTHY_LS_WEBHOOK_SECRET"
WEBHOOK_SECRET_HEADER = "X-Checkworthy-Secret"
MIN_SECRET = 16  # characters
MAX_BODY = 4_000_000  # bytes: a /predict of Label Studio's default batch (100 tasks) is far below


@dataclass(frozen=True)
class LabelFlow:
    """Where the label-update flow works: the data project (DVC), its params file and the store
    (None: ``DATABASE_URL``)."""

    repo: Path = ROOT
    params_path: Path = PARAMS_FILE
    db_url: str | None = None


def model_version(served: ServedRun) -> str:
    """Label Studio's model version of the served run: a new run in force is a new version."""
    return f"checkworthy {served.lineage} run {served.run_id}"


def project_id(value: Any) -> int | None:
    """A Label Studio project id: ``3``, ``"3"``, or ``"3.1732000000"`` (the ML API's project uid)."""
    return ascii_id(str(value).split(".", 1)[0]) if value is not None else None


def our_project(value: Any, allowed: Sequence[int], field: str) -> int:
    """The project id of ``value`` when the backend serves it, else :class:`ApiError` (403)."""
    pid = project_id(value)
    if pid not in allowed:
        raise ApiError(403, "other_project", f"Label Studio project {value!r} is not one this backend "
                       f"serves (--project {' '.join(map(str, allowed))})", field)
    return pid


def schema_problem(schema: str) -> str | None:
    """Why a project's labelling configuration cannot hold our answers (None when it can): it
    needs the single ``Choices`` named ``checkworthy`` with Yes and No over a ``Text`` of ``$text``."""
    try:
        root = ET.fromstring(schema)
    except ET.ParseError as exc:
        return f"the labelling configuration is not XML ({exc})"
    texts = {t.get("name") for t in root.iter("Text") if t.get("value") == "$text"}
    for c in root.iter("Choices"):
        if c.get("name") == label_studio.FROM_NAME and c.get("toName") in texts:
            if {x.get("value") for x in c.iter("Choice")} == {"Yes", "No"}:
                return None
    return (f"the labelling configuration needs Choices {label_studio.FROM_NAME!r} (Yes, No) over the "
            "Text of $text: use data/label_studio.py's LABEL_CONFIG (docs/review.md)")


class Annotations:
    """Annotations checked, then applied one at a time through the label-update flow."""

    def __init__(self, engine: Engine, flow: LabelFlow, projects: Sequence[int]) -> None:
        self.engine, self.flow, self.projects = engine, flow, sorted(set(projects))
        self._one_at_a_time = threading.Lock()
        self._lock = threading.Lock()  # guards _pending
        self._pending: set[str] = set()

    def receive(self, body: Mapping[str, Any], lineage: str, background: BackgroundTasks) -> Any:
        """A webhook's event: an annotation of a task of ``lineage`` checked and queued (202), an
        answer seen before (200), or a refusal (:class:`ApiError`); other events are ignored."""
        action = body.get("action")
        if action not in ANNOTATION_ACTIONS:
            return JSONResponse({"status": "ignored", "action": action}, status_code=200)
        annotation, task = body.get("annotation"), body.get("task")
        if not isinstance(annotation, Mapping) or not isinstance(task, Mapping):
            raise ApiError(422, "invalid", f"{action} without its annotation and task", "annotation")
        if ascii_id(str(task.get("id"))) is None:
            raise ApiError(422, "invalid", f"{action}: the task has no numeric id", "task.id")
        project = body.get("project")
        project = project.get("id") if isinstance(project, Mapping) else None
        pid = our_project(annotation.get("project", task.get("project", project)), self.projects,
                          "annotation.project")
        where = f"Label Studio task {task.get('id')}"
        try:
            answer = label_studio.annotation_answer(task, annotation, where)
        except DataError as exc:
            raise ApiError(422, "bad_annotation", f"{where}: {exc.problem}", exc.field) from None
        if answer is None:
            return JSONResponse({"status": "no answer", "task": task.get("id")}, status_code=200)
        folder = tempfile.TemporaryDirectory(prefix="label-studio-")
        try:
            path = Path(folder.name) / f"label-studio-{pid}-task-{task.get('id')}.csv"
            self.check(answer, task, lineage, path)
            state, done = self.claim(path)
        except BaseException:
            folder.cleanup()
            raise
        summary = {"task": task.get("id"), "claim": answer.id, "dataset": answer.dataset,
                   "label": answer.label}
        if state != "new":
            folder.cleanup()
            status = f"already {done['status']}" if done else "already queued"
            return JSONResponse(summary | {"status": status, "update_id": done["id"] if done else None},
                                status_code=200)
        background.add_task(self.apply, path, folder)
        return summary | {"status": "accepted"}

    def check(self, answer: label_studio.Answer, task: Mapping[str, Any], lineage: str, path: Path) -> None:
        """Write the answer's label file at ``path`` and check it as ``labels add`` does (a known
        claim) and against the task (a claim ``lineage`` holds or calibrates; the same claim id
        when the task names one)."""
        where = f"Label Studio task {task.get('id')}"
        key = (answer.dataset, answer.id)
        with self.engine.connect() as conn:
            ours = key in claims_of_lineage(conn, lineage, [key])
        if not ours:
            raise ApiError(422, "other_lineage", f"{where}: claim {answer.id!r} of {answer.dataset!r} is "
                           f"not a claim lineage {lineage!r} holds or calibrates", "task.data.source_id")
        write_label_file([answer], path)
        try:
            with self.engine.connect() as conn:
                check_label_file(conn, path, read_label_csv(path))
                stored = stored_claims(conn, [key]).get(key)
        except DataError as exc:
            raise ApiError(422, "unknown_claim", f"{where}: {exc.problem}", "task.data.source_id") from None
        claimed = (task.get("data") or {}).get("claim_id")
        if stored is None or (claimed is not None and str(claimed) != str(stored["claim_id"])):
            raise ApiError(422, "unknown_claim", f"{where}: claim {answer.id!r} of {answer.dataset!r} is not "
                           "a stored claim of this store (export tasks with 'checkworthy review export')",
                           "task.data.claim_id")

    def claim(self, path: Path) -> tuple[str, Mapping[str, Any] | None]:
        """Reserve the file's update: ``("new", None)``, ``("pending", None)`` while the same bytes
        wait for their update, or ``("done", the update)`` when they were applied (or rejected)
        before."""
        sha = sha256_file(path)
        with self.engine.connect() as conn:
            done = find_update(conn, sha)
        if done is not None:
            return "done", done
        with self._lock:
            if sha in self._pending:
                return "pending", None
            self._pending.add(sha)
        return "new", None

    def apply(self, path: Path, folder: tempfile.TemporaryDirectory) -> None:
        """The label-update flow on one checked file (after the webhook's answer), then recalibration."""
        sha = sha256_file(path)
        try:
            with self._one_at_a_time:
                out = label_update_flow(files=[str(path)], repo=str(self.flow.repo), db_url=self.flow.db_url,
                                        params_path=str(self.flow.params_path), recalibrate_now=True)
            for u in out.updates:
                log.warning("%s: %s, %d labels appended, new heads %s, event %s", path.name, u.status,
                            u.n_appended, u.new_heads, u.event_id)
            for r in out.refused:
                log.warning("%s: refused: %s", path.name, r.reason)
        except Exception:
            log.exception("%s: the label update failed", path.name)
        finally:
            with self._lock:
                self._pending.discard(sha)
            folder.cleanup()


def predictions(served: ServedRun, engine: Engine, tasks: Sequence[Mapping[str, Any]]
                ) -> list[dict[str, Any]]:
    """One prediction per task: the run's decision as the ``checkworthy`` choice and ``score`` =
    1 - review priority (0 at the threshold: the most uncertain sort first). A task without a
    stored claim the lineage holds or calibrates, or whose claim has no usable score, gets an empty
    result and score 0 (a person decides)."""
    version = model_version(served)
    keys = [_task_claim(t) for t in tasks]
    with engine.connect() as conn:
        found = claims_of_lineage(conn, served.lineage, [k for k in keys if k is not None])
    ids = [found.get(k) if k is not None else None for k in keys]
    got = served.calibrate_stored(sorted({i for i in ids if i is not None})) if any(ids) else None
    by_claim: dict[int, tuple[float, int]] = {}
    if got is not None:
        res, nb = got
        by_claim = {int(c): (float(t), int(d)) for c, t, d in zip(nb.claim_ids, res.theta, res.decision)}
    out = []
    for cid in ids:
        if cid is None or cid not in by_claim:
            out.append({"result": [], "score": 0.0, "model_version": version})
            continue
        theta, decision = by_claim[cid]
        confidence = 1.0 - float(review_priority([theta], served.threshold)[0])
        out.append({"result": [{"from_name": label_studio.FROM_NAME, "to_name": "text", "type": "choices",
                                "value": {"choices": ["Yes" if decision == 1 else "No"]}}],
                    "score": round(min(1.0, max(0.0, confidence)), 6), "model_version": version})
    return out


def _task_claim(task: Mapping[str, Any]) -> tuple[str, str] | None:
    data = task.get("data") if isinstance(task, Mapping) else None
    if not isinstance(data, Mapping) or any(data.get(f) in (None, "") for f in ("dataset", "source_id")):
        return None
    return str(data["dataset"]), str(data["source_id"])


def secret_problem(secret: str | None) -> str | None:
    """Why ``secret`` cannot be the webhook's shared secret (None when it can): unset, short, or
    not printable ASCII without spaces (it travels as an HTTP header)."""
    how = (f"give the project's webhook in Label Studio the header {WEBHOOK_SECRET_HEADER} with the same "
           "value (docs/review.md, 'Label Studio')")
    if not secret:
        return (f"{WEBHOOK_SECRET_ENV} is not set: the backend accepts annotations only with a shared "
                f"secret; set it (at least {MIN_SECRET} characters, e.g. from `python -c 'import secrets; "
                f"print(secrets.token_urlsafe(32))'`) and {how}")
    if len(secret) < MIN_SECRET or not (secret.isascii() and secret.isprintable()) or " " in secret:
        return (f"{WEBHOOK_SECRET_ENV}: the secret must be at least {MIN_SECRET} printable ASCII characters "
                "without spaces")
    return None


def webhook_secret(secret: str) -> Check:
    """:class:`Guard`'s check: ``/webhook`` needs ``secret`` in :data:`WEBHOOK_SECRET_HEADER`,
    compared in constant time; the other routes are Label Studio's ML protocol, which carries no
    such header."""
    expected = secret.encode("ascii")

    async def check(scope: Scope) -> None:
        if scope["path"] != "/webhook":
            return
        given = Headers(scope=scope).get(WEBHOOK_SECRET_HEADER)
        if not given:
            raise ApiError(401, "missing_secret", f"send the webhook secret in the {WEBHOOK_SECRET_HEADER} "
                           "header (docs/review.md)", WEBHOOK_SECRET_HEADER)
        if not hmac.compare_digest(given.encode("latin-1"), expected):
            raise ApiError(401, "invalid_secret", "wrong webhook secret", WEBHOOK_SECRET_HEADER)
    return check


def create_backend(engine: Engine, selection: Selection, params: Mapping[str, Any], projects: Sequence[int],
                   flow: LabelFlow = LabelFlow(), *, secret: str, max_body: int = MAX_BODY) -> FastAPI:
    """The ML backend for Label Studio ``projects`` over the runs ``selection`` names; webhooks
    need ``secret`` (:func:`secret_problem` says why one is refused: ValueError)."""
    problem = secret_problem(secret)
    if problem:
        raise ValueError(problem)
    app = FastAPI(title="checkworthy ML backend for Label Studio", version="1")
    app.add_middleware(Guard, max_body=max_body, check=webhook_secret(secret))
    json_errors(app)
    current = CurrentRun(engine, selection, params)
    annotations = Annotations(engine, flow, projects)
    app.state.current, app.state.annotations = current, annotations

    @app.get("/health")
    @app.get("/")
    def health() -> dict[str, Any]:
        """Liveness (Label Studio's connection check)."""
        return {"status": "UP", "model_class": "checkworthy"}

    @app.post("/setup")
    def setup(body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        """A project connects: it must be ours and its labelling configuration must fit."""
        check_strings(body)
        our_project(body.get("project"), annotations.projects, "project")
        problem = schema_problem(str(body.get("schema") or ""))
        if problem:
            raise ApiError(422, "label_config", problem, "schema")
        return {"model_version": model_version(current.get())}

    @app.get("/versions")
    def versions() -> dict[str, Any]:
        """The model version served now."""
        return {"versions": [model_version(current.get())]}

    @app.post("/predict")
    def predict(body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        """Pre-annotations for the tasks, scored for uncertainty sampling."""
        check_strings(body)
        our_project(body.get("project"), annotations.projects, "project")
        tasks = body.get("tasks")
        if not isinstance(tasks, list):
            raise ApiError(422, "invalid", "tasks must be a list", "tasks")
        served = current.get()
        return {"results": predictions(served, engine, tasks), "model_version": model_version(served)}

    @app.post("/webhook", status_code=202)
    def webhook(body: Annotated[dict[str, Any], Body()], background: BackgroundTasks) -> Any:
        """An annotation becomes a label update (after this answer); other events are ignored."""
        check_strings(body)
        return annotations.receive(body, current.get().lineage, background)

    return app
