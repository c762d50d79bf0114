"""OpenAI-compatible backend: OpenAI, Azure OpenAI and any server speaking ``/v1/chat/completions``.

Why it is shaped like this:

* Same prompt as every other LLM scorer (``prompt.chat_prompt`` = ``prompt.build_prompt``
  without the pre-fill), one user message, the answer asked as the JSON object
  ``{"confidence_score", "justification"}`` via ``response_format`` (``json_schema`` by default,
  ``json_object`` or ``none`` for servers without structured outputs) and parsed by
  ``prompt.parse_answer``: a score is never invented.
* API models run at provider defaults (the paper): temperature and top_p are only sent when set
  (``temperature=0.1`` is the ablation); ``params()`` records ``None`` for "provider default".
* Retries are ours, not the SDK's (``max_retries=0``): 429 and 5xx honour ``Retry-After`` /
  ``retry-after-ms`` and hold back every worker (a shared gate), timeouts and lost connections back
  off exponentially (``http_retry``); a spent quota (``insufficient_quota``) fails at once. After
  the last attempt a :class:`~checkworthy.scorers.http_retry.BackendError` aborts the chunk, so
  nothing is stored and a rerun resumes.
* A request refused for the claim itself (content filter, model refusal) is a stored ``error``
  with the service's message as raw output: it is a property of that claim, not an outage.
* Token usage of every call (prompt, completion, cached, reasoning tokens, attempts) goes into
  ``Score.usage`` so a run's cost can be reported.

Environment (explicit constructor arguments win):

* OpenAI / compatible: ``OPENAI_BASE_URL`` (optional), ``OPENAI_API_KEY``; the model comes from the
  spec (``openai:<deployment>``) or ``OPENAI_DEPLOYMENT``.
* Azure OpenAI (chosen when ``AZURE_OPENAI_ENDPOINT`` is set and ``OPENAI_BASE_URL`` is not, or
  with ``api="azure"``): ``AZURE_OPENAI_ENDPOINT``, ``AZURE_OPENAI_API_KEY``,
  ``OPENAI_API_VERSION`` (or ``AZURE_OPENAI_API_VERSION``), deployment from the spec or
  ``AZURE_OPENAI_DEPLOYMENT`` / ``OPENAI_DEPLOYMENT``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from checkworthy.scorers.base import ERROR, Score, clean_raw
from checkworthy.scorers.http_retry import (
    BackendConfigError,
    Gate,
    Incomplete,
    Retry,
    RetryPolicy,
    call_with_retries,
    parse_retry_after,
    run_bounded,
)
from checkworthy.scorers.prompt import (
    ANSWER_SCHEMA,
    DEFAULT_GUIDELINES,
    VERBALISED,
    chat_prompt,
    load_guidelines,
    parse_answer,
    prompt_version,
)

#: Azure API version used when none is configured (GA, supports json_schema structured outputs)
AZURE_DEFAULT_API_VERSION = "2024-10-21"
RESPONSE_FORMATS = ("json_schema", "json_object", "none")


@dataclass(frozen=True)
class OpenAIOptions:
    """How an OpenAI-compatible model is asked (:class:`OpenAIScorer`): sampling (``temperature``,
    ``top_p``, ``seed``; ``None`` = provider default), ``max_tokens``, ``reasoning_effort``,
    ``response_format``, and the service: ``api`` (auto, openai, azure), ``base_url``, ``api_key``,
    ``api_version`` (else from the environment), ``stream``, requests in flight, ``timeout``,
    retries."""

    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    response_format: str = "json_schema"
    api: str = "auto"
    base_url: str | None = None
    api_key: str | None = None
    api_version: str | None = None
    stream: bool = False
    concurrency: int = 4
    timeout: float = 120.0
    retry: RetryPolicy = RetryPolicy()

    def __post_init__(self) -> None:
        if self.api not in ("auto", "openai", "azure"):
            raise ValueError(f"openai: api must be auto, openai or azure, not {self.api!r}")
        if self.response_format not in RESPONSE_FORMATS:
            raise ValueError(f"openai: response_format must be one of {', '.join(RESPONSE_FORMATS)}")


class OpenAIScorer:
    """Verbalised check-worthiness scores from an OpenAI-compatible chat model (``openai:<deployment>``)."""

    score_kinds = (VERBALISED,)

    def __init__(self, deployment: str | None = None, options: OpenAIOptions = OpenAIOptions(), *,
                 guidelines_path: str | Path = DEFAULT_GUIDELINES) -> None:
        o = options
        api = o.api
        if api == "auto":
            own_url = o.base_url or os.environ.get("OPENAI_BASE_URL")
            api = "azure" if os.environ.get("AZURE_OPENAI_ENDPOINT") and not own_url else "openai"
        if not deployment and api == "azure":
            deployment = os.environ.get("AZURE_OPENAI_DEPLOYMENT")
        deployment = deployment or os.environ.get("OPENAI_DEPLOYMENT")
        if not deployment:
            raise ValueError("openai: name the deployment (openai:<deployment> or OPENAI_DEPLOYMENT)")
        self.api, self.deployment = api, deployment
        self.spec = f"openai:{deployment}"
        self.temperature = None if o.temperature is None else float(o.temperature)
        self.top_p = None if o.top_p is None else float(o.top_p)
        self.seed = None if o.seed is None else int(o.seed)
        self.max_tokens = o.max_tokens
        self.reasoning_effort = o.reasoning_effort
        self.response_format = o.response_format
        self.stream = bool(o.stream)
        self.concurrency = max(1, int(o.concurrency))
        self.retry = o.retry
        self.guidelines = load_guidelines(guidelines_path)
        self.prompt_version = prompt_version(guidelines_path)
        self._gate = Gate()
        if api == "azure":
            endpoint = o.base_url or os.environ.get("AZURE_OPENAI_ENDPOINT")
            key = o.api_key or os.environ.get("AZURE_OPENAI_API_KEY")
            if not endpoint or not key:
                raise ValueError("openai (azure): set AZURE_OPENAI_ENDPOINT and AZURE_OPENAI_API_KEY")
            version = (o.api_version or os.environ.get("OPENAI_API_VERSION")
                       or os.environ.get("AZURE_OPENAI_API_VERSION") or AZURE_DEFAULT_API_VERSION)
            self.api_version: str | None = version
            self._client: openai.OpenAI = openai.AzureOpenAI(
                azure_endpoint=endpoint, api_key=key, api_version=version, azure_deployment=deployment,
                timeout=o.timeout, max_retries=0)
        else:
            key = o.api_key or os.environ.get("OPENAI_API_KEY")
            if not key:
                raise ValueError("openai: set OPENAI_API_KEY (any non-empty value for keyless local servers)")
            self.api_version = None
            self._client = openai.OpenAI(base_url=o.base_url or os.environ.get("OPENAI_BASE_URL") or None,
                                         api_key=key, timeout=o.timeout, max_retries=0)

    def params(self) -> dict[str, Any]:
        """What determines the scores; ``None`` = provider default. No URL, no key."""
        return {
            "backend": "openai",
            "api": self.api,
            "api_version": self.api_version,
            "model": self.deployment,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": None,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "reasoning_effort": self.reasoning_effort,
            "response_format": self.response_format,
            "prompt_version": self.prompt_version,
        }

    def request_body(self, claim: str) -> dict[str, Any]:
        """Keyword arguments of ``chat.completions.create`` for one claim."""
        body: dict[str, Any] = {
            "model": self.deployment,
            "messages": [{"role": "user", "content": chat_prompt(claim, self.guidelines)}],
        }
        if self.response_format == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "checkworthiness", "strict": True, "schema": ANSWER_SCHEMA},
            }
        elif self.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        for key, value in (("temperature", self.temperature), ("top_p", self.top_p), ("seed", self.seed),
                           ("max_completion_tokens", self.max_tokens),
                           ("reasoning_effort", self.reasoning_effort)):
            if value is not None:
                body[key] = value
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Score texts with at most ``concurrency`` requests in flight; output order = input order."""
        return [{VERBALISED: s} for s in run_bounded(self.score_one, list(texts), self.concurrency)]

    def score_one(self, claim: str) -> Score:
        """One completion, retried while the service fails; the answer parsed, never invented."""
        body = self.request_body(claim)
        try:
            (text, meta), attempts = call_with_retries(
                lambda: self._complete(body), _classify, self.retry, self._gate, f"openai {self.deployment}")
        except openai.BadRequestError as exc:
            if _error_code(exc) == "content_filter":
                return Score(None, ERROR, clean_raw(f"content_filter: {_error_text(exc)}"), {"attempts": 1})
            text = _error_text(exc)
            hint = " (set response_format: json_object or none)" if "response_format" in text else ""
            raise BackendConfigError(f"openai rejected the request: {text}{hint}") from exc
        except openai.APIStatusError as exc:
            raise BackendConfigError(f"openai: HTTP {exc.status_code}: {_error_text(exc)}") from exc
        refusal = meta.pop("refusal", None)
        usage = {**meta.pop("usage"), **meta, "attempts": attempts}
        if refusal:
            return Score(None, ERROR, clean_raw(f"refusal: {refusal}"), usage)
        if meta.get("finish_reason") == "content_filter" and not text:
            return Score(None, ERROR, "content_filter: the completion was filtered", usage)
        score, status = parse_answer(text)
        return Score(score, status, clean_raw(text), usage)

    def _complete(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(answer text, metadata incl. token usage) of one call, streamed or not."""
        if not self.stream:
            resp = self._client.chat.completions.create(**body)
            choice = resp.choices[0] if resp.choices else None
            message = choice.message if choice else None
            return (message.content or "") if message else "", {
                "usage": _usage(resp.usage),
                "finish_reason": choice.finish_reason if choice else None,
                "refusal": getattr(message, "refusal", None) if message else None,
                "response_model": resp.model,
                "system_fingerprint": resp.system_fingerprint,
            }
        pieces: list[str] = []
        refusal: list[str] = []
        meta: dict[str, Any] = {"usage": {}, "finish_reason": None, "response_model": None,
                                "system_fingerprint": None}
        for chunk in self._client.chat.completions.create(**body):
            meta["response_model"] = chunk.model or meta["response_model"]
            meta["system_fingerprint"] = chunk.system_fingerprint or meta["system_fingerprint"]
            if chunk.usage is not None:
                meta["usage"] = _usage(chunk.usage)
            for choice in chunk.choices or []:
                if choice.delta and choice.delta.content:
                    pieces.append(choice.delta.content)
                if choice.delta and getattr(choice.delta, "refusal", None):
                    refusal.append(choice.delta.refusal)
                if choice.finish_reason:
                    meta["finish_reason"] = choice.finish_reason
        if meta["finish_reason"] is None:
            raise Incomplete("stream ended without a finish_reason")
        meta["refusal"] = "".join(refusal) or None
        return "".join(pieces), meta


def _usage(usage: Any) -> dict[str, Any]:
    """Token counts of one call (cached and reasoning tokens when the service reports them)."""
    if usage is None:
        return {}
    out = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
           "total_tokens": usage.total_tokens}
    details = getattr(usage, "prompt_tokens_details", None)
    if details is not None and getattr(details, "cached_tokens", None) is not None:
        out["cached_tokens"] = details.cached_tokens
    details = getattr(usage, "completion_tokens_details", None)
    if details is not None and getattr(details, "reasoning_tokens", None) is not None:
        out["reasoning_tokens"] = details.reasoning_tokens
    return out


def _error_body(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        return inner if isinstance(inner, dict) else {"message": str(inner)}
    return {"message": str(body or exc.message)}


def _error_code(exc: openai.APIStatusError) -> str:
    return str(_error_body(exc).get("code") or "")


def _error_text(exc: openai.APIStatusError) -> str:
    err = _error_body(exc)
    return json.dumps(err, ensure_ascii=False) if err.get("code") else str(err.get("message", exc.message))


def _classify(exc: BaseException) -> Retry | None:
    """Transient failures: 408/409/429/5xx (with the server's Retry-After), timeouts, lost connections."""
    if isinstance(exc, openai.APITimeoutError):
        return Retry("timeout")
    if isinstance(exc, openai.APIConnectionError):
        return Retry(f"connection failed ({exc.__cause__ or exc})")
    if isinstance(exc, Incomplete):
        return Retry(str(exc))
    if isinstance(exc, openai.APIError) and not isinstance(exc, openai.APIStatusError):
        return Retry(f"error event in the response ({exc.message})")
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code == 429 and _error_code(exc) == "insufficient_quota":
            return None
        if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
            wait = parse_retry_after(exc.response.headers)
            return Retry(f"HTTP {exc.status_code}: {_error_text(exc)}", wait)
    return None
