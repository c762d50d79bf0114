"""``checkworthy label-studio-backend``: Label Studio's ML backend over a lineage's run in force.

Pre-annotations scored for uncertainty sampling, and annotations turned into label updates as by
``review import`` (docs/review.md, "Label Studio"). The options choose the run as ``serve``'s do;
the webhook's shared secret comes from the environment (``CHECKWORTHY_LS_WEBHOOK_SECRET``: not an
option, which ``ps`` would show). Everything is checked before it listens, so a mistake is one
line and exit status 2.
"""

from __future__ import annotations

import argparse

from checkworthy.cli.checks import port, positive_int
from checkworthy.cli.serve import add_selection_arguments
from checkworthy.config import PARAMS_FILE


def register(sub: argparse._SubParsersAction) -> None:
    lb = sub.add_parser("label-studio-backend",
                        help="Label Studio's ML backend: pre-annotations by uncertainty, annotations "
                             "become label updates (docs/review.md)")
    lb.add_argument("--project", type=positive_int, action="append", required=True,
                    help="the Label Studio project id it serves (repeat for several); others are refused")
    add_selection_arguments(lb)
    lb.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    lb.add_argument("--port", type=port, default=9090, help="default 9090 (Label Studio's habit)")
    lb.add_argument("--params", default=str(PARAMS_FILE),
                    help="params file (models, predict: defaults; the label updates' validation)")
    lb.set_defaults(func=cmd_label_studio_backend)


def cmd_label_studio_backend(args: argparse.Namespace) -> int:
    """Serve Label Studio's ML backend protocol until stopped."""
    import os
    from pathlib import Path

    import uvicorn

    from checkworthy.cli.serve import served_selection
    from checkworthy.errors import UsageError
    from checkworthy.flows.api_events import FlowEvents
    from checkworthy.serve.label_studio_backend import (
        WEBHOOK_SECRET_ENV,
        create_backend,
        model_version,
        secret_problem,
    )
    from checkworthy.serve.served import NotReady

    secret = os.environ.get(WEBHOOK_SECRET_ENV)
    problem = secret_problem(secret)
    if problem:
        raise UsageError(problem)
    eng, params, selection = served_selection(args)
    app = create_backend(eng, selection, params, args.project, FlowEvents(params_path=Path(args.params)),
                         secret=str(secret))
    try:
        version = model_version(app.state.backend.current.get())
    except (NotReady, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(f"Label Studio ML backend for project {', '.join(map(str, args.project))}: {version}, on "
          f"http://{args.host}:{args.port} (connect it in the project's Settings > Model)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
