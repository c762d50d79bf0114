"""A stand-in OpenAI-compatible server on loopback, speaking the real Chat Completions wire protocol.

Endpoints: ``POST /v1/chat/completions`` (OpenAI and compatible servers) and
``POST /openai/deployments/<deployment>/chat/completions?api-version=...`` (Azure OpenAI).
Auth by ``Authorization: Bearer <key>`` or Azure's ``api-key`` header. Replies are
``chat.completion`` objects with ``usage`` (incl. cached/reasoning token details), or with
``"stream": true`` Server-Sent Events (``data: {chunk}`` lines, a final usage chunk when
``stream_options.include_usage`` is set, then ``data: [DONE]``). Errors use OpenAI's JSON error
body ``{"error": {"message", "type", "param", "code"}}``: 401 bad key, 404 unknown model, 400 for
an unsupported ``response_format`` or Azure's prompt ``content_filter``, 429 with ``Retry-After``,
5xx. The "model" is the same toy as in ``fake_ollama`` (0.9 for a statement with a digit, else 0.1).

Failures are scripted per request with :meth:`LoopbackServer.script` (``status`` with ``headers``
and ``error``, ``delay``, ``drop``, ``refusal``, ``filtered``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from checkworthy.testing.fake_ollama import Handler, LoopbackServer, Request, toy_answer


def error_body(message: str, type_: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


RATE_LIMIT = error_body("Rate limit reached for requests. Please try again in 1s.", "requests",
                        code="rate_limit_exceeded")
SERVER_ERROR = error_body("The server had an error while processing your request. Sorry about that!",
                          "server_error")
NO_QUOTA = error_body("You exceeded your current quota, please check your plan and billing details.",
                      "insufficient_quota", code="insufficient_quota")


class FakeOpenAI(LoopbackServer):
    """An OpenAI-compatible server knowing ``models`` and accepting ``api_key``."""

    def __init__(
        self,
        models: tuple[str, ...] = ("gpt-4o-mini", "my-azure-deployment"),
        api_key: str = "sk-test",
        json_schema: bool = True,
        responder: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        super().__init__()
        self.models, self.api_key, self.json_schema, self.responder = models, api_key, json_schema, responder

    def handle(self, h: Handler, req: Request) -> None:
        """Refuse the request as OpenAI would, play the next scripted failure, or complete the chat."""
        accepted = self._accept(h, req)
        if accepted is None:
            return
        body, model = accepted
        action = self.next_action() or {}
        if self._scripted_failure(h, action):
            return
        self._complete(h, body, model, action)

    def _accept(self, h: Handler, req: Request) -> tuple[dict[str, Any], Any] | None:
        """The request's body and model; None once an error reply was sent (bad URL, key, model or
        response format)."""
        path = urlsplit(req.path).path
        azure = path.startswith("/openai/deployments/")
        if req.method != "POST" or not (path == "/v1/chat/completions" or
                                        (azure and path.endswith("/chat/completions"))):
            h.send_json(404, error_body(f"Invalid URL ({req.method} {path})"))
            return None
        bearer = req.headers.get("authorization", "").removeprefix("Bearer ")
        key = req.headers.get("api-key") if azure else bearer
        if key != self.api_key:
            h.send_json(401, error_body(f"Incorrect API key provided: {key}.", code="invalid_api_key"))
            return None
        body = req.body if isinstance(req.body, dict) else {}
        model = path.split("/")[3] if azure else body.get("model")
        if model not in self.models:
            code = "DeploymentNotFound" if azure else "model_not_found"
            h.send_json(404, error_body(f"The model `{model}` does not exist or you do not have "
                                        "access to it.", code=code))
            return None
        fmt = (body.get("response_format") or {}).get("type")
        if fmt == "json_schema" and not self.json_schema:
            h.send_json(400, error_body("Invalid parameter: 'response_format' of type 'json_schema' "
                                        "is not supported with this model.", param="response_format"))
            return None
        return body, model

    @staticmethod
    def _scripted_failure(h: Handler, action: dict[str, Any]) -> bool:
        """Play a scripted failure before the answer; True when it was the whole reply."""
        kind = action.get("kind")
        if kind == "status":
            h.send_json(action["status"], action.get("error", SERVER_ERROR), action.get("headers"))
            return True
        if kind == "drop":
            h.drop()
            return True
        if kind == "delay":
            time.sleep(action["seconds"])
        if kind == "filtered_prompt":
            h.send_json(400, {"error": {
                "message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
                           "management policy.", "type": None, "param": "prompt", "code": "content_filter",
                "status": 400, "innererror": {"code": "ResponsibleAIPolicyViolation"}}})
            return True
        return False

    def _complete(self, h: Handler, body: dict[str, Any], model: Any, action: dict[str, Any]) -> None:
        """The toy model's (or the responder's) answer, whole or streamed, with a scripted refusal,
        content filter, stall or truncation applied."""
        kind = action.get("kind")
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        content: str | None = self.responder(body) if self.responder else toy_answer(prompt, raw=False)
        refusal = None
        finish = "stop"
        if kind == "refusal":
            content, refusal = None, "I'm sorry, I can't help with that."
        if kind == "filtered":
            content, finish = None, "content_filter"
        usage = _usage(prompt, content or refusal or "")
        head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": f"{model}-2024-07-18", "system_fingerprint": "fp_fake0001"}
        if not body.get("stream"):
            return h.send_json(200, {**head, "object": "chat.completion", "choices": [{
                "index": 0, "message": {"role": "assistant", "content": content, "refusal": refusal,
                                        "annotations": []},
                "logprobs": None, "finish_reason": finish}], "usage": usage, "service_tier": "default"})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        _Stream(h, head, include_usage).send(content, refusal, finish, usage, action)


def _usage(prompt: str, answer: str) -> dict[str, Any]:
    """The ``usage`` object: ~4 characters a token, with the cached/reasoning token details."""
    return {
        "prompt_tokens": len(prompt) // 4, "completion_tokens": len(answer) // 4,
        "total_tokens": len(prompt) // 4 + len(answer) // 4,
        "prompt_tokens_details": {"cached_tokens": 128, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    }


@dataclass
class _Stream:
    """A streamed answer: Server-Sent Events of ``chat.completion.chunk`` objects, then ``[DONE]``."""

    h: Handler
    head: dict[str, Any]
    include_usage: bool

    def event(self, choices: list[dict[str, Any]], chunk_usage: dict[str, Any] | None = None) -> None:
        chunk = {**self.head, "object": "chat.completion.chunk", "choices": choices}
        if self.include_usage:
            chunk["usage"] = chunk_usage
        self.h.write_chunk(f"data: {json.dumps(chunk)}\n\n".encode())

    def send(self, content: str | None, refusal: str | None, finish: str, usage: dict[str, Any],
             action: dict[str, Any]) -> None:
        """Stream the answer five characters a chunk (a ``stall`` after the first, a
        ``truncated_stream`` ends before the finish reason)."""
        kind = action.get("kind")
        self.h.start_chunked("text/event-stream; charset=utf-8")
        self.event([{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": None},
                     "logprobs": None, "finish_reason": None}])
        if refusal:
            self.event([{"index": 0, "delta": {"refusal": refusal}, "logprobs": None, "finish_reason": None}])
        text = content or ""
        for i in range(0, len(text), 5):
            delta = {"content": text[i: i + 5]}
            self.event([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}])
            if kind == "stall" and i == 0:
                time.sleep(action["seconds"])
        if kind == "truncated_stream":
            return self.h.end_chunked()
        self.event([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}])
        if self.include_usage:
            self.event([], usage)
        self.h.write_chunk(b"data: [DONE]\n\n")
        self.h.end_chunked()
