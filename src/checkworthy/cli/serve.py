"""``checkworthy serve`` (the HTTP API under uvicorn) and ``checkworthy keys`` (its API keys).

Everything the server needs is checked before it listens: the options, the port, the lineage and
a run to serve (loaded and fitted up front), so a mistake is one line and exit status 2. Without
``--lineage`` it serves the only lineage with a run to serve, else the one whose run is newest,
and says which in its first line.
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine

from checkworthy.cli.checks import port, positive_int
from checkworthy.config import PARAMS_FILE, load_params
from checkworthy.errors import UsageError
from checkworthy.settings import PredictSettings, parse_section

if TYPE_CHECKING:
    from checkworthy.serve.served import Selection


def register(sub: argparse._SubParsersAction) -> None:
    sv = sub.add_parser("serve", help="the HTTP API: calibrated decisions for submitted texts (docs/api.md)")
    add_serve_arguments(sv)
    sv.add_argument("--params", default=str(PARAMS_FILE), help="params file (models, predict: defaults)")
    sv.set_defaults(func=cmd_serve)
    ky = sub.add_parser("keys", help="the API's keys: create, revoke, list")
    add_keys_arguments(ky)
    ky.set_defaults(func=cmd_keys)


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    add_selection_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=port, default=8000, help="default 8000")
    p.add_argument("--max-batch", type=positive_int, default=100, help="texts per request (default 100)")
    p.add_argument("--max-chars", type=positive_int, default=2000,
                   help="characters per text (default 2000)")
    p.add_argument("--wait", action="store_true",
                   help="start even before the lineage has a run (a service started with the stack): "
                        "/health/ready answers 503 until one exists")


def add_selection_arguments(p: argparse.ArgumentParser) -> None:
    """Which run answers: ``serve``'s and ``label-studio-backend``'s options."""
    p.add_argument("--lineage",
                   help="the label-set lineage whose newest complete run answers (a wrong name lists the "
                        "calibrated ones; default: the only lineage with a run to serve, else the one "
                        "whose run is newest)")
    p.add_argument("--run", type=positive_int, help="serve this run only (default: the lineage's newest)")
    p.add_argument("--model", help="only runs of this model spec (default: the lineage's champion, "
                                   "else params.yaml predict: model)")
    p.add_argument("--score-kind",
                   help="only runs of this score kind (default: params.yaml predict: score_kind)")
    p.add_argument("--k", type=positive_int, help="only runs with this k (default: params.yaml predict: k)")
    p.add_argument("--correction", help="only runs with this correction (default: any)")
    p.add_argument("--interval", help="only runs with this interval (default: any)")
    p.add_argument("--any-model", action="store_true",
                   help="serve the lineage's newest run whatever its model, score kind and k")


def add_keys_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="keys_command", required=True)
    c = sub.add_parser("create", help="a new key; its secret is printed once and never stored")
    c.add_argument("name", help="a name for the key (letters, digits, '.', '_', '-')")
    c.add_argument("--role", required=True, choices=["scorer", "auditor"],
                   help="scorer: submit texts and read explanations; auditor: read only")
    r = sub.add_parser("revoke", help="revoke a key (refused from the next request on)")
    r.add_argument("name")
    sub.add_parser("list", help="every key, with its role and when it was revoked")


def cmd_keys(args: argparse.Namespace) -> int:
    """Create, revoke and list the API's keys."""
    from checkworthy.store import api_keys
    from checkworthy.store.engine import get_engine

    if args.keys_command == "list":
        with get_engine().connect() as conn:
            for k in api_keys.list_keys(conn):
                state = f"revoked {k['revoked_at']:%Y-%m-%d %H:%M}" if k["revoked_at"] else "in force"
                print(f"{k['name']}\t{k['role']}\t{k['key_prefix']}...\t"
                      f"created {k['created_at']:%Y-%m-%d %H:%M}\t{state}")
        return 0
    try:
        with get_engine().begin() as conn:
            if args.keys_command == "create":
                key, secret = api_keys.create_key(conn, args.name, args.role)
                print(f"key {key.name} ({key.role}): {secret}\n"
                      "shown once: only its sha256 is stored; send it in the X-API-Key header")
                return 0
            done = api_keys.revoke_key(conn, args.name)
    except (ValueError, LookupError) as exc:
        raise UsageError(exc.args[0]) from None
    print(f"key {args.name}: " + ("revoked" if done else "was revoked already"))
    return 0


def port_problem(host: str, port: int) -> str | None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            return f"--host {host} --port {port}: cannot listen there ({exc.strerror})"
    return None


def cmd_serve(args: argparse.Namespace) -> int:
    """The HTTP API over a lineage's newest calibration run (see docs/api.md)."""
    import uvicorn

    from checkworthy.flows.api_events import FlowEvents
    from checkworthy.serve.app import create_app
    from checkworthy.serve.inputs import Limits
    from checkworthy.serve.served import NotReady

    eng, params, selection = served_selection(args, args.wait)
    app = create_app(eng, selection, params, Limits(max_chars=args.max_chars, max_batch=args.max_batch),
                     events=FlowEvents())
    try:
        p = app.state.api.current.get().provenance
        print(f"serving run {p['run_id']} of {p['lineage']} ({p['model']} {p['score_kind']}, k={p['k']}, "
              f"{p['correction']}/{p['interval']}) on http://{args.host}:{args.port} (docs: /docs)",
              flush=True)
    except NotReady as exc:
        if not args.wait:
            raise UsageError(str(exc)) from None
        print(f"waiting: {exc}; listening on http://{args.host}:{args.port}", flush=True)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def served_selection(args: argparse.Namespace, wait: bool = False
                     ) -> tuple[Engine, Mapping[str, Any], Selection]:
    """The store, the params to load models with and the runs to serve for ``args`` (the options
    of :func:`add_selection_arguments`, ``--host``, ``--port``, ``--params``); refused in one line
    when the port is taken or the lineage unknown (unless ``wait``)."""
    from checkworthy.store.engine import get_engine
    from checkworthy.store.served_runs import calibrated_lineages

    problem = port_problem(args.host, args.port)
    if problem:
        raise UsageError(problem)
    params = load_params(args.params)
    eng = get_engine()
    with eng.connect() as conn:
        known = calibrated_lineages(conn)
        lineage = args.lineage or _default_lineage(conn, args, params, known)
        params, selection = _selection(conn, args, params, lineage)
    if lineage not in known and not wait:
        raise UsageError(f"--lineage {lineage!r}: no calibrated lineage of that name "
                         f"(calibrated: {', '.join(known) or 'none'})")
    return eng, params, selection


def labels_in_english(conn: Connection, lineage: str) -> bool:
    """Whether the labels in force of ``lineage`` are English (:func:`checkworthy.runs.embedding.
    english_counts` over their stored languages); a lineage without labels counts as English."""
    from checkworthy.runs.embedding import english_counts
    from checkworthy.store.languages import label_set_languages
    from checkworthy.store.lineages import label_set_in_force

    label_set = label_set_in_force(conn, lineage)
    return label_set is None or english_counts(label_set_languages(conn, label_set))


def _selection(conn: Connection, args: argparse.Namespace, params: Mapping[str, Any], lineage: str
               ) -> tuple[Mapping[str, Any], Selection]:
    """The runs of ``lineage`` the server may serve, and the params to load their models with: the
    options given, else the lineage's adapted champion, else params.yaml ``predict:`` (its
    ``model_other_languages`` for a lineage whose labels are not English, as ``predict`` chose;
    none of these with ``--any-model`` or ``--run``)."""
    from checkworthy.runs.predict import adapted_champion, champion_model, champion_params
    from checkworthy.serve.served import Selection
    from checkworthy.store import model_registry as registry

    rec = {} if args.any_model or args.run else dict(params.get("predict") or {})
    champion = registry.champion(conn, lineage)
    if adapted_champion(champion) and rec and not args.model and not args.score_kind:  # the lineage's own
        params = champion_params(params, champion)
        rec["model"], rec["score_kind"] = champion_model(params, champion)
    elif rec and not args.model and not labels_in_english(conn, lineage):  # as predict chose
        rec["model"] = parse_section(PredictSettings, params.get("predict") or {}, "predict",
                                     args.params).model_other_languages
    fields = {"model": args.model or rec.get("model"), "score_kind": args.score_kind or rec.get("score_kind"),
              "k": args.k or rec.get("k"), "correction": args.correction, "interval": args.interval}
    return params, Selection(lineage, fields, args.run)


def _default_lineage(conn: Connection, args: argparse.Namespace, params: Mapping[str, Any],
                     known: list[str]) -> str:
    """Without ``--lineage``: the only lineage with a run the options select, else the one whose
    such run is newest; said in one line. Refused when none has one (``--wait`` needs a name)."""
    from checkworthy.store.served_runs import newest_run

    servable = {}
    for name in known:
        selection = _selection(conn, args, params, name)[1]
        run_id = newest_run(conn, name, selection.fields, selection.run_id)
        if run_id is not None:
            servable[name] = run_id
    if not servable:
        raise UsageError(f"no lineage has a complete run to serve (calibrated: {', '.join(known) or 'none'})"
                         ": run `checkworthy predict` or the main job first, or name one with --lineage")
    lineage = max(servable, key=servable.__getitem__)
    print(f"lineage {lineage}: the only lineage with a run to serve" if len(servable) == 1 else
          f"lineage {lineage}: its run {servable[lineage]} is the newest of the {len(servable)} lineages "
          "with a run to serve (--lineage chooses another)", flush=True)
    return lineage
