"""A stand-in Ollama server on loopback, speaking Ollama's real HTTP API (neither Ollama nor a model
can run here).

Endpoints: ``GET /api/version``, ``GET /api/tags``, ``POST /api/generate`` and ``POST /api/chat``
(NDJSON streaming with chunked transfer encoding by default, one JSON object with
``"stream": false``), errors as ``{"error": "..."}`` with Ollama's status codes, an ``error`` line
mid-stream. The "model" is a deterministic toy: it reads the statement in the last statement
slot (``prompt.SLOT_OPEN`` ... ``prompt.SLOT_CLOSE``) and answers 0.9 if it holds a digit, else
0.1 (so tests can tell claims apart); it honours ``num_predict`` (~4 characters per token) and
``stop``.

Failures are scripted per request with :meth:`LoopbackServer.script` (``status``, ``delay``,
``drop``, ``stall``, ``midstream_error``), and every request is recorded.

:class:`LoopbackServer` is the shared plumbing for ``fake_openai`` too.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from checkworthy.scorers.prompt import SLOT_CLOSE, SLOT_OPEN


@dataclass
class Request:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    #: time.monotonic() when the request arrived
    t: float = field(default_factory=time.monotonic)


class Handler(BaseHTTPRequestHandler):
    """Routes every request to its :class:`LoopbackServer`; helpers write real HTTP/1.1 replies."""

    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # headers and body go out in separate writes: without this, Nagle + delayed ACK add ~40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch()

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch()

    def _dispatch(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        req = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        with owner.lock:
            owner.requests.append(req)
            owner.in_flight += 1
            owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
        try:
            if owner.latency:
                time.sleep(owner.latency)
            owner.handle(self, req)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout): nothing to do
        finally:
            with owner.lock:
                owner.in_flight -= 1

    def send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def drop(self) -> None:
        """Close the connection without a reply (a crashed or restarted server)."""
        self.close_connection = True
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the access log
        return


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: LoopbackServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients closing kept-alive connections (or timing out) are normal here, not errors."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class LoopbackServer:
    """A threaded HTTP/1.1 server on 127.0.0.1 at a random port; subclasses implement ``handle``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[Request] = []
        self.actions: deque[dict[str, Any]] = deque()
        self.in_flight = 0
        self.max_in_flight = 0
        #: seconds every request waits before it is handled (to emulate a model's latency)
        self.latency = 0.0
        self._httpd = _HTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LoopbackServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def script(self, *actions: dict[str, Any]) -> None:
        """Queue per-request behaviours, used in order by the next model requests."""
        with self.lock:
            self.actions.extend(actions)

    def next_action(self) -> dict[str, Any] | None:
        with self.lock:
            return self.actions.popleft() if self.actions else None

    def model_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST"]

    def handle(self, h: Handler, req: Request) -> None:
        raise NotImplementedError


_SLOT = re.compile(re.escape(SLOT_OPEN) + "(.*?)" + re.escape(SLOT_CLOSE), re.DOTALL)


def statement_of(prompt: str) -> str:
    """The statement in the last slot of a prompt (the claim being scored)."""
    found = _SLOT.findall(prompt)
    if found:
        return found[-1]
    tail = prompt.rsplit(SLOT_OPEN, 1)
    return tail[-1] if len(tail) == 2 else ""


def toy_answer(prompt: str, raw: bool) -> str:
    """The toy model: 0.9 for a statement with a digit, else 0.1; a JSON answer, or its continuation
    after the pre-fill in raw mode."""
    statement = statement_of(prompt)
    score = 0.9 if re.search(r"\d", statement) else 0.1
    why = "It cites a figure." if score > 0.5 else "No verifiable figure."
    if raw:
        return f'{score}, "justification": "{why}"}}'
    return json.dumps({"confidence_score": score, "justification": why})


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class FakeOllama(LoopbackServer):
    """An Ollama server holding ``models``; ``responder(body) -> text`` replaces the toy model."""

    def __init__(
        self,
        models: tuple[str, ...] = ("gemma3:1b", "gemma3:270m", "gemma3:4b"),
        version: str = "0.12.6",
        responder: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        super().__init__()
        self.models = models
        self.version = version
        self.responder = responder

    def handle(self, h: Handler, req: Request) -> None:
        if req.method == "GET" and req.path == "/api/version":
            return h.send_json(200, {"version": self.version})
        if req.method == "GET" and req.path == "/api/tags":
            return h.send_json(200, {"models": [self._tag(m) for m in self.models]})
        if req.method == "POST" and req.path in ("/api/generate", "/api/chat"):
            return self._generate(h, req)
        return self._not_found(h)

    @staticmethod
    def _not_found(h: Handler) -> None:
        data = b"404 page not found"
        h.send_response(404)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    @staticmethod
    def _tag(name: str) -> dict[str, Any]:
        digest = hashlib.sha256(name.encode()).hexdigest()  # the same in every process, as a real one
        return {
            "name": name, "model": name, "modified_at": "2025-08-14T10:00:00.000000000Z",
            "size": 815319791, "digest": digest,
            "details": {"parent_model": "", "format": "gguf", "family": "gemma3", "families": ["gemma3"],
                        "parameter_size": "999.89M", "quantization_level": "Q4_K_M"},
        }

    def _generate(self, h: Handler, req: Request) -> None:
        """Answer ``/api/generate`` or ``/api/chat``: an error, a scripted failure, or the answer."""
        body = req.body if isinstance(req.body, dict) else {}
        model = body.get("model", "")
        if not model:
            return h.send_json(400, {"error": "model is required"})
        if model not in self.models:
            return h.send_json(404, {"error": f'model "{model}" not found, try pulling it first'})
        chat = req.path == "/api/chat"
        if chat:
            prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        else:
            prompt = str(body.get("prompt", ""))
        action = self.next_action() or {}
        kind = action.get("kind")
        if kind == "status":
            return h.send_json(action["status"], {"error": action.get("error", "boom")},
                               action.get("headers"))
        if kind == "drop":
            return h.drop()
        if kind == "delay":
            time.sleep(action["seconds"])
        text, final = self._answer(body, prompt)
        head = {"model": model, "created_at": _now()}
        if not chat and not body.get("raw"):
            final["context"] = [1, 2, 3]
        _reply(h, _Pieces(head, chat), text, final, body.get("stream", True) is False, action)

    def _answer(self, body: dict[str, Any], prompt: str) -> tuple[str, dict[str, Any]]:
        """The answer's text, cut at a ``stop`` string or at ``num_predict`` tokens, and the final
        object's fields (done reason, durations, token counts)."""
        options = body.get("options") or {}
        text = self.responder(body) if self.responder else toy_answer(prompt, bool(body.get("raw")))
        done_reason = "stop"
        for stop in options.get("stop") or []:
            if stop and stop in text:
                text = text[: text.index(stop)]
        if options.get("num_predict") and len(text) > 4 * options["num_predict"]:
            text, done_reason = text[: 4 * options["num_predict"]], "length"
        final = {
            "done": True, "done_reason": done_reason, "total_duration": 123456789,
            "load_duration": 1234567, "prompt_eval_count": len(prompt) // 4,
            "prompt_eval_duration": 2345678, "eval_count": max(1, len(text) // 4),
            "eval_duration": 3456789,
        }
        return text, final


@dataclass
class _Pieces:
    """Builds one piece of an answer: a ``message`` for chat, a ``response`` for generate."""

    head: dict[str, Any]
    chat: bool

    def __call__(self, content: str) -> dict[str, Any]:
        if self.chat:
            return {**self.head, "message": {"role": "assistant", "content": content}, "done": False}
        return {**self.head, "response": content, "done": False}


def _reply(h: Handler, piece: _Pieces, text: str, final: dict[str, Any], whole: bool,
           action: dict[str, Any]) -> None:
    """Send the answer as one JSON object (``whole``) or as NDJSON, four characters a line, with a
    scripted ``midstream_error`` or ``stall`` after the first line."""
    kind = action.get("kind")
    if whole:
        return h.send_json(200, {**piece(text), **final})
    h.start_chunked("application/x-ndjson")
    pieces = [text[i: i + 4] for i in range(0, len(text), 4)] or [""]
    for i, content in enumerate(pieces):
        h.write_chunk((json.dumps(piece(content)) + "\n").encode())
        if i == 0 and kind == "midstream_error":
            h.write_chunk((json.dumps({"error": action.get("error", "llama runner process has "
                                                                    "terminated")}) + "\n").encode())
            return h.end_chunked()
        if i == 0 and kind == "stall":
            time.sleep(action["seconds"])
    h.write_chunk((json.dumps({**piece(""), **final}) + "\n").encode())
    h.end_chunked()
