"""``checkworthy serve`` (the HTTP API under uvicorn) and ``checkworthy keys`` (its API keys).

Everything the server needs is checked before it listens: the options, the port, the lineage and
a run to serve (loaded and fitted up front), so a mistake is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Callable

from sqlalchemy import Engine

from checkworthy.cli.checks import positive_int
from checkworthy.config import load_params


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lineage", required=True,
                   help="the label-set lineage whose newest complete run answers (a wrong name "
                        "lists the calibrated ones)")
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
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=positive_int, default=8000, help="default 8000")
    p.add_argument("--max-batch", type=positive_int, default=100, help="texts per request (default 100)")
    p.add_argument("--max-chars", type=positive_int, default=2000,
                   help="characters per text (default 2000)")
    p.add_argument("--wait", action="store_true",
                   help="start even before the lineage has a run (a service started with the stack): "
                        "/health/ready answers 503 until one exists")


def add_keys_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="keys_command", required=True)
    c = sub.add_parser("create", help="a new key; its secret is printed once and never stored")
    c.add_argument("name", help="a name for the key (letters, digits, '.', '_', '-')")
    c.add_argument("--role", required=True, choices=["scorer", "auditor"],
                   help="scorer: submit texts and read explanations; auditor: read only")
    r = sub.add_parser("revoke", help="revoke a key (refused from the next request on)")
    r.add_argument("name")
    sub.add_parser("list", help="every key, with its role and when it was revoked")


def run_keys(args: argparse.Namespace, engine: Callable[[], Engine]) -> int:
    from checkworthy.store import api_keys

    if args.keys_command == "list":
        with engine().connect() as conn:
            for k in api_keys.list_keys(conn):
                state = f"revoked {k['revoked_at']:%Y-%m-%d %H:%M}" if k["revoked_at"] else "in force"
                print(f"{k['name']}\t{k['role']}\t{k['key_prefix']}...\t"
                      f"created {k['created_at']:%Y-%m-%d %H:%M}\t{state}")
        return 0
    try:
        with engine().begin() as conn:
            if args.keys_command == "create":
                key, secret = api_keys.create_key(conn, args.name, args.role)
                print(f"key {key.name} ({key.role}): {secret}\n"
                      "shown once: only its sha256 is stored; send it in the X-API-Key header")
                return 0
            done = api_keys.revoke_key(conn, args.name)
    except (ValueError, LookupError) as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    print(f"key {args.name}: " + ("revoked" if done else "was revoked already"))
    return 0


def _port_problem(host: str, port: int) -> str | None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            return f"--host {host} --port {port}: cannot listen there ({exc.strerror})"
    return None


def run_serve(args: argparse.Namespace, engine: Callable[[], Engine], params_path: str) -> int:
    import uvicorn

    from checkworthy.runs.adapt import adapted_champion, champion_model, champion_params
    from checkworthy.serve.app import Limits, create_app
    from checkworthy.serve.served import NotReady, Selection
    from checkworthy.store import model_registry as registry
    from checkworthy.store.served_runs import calibrated_lineages

    problem = _port_problem(args.host, args.port)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    params = load_params(params_path)
    rec = {} if args.any_model or args.run else dict(params.get("predict") or {})
    eng = engine()
    with eng.connect() as conn:
        known = calibrated_lineages(conn)
        champion = registry.champion(conn, args.lineage)
    if adapted_champion(champion) and rec and not args.model and not args.score_kind:  # the lineage's own
        params = champion_params(params, champion)
        rec["model"], rec["score_kind"] = champion_model(params, champion)
    fields = {"model": args.model or rec.get("model"), "score_kind": args.score_kind or rec.get("score_kind"),
              "k": args.k or rec.get("k"), "correction": args.correction, "interval": args.interval}
    if args.lineage not in known and not args.wait:
        print(f"error: --lineage {args.lineage!r}: no calibrated lineage of that name "
              f"(calibrated: {', '.join(known) or 'none'})", file=sys.stderr)
        return 2
    app = create_app(eng, Selection(args.lineage, fields, args.run), params,
                     Limits(max_chars=args.max_chars, max_batch=args.max_batch))
    try:
        p = app.state.current.get().provenance
        print(f"serving run {p['run_id']} of {p['lineage']} ({p['model']} {p['score_kind']}, k={p['k']}, "
              f"{p['correction']}/{p['interval']}) on http://{args.host}:{args.port} (docs: /docs)",
              flush=True)
    except NotReady as exc:
        if not args.wait:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"waiting: {exc}; listening on http://{args.host}:{args.port}", flush=True)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
