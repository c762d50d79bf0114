"""The console script ``checkworthy`` run in a fresh process per invocation, without paying Python's
and the libraries' start-up each time (tests/test_cli_behaviour.py).

Started once as ``python tests/golden/console.py SCRIPT``, it imports the package's modules and
then, for each request on stdin (a JSON line ``{"argv": [...], "stdout": PATH, "stderr": PATH}``),
forks a child that runs SCRIPT (the installed ``.venv/bin/checkworthy``) as ``__main__`` with that
argv, its file descriptors 1 and 2 on the two files and 0 on /dev/null, and exits as Python would
with the script's status; the exit status is answered on stdout, one line per request.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import traceback

# imported once here rather than in each child (none starts a thread): the slow libraries some
# invocations use (torch and the sentence encoder, Prefect, the servers) and the command line; only
# its entry point of the package, so that a refactor moving the modules under it needs no change here
import prefect  # noqa: F401
import sentence_transformers  # noqa: F401
import uvicorn  # noqa: F401

import checkworthy.cli.main  # noqa: F401


def exit_status(code: object) -> int:
    """The status Python exits with for ``SystemExit(code)`` (a message is printed, then 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def child(script: str, argv: list[str], stdout: str, stderr: str) -> None:
    """Run ``script`` as the console script does, in this (forked) process; never returns."""
    status = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, stdout), (2, stderr)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        sys.argv = [script, *argv]
        try:
            runpy.run_path(script, run_name="__main__")
            status = 0
        except SystemExit as exc:
            status = exit_status(exc.code)
        except BaseException:  # what the interpreter prints for an uncaught exception
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)


def serve(script: str) -> None:
    """Answer requests until stdin closes."""
    for line in sys.stdin:
        request = json.loads(line)
        if threading.active_count() != 1:  # a fork copies one thread only: refuse rather than hang
            raise RuntimeError(f"{threading.active_count()} threads before a fork")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(script, request["argv"], request["stdout"], request["stderr"])
        _, wait_status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(wait_status), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1])
