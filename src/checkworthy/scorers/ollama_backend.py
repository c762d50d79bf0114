"""Ollama backend (the production backend): Gemma 3 and any other model an Ollama server holds.

Why it is shaped like this:

* Same prompt as every other LLM scorer (``prompt.build_prompt``), so the stored prompt version is
  right. Chat/instruction models get the prompt without the trailing pre-fill and write the whole
  JSON answer (``mode="chat"`` via ``/api/chat``, ``mode="generate"`` via ``/api/generate`` with the
  model's template); ``mode="raw"`` sends the exact prompt with the pre-fill, bypassing the
  template, and reads only the number (a few tokens per claim: the cheapest mode; ``Score.raw``
  then holds the continuation after the pre-fill).
* Generation parameters default to the paper's (``sampling_presets``); ``sampling="t0.1"`` is the
  paper's low-temperature ablation. Every parameter that changes the output (and the model digest
  the server reports) is in ``params()``, hence in the store's cache key; the host URL is not (the
  same model scores the same anywhere).
* Structured output: a JSON schema in ``format`` when the server is >= 0.5.0, plain ``"json"``
  before that (probed once via ``/api/version``); the parser never trusts it anyway.
* Failures are split in two. The service failing (timeouts, connection errors, 429/5xx, an error
  line mid-stream) is retried with exponential backoff (``http_retry``) and, if it persists, raises
  :class:`~checkworthy.scorers.http_retry.BackendError`, so nothing is stored for the chunk and a
  rerun resumes. A model *answer* that is not a score in [0, 1] is a stored failure with its raw
  text (``base`` statuses).

Environment: ``OLLAMA_HOST`` (read by the official client; default ``127.0.0.1:11434``) and
``OLLAMA_API_KEY`` (optional bearer token, also read by the client).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import ollama

from checkworthy.scorers.base import Score, clean_raw
from checkworthy.scorers.http_retry import (
    BackendConfigError,
    Gate,
    Incomplete,
    Retry,
    RetryPolicy,
    call_with_retries,
    run_bounded,
)
from checkworthy.scorers.prompt import (
    ANSWER_SCHEMA,
    DEFAULT_GUIDELINES,
    PREFILL,
    SCORE_TERMINATORS,
    VERBALISED,
    build_prompt,
    chat_prompt,
    load_guidelines,
    parse_answer,
    parse_score,
    prompt_version,
)
from checkworthy.scorers.sampling_presets import Sampling, paper_sampling

MODES = ("chat", "generate", "raw")
#: Ollama accepted JSON schemas in ``format`` from this version on
SCHEMA_SINCE = (0, 5, 0)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", version.split("-")[0])[:3]
    return tuple(int(p) for p in parts) if parts else (0,)


@dataclass(frozen=True)
class OllamaOptions:
    """How an Ollama model is asked (:class:`OllamaScorer`): ``mode``, the sampling preset and its
    overrides, ``seed``, ``num_predict`` (default 8 tokens in raw mode, else 256), ``num_ctx``,
    ``structured`` output (auto, schema, json, none), and the transport: ``host`` (default
    ``OLLAMA_HOST``), ``stream``, requests in flight, timeouts, retries, ``keep_alive``. Only the
    first group is in the scorer's params."""

    mode: str = "chat"
    sampling: str = "paper"
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = 0
    num_predict: int | None = None
    num_ctx: int | None = None
    structured: str = "auto"
    host: str | None = None
    stream: bool = False
    concurrency: int = 4
    timeout: float = 120.0
    connect_timeout: float = 10.0
    retry: RetryPolicy = RetryPolicy()
    keep_alive: str | float | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"ollama: unknown mode {self.mode!r} ({', '.join(MODES)})")
        if self.structured not in ("auto", "schema", "json", "none"):
            raise ValueError(
                f"ollama: structured must be auto, schema, json or none, not {self.structured!r}")


class OllamaScorer:
    """Verbalised check-worthiness scores from a model served by Ollama (``ollama:<model>``)."""

    score_kinds = (VERBALISED,)

    def __init__(self, model: str, options: OllamaOptions = OllamaOptions(), *,
                 guidelines_path: str | Path = DEFAULT_GUIDELINES) -> None:
        if not model:
            raise ValueError("ollama: needs a model name, e.g. ollama:gemma3:1b")
        o = options
        self.model = model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"
        self.spec = f"ollama:{model}"
        self.mode = o.mode
        preset, self.sampling_preset = paper_sampling(self.model, o.sampling)
        self.sampling = Sampling(
            preset.temperature if o.temperature is None else float(o.temperature),
            preset.top_k if o.top_k is None else int(o.top_k),
            preset.top_p if o.top_p is None else float(o.top_p),
        )
        if (o.temperature, o.top_k, o.top_p) != (None, None, None):
            self.sampling_preset += "+override"
        self.seed = o.seed
        self.num_predict = o.num_predict if o.num_predict is not None else (8 if o.mode == "raw" else 256)
        self.num_ctx = o.num_ctx
        self.structured = "none" if o.mode == "raw" else o.structured
        self.stream = bool(o.stream)
        self.concurrency = max(1, int(o.concurrency))
        self.timeout = float(o.timeout)
        self.retry = o.retry
        self.keep_alive = o.keep_alive
        self.guidelines = load_guidelines(guidelines_path)
        self.prompt_version = prompt_version(guidelines_path)
        timeout = httpx.Timeout(self.timeout, connect=o.connect_timeout)
        self._client = ollama.Client(host=o.host, timeout=timeout)
        self._gate = Gate()
        self._server: dict[str, Any] | None = None
        self._lock = threading.Lock()

    # ---- identity -----------------------------------------------------------------------------

    def server_info(self) -> dict[str, Any]:
        """Server version, whether it takes JSON schemas, and the model's digest (asked once)."""
        with self._lock:
            if self._server is None:
                self._server = self._probe()
            return self._server

    def _probe(self) -> dict[str, Any]:
        def version() -> str:
            return str(self._client._request_raw("GET", "/api/version").json().get("version", ""))

        retry, gate = self.retry, self._gate
        server_version, _ = call_with_retries(version, _classify, retry, gate, "ollama /api/version")
        tags, _ = call_with_retries(self._client.list, _classify, retry, gate, "ollama /api/tags")
        entry = next((m for m in tags.models if m.model == self.model), None)
        if entry is None:
            names = ", ".join(sorted(m.model or "?" for m in tags.models)) or "none"
            raise BackendConfigError(f"model {self.model!r} is not on the Ollama server (it has: {names}); "
                               f"run `ollama pull {self.model}`")
        details = entry.details
        return {
            "version": server_version,
            "schema": _version_tuple(server_version) >= SCHEMA_SINCE,
            "digest": entry.digest or "",
            "quantization": (details.quantization_level if details else None) or "",
        }

    def _format(self) -> str | dict[str, Any] | None:
        if self.structured == "none":
            return None
        if self.structured == "json" or (self.structured == "auto" and not self.server_info()["schema"]):
            return "json"
        return ANSWER_SCHEMA

    def params(self) -> dict[str, Any]:
        """What determines the scores (not host, concurrency, timeouts, streaming or keep-alive)."""
        info = self.server_info()
        fmt = self._format()
        params: dict[str, Any] = {
            "backend": "ollama",
            "model": self.model,
            "model_digest": info["digest"],
            "quantization": info["quantization"],
            "mode": self.mode,
            "format": "none" if fmt is None else ("json" if fmt == "json" else "json_schema"),
            "temperature": self.sampling.temperature,
            "top_k": self.sampling.top_k,
            "top_p": self.sampling.top_p,
            "seed": self.seed,
            "num_predict": self.num_predict,
            "num_ctx": self.num_ctx,
            "sampling_preset": self.sampling_preset,
            "prompt_version": self.prompt_version,
        }
        if self.mode == "raw":
            params["prefill"] = PREFILL
            params["stop"] = list(SCORE_TERMINATORS)
        return params

    # ---- scoring ------------------------------------------------------------------------------

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Score texts with at most ``concurrency`` requests in flight; output order = input order."""
        self.server_info()
        return [{VERBALISED: s} for s in run_bounded(self.score_one, list(texts), self.concurrency)]

    def options(self) -> dict[str, Any]:
        """The ``options`` object sent with every request."""
        opts: dict[str, Any] = {
            "temperature": self.sampling.temperature,
            "top_k": self.sampling.top_k,
            "top_p": self.sampling.top_p,
            "num_predict": self.num_predict,
        }
        if self.seed is not None:
            opts["seed"] = int(self.seed)
        if self.num_ctx is not None:
            opts["num_ctx"] = int(self.num_ctx)
        if self.mode == "raw":
            opts["stop"] = list(SCORE_TERMINATORS)
        return opts

    def score_one(self, claim: str) -> Score:
        """One request, retried while the service fails; the answer parsed, never invented."""
        (text, final), attempts = call_with_retries(
            lambda: self._request(claim), _classify, self.retry, self._gate, f"ollama {self.model}"
        )
        usage = {
            "prompt_eval_count": final.get("prompt_eval_count"),
            "eval_count": final.get("eval_count"),
            "total_duration_ns": final.get("total_duration"),
            "done_reason": final.get("done_reason"),
            "attempts": attempts,
        }
        score, status = parse_score(text) if self.mode == "raw" else parse_answer(text)
        return Score(score, status, clean_raw(text), usage)

    def _request(self, claim: str) -> tuple[str, dict[str, Any]]:
        """(generated text, final response fields) of one call, streamed or not."""
        common: dict[str, Any] = {"options": self.options(), "stream": self.stream}
        if self.keep_alive is not None:
            common["keep_alive"] = self.keep_alive
        if self.mode == "chat":
            messages = [{"role": "user", "content": chat_prompt(claim, self.guidelines)}]
            result = self._client.chat(self.model, messages, format=self._format(), **common)
        elif self.mode == "generate":
            result = self._client.generate(self.model, chat_prompt(claim, self.guidelines),
                                           format=self._format(), **common)
        else:
            result = self._client.generate(self.model, build_prompt(claim, self.guidelines), raw=True,
                                           **common)
        parts: Iterable[Any] = result if self.stream else [result]
        pieces: list[str] = []
        final: dict[str, Any] = {}
        deadline = time.monotonic() + self.timeout
        for part in parts:
            pieces.append(_piece(part))
            if part.done:
                final = part.model_dump()
            if self.stream and time.monotonic() > deadline:
                raise Incomplete(f"stream still running after {self.timeout:.0f} s")
        if not final:
            raise Incomplete("response ended before done=true")
        return "".join(pieces), final


def _piece(part: Any) -> str:
    message = getattr(part, "message", None)
    if message is not None:
        return message.content or ""
    return getattr(part, "response", None) or ""


_RETRY_STATUS = {408, 429, 500, 502, 503, 504}


def _classify(exc: BaseException) -> Retry | None:
    """Transient Ollama failures: timeouts, lost connections, 429/5xx, errors mid-stream."""
    if isinstance(exc, httpx.TimeoutException):
        return Retry(f"timeout ({type(exc).__name__})")
    if isinstance(exc, httpx.TransportError | ConnectionError):
        return Retry(f"connection failed ({exc})")
    if isinstance(exc, Incomplete):
        return Retry(str(exc))
    if isinstance(exc, json.JSONDecodeError):
        return Retry(f"garbled response line ({exc})")
    if isinstance(exc, ollama.ResponseError):
        if exc.status_code == -1 or exc.status_code in _RETRY_STATUS:
            return Retry(f"HTTP {exc.status_code}: {exc.error}")
        raise BackendConfigError(f"ollama refused the request: HTTP {exc.status_code}: {exc.error}") from exc
    return None
