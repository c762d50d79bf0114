"""An ASGI app under a real uvicorn server on a free loopback port, in a thread of the test."""

from __future__ import annotations

import contextvars
import json
import socket
import threading
import time
from typing import Any

import uvicorn


class LoopbackServer:
    """``app`` served on ``url`` (127.0.0.1, a free port) until :meth:`close`; the thread runs in a
    copy of the caller's context, so Prefect's settings (the test harness) reach the routes."""

    def __init__(self, app: Any) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=contextvars.copy_context().run, args=(self.server.run,),
                                       daemon=True)
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                break
            time.sleep(0.05)
        assert self.server.started
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def answer_mid_body(port: int, path: str, headers: dict[str, str], chunks: int, size: int = 1000,
                    timeout: float = 10) -> tuple[int, dict[str, Any]]:
    """The status and JSON body a server on loopback ``port`` answers to a chunked POST of
    ``path`` whose body is never finished (``chunks`` chunks of ``size`` bytes sent, no last
    chunk): only a server that judges the headers, or counts the body as it streams, answers
    at all; one that reads the body whole first times out (``socket.timeout``)."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Transfer-Encoding: chunked\r\n{head}\r\n".encode("latin-1"))
        try:
            for _ in range(chunks):
                sock.sendall(f"{size:x}\r\n".encode() + b"x" * size + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed while the body was still coming: read its answer
        got = b""
        try:
            while part := sock.recv(65536):
                got += part
        except ConnectionResetError:  # a close with the body unread resets, after the answer arrived
            if not got:
                raise
    status_line, _, body = got.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(body)
