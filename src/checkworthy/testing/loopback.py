"""An ASGI app under a real uvicorn server on a free loopback port, in a thread of the test."""

from __future__ import annotations

import contextvars
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
